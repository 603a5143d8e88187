package persist

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// BudgetHoldParams asks for a hold on a run's budgets for one model call
// (budget_holds, migration 00044): its tenant's monthly budget, and the
// max_cost of the run and of each run above it (a run's max_cost covers
// the calls of its sub-agents' runs, at every depth).
type BudgetHoldParams struct {
	TenantID, RunID string
	// Epoch is the run's epoch, whose claim makes the call: the hold
	// counts only while the run is running under it with a live lease.
	Epoch int64
	// Monthly is the tenant's monthly budget; 0: none.
	Monthly float64
	// Amount is what the run holds: the call's estimated cost, and what
	// its calls that answered and whose ledger rows are not committed yet
	// cost. It replaces the run's earlier hold.
	Amount float64
}

// BudgetHeld is the answer to a BudgetHold.
type BudgetHeld struct {
	// Month is what the tenant's model calls cost in the current month
	// (UTC) by the ledger; Held what the other runs' live holds hold of
	// it.
	Month, Held float64
	// Capped is the first run, from the run up its tree, whose max_cost
	// refused the call; nil: none did. Caps counts the runs, from the run
	// up, that have a max_cost (what a run's executor may keep: a run's
	// parameters do not change).
	Capped *BudgetCapped
	Caps   int
	// OK: the hold was made, Month+Held being below Monthly (or no
	// monthly budget) and no max_cost refusing. Otherwise the run holds
	// nothing (its earlier hold, if any, is kept).
	OK bool
}

// BudgetCapped is a run whose max_cost refused a call of its tree: what
// the model calls of the runs of its tree cost (Spent), and what the
// live holds of the others than the calling run held (Held), reached Cap.
type BudgetCapped struct {
	RunID            string
	Cap, Spent, Held float64
}

// BudgetHold makes the run's hold of p.Amount if what the month spent and
// what the calls in flight of the tenant's other runs hold is below
// p.Monthly, and, for the run and each run above it with a max_cost, what
// the runs of its tree spent and hold is below it (the call that crosses a
// budget is made, the next is not). Holds of one tenant are made one at a
// time, under a transaction-scoped advisory lock of the tenant's budgets,
// and each one's check is a statement whose snapshot is taken under that
// lock: it sees every hold made before it, and every ledger row whose
// write deleted its hold (the two commit together). It costs one round
// trip. On the way it deletes the tenant's holds that no longer count
// (their run stopped, lost its lease, or was claimed again). Now and then
// it moves the month's watermark, as Spend does.
func (s *Store) BudgetHold(ctx context.Context, p BudgetHoldParams) (BudgetHeld, error) {
	var h BudgetHeld
	amount := p.Amount
	if math.IsNaN(amount) || math.IsInf(amount, 0) || amount < 0 {
		amount = 0
	}
	var start, through, now time.Time
	var kept bool
	var capped *string
	var c BudgetCapped
	var b pgx.Batch
	// One implicit transaction: the lock is held until the hold is made.
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('agentd.budget_holds:' || $1, 0))`, p.TenantID)
	b.Queue(`WITH RECURSIVE m AS (SELECT date_trunc('month', now(), 'UTC') AS start),
		w AS (SELECT s.through, s.cost FROM tenant_spend s, m WHERE s.tenant_id = $1 AND s.month = m.start),
		month AS (SELECT m.start, EXISTS (SELECT 1 FROM w) AS kept, coalesce((SELECT through FROM w), m.start) AS through,
			CASE WHEN $4::float8 > 0 THEN (coalesce((SELECT cost FROM w), 0) + coalesce((SELECT sum(c.cost) FROM model_calls c
				WHERE c.tenant_id = $1 AND c.created_at >= coalesce((SELECT through FROM w), m.start)
				AND c.created_at < m.start + interval '1 month'), 0))::float8 ELSE 0 END AS spent
			FROM m),
		holds AS (SELECT h.run_id, h.amount,
				coalesce(r.epoch = h.epoch AND r.status = 'running' AND r.lease_expires_at > now(), false) AS live
			FROM budget_holds h LEFT JOIN runs r ON r.id = h.run_id
			WHERE h.tenant_id = $1 AND h.run_id <> $2),
		gone AS (DELETE FROM budget_holds h USING holds WHERE h.run_id = holds.run_id AND NOT holds.live),
		held AS (SELECT coalesce(sum(amount) FILTER (WHERE live), 0)::float8 AS held FROM holds),
		-- The run and the runs above it (a cycle of parents, which no
		-- writer makes, still ends at the depth's cap), those with a
		-- max_cost, and the runs of each one's tree.
		up (id, parent, cap, depth) AS (
			SELECT id, parent_run_id, (params->>'max_cost')::float8, 0 FROM runs WHERE id = $2
			UNION ALL
			SELECT r.id, r.parent_run_id, (r.params->>'max_cost')::float8, up.depth + 1
			FROM up JOIN runs r ON r.id = up.parent WHERE up.depth < 100),
		caps AS (SELECT id, cap, depth FROM up WHERE cap > 0),
		tree (root, id) AS (
			SELECT id, id FROM caps
			UNION
			SELECT t.root, c.id FROM tree t JOIN runs c ON c.parent_run_id = t.id),
		capped AS (SELECT caps.id, caps.cap,
				coalesce((SELECT sum(mc.cost) FROM tree t JOIN model_calls mc ON mc.run_id = t.id WHERE t.root = caps.id), 0)::float8 AS spent,
				coalesce((SELECT sum(h.amount) FROM tree t JOIN holds h ON h.run_id = t.id WHERE t.root = caps.id AND h.live), 0)::float8 AS held,
				caps.depth
			FROM caps),
		refused AS (SELECT id, cap, spent, held FROM capped WHERE spent + held >= cap ORDER BY depth LIMIT 1),
		made AS (INSERT INTO budget_holds (run_id, tenant_id, epoch, amount)
			SELECT $2, $1, $3, $5 FROM month, held
			WHERE ($4::float8 <= 0 OR month.spent + held.held < $4::float8) AND NOT EXISTS (SELECT 1 FROM refused)
			ON CONFLICT (run_id) DO UPDATE SET tenant_id = excluded.tenant_id, epoch = excluded.epoch,
				amount = excluded.amount, created_at = now()
				WHERE budget_holds.epoch <= excluded.epoch
			RETURNING 1)
		SELECT month.start, month.kept, month.through, month.spent, held.held, EXISTS (SELECT 1 FROM made),
			(SELECT id::text FROM refused), coalesce((SELECT cap FROM refused), 0),
			coalesce((SELECT spent FROM refused), 0), coalesce((SELECT held FROM refused), 0),
			(SELECT count(*) FROM caps)::int, now()
		FROM month, held`, p.TenantID, p.RunID, p.Epoch, p.Monthly, amount)
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&start, &kept, &through, &h.Month, &h.Held, &h.OK, &capped, &c.Cap, &c.Spent, &c.Held, &h.Caps, &now)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return BudgetHeld{}, fmt.Errorf("budget hold: %w", translate(err))
	}
	if capped != nil {
		c.RunID = *capped
		h.Capped = &c
	}
	if p.Monthly > 0 && through.Before(now.Add(-spendGrace-spendEvery)) {
		_ = s.spendAdvance(ctx, p.TenantID, start, now.Add(-spendGrace), kept)
	}
	return h, nil
}

// BudgetRelease deletes the hold of run RunID made under Epoch: an op of
// the write that commits the ledger rows of the calls it held for, so
// that their cost moves from the hold to the ledger at once.
type BudgetRelease struct {
	RunID string
	Epoch int64
}

func (o BudgetRelease) queue(b *batch) error {
	b.exec("release budget hold", `DELETE FROM budget_holds WHERE run_id = $1 AND epoch = $2`, o.RunID, o.Epoch)
	return nil
}
