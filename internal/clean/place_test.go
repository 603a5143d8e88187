package clean

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStringProblem(t *testing.T) {
	for _, c := range []struct {
		in, at, problem string // at: the Place's String
	}{
		{`{"input":"hi","metadata":{"k":[1,"\u00e9",null]}}`, "", ""},
		{`"\ud83d\ude42 \\ud800 \u0000"`, "", ""}, // a pair, an escaped backslash, a NUL
		{"{\"input\":\"a\xffb\"}", "input", "is not valid UTF-8"},
		{`{"input":"\ud800"}`, "input", "holds a lone surrogate escape"},
		{`{"input":"\udc00x"}`, "input", "holds a lone surrogate escape"},
		{`{"input":"\ud800\u0041"}`, "input", "holds a lone surrogate escape"},
		{"{\"input\":[{\"role\":\"user\",\"content\":\"ok\"}, {\"role\":\"user\" , \"content\" : \"\xed\xa0\x80\"}]}",
			"input[1].content", "is not valid UTF-8"},
		{"{\"a\":{},\"m\":{\"x\\\"y\":[[], [true, \"\xc3\"]]}}", `m.x"y[1][1]`, "is not valid UTF-8"},
		{"{\"metadata\":{\"k\xff\":1}}", "metadata", "has a key that is not valid UTF-8"},
		{"\"\xff\"", "", "is not valid UTF-8"},
		{"{\"a\":\"\xff", "", ""}, // not JSON: the decoder's to say
	} {
		at, problem := StringProblem([]byte(c.in))
		if at.String() != c.at || problem != c.problem {
			t.Errorf("StringProblem(%q) = %q, %q; want %q, %q", c.in, at, problem, c.at, c.problem)
		}
	}
}

// FuzzStringProblem: StringProblem finds a problem exactly when a string
// of valid JSON decodes to something other than what was written (more
// U+FFFD than the text wrote), and the Place it gives leads to a value of
// the decoded text.
func FuzzStringProblem(f *testing.F) {
	for _, s := range []string{`{"a":["\ud800"]}`, "{\"a\":{\"b\":\"\xff\"}}", `["\ufffd","\\ud800"]`, "[\"\xef\xbf\xbd\"]",
		"{\"k\xff\":{}}", `{"a":1,"b":[{},{"c":"\udfff"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		at, problem := StringProblem(raw)
		if !json.Valid(raw) {
			if problem != "" {
				t.Fatalf("StringProblem(%q) found %q in invalid JSON", raw, problem)
			}
			return
		}
		if want := changesText(t, raw); (problem != "") != want {
			t.Fatalf("StringProblem(%q) = %q at %q; a string changes when decoded: %v", raw, problem, at, want)
		}
		if problem != "" && !leadsSomewhere(raw, at) {
			t.Fatalf("StringProblem(%q): %q leads nowhere", raw, at)
		}
	})
}

// changesText reports whether a string of raw (valid JSON), read with a
// json.Decoder, holds more U+FFFD than its text wrote.
func changesText(t *testing.T, raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	for prev := int64(0); ; {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatalf("read %q: %v", raw, err)
		}
		end := dec.InputOffset()
		span := raw[prev:end]
		prev = end
		s, ok := tok.(string)
		if !ok {
			continue
		}
		written := span[bytes.IndexByte(span, '"')+1 : len(span)-1]
		if strings.Count(s, "\uFFFD") > writtenReplacements(written) {
			return true
		}
	}
}

// writtenReplacements counts the U+FFFD that a string's text writes, as
// the character itself or as its escape.
func writtenReplacements(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] == '\\' {
			if b[i+1] == 'u' {
				if strings.EqualFold(string(b[i+2:i+6]), "fffd") {
					n++
				}
				i += 6
			} else {
				i += 2
			}
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 3 {
			n++
		}
		i += size
	}
	return n
}

// leadsSomewhere reports whether p leads to a value of raw decoded.
func leadsSomewhere(raw []byte, p Place) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	for _, s := range p {
		switch s := s.(type) {
		case int:
			a, ok := v.([]any)
			if !ok || s >= len(a) {
				return false
			}
			v = a[s]
		case string:
			o, ok := v.(map[string]any)
			if !ok {
				return false
			}
			if v, ok = o[s]; !ok {
				return false
			}
		}
	}
	return true
}
