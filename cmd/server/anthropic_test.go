package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm/fakeanthropic"
)

// TestAnthropicProvider: a model that the models file routes to Anthropic
// runs through the Anthropic adapter (the real SDK client) against the
// fake Messages API: its tool call, the result sent back in the API's
// form (the fake refuses any other), its answer, and the cache usage the
// fake reports from the breakpoints it received.
func TestAnthropicProvider(t *testing.T) {
	t.Parallel()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(srv.Close)
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"claude": {"provider": "anthropic", "base_url": "`+srv.URL+`",
		"api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-test", "context_window": 200000}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, map[string]string{"AGENTD_MODELS_FILE": models, "TEST_ANTHROPIC_KEY": "sk-ant-test"})
	var run struct {
		ID, Status string
		OutputText *string `json:"output_text"`
		Usage      struct {
			InputTokens       int64 `json:"input_tokens"`
			CachedInputTokens int64 `json:"cached_input_tokens"`
		}
	}
	for i, input := range []string{`/call calculator {"expression": "6*7"}` + "\n/say It is 42.", "/say Again."} {
		body, _ := json.Marshal(map[string]any{"model": "claude", "input": input, "tools": []string{"calculator"}})
		req, _ := http.NewRequest("POST", base+"/runs?wait=20", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		want := []string{"It is 42.", "Again."}[i]
		if run.Status != "completed" || run.OutputText == nil || *run.OutputText != want {
			t.Fatalf("run %d: %+v, want completed with %q", i, run, want)
		}
	}
	if n := fake.CallsFor("claude-test"); n != 3 {
		t.Errorf("the fake answered %d requests for claude-test, want 3 (a tool call, its answer, the other run)", n)
	}
	if run.Usage.InputTokens == 0 || run.Usage.InputTokens != fake.Requests()[2].Usage.TotalInput() {
		t.Errorf("the run's usage %+v is not the fake's %+v", run.Usage, fake.Requests()[2].Usage)
	}
	t.Logf("the last run read %d of its %d input tokens from cache", run.Usage.CachedInputTokens, run.Usage.InputTokens)
}
