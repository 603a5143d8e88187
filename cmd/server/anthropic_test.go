package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
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

// TestAnthropicThinkingAcrossTakeover: a run that asks for extended
// thinking calls a tool, and its server is SIGKILLed while the model
// streams the answer after the tool; the instance that takes the run over
// rebuilds the conversation from the database and must send the first
// answer's thinking back, signed as the model gave it, at the start of its
// assistant message (the fake refuses the request otherwise, as
// Anthropic's API does). The thinking is kept in the message rows and is
// never the answer's text.
func TestAnthropicThinkingAcrossTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	t.Parallel()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(srv.Close)
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"claude": {"provider": "anthropic", "base_url": "`+srv.URL+`",
		"api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-think", "context_window": 200000, "max_output_tokens": 4096}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_MODELS_FILE=" + models, "TEST_ANTHROPIC_KEY=sk-ant-test",
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms"}
	a := startChild(t, env)
	input := "/think I should compute 6*7 with the calculator.\n" + `/call calculator {"expression": "6*7"}` +
		"\n/stream 30 100\n/say It is 42, streamed slowly."
	body, _ := json.Marshal(map[string]any{"model": "claude", "input": input, "tools": []string{"calculator"},
		"thinking": map[string]int{"budget_tokens": 2048}})
	resp, err := http.Post("http://"+a.addr+"/runs", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		ID       string
		Thinking *struct {
			BudgetTokens int `json:"budget_tokens"`
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted || created.Thinking == nil || created.Thinking.BudgetTokens != 2048 {
		t.Fatalf("POST /runs: %d %+v", resp.StatusCode, created)
	}
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Killed once the answer after the tool streams: step 2's deltas.
	waitEvent(t, store, created.ID, func(e agentd.Event) bool {
		env, err := agentd.DecodeEnvelope(e.Data)
		return err == nil && e.Type == agentd.EventMessageDelta && env.Step == 2
	})
	a.kill(t)
	startChild(t, env)
	r := persisttest.WaitRun(t, store, created.ID, func(r agentd.Run) bool { return r.Status.Terminal() }, 60*time.Second)
	if r.Status != agentd.StatusCompleted || r.Epoch < 2 {
		t.Fatalf("the run ended %s (%s) at epoch %d; want completed by the instance that took it over", r.Status, r.Error, r.Epoch)
	}
	var output []agentd.Part
	_ = json.Unmarshal(r.Output, &output)
	if text := agentd.TextOf(output); text != "It is 42, streamed slowly." {
		t.Errorf("the answer's text is %q", text)
	}
	st, err := store.RunStateLoad(context.Background(), created.ID)
	if err != nil {
		t.Fatal(err)
	}
	var thoughts []agentd.Part
	for _, m := range st.Messages {
		if m.Role == agentd.RoleAssistant {
			if len(m.Content) == 0 || m.Content[0].Type != agentd.PartReasoning {
				t.Errorf("assistant message %s does not start with its thinking: %+v", m.ID, m.Content)
			}
			for _, p := range m.Content {
				if p.Type == agentd.PartReasoning {
					thoughts = append(thoughts, p)
				}
			}
		}
	}
	if len(thoughts) != 2 || thoughts[0].Text != "I should compute 6*7 with the calculator." || thoughts[0].Signature == "" {
		t.Errorf("the thinking kept: %+v, want one signed block per answer", thoughts)
	}
	var refused, resent int
	for _, q := range fake.Requests() {
		if q.Status != http.StatusOK {
			refused++
			t.Logf("request %d refused: %d %s", q.Seq, q.Status, q.Error)
		}
		// The fake's step counts the answers with tool use before: 1 is
		// the answer after the tool.
		if q.Thinking && q.Step == 1 && q.Status == http.StatusOK {
			resent++
		}
	}
	if refused != 0 || resent < 2 {
		t.Errorf("the fake refused %d requests and answered %d of step 2 (want 0, and 2: before and after the kill)", refused, resent)
	}
}

// waitEvent waits until the run has an event that ok accepts.
func waitEvent(t *testing.T, store *persist.Store, runID string, ok func(agentd.Event) bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, err := store.EventsAfter(context.Background(), runID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs, ok) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not get to the event waited for")
		}
	}
}

// TestModelsList: GET /models lists the default model and the models
// file's, with their provider, limits, input and prices.
func TestModelsList(t *testing.T) {
	t.Parallel()
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"claude": {"provider": "anthropic", "model": "claude-x",
		"api_key_env": "TEST_ANTHROPIC_KEY", "context_window": 200000, "max_output_tokens": 8192,
		"prices": {"input": 3, "cached_input": 0.3, "output": 15}},
		"small": {"context_window": 8192, "input": ["text"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, map[string]string{"AGENTD_MODELS_FILE": models, "TEST_ANTHROPIC_KEY": "sk-ant-test"})
	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []agentd.ModelView }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /models: %d %v", resp.StatusCode, err)
	}
	byID := map[string]agentd.ModelView{}
	for _, m := range list.Data {
		byID[m.ID] = m
	}
	c, s, def := byID["claude"], byID["small"], list.Data[0]
	if len(list.Data) != 3 || !def.Default || def.ID != "fake" || !slices.Equal(def.Input, []string{"text", "image", "file"}) {
		t.Fatalf("models %+v, want the default fake first, then the file's two", list.Data)
	}
	if c.Provider != "anthropic" || c.Upstream != "claude-x" || c.ContextWindow != 200000 || c.Prices == nil ||
		c.Prices.CachedInput != 0.3 || c.Prices.CacheWrite != 3 || len(c.Input) != 3 {
		t.Errorf("claude %+v", c)
	}
	if s.Provider != "openai" || s.Prices != nil || !slices.Equal(s.Input, []string{"text"}) {
		t.Errorf("small %+v", s)
	}
}
