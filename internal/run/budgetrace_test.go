package run_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/persist"
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
	completed, stopped, answered := 0, 0, ""
	for _, id := range ids {
		switch r := b.wait(t, id, nil); {
		case r.Status == agentd.StatusCompleted:
			completed, answered = completed+1, id
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
	if answered == "" {
		t.Fatal("no run completed")
	}
	call := runUsage(t, b, answered).Cost // every call is the same
	t.Logf("100 runs against a budget of 10: %d completed, %d stopped; the month spent %.2f (a call costs %.3f)",
		completed, stopped, month, call)
	if month > 10+call+1e-9 {
		t.Errorf("the month spent %.2f, past the budget of 10 by more than one call (%.3f)", month, call)
	}
	// Calls in flight hold their estimates, a little above their cost: the
	// runs that find the budget held by them stop, though the calls settle
	// for less. The budget is still spent to within two calls.
	if month < 10-2*call {
		t.Errorf("the month spent %.2f: the budget of 10 was not spent to within two calls", month)
	}
}

// TestBudgetHoldEndsWithItsLease: a run whose worker dies in the middle of
// a model call leaves its hold on the tenant's budget behind, uncommitted;
// the hold counts while the run's lease lives (another run of the tenant
// is refused for it), not once the lease lapsed, nor after the run was
// taken over and finished: the budget is not lost to the crash.
func TestBudgetHoldEndsWithItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := time.Second
	cfg := run.Config{Profiles: unitProfiles(t), LeaseTTL: ttl, PollInterval: 100 * time.Millisecond,
		ModelBackoff: 10 * time.Millisecond, Workers: 2, MonthlyBudget: 1}
	e1 := b.start(t, cfg)
	// A call of about 0.9, estimated at about 1.06 (max_output_tokens
	// counted in full): while it is in flight, it holds the whole budget.
	p := agentd.RunParams{Sampling: agentd.Sampling{MaxOutputTokens: 128}}
	words := "/say " + strings.Repeat("word ", 80)
	r1 := b.create(t, "/fault hang\n"+words, p)
	ctx := context.Background()
	// probe asks for a hold of nothing for a run that does not exist: it
	// is made when the tenant's month and its live holds leave room.
	probe := func() persist.BudgetHeld {
		t.Helper()
		h, err := b.store.BudgetHold(ctx, persist.BudgetHoldParams{TenantID: "default", RunID: agentd.NewID(), Monthly: 1})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	deadline := time.Now().Add(15 * time.Second)
	for h := probe(); h.OK; h = probe() {
		if time.Now().After(deadline) {
			t.Fatalf("run %s never held the budget: %+v", r1.ID, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r2 := b.wait(t, b.create(t, words, p).ID, nil)
	var e agentd.ErrorDetail
	_ = json.Unmarshal(r2.Error, &e)
	if r2.TerminalReason != agentd.ReasonBudgetExceeded || !strings.Contains(e.Message, "in flight") {
		t.Fatalf("a run beside the call in flight ended %s/%s: %s, want budget_exceeded for the call in flight",
			r2.Status, r2.TerminalReason, e.Message)
	}
	calls := b.fake.Calls()
	e1.Abandon() // the worker dies mid-call: nothing settles its hold
	crashed := time.Now()
	for h := probe(); !h.OK || h.Held != 0 || h.Month != 0; h = probe() {
		if time.Since(crashed) > ttl+5*time.Second {
			t.Fatalf("the crashed run's hold still counts %v after the crash: %+v", time.Since(crashed), h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lapsed := time.Since(crashed); lapsed < ttl/2 {
		t.Fatalf("the hold stopped counting %v after the crash, before the lease could lapse", lapsed)
	}
	// Taken over, the run asks again (the hang was once) and finishes;
	// the run after it finds the budget as the ledger says: 0.92 spent.
	b.start(t, cfg)
	if r := b.wait(t, r1.ID, nil); r.Status != agentd.StatusCompleted || b.fake.Calls() != calls+1 {
		t.Fatalf("the crashed run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	if r := b.wait(t, b.create(t, words, p).ID, nil); r.Status != agentd.StatusCompleted {
		t.Fatalf("the run after the crash ended %s/%s: %s, want completed: the crashed call's hold was lost",
			r.Status, r.TerminalReason, r.Error)
	}
}

// TestMaxCostCoversTheTree: a parent's max_cost covers its sub-agents'
// runs, which run at once: its tree spends at most the cap and one call,
// a child past it is refused naming the parent's budget, and the parent's
// own call after that finds the budget spent by its children.
func TestMaxCostCoversTheTree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Output priced (13000 a million, about 1.1 for a child's answer of
	// 60 words), a call's answer estimated at the profile's 100 tokens.
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(`{"models": {"fake": {"context_window": 0, "max_output_tokens": 100,
		"prices": {"input": 10, "output": 13000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := compact.LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	var hooked []string
	cfg := runConfig()
	cfg.Workers, cfg.Composer, cfg.Profiles, cfg.ModelBackoff = 8, childSpecs(t, b, &hooked), profiles, 10*time.Millisecond
	b.start(t, cfg)
	script := strings.Repeat("/call researcher {\"task\":\"/stream 60 30\"}\n", 6) + "/next\n/say done"
	const maxCost = 3
	p := b.wait(t, b.create(t, script, agentd.RunParams{SubAgents: researchers, MaxCost: maxCost}).ID,
		func(r agentd.Run) bool { return r.Status.Terminal() })
	kids := childOf(t, b, p.ID)
	if len(kids) != 6 {
		t.Fatalf("children started: %d, want 6", len(kids))
	}
	ctx := context.Background()
	refused, call := 0, 0.0
	for _, id := range kids {
		k := b.wait(t, id, func(r agentd.Run) bool { return r.Status.Terminal() })
		var e agentd.ErrorDetail
		_ = json.Unmarshal(k.Error, &e)
		switch {
		case k.Status == agentd.StatusCompleted:
			call = max(call, runUsage(t, b, id).Cost)
		case k.TerminalReason == agentd.ReasonBudgetExceeded && strings.Contains(e.Message, p.ID):
			refused++
		default:
			t.Fatalf("child %s ended %s/%s: %s", id, k.Status, k.TerminalReason, e.Message)
		}
	}
	tree, err := b.store.RunCost(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a max_cost of %v over 6 children: %d refused, the tree spent %.2f (a child's call %.2f); the parent ended %s/%s",
		maxCost, refused, tree.Cost, call, p.Status, p.TerminalReason)
	if refused == 0 || tree.Cost > maxCost+call+1e-9 {
		t.Fatalf("the tree spent %.2f with %d children refused, want at most %v and one call (%.2f)",
			tree.Cost, refused, maxCost, call)
	}
}
