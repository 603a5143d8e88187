package fakellm

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMedia: the images and files of a request are counted as the package
// doc says (an image ImageTokens, a PDF a quarter of its bytes and at
// least an image's, a text file its bytes), not as their base64; /media
// answers with them, and the request's record holds them.
func TestMedia(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	pdf := "data:application/pdf;base64," + strings.Repeat("QUJD", 10000) // 30000 bytes
	body, _ := json.Marshal(map[string]any{"model": "fake", "messages": []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "/media"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.png"}},
			map[string]any{"type": "file", "file": map[string]any{"file_data": pdf, "filename": "x.pdf"}},
			map[string]any{"type": "file", "file": map[string]any{"file_data": "data:text/plain;base64,aGVsbG8=", "filename": "a.txt"}},
		}}}})
	var out completion
	res := post(t, srv, "/v1/chat/completions", string(body))
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
		t.Fatalf("%d %v", res.StatusCode, err)
	}
	want := "image image/png 8 detail=low\nimage https://example.com/cat.png\nfile application/pdf 30000 x.pdf\nfile text/plain 5 a.txt"
	if got := *out.Choices[0].Message.Content; got != want {
		t.Fatalf("/media answered %q, want %q", got, want)
	}
	p := int64(len("/media") + 2*4*ImageTokens + 30000/4 + 5)
	if out.Usage.PromptTokens != p/4+1 {
		t.Fatalf("prompt_tokens %d, want %d", out.Usage.PromptTokens, p/4+1)
	}
	if m := s.Requests()[0].Media; len(m) != 4 || m[2].Filename != "x.pdf" || m[0].MediaType != "image/png" {
		t.Fatalf("the record's media: %+v", m)
	}
}
