package fakellm

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestContextWindowNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model string
		want  int64
	}{
		{"fake-1k", 1024},
		{"fake-4k", 4096},
		{"fake-128k", 131072},
		{"fake-1048576k", 1 << 30},
		{"fake", 0},
		{"gpt-4o", 0},
		{"fake-0k", 0},
		{"fake-04k", 0},
		{"fake-k", 0},
		{"fake-xk", 0},
		{"fake--1k", 0},
		{"fake-+1k", 0},
		{"fake-4", 0},
		{"fake-4K", 0},
		{"fake-1048577k", 0},
		{"fake-99999999999999999999k", 0},
		{"my-fake-4k", 0},
	}
	for _, tt := range tests {
		if got := ContextWindow(tt.model); got != tt.want {
			t.Errorf("ContextWindow(%q) = %d, want %d", tt.model, got, tt.want)
		}
	}
}

// request returns a request body for model whose one user message is
// content, streaming or not.
func request(t *testing.T, model, content string, stream bool) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": content}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestContextWindowEnforced(t *testing.T) {
	t.Parallel()
	// fake-1k holds 1024 tokens: a prompt of 4092 bytes is 4092/4+1 = 1024
	// tokens, the most it takes; 4096 bytes are 1025 tokens, one too many.
	const over = `{"error":{"message":"This model's maximum context length is 1024 tokens. ` +
		`However, your messages resulted in 1025 tokens. Please reduce the length of the messages.",` +
		`"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	tests := []struct {
		name    string
		model   string
		content string
		stream  bool
		status  int
		body    string // the exact error body, for a refusal
	}{
		{"under", "fake-1k", strings.Repeat("x", 4000), false, 200, ""},
		{"at the window", "fake-1k", strings.Repeat("x", 4092), false, 200, ""},
		{"at the window, stream", "fake-1k", strings.Repeat("x", 4092), true, 200, ""},
		{"over", "fake-1k", strings.Repeat("x", 4096), false, 400, over},
		{"over, stream", "fake-1k", strings.Repeat("x", 4096), true, 400, over},
		// The window is checked before a fault fires.
		{"over, with a fault", "fake-1k", "/fault 500\n" + strings.Repeat("x", 4085), false, 400, over},
		{"fake has no limit", "fake", strings.Repeat("x", 1<<20), false, 200, ""},
		{"fake has no limit, stream", "fake", strings.Repeat("x", 1<<20), true, 200, ""},
		{"fake-0k has no limit", "fake-0k", strings.Repeat("x", 1<<20), false, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New()
			srv := httptest.NewServer(s)
			defer srv.Close()
			res := post(t, srv, "/v1/chat/completions", request(t, tt.model, tt.content, tt.stream))
			b, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, b)
			}
			if tt.status != 200 {
				if string(b) != tt.body {
					t.Fatalf("body = %s\nwant   %s", b, tt.body)
				}
				if ct := res.Header.Get("Content-Type"); ct != "application/json" {
					t.Fatalf("content type %q", ct)
				}
			} else if tt.stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("stream did not end with [DONE]: %.200s", b)
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Status != tt.status || reqs[0].Completed != (tt.status == 200) {
				t.Fatalf("records = %+v", reqs)
			}
			want := int64(len(tt.content)/4 + 1)
			if got := s.MaxPromptTokens(tt.model); got != want {
				t.Fatalf("MaxPromptTokens(%q) = %d, want %d", tt.model, got, want)
			}
		})
	}
}

func TestMaxPromptTokens(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, n := range []int{400, 4096, 40} { // 101, 1025 (refused), 11 tokens
		post(t, srv, "/v1/chat/completions", request(t, "fake-1k", strings.Repeat("x", n), false))
	}
	post(t, srv, "/v1/chat/completions", request(t, "fake", strings.Repeat("x", 80), true))
	if got := s.MaxPromptTokens("fake-1k"); got != 1025 {
		t.Errorf("fake-1k: %d, want 1025 (a refused request counts)", got)
	}
	if got := s.MaxPromptTokens("fake"); got != 21 {
		t.Errorf("fake: %d, want 21", got)
	}
	if got := s.MaxPromptTokens("never-sent"); got != 0 {
		t.Errorf("never-sent: %d, want 0", got)
	}
	s.Reset()
	if got := s.MaxPromptTokens("fake-1k"); got != 0 {
		t.Errorf("after Reset: %d, want 0", got)
	}
}

// TestTemplateAnswer: a system prompt of "## " headings and a last message
// without directives is answered with the headings, in order.
func TestTemplateAnswer(t *testing.T) {
	got := templateAnswer("Summarize.\n## Goal\ntext\n  ## Key facts\n", "> a\n> b")
	want := "## Goal\n- noted from 2 lines\n## Key facts\n- noted from 2 lines"
	if got != want {
		t.Fatalf("templateAnswer = %q, want %q", got, want)
	}
	if templateAnswer("no headings here", "x") != "" {
		t.Fatal("an answer without headings in the system prompt")
	}
}
