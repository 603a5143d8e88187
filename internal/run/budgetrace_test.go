package run_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/run"
)

// unitProfiles price the fake so that a call of a few hundred bytes in
// and out costs about 1: 4000 per million input tokens, 5000 per million
// output tokens.
func unitProfiles(t *testing.T) *compact.Profiles {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(`{"models": {"fake": {"context_window": 0,
		"prices": {"input": 4000, "output": 5000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := compact.LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBudgetHoldsUnderConcurrency: 100 runs of one tenant that start at
// once against a monthly budget of 10, each one model call of about 1,
// spend at most the budget and one call: each call holds its estimate
// of the budget before it is made, so the calls in flight count.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100 runs at once")
	}
	b := setup(t)
	b.start(t, run.Config{Profiles: unitProfiles(t), LeaseTTL: 10 * time.Second, PollInterval: 200 * time.Millisecond,
		ModelBackoff: 10 * time.Millisecond, Workers: 100, MonthlyBudget: 10})
	// About 100 tokens in and 100 out, streamed over half a second so that
	// every run's call is in flight at once.
	input := "/stream 5 100\n/say " + strings.Repeat("word ", 80)
	ids := make([]string, 100)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = b.create(t, input, agentd.RunParams{Sampling: agentd.Sampling{MaxOutputTokens: 128}}).ID
		}()
	}
	wg.Wait()
	completed, stopped := 0, 0
	for _, id := range ids {
		switch r := b.wait(t, id, nil); {
		case r.Status == agentd.StatusCompleted:
			completed++
		case r.TerminalReason == agentd.ReasonBudgetExceeded:
			stopped++
		default:
			t.Fatalf("run %s ended %s/%s: %s", id, r.Status, r.TerminalReason, r.Error)
		}
	}
	month, _, err := b.store.Spend(context.Background(), "default", "")
	if err != nil {
		t.Fatal(err)
	}
	call := runUsage(t, b, ids[0]).Cost // every call is the same
	t.Logf("100 runs against a budget of 10: %d completed, %d stopped; the month spent %.2f (a call costs %.3f)",
		completed, stopped, month, call)
	if month > 10+call+1e-9 {
		t.Errorf("the month spent %.2f, past the budget of 10 by more than one call (%.3f)", month, call)
	}
	if month < 10 {
		t.Errorf("the month spent %.2f: the budget of 10 was not spent", month)
	}
}
