package fakellm

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestSamplingDirective: /sampling answers with the request's sampling
// parameters as sent, and the record holds them too.
func TestSamplingDirective(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"model":"m","temperature":0,"top_p":0.5,"max_completion_tokens":1000,
		"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type": "object"},"strict":true}},
		"messages":[{"role":"user","content":"/sampling\n/say ignored"}]}`
	var c completion
	if err := json.NewDecoder(post(t, srv, "/v1/chat/completions", body).Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	want := `{"max_completion_tokens":1000,"temperature":0,"top_p":0.5,` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"},"strict":true}}}`
	if msg := c.Choices[0].Message; msg.Content == nil || *msg.Content != want || c.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %+v, want the text %s", c.Choices[0], want)
	}
	r := s.Requests()[0]
	if r.MaxCompletionTokens != 1000 || r.Temperature == nil || *r.Temperature != 0 || r.TopP == nil || *r.TopP != 0.5 ||
		!strings.HasPrefix(string(r.ResponseFormat), `{"type":"json_schema"`) {
		t.Fatalf("record %+v", r)
	}
	// Nothing sent: an empty object, and a record without sampling.
	if err := json.NewDecoder(post(t, srv, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"/sampling"}]}`).Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if msg := c.Choices[0].Message; msg.Content == nil || *msg.Content != "{}" {
		t.Fatalf("answer %+v, want {}", c.Choices[0])
	}
	if r := s.Requests()[1]; r.MaxCompletionTokens != 0 || r.Temperature != nil || r.TopP != nil || r.ResponseFormat != nil {
		t.Fatalf("record %+v", r)
	}
}

// TestMaxCompletionTokens: an answer longer than max_completion_tokens (by
// the fake's count, C/4+1) is cut to the longest text within it, with
// finish_reason length, streamed or not; a shorter one is answered whole.
func TestMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, c := range []struct {
		name, say string
		max       int
		stream    bool
		text      string
		finish    string
		tokens    int64
	}{
		{"cut", "abcdefghijkl", 2, false, "abcdefg", "length", 2},
		{"cut in a stream", "abcdefghijkl", 2, true, "abcdefg", "length", 2},
		{"whole", "abcdefghijkl", 4, true, "abcdefghijkl", "stop", 4},
		{"on a rune boundary", "日本語", 1, false, "日", "length", 1},
		{"on a rune boundary in a stream", "日本語", 1, true, "日", "length", 1},
		{"before the first rune", "𝄞x", 1, true, "", "length", 1},
	} {
		body, _ := json.Marshal(map[string]any{"model": "m", "stream": c.stream, "max_completion_tokens": c.max,
			"stream_options": map[string]bool{"include_usage": true},
			"messages":       []map[string]string{{"role": "user", "content": "/say " + c.say + "\n/stream 3 0"}}})
		text, finish, usage := answerOf(t, post(t, srv, "/v1/chat/completions", string(body)).Body, c.stream)
		if text != c.text || finish != c.finish || usage.CompletionTokens != c.tokens {
			t.Errorf("%s: %q %s, %d tokens; want %q %s, %d tokens", c.name, text, finish, usage.CompletionTokens, c.text, c.finish, c.tokens)
		}
	}
	// A cut answer is cut whatever /finish says.
	body := `{"model":"m","max_completion_tokens":1,"messages":[{"role":"user","content":"/say abcdef\n/finish content_filter"}]}`
	if text, finish, _ := answerOf(t, post(t, srv, "/v1/chat/completions", body).Body, false); text != "abc" || finish != "length" {
		t.Errorf("with /finish: %q %s", text, finish)
	}
}

// answerOf reads a response's text, finish_reason and usage.
func answerOf(t *testing.T, body io.Reader, stream bool) (string, string, wireUsage) {
	t.Helper()
	if !stream {
		var c completion
		if err := json.NewDecoder(body).Decode(&c); err != nil {
			t.Fatal(err)
		}
		return *c.Choices[0].Message.Content, c.Choices[0].FinishReason, *c.Usage
	}
	var text strings.Builder
	var finish string
	var usage wireUsage
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			usage = *c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return text.String(), finish, usage
}

// TestSamplingRefused: out of range sampling parameters are refused as
// OpenAI refuses them, naming the parameter.
func TestSamplingRefused(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	for param, body := range map[string]string{
		"max_completion_tokens": `{"model":"m","max_completion_tokens":0,"messages":[{"role":"user","content":"hi"}]}`,
		"temperature":           `{"model":"m","temperature":2.5,"messages":[{"role":"user","content":"hi"}]}`,
		"top_p":                 `{"model":"m","top_p":-0.1,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		res := post(t, srv, "/v1/chat/completions", body)
		var e errorBody
		if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != param || !strings.Contains(e.Error.Message, "'"+param+"'") {
			t.Errorf("%s: %d %+v", param, res.StatusCode, e.Error)
		}
	}
}

func TestCutPieces(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pieces []string
		n      int64
		want   []string
		cut    bool
	}{
		{[]string{"ab", "cd"}, 4, []string{"ab", "cd"}, false},
		{[]string{"ab", "cd"}, 3, []string{"ab", "c"}, true},
		{[]string{"ab", "cd"}, 2, []string{"ab"}, true},
		{[]string{"ab", "cd"}, 0, []string{""}, true},
		{[]string{"a", "日本"}, 3, []string{"a"}, true},
		{[]string{"a", "日本"}, 4, []string{"a", "日"}, true},
	} {
		got, cut := cutPieces(slices.Clone(c.pieces), c.n)
		if !slices.Equal(got, c.want) || cut != c.cut {
			t.Errorf("cutPieces(%q, %d) = %q, %v; want %q, %v", c.pieces, c.n, got, cut, c.want, c.cut)
		}
	}
}

// TestSystemDirective: /system answers with the request's system prompt,
// and with an empty text when it has none.
func TestSystemDirective(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(New())
	defer srv.Close()
	for _, c := range []struct{ body, want string }{
		{`{"model":"m","messages":[{"role":"system","content":"You are a pirate."},{"role":"user","content":"/system\n/say ignored"}]}`, "You are a pirate."},
		{`{"model":"m","messages":[{"role":"user","content":"/system"}]}`, ""},
	} {
		var got completion
		if err := json.NewDecoder(post(t, srv, "/v1/chat/completions", c.body).Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if msg := got.Choices[0].Message; msg.Content == nil || *msg.Content != c.want {
			t.Fatalf("answer %+v, want the text %q", got.Choices[0], c.want)
		}
	}
}
