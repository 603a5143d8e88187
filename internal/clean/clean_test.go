package clean

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextProblem(t *testing.T) {
	for _, c := range []struct {
		in   string
		bad  bool
		want string
	}{
		{"plain é 🙂", false, "plain é 🙂"},
		{"a\x00b", true, "a\uFFFDb"},
		{"a\xffb", true, "a\uFFFDb"},
		{"\xed\xa0\x80", true, "\uFFFD"}, // a surrogate encoded in UTF-8 is invalid UTF-8
	} {
		if got := TextProblem(c.in) != ""; got != c.bad {
			t.Errorf("TextProblem(%q) bad = %v, want %v", c.in, got, c.bad)
		}
		got, changed := Text(c.in)
		if got != c.want || changed != c.bad || TextProblem(got) != "" {
			t.Errorf("Text(%q) = %q %v, want %q %v", c.in, got, changed, c.want, c.bad)
		}
	}
}

func TestJSON(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "": unchanged
		problem  bool
	}{
		{`{"b":1,"a":[true,null,"x",-1.5e10]}`, "", false},
		{`"\\u0000 is text"`, "", false}, // an escaped backslash, then text
		{`"\ud83d\ude42"`, "", false},    // a surrogate pair
		{`{"z":"\u0000","a":1}`, `{"z":"\ufffd","a":1}`, true},
		{`{"k":"\ud800"}`, `{"k":"\ufffd"}`, true},
		{`["\udc00x"]`, `["\ufffdx"]`, true},
		{`{"n":1e999999,"m":2}`, `{"n":"1e999999","m":2}`, true},
		{`[1e-999999,0.0e5,-0,0.5e-3]`, `["1e-999999",0.0e5,-0,0.5e-3]`, true},
		{"{\"s\":\"a\xffb\"}", `{"s":"a\ufffdb"}`, true},
	} {
		if got := JSONProblem([]byte(c.in)) != ""; got != c.problem {
			t.Errorf("JSONProblem(%s) = %v, want %v", c.in, got, c.problem)
		}
		out, changed, err := JSON([]byte(c.in))
		want := c.want
		if want == "" {
			want = c.in
		}
		if err != nil || changed != c.problem || !sameJSON(t, string(out), want) || JSONProblem(out) != "" {
			t.Errorf("JSON(%s) = %s %v %v, want %s", c.in, out, changed, err, want)
		}
	}
	if _, _, err := JSON([]byte(`{"a":`)); err == nil {
		t.Error("JSON of invalid JSON gave no error")
	}
}

// sameJSON compares JSON texts token by token, keeping key order.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	ta, tb := tokens(a), tokens(b)
	if ta == nil || tb == nil || len(ta) != len(tb) {
		return false
	}
	for i := range ta {
		if ta[i] != tb[i] {
			return false
		}
	}
	return true
}

func tokens(s string) []any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []any
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		out = append(out, tok)
	}
}

// FuzzJSON: whatever JSON goes in, what comes out is storable, valid JSON.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `["\ud800",1e400]`, `"ok"`, "\"\xff\"", `{"k":[{"x":-0.0}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, _, err := JSON(raw)
		if err != nil {
			if json.Valid(raw) && utf8.Valid(raw) {
				t.Fatalf("JSON(%q): %v for valid JSON", raw, err)
			}
			return
		}
		if p := JSONProblem(out); p != "" {
			t.Fatalf("JSON(%q) = %q, which %s", raw, out, p)
		}
	})
}

// FuzzText: what Text returns is storable, and unchanged when it already was.
func FuzzText(f *testing.F) {
	f.Add("a\x00b\xff")
	f.Fuzz(func(t *testing.T, s string) {
		out, changed := Text(s)
		if TextProblem(out) != "" || changed != (TextProblem(s) != "") || (!changed && out != s) {
			t.Fatalf("Text(%q) = %q %v", s, out, changed)
		}
	})
}
