package llm_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// TestFakeWindowIsContextOverflow checks that the fake's refusal of a prompt
// longer than its window reads, through the adapter, as OpenAI's does: a
// KindContextOverflow that no retry mends.
func TestFakeWindowIsContextOverflow(t *testing.T) {
	t.Parallel()
	fake := fakellm.New()
	srv := httptest.NewServer(fake)
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	m := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL:    srv.URL + "/v1",
		APIKey:     "test-key",
		HTTPClient: &http.Client{Transport: tr},
	})
	req := func(content string) llm.Request {
		return llm.Request{Model: "fake-1k", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, content)}}
	}

	// 4092 bytes are 1024 tokens: the whole window.
	if _, err := m.Stream(t.Context(), req(strings.Repeat("x", 4092)), nil); err != nil {
		t.Fatalf("at the window: %v", err)
	}
	_, err := m.Stream(t.Context(), req(strings.Repeat("x", 4096)), nil)
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("over the window: error %v (%T) is not a *llm.Error", err, err)
	}
	if e.Kind != llm.KindContextOverflow || e.Status != http.StatusBadRequest ||
		e.Code != "context_length_exceeded" || e.Type != "invalid_request_error" ||
		!strings.Contains(e.Message, "maximum context length is 1024 tokens") ||
		!strings.Contains(e.Message, "resulted in 1025 tokens") {
		t.Fatalf("over the window: %+v (%v)", e, e)
	}
	if llm.IsRetryable(err) {
		t.Fatalf("%v is retryable", err)
	}
	if got := fake.MaxPromptTokens("fake-1k"); got != 1025 {
		t.Fatalf("MaxPromptTokens = %d, want 1025", got)
	}
}
