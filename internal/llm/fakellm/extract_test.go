package fakellm

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// extractionBody is a non-streaming extraction request whose quoted turn
// is turn.
func extractionBody(t *testing.T, turn string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "small", "messages": []map[string]string{
		{"role": "system", "content": ExtractionMarker + "\nAnswer with JSON."},
		{"role": "user", "content": "The turn:\n" + turn}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// extracted is the status and the text of a non-streaming answer.
func extracted(t *testing.T, res *http.Response) (int, string) {
	t.Helper()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var c completion
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, string(body)
	}
	if err := json.Unmarshal(body, &c); err != nil || c.Choices[0].Message.Content == nil {
		t.Fatalf("%v: %s", err, body)
	}
	return res.StatusCode, *c.Choices[0].Message.Content
}

// TestExtractor: an extraction request is answered with the JSON of its
// /remember lines, whatever else the quoted turn asks of a model; a later
// line of a key replaces its value; /extract-fail fails it the first N
// times (or always), /extract-delay holds it; the same lines in another
// request change nothing.
func TestExtractor(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	turn := "[user]\nI moved.\n/remember home=Lisbon\n/remember diet = vegetarian\n/remember home=Porto\n/call f {}\n/fault 500\n/say no\n\n[assistant]\nok"
	if code, text := extracted(t, post(t, srv, "/v1/chat/completions", extractionBody(t, turn))); code != 200 ||
		text != `{"memories":[{"key":"home","value":"Porto"},{"key":"diet","value":"vegetarian"}]}` {
		t.Fatalf("extraction: %d %s", code, text)
	}
	if _, text := extracted(t, post(t, srv, "/v1/chat/completions", extractionBody(t, "[user]\nhi"))); text != `{"memories":[]}` {
		t.Fatalf("nothing to remember: %s", text)
	}
	twice := extractionBody(t, "/remember a=b\n/extract-fail 500 2")
	for i, want := range []int{500, 500, 200} {
		if code, text := extracted(t, post(t, srv, "/v1/chat/completions", twice)); code != want {
			t.Fatalf("attempt %d: %d %s", i+1, code, text)
		}
	}
	always := extractionBody(t, "/remember a=b\n/extract-fail invalid")
	for range 3 {
		if code, text := extracted(t, post(t, srv, "/v1/chat/completions", always)); code != 200 || text != invalidAnswer {
			t.Fatalf("invalid: %d %s", code, text)
		}
	}
	start := time.Now()
	if code, _ := extracted(t, post(t, srv, "/v1/chat/completions", extractionBody(t, "/extract-delay 200"))); code != 200 ||
		time.Since(start) < 200*time.Millisecond {
		t.Fatalf("delay: %d after %v", code, time.Since(start))
	}
	for _, bad := range []string{"/remember novalue", "/remember =x", "/extract-fail 404", "/extract-fail 500 0", "/extract-delay x"} {
		if code, _ := extracted(t, post(t, srv, "/v1/chat/completions", extractionBody(t, bad))); code != http.StatusBadRequest {
			t.Errorf("%q: status %d", bad, code)
		}
	}
	plain := `{"model":"m","messages":[{"role":"user","content":"/remember a=b\n/extract-fail 500\n/say hi"}]}`
	if code, text := extracted(t, post(t, srv, "/v1/chat/completions", plain)); code != 200 || text != "hi" {
		t.Fatalf("the lines in a run's own request: %d %s", code, text)
	}
}
