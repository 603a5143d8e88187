package run_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/run"
)

// pricedProfiles are profiles that price the fake at 1000 per million
// input tokens and 2000 per million output tokens (so a call of a few
// dozen tokens costs a few hundredths).
func pricedProfiles(t *testing.T) *compact.Profiles {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(`{"models": {"fake": {"context_window": 0,
		"prices": {"input": 1000, "output": 2000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := compact.LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runUsage is the ledger's one row of run id.
func runUsage(t *testing.T, b *bundle, id string) agentd.UsageRow {
	t.Helper()
	rows, err := b.store.Usage(context.Background(), agentd.UsageQuery{Tenant: "default",
		From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour), GroupBy: []agentd.UsageKey{agentd.UsageByRun}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if g := r.Group[agentd.UsageByRun]; g != nil && *g == id {
			return r
		}
	}
	t.Fatalf("the ledger has no row of run %s: %+v", id, rows)
	return agentd.UsageRow{}
}

// TestLedgerCountsEveryCall: each model call of a run that answered is one
// ledger row, written with the step's output; the rows' tokens are what
// the fake reported, and their cost is the tokens at the profile's prices.
func TestLedgerCountsEveryCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, run.Config{Profiles: pricedProfiles(t), LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond,
		ModelBackoff: 10 * time.Millisecond, Workers: 2})
	// Two steps; the second's answer is cut at the fake's output limit
	// twice and continued: four calls in all.
	r := b.create(t, "/call calculator {\"expression\":\"1+2\"}\n/finish length 2\n/say three", agentd.RunParams{})
	got := b.wait(t, r.ID, nil)
	if got.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", got.Status, got.TerminalReason, got.Error)
	}
	u := runUsage(t, b, r.ID)
	fake := b.fake.UsageTotal()
	if u.Calls != int64(b.fake.Calls()) || u.Calls != 4 || u.InputTokens != fake.PromptTokens || u.OutputTokens != fake.CompletionTokens {
		t.Fatalf("ledger %+v; the fake answered %d calls, %+v", u, b.fake.Calls(), fake)
	}
	want := (float64(fake.PromptTokens)*1000 + float64(fake.CompletionTokens)*2000) / 1e6
	if math.Abs(u.Cost-want) > 1e-9 {
		t.Errorf("ledger cost %v, want %v", u.Cost, want)
	}
	if got.Usage.InputTokens != u.InputTokens {
		t.Errorf("the run's usage %+v is not the ledger's %+v", got.Usage, u)
	}
}

// TestBudgetStopsTheNextCall: a run's max_cost that its first call
// spends ends it before its second call, failed budget_exceeded with a
// message naming the budget; a tenant's monthly budget stops its next run
// before any call, until an admin raises it.
func TestBudgetStopsTheNextCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, run.Config{Profiles: pricedProfiles(t), LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond,
		ModelBackoff: 10 * time.Millisecond, Workers: 2, MonthlyBudget: 0.5})
	r := b.create(t, "/call calculator {\"expression\":\"1+2\"}\n/say three", agentd.RunParams{MaxCost: 0.001})
	got := b.wait(t, r.ID, nil)
	var e agentd.ErrorDetail
	_ = json.Unmarshal(got.Error, &e)
	if got.Status != agentd.StatusFailed || got.TerminalReason != agentd.ReasonBudgetExceeded || e.Kind != agentd.RunErrBudgetExceeded ||
		!strings.Contains(e.Message, "max_cost") {
		t.Fatalf("run ended %s/%s: %+v, want failed budget_exceeded naming max_cost", got.Status, got.TerminalReason, e)
	}
	if n := b.fake.Calls(); n != 1 {
		t.Fatalf("the fake answered %d calls, want 1: none past the budget", n)
	}

	// The tenant's month: spend it with runs until one is stopped.
	var stopped agentd.Run
	last := 0.0 // what the last run that was not stopped cost
	for i := 0; i < 100 && stopped.ID == ""; i++ {
		r := b.wait(t, b.create(t, "/say "+strings.Repeat("many words ", 50), agentd.RunParams{}).ID, nil)
		if r.Status == agentd.StatusFailed {
			stopped = r
		} else {
			last = runUsage(t, b, r.ID).Cost
		}
	}
	_ = json.Unmarshal(stopped.Error, &e)
	if stopped.TerminalReason != agentd.ReasonBudgetExceeded || !strings.Contains(e.Message, "monthly budget of 0.5") {
		t.Fatalf("run %s/%s: %+v, want budget_exceeded naming the monthly budget", stopped.Status, stopped.TerminalReason, e)
	}
	month, _, err := b.store.Spend(context.Background(), "default", "")
	if err != nil || month < 0.5 || month >= 0.5+last {
		t.Fatalf("the month spent %v (%v), want past 0.5 by less than the last call (%v)", month, err, last)
	}
	calls := b.fake.Calls()
	raised := 10.0
	if err := b.store.BudgetSet(context.Background(), "default", &raised, "admin"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // the engine's read of the tenant's own budget is kept 2s
	if r := b.wait(t, b.create(t, "/say after the raise", agentd.RunParams{}).ID, nil); r.Status != agentd.StatusCompleted ||
		b.fake.Calls() != calls+1 {
		t.Fatalf("after the raise the run ended %s/%s", r.Status, r.TerminalReason)
	}
}
