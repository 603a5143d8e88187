package fakeanthropic_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// TestMedia: images and documents in a user message are read from their
// sources, counted as fakellm counts them (not as their base64), listed
// by /media and in the request's record; the real API's refusals of them
// are the fake's.
func TestMedia(t *testing.T) {
	t.Parallel()
	fake, url := start(t)
	pdf := strings.Repeat("QUJD", 10000) // 30000 bytes
	content := []any{
		map[string]any{"type": "text", "text": "/media"},
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
		map[string]any{"type": "document", "title": "x.pdf", "source": map[string]any{"type": "base64", "media_type": "application/pdf", "data": pdf}},
		map[string]any{"type": "document", "source": map[string]any{"type": "text", "media_type": "text/plain", "data": "hello"}},
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": content}}})
	status, out := post(t, fake, url, string(body))
	var msg struct {
		Content []struct{ Text string }
	}
	_ = json.Unmarshal([]byte(out), &msg)
	want := "image image/png 8\nfile application/pdf 30000 x.pdf\nfile text/plain 5"
	if status != 200 || len(msg.Content) != 1 || msg.Content[0].Text != want {
		t.Fatalf("%d %s, want the answer %q", status, out, want)
	}
	rec := fake.Requests()[0]
	if len(rec.Media) != 3 || rec.Media[1].Filename != "x.pdf" {
		t.Fatalf("the record's media: %+v", rec.Media)
	}
	if total := rec.Usage.TotalInput(); total >= int64(len(pdf))/4 || total < (4*fakellm.ImageTokens+30000/4+5)/4 {
		t.Fatalf("input tokens %d: the media are not counted as the doc says", total)
	}
	for _, bad := range []struct{ content, says string }{
		{`[{"type":"image","source":{"type":"base64","media_type":"image/svg+xml","data":"PHN2Zy8+"}}]`, "media_type"},
		{`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"!!"}}]`, "invalid base64"},
		{`[{"type":"document","source":{"type":"base64","media_type":"application/zip","data":"UEs="}}]`, "application/pdf"},
	} {
		body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":` + bad.content + `}]}`
		if status, out := post(t, fake, url, body); status != 400 || !strings.Contains(out, bad.says) {
			t.Errorf("%s: %d %s, want a 400 that says %q", bad.content, status, out, bad.says)
		}
	}
	asst := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"image",` +
		`"source":{"type":"url","url":"https://x/y.png"}}]},{"role":"user","content":"b"}]}`
	if status, out := post(t, fake, url, asst); status != 400 || !strings.Contains(out, "only allowed in user messages") {
		t.Errorf("an assistant's image: %d %s", status, out)
	}
}
