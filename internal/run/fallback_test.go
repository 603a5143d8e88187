package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// chainEndpoint is a model endpoint where the model "primary" answers
// every request with status (and an OpenAI error body), and every other
// model is the fake's; it counts the requests of each model.
type chainEndpoint struct {
	mu     sync.Mutex
	counts map[string]int
	status int
}

func (c *chainEndpoint) count(model string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[model]
}

func (c *chainEndpoint) handler(fake http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		_ = json.Unmarshal(body, &req)
		c.mu.Lock()
		c.counts[req.Model]++
		c.mu.Unlock()
		if req.Model == "primary" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, `{"error":{"message":"primary is unavailable","type":"server_error","code":null}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	})
}

// startChain starts an engine whose model endpoint is a chainEndpoint
// answering the primary with status, and creates a run of input on the
// chain primary, secondary.
func startChain(t *testing.T, b *bundle, status int, input string) (*chainEndpoint, agentd.Run) {
	t.Helper()
	c := &chainEndpoint{counts: map[string]int{}, status: status}
	p := newProvider(t, c.handler(fakellm.New()))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	model := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: p.srv.URL + "/v1", APIKey: "test", HTTPClient: &http.Client{Transport: tr}})
	b.start(t, run.Config{Model: model, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond,
		ModelBackoff: 5 * time.Millisecond, ModelAttempts: 3, Workers: 2})
	r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "primary",
		Params: agentd.RunParams{MaxSteps: 10, Fallbacks: []string{"secondary"}},
		Input:  []agentd.InputMessage{{Role: "user", Content: input}}})
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// fallbacks are the step.model_fallback events of a run.
func fallbacks(t *testing.T, b *bundle, runID string) []agentd.ModelFallbackData {
	t.Helper()
	var out []agentd.ModelFallbackData
	for _, e := range b.events(t, runID) {
		if e.Type == agentd.EventModelFallback {
			var d agentd.ModelFallbackData
			if err := json.Unmarshal(envelopeData(t, e.Data), &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// TestFallbackAfterRetryableErrors: a primary that answers 503 to every
// call is asked as many times as a call's attempts allow, then the step
// falls back to the next model of the chain, which answers; the step
// records the model, and the run's next step stays on it.
func TestFallbackAfterRetryableErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, r := startChain(t, b, http.StatusServiceUnavailable, "/call calculator {\"expression\":\"6*7\"}\n/say It is 42.")
	got := b.wait(t, r.ID, nil)
	if got.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", got.Status, got.TerminalReason, got.Error)
	}
	if text := agentd.TextOf(outputParts(t, got)); text != "It is 42." {
		t.Errorf("the answer is %q", text)
	}
	if n, m := c.count("primary"), c.count("secondary"); n != 3 || m != 2 {
		t.Errorf("primary asked %d times, secondary %d; want 3 (its attempts) and 2 (both steps)", n, m)
	}
	fb := fallbacks(t, b, r.ID)
	if len(fb) != 1 || fb[0].From != "primary" || fb[0].To != "secondary" || fb[0].Attempts != 3 ||
		fb[0].Error == nil || fb[0].Error.Kind != agentd.ModelErrServer || fb[0].Error.Status != 503 {
		t.Fatalf("fallback events %+v, want one from primary to secondary after 3 server errors", fb)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Model != "secondary" || steps[0].Transition != agentd.TransitionModelFallback ||
		steps[1].Model != "secondary" {
		t.Fatalf("steps %+v, want both on secondary, the first by a fallback", steps)
	}
}

// TestNoFallbackAfterBadRequest: a 400 is about the request, which the
// next model would get too: the run fails, and the chain is not used.
func TestNoFallbackAfterBadRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, r := startChain(t, b, http.StatusBadRequest, "hello")
	got := b.wait(t, r.ID, nil)
	if got.Status != agentd.StatusFailed || got.TerminalReason != agentd.ReasonModelError {
		t.Fatalf("run ended %s/%s, want failed model_error", got.Status, got.TerminalReason)
	}
	if n, m := c.count("primary"), c.count("secondary"); n != 1 || m != 0 {
		t.Errorf("primary asked %d times, secondary %d; want 1 and 0", n, m)
	}
	if fb := fallbacks(t, b, r.ID); len(fb) != 0 {
		t.Errorf("fallback events %+v after a 400", fb)
	}
}

func outputParts(t *testing.T, r agentd.Run) []agentd.Part {
	t.Helper()
	var parts []agentd.Part
	if err := json.Unmarshal(r.Output, &parts); err != nil {
		t.Fatalf("run output %s: %v", r.Output, err)
	}
	return parts
}

// TestCompactionFollowsTheChain: a conversation on the chain primary,
// fake-4k outgrows the primary's window; the primary answers nothing, so
// each compaction's summary is asked of the next model, once, and its
// ledger row names that model.
func TestCompactionFollowsTheChain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := &chainEndpoint{counts: map[string]int{}, status: http.StatusServiceUnavailable}
	p := newProvider(t, c.handler(fakellm.New()))
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"primary": {"context_window": 4096, "max_output_tokens": 256}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := compact.LoadProfiles(models)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, run.Config{Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: p.srv.URL + "/v1", APIKey: "test"}), Profiles: profiles,
		LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond, ModelBackoff: time.Millisecond, ModelAttempts: 2, Workers: 2})
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30)
	var conv string
	for i := range 12 {
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "primary",
			ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, Fallbacks: []string{"fake-4k"}},
			Input: []agentd.InputMessage{{Role: "user", Content: fmt.Sprintf("question %d: %s\n/say answer %d: %s", i, filler, i, filler)}}})
		if err != nil {
			t.Fatal(err)
		}
		conv = r.ConversationID
		if r = b.wait(t, r.ID, nil); r.Status != agentd.StatusCompleted {
			t.Fatalf("turn %d ended %s/%s: %s", i, r.Status, r.TerminalReason, r.Error)
		}
	}
	rows, err := b.store.Usage(context.Background(), agentd.UsageQuery{Tenant: "default", From: time.Now().Add(-time.Hour),
		To: time.Now().Add(time.Hour), GroupBy: []agentd.UsageKey{agentd.UsageByModel}})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(context.Background(), b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var compactions int
	if err := db.QueryRow(context.Background(),
		`SELECT count(*) FROM model_calls WHERE kind = 'compaction' AND model = 'fake-4k'`).Scan(&compactions); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.CompactionLatest(context.Background(), conv); err != nil || compactions == 0 {
		t.Fatalf("no compaction by the fallback (%d ledger rows, %v); usage by model %+v", compactions, err, rows)
	}
	t.Logf("%d compactions, summarized by fake-4k; the primary was asked %d times", compactions, c.count("primary"))
	if n := c.count("primary"); n != 2*12+compactions {
		t.Errorf("the primary was asked %d times; want 2 a turn and one a compaction (%d)", n, 2*12+compactions)
	}
}
