package persist

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// BudgetHoldParams asks for a hold on a tenant's monthly budget for one
// model call of a run (budget_holds, migration 00044).
type BudgetHoldParams struct {
	TenantID, RunID string
	// Epoch is the run's epoch, whose claim makes the call: the hold
	// counts only while the run is running under it with a live lease.
	Epoch int64
	// Monthly is the tenant's monthly budget; it must be positive.
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
	// it; Run what the run's own calls cost.
	Month, Held, Run float64
	// OK: the hold was made, Month+Held being below Monthly. Otherwise
	// the run holds nothing (its earlier hold, if any, is kept).
	OK bool
}

// BudgetHold makes the run's hold of p.Amount on its tenant's monthly
// budget if what the month spent and what the calls in flight of the
// tenant's other runs hold is below p.Monthly (the call that crosses the
// budget is made, the next is not). Holds of one tenant are made one at a
// time, under a transaction-scoped advisory lock of the tenant's budget,
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
	var b pgx.Batch
	// One implicit transaction: the lock is held until the hold is made.
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('agentd.budget_holds:' || $1, 0))`, p.TenantID)
	b.Queue(`WITH m AS (SELECT date_trunc('month', now(), 'UTC') AS start),
		w AS (SELECT s.through, s.cost FROM tenant_spend s, m WHERE s.tenant_id = $1 AND s.month = m.start),
		month AS (SELECT m.start, EXISTS (SELECT 1 FROM w) AS kept, coalesce((SELECT through FROM w), m.start) AS through,
			(coalesce((SELECT cost FROM w), 0) + coalesce((SELECT sum(c.cost) FROM model_calls c
				WHERE c.tenant_id = $1 AND c.created_at >= coalesce((SELECT through FROM w), m.start)
				AND c.created_at < m.start + interval '1 month'), 0))::float8 AS spent
			FROM m),
		holds AS (SELECT h.run_id, h.amount,
				coalesce(r.epoch = h.epoch AND r.status = 'running' AND r.lease_expires_at > now(), false) AS live
			FROM budget_holds h LEFT JOIN runs r ON r.id = h.run_id
			WHERE h.tenant_id = $1 AND h.run_id <> $2),
		gone AS (DELETE FROM budget_holds h USING holds WHERE h.run_id = holds.run_id AND NOT holds.live),
		held AS (SELECT coalesce(sum(amount) FILTER (WHERE live), 0)::float8 AS held FROM holds),
		made AS (INSERT INTO budget_holds (run_id, tenant_id, epoch, amount)
			SELECT $2, $1, $3, $5 FROM month, held WHERE month.spent + held.held < $4
			ON CONFLICT (run_id) DO UPDATE SET tenant_id = excluded.tenant_id, epoch = excluded.epoch,
				amount = excluded.amount, created_at = now()
				WHERE budget_holds.epoch <= excluded.epoch
			RETURNING 1)
		SELECT month.start, month.kept, month.through, month.spent, held.held, EXISTS (SELECT 1 FROM made),
			coalesce((SELECT sum(cost) FROM model_calls WHERE run_id = $2), 0)::float8, now()
		FROM month, held`, p.TenantID, p.RunID, p.Epoch, p.Monthly, amount)
	br := s.pool.SendBatch(ctx, &b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&start, &kept, &through, &h.Month, &h.Held, &h.OK, &h.Run, &now)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return BudgetHeld{}, fmt.Errorf("budget hold: %w", translate(err))
	}
	if through.Before(now.Add(-spendGrace - spendEvery)) {
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
