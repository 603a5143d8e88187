package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// TestBudgetHoldCounts: a hold counts against its tenant's month until the
// write of its call's ledger row releases it; a hold is refused once the
// month and the live holds reach the budget; a worker past the run's epoch
// cannot replace the run's hold; and a hold whose run's lease lapsed stops
// counting, and is deleted by the next check.
func TestBudgetHoldCounts(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	createRun(t, l.s, "a")
	createRun(t, l.s, "b")
	var claims [2]persist.Claim
	for i := range claims {
		c, err := l.s.RunClaim(ctx, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		claims[i] = c
	}
	hold := func(run string, epoch int64, amount float64) persist.BudgetHeld {
		t.Helper()
		h, err := l.s.BudgetHold(ctx, persist.BudgetHoldParams{TenantID: "default", RunID: run, Epoch: epoch,
			Monthly: 10, Amount: amount})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	probe := func() persist.BudgetHeld { t.Helper(); return hold(agentd.NewID(), 0, 0) }
	r1, r2 := claims[0], claims[1]
	if h := hold(r1.ID, r1.Epoch, 6); !h.OK || h.Held != 0 {
		t.Fatalf("the first hold: %+v", h)
	}
	if h := hold(r2.ID, r2.Epoch, 6); !h.OK || h.Held != 6 {
		t.Fatalf("the second hold, beside 6 held: %+v", h)
	}
	if h := probe(); h.OK || h.Held != 12 {
		t.Fatalf("a third call past 12 held of 10: %+v", h)
	}
	// r1's call cost 5: its ledger row and its hold's release commit
	// together.
	if _, err := l.s.Exec(ctx, persist.Fence{RunID: r1.ID, Epoch: r1.Epoch, Worker: "w"}, nil,
		persist.LedgerInsert{TenantID: "default", RunID: r1.ID, StepSeq: 1, N: 1, Kind: agentd.ModelCallStep, Model: "m",
			Provider: "openai", Cost: 5}, persist.BudgetRelease{RunID: r1.ID, Epoch: r1.Epoch}); err != nil {
		t.Fatal(err)
	}
	if h := probe(); h.OK || h.Month != 5 || h.Held != 6 {
		t.Fatalf("after r1's call settled: %+v, want 5 spent and 6 held", h)
	}
	if h := hold(r2.ID, r2.Epoch-1, 0); h.OK {
		t.Fatalf("a worker past r2's epoch replaced its hold: %+v", h)
	}
	if h := probe(); h.OK || h.Held != 6 {
		t.Fatalf("r2's hold after a stale worker's: %+v", h)
	}
	// r2's worker died mid-call: its lease lapses.
	l.exec(`UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, r2.ID)
	if h := probe(); !h.OK || h.Month != 5 || h.Held != 0 {
		t.Fatalf("after r2's lease lapsed: %+v, want 5 spent and nothing held", h)
	}
	if n := l.count(`SELECT count(*) FROM budget_holds WHERE run_id = $1`, r2.ID); n != 0 {
		t.Fatalf("the lapsed hold's row is still there")
	}
}
