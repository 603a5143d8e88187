package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// Schedules (docs/schedules.md). A due schedule is claimed, for a lease,
// with FOR UPDATE SKIP LOCKED by whichever instance ticks first
// (ScheduleClaim), in a short transaction; its slot's run spec is made
// outside any transaction; then its run is created, and its next_at
// advanced, in one transaction that checks the claim still holds
// (ScheduleFire). The run's row names the schedule and the slot, which
// runs_schedule_slot keeps unique. The ends of its runs are counted afterwards, from the runs'
// rows (ScheduleSettle), in the order of their slots: a schedule whose
// runs failed too many times in a row pauses itself.

// scheduleColumns read a schedule (s: schedules), with the outcomes of its
// latest slots that started runs.
const scheduleColumns = `s.id::text, s.tenant_id, s.name, s.cron, s.timezone, s.run, s.overlap, s.catch_up, s.paused,
	coalesce(s.paused_reason, ''), s.next_at, s.consecutive_failures, coalesce(s.last_error, ''),
	coalesce(s.last_run_id::text, ''), s.last_slot, s.counted_through, s.created_by, s.created_at, s.updated_at,
	coalesce((SELECT json_agg(json_build_object('run_id', o.id, 'scheduled_for', o.scheduled_for, 'status', o.status)
		ORDER BY o.scheduled_for DESC) FROM (SELECT r.id, r.scheduled_for, r.status FROM runs r
		WHERE r.schedule_id = s.id ORDER BY r.scheduled_for DESC LIMIT 5) o), '[]')`

func scanSchedule(row pgx.Row) (agentd.Schedule, error) {
	var sc agentd.Schedule
	var last []byte
	err := row.Scan(&sc.ID, &sc.TenantID, &sc.Name, &sc.Cron, &sc.Timezone, &sc.Run, &sc.Overlap, &sc.CatchUp, &sc.Paused,
		&sc.PausedReason, &sc.NextAt, &sc.ConsecutiveFailures, &sc.LastError, &sc.LastRunID, &sc.LastSlot,
		&sc.CountedThrough, &sc.CreatedBy, &sc.CreatedAt, &sc.UpdatedAt, &last)
	if err != nil {
		return sc, notFound(translate(err), agentd.ErrScheduleNotFound)
	}
	if err := json.Unmarshal(last, &sc.LastRuns); err != nil {
		return sc, fmt.Errorf("decode the schedule's last runs: %w", err)
	}
	return sc, nil
}

// ScheduleCreate stores a new schedule (its ID, tenant, name, timing, run
// template, policies, NextAt and CreatedBy as sc has them).
// ErrScheduleExists: the tenant has a schedule of that name.
func (s *Store) ScheduleCreate(ctx context.Context, sc agentd.Schedule) (agentd.Schedule, error) {
	if sc.ID == "" {
		sc.ID = newID()
	}
	out, err := scanSchedule(s.pool.QueryRow(ctx, `WITH s AS (
			INSERT INTO schedules (id, tenant_id, name, cron, timezone, run, overlap, catch_up, paused, next_at, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *)
		SELECT `+scheduleColumns+` FROM s`,
		sc.ID, sc.TenantID, sc.Name, sc.Cron, sc.Timezone, sc.Run, sc.Overlap, sc.CatchUp, sc.Paused, sc.NextAt, sc.CreatedBy))
	if errors.Is(err, agentd.ErrConflict) {
		return out, agentd.ErrScheduleExists
	}
	return out, err
}

// ScheduleGet returns a tenant's schedule; ErrScheduleNotFound.
func (s *Store) ScheduleGet(ctx context.Context, tenantID, id string) (agentd.Schedule, error) {
	return scanSchedule(s.pool.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s
		WHERE s.tenant_id = $1 AND s.id = $2`, tenantID, id))
}

// ScheduleList returns a page of a tenant's schedules by name, after the
// name after.
func (s *Store) ScheduleList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Schedule, error) {
	return queryAll(ctx, s.pool, scanSchedule, `SELECT `+scheduleColumns+` FROM schedules s
		WHERE s.tenant_id = $1 AND s.name > $2 ORDER BY s.name LIMIT $3`, tenantID, after, limit)
}

// ScheduleUpdate changes a tenant's schedule: change is called with the
// schedule as it is, locked, and changes it (its error is returned as it
// is, and nothing is written); then its timing, run template, policies,
// pause and counters are written as change left them, and a claim on it
// is voided (a slot whose run was made from the schedule as it was is
// claimed again). ErrScheduleNotFound.
func (s *Store) ScheduleUpdate(ctx context.Context, tenantID, id string, change func(*agentd.Schedule) error) (agentd.Schedule, error) {
	var out agentd.Schedule
	err := s.tx(ctx, func(tx pgx.Tx) error {
		sc, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s
			WHERE s.tenant_id = $1 AND s.id = $2 FOR UPDATE`, tenantID, id))
		if err != nil {
			return err
		}
		if err := change(&sc); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE schedules SET cron = $2, timezone = $3, run = $4, overlap = $5, catch_up = $6,
				paused = $7, paused_reason = $8, next_at = $9, consecutive_failures = $10, updated_at = now(),
			claim_id = NULL, claimed_until = NULL
			WHERE id = $1`, id, sc.Cron, sc.Timezone, sc.Run, sc.Overlap, sc.CatchUp, sc.Paused,
			nullIfEmpty(sc.PausedReason), sc.NextAt, sc.ConsecutiveFailures); err != nil {
			return fmt.Errorf("update schedule: %w", err)
		}
		out, err = scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s WHERE s.id = $1`, id))
		return err
	})
	return out, err
}

// ScheduleDelete deletes a tenant's schedule; its runs stay, naming it.
// ErrScheduleNotFound.
func (s *Store) ScheduleDelete(ctx context.Context, tenantID, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedules WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return agentd.ErrScheduleNotFound
	}
	return nil
}

// ScheduleRuns returns a page of the runs of a tenant's schedule, the
// newest slot first: limit of them before the slot before (nil: from the
// latest). ErrScheduleNotFound.
func (s *Store) ScheduleRuns(ctx context.Context, tenantID, id string, before *time.Time, limit int) ([]agentd.Run, error) {
	var found bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schedules WHERE tenant_id = $1 AND id = $2)`,
		tenantID, id).Scan(&found); err != nil {
		return nil, translate(err)
	}
	if !found {
		return nil, agentd.ErrScheduleNotFound
	}
	return queryAll(ctx, s.pool, scanRun, `SELECT `+runColumns+` FROM runs
		WHERE schedule_id = $2 AND tenant_id = $1 AND ($3::timestamptz IS NULL OR scheduled_for < $3)
		ORDER BY scheduled_for DESC LIMIT $4`, tenantID, id, before, limit)
}

// DueSchedule is a schedule whose next slot is due, as ScheduleClaim
// claimed it, with what its slot needs to know.
type DueSchedule struct {
	agentd.Schedule
	// Now is the database's time, which next_at was compared with.
	Now time.Time
	// PrevOpen: the schedule's latest run has not ended (completed,
	// failed, cancelled or timed out); PrevFinishedAt is when it ended.
	PrevOpen       bool
	PrevFinishedAt *time.Time
	// Claim is the claim ScheduleClaim took, which ScheduleFire and
	// ScheduleRelease check.
	Claim string
}

// SlotPlan is what a due schedule's slot does.
type SlotPlan struct {
	// Run is the slot's run (its Params.Schedule names the schedule and
	// the slot); nil: the slot starts none.
	Run *RunCreateParams
	// NextAt is the schedule's next slot; zero: the schedule is left as it
	// is, due (a slot that waits for the previous run to end).
	NextAt time.Time
	// Error says why the slot could not start its run; it counts as a
	// failed run.
	Error string
}

// ScheduleClaimParams are the inputs of ScheduleClaim.
type ScheduleClaimParams struct {
	// Limit caps the schedules claimed.
	Limit int
	// Lease is how long the claims hold, unless extended
	// (ScheduleExtend). Past it, another instance may claim the schedule,
	// and the first claim is void.
	Lease time.Duration
}

// ScheduleFireParams are the inputs of ScheduleFire.
type ScheduleFireParams struct {
	// Due is the schedule, as ScheduleClaim claimed it.
	Due DueSchedule
	// Plan is what its slot does.
	Plan SlotPlan
	// MaxFailures is how many failures in a row pause a schedule (0: never).
	MaxFailures int
}

// FireResult is what ScheduleFire did.
type FireResult struct {
	// Run is the run created; nil: none.
	Run *agentd.Run
	// Failed: the slot failed (its plan said so, or its run could not be
	// created), counted.
	Failed bool
	// Paused is the schedule, when it paused itself; nil otherwise.
	Paused *agentd.Schedule
}

// ErrClaimLost is ScheduleFire's answer when the claim it was given is no
// longer the schedule's (its lease ran out and another instance claimed
// it, a change of the schedule voided it, the schedule is gone or paused)
// or the schedule's next_at moved: it wrote nothing.
var ErrClaimLost = errors.New("the schedule's claim was lost")

// dueSQL takes the due schedules (limit $1) that no live claim holds, but
// those that wait, with overlap enqueue, for their latest run to end: they
// are not taken until it has, so that they do not hold a place in every
// batch.
const dueSQL = `SELECT now(), ` + scheduleColumns + `,
		coalesce(p.status NOT IN ('completed', 'failed', 'cancelled', 'timed_out'), false), p.finished_at
	FROM schedules s LEFT JOIN runs p ON p.id = s.last_run_id
	WHERE NOT s.paused AND s.next_at <= now() AND (s.claimed_until IS NULL OR s.claimed_until <= now())
		AND NOT (s.overlap = 'enqueue' AND p.status IS NOT NULL AND p.status NOT IN ('completed', 'failed', 'cancelled', 'timed_out'))
	ORDER BY s.next_at LIMIT $1 FOR UPDATE OF s SKIP LOCKED`

// ScheduleClaim claims up to p.Limit due schedules that no live claim
// holds, for p.Lease, in one short transaction (FOR UPDATE SKIP LOCKED,
// so that instances share them without a leader). Nothing is fired: the
// caller makes each slot's run spec outside any transaction, then fires
// it with ScheduleFire, or gives the claim up with ScheduleRelease.
func (s *Store) ScheduleClaim(ctx context.Context, p ScheduleClaimParams) ([]DueSchedule, error) {
	claim := newID()
	var due []DueSchedule
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if due, err = queryAll(ctx, tx, scanDueSchedule, dueSQL, p.Limit); err != nil || len(due) == 0 {
			return err
		}
		ids := make([]string, 0, len(due))
		for i := range due {
			due[i].Claim = claim
			ids = append(ids, due[i].ID)
		}
		_, err = tx.Exec(ctx, `UPDATE schedules SET claim_id = $2, claimed_until = now() + $3 * interval '1 millisecond'
			WHERE id = ANY($1)`, ids, claim, p.Lease.Milliseconds())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim due schedules: %w", err)
	}
	return due, nil
}

// ScheduleExtend extends the leases of the claims (DueSchedule.Claim) to
// lease from now, on the schedules they still hold: an instance does so
// while it makes their slots' run specs, so that a short lease lapses
// soon after an instance dies, not while it works.
func (s *Store) ScheduleExtend(ctx context.Context, claims []string, lease time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE schedules SET claimed_until = now() + $2 * interval '1 millisecond'
		WHERE claim_id = ANY($1::uuid[])`, claims, lease.Milliseconds())
	return translate(err)
}

// ScheduleRelease gives up the claim of d, if it is still its schedule's,
// so that the schedule is due again at once, to any instance.
func (s *Store) ScheduleRelease(ctx context.Context, d DueSchedule) error {
	_, err := s.pool.Exec(ctx, `UPDATE schedules SET claim_id = NULL, claimed_until = NULL WHERE id = $1 AND claim_id = $2`,
		d.ID, d.Claim)
	return translate(err)
}

// ScheduleFire carries out the plan of a claimed schedule's slot in one
// transaction: it checks, under the schedule's row lock, that the claim is
// still the caller's and next_at unchanged (else ErrClaimLost), then
// creates the slot's run, and advances the schedule, together, giving the
// claim up. A run that cannot be created for the request it is (a busy
// conversation, a missing one) leaves its slot failed, counted; a schedule
// whose failures reach p.MaxFailures pauses itself.
func (s *Store) ScheduleFire(ctx context.Context, p ScheduleFireParams) (FireResult, error) {
	var res FireResult
	var made *creation
	d := p.Due
	err := s.tx(ctx, func(tx pgx.Tx) error {
		res, made = FireResult{}, nil
		tag, err := tx.Exec(ctx, `UPDATE schedules SET claim_id = NULL, claimed_until = NULL
			WHERE id = $1 AND claim_id = $2 AND next_at = $3 AND NOT paused`, d.ID, d.Claim, d.NextAt)
		if err != nil {
			return fmt.Errorf("check the claim: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrClaimLost
		}
		plan := p.Plan
		c, err := s.fireSlot(ctx, tx, d, &plan)
		if err != nil {
			return fmt.Errorf("fire schedule %s: %w", d.ID, err)
		}
		if c != nil {
			made, res.Run = c, &c.state.Run
		}
		if plan.Error == "" {
			return nil
		}
		res.Failed = true
		res.Paused, err = pauseIfFailing(ctx, tx, d.ID, p.MaxFailures, "; last: "+plan.Error)
		return err
	})
	if err != nil {
		return FireResult{}, err
	}
	if made != nil {
		s.published(made.cancelled)
		if s.pub != nil {
			s.pub.PublishedEvents(made.state.Run.ID, made.events())
		}
	}
	return res, nil
}

func scanDueSchedule(row pgx.Row) (DueSchedule, error) {
	var d DueSchedule
	var last []byte
	sc := &d.Schedule
	err := row.Scan(&d.Now, &sc.ID, &sc.TenantID, &sc.Name, &sc.Cron, &sc.Timezone, &sc.Run, &sc.Overlap, &sc.CatchUp,
		&sc.Paused, &sc.PausedReason, &sc.NextAt, &sc.ConsecutiveFailures, &sc.LastError, &sc.LastRunID, &sc.LastSlot,
		&sc.CountedThrough, &sc.CreatedBy, &sc.CreatedAt, &sc.UpdatedAt, &last, &d.PrevOpen, &d.PrevFinishedAt)
	if err != nil {
		return d, translate(err)
	}
	return d, json.Unmarshal(last, &sc.LastRuns)
}

// fireSlot carries out plan for due schedule d, locked, in tx: it creates the
// slot's run under a savepoint (a run refused for its request, or over its
// tenant's quota when its template says on_quota reject, fails the slot,
// in plan.Error, rather than the transaction) and advances the schedule. It returns the creation, nil when no run was created.
func (s *Store) fireSlot(ctx context.Context, tx pgx.Tx, d DueSchedule, plan *SlotPlan) (*creation, error) {
	var c *creation
	if plan.Run != nil {
		if sc := plan.Run.Params.Schedule; sc == nil || sc.ID != d.ID {
			return nil, fmt.Errorf("the slot's run does not name its schedule %s", d.ID)
		}
		err := s.overQuota(ctx, tx, *plan.Run)
		if err == nil {
			c, err = createSaved(ctx, tx, *plan.Run)
		}
		if err != nil {
			if !refused(err) {
				return nil, err
			}
			c, plan.Error = nil, "the run could not be created: "+err.Error()
		}
	}
	var err error
	switch {
	case c != nil:
		_, err = tx.Exec(ctx, `UPDATE schedules SET next_at = $2, last_run_id = $3, last_slot = $4, last_error = NULL,
			updated_at = now() WHERE id = $1`, d.ID, plan.NextAt, c.runID, plan.Run.Params.Schedule.Slot)
	case plan.Error != "":
		next := plan.NextAt
		if next.IsZero() {
			next = d.NextAt
		}
		_, err = tx.Exec(ctx, `UPDATE schedules SET next_at = $2, consecutive_failures = consecutive_failures + 1,
			last_error = $3, updated_at = now() WHERE id = $1`, d.ID, next, plan.Error)
	case !plan.NextAt.IsZero():
		_, err = tx.Exec(ctx, `UPDATE schedules SET next_at = $2, updated_at = now() WHERE id = $1`, d.ID, plan.NextAt)
	}
	if err != nil {
		return nil, fmt.Errorf("advance: %w", err)
	}
	return c, nil
}

// createSaved creates a run in tx under a savepoint, rolled back when the
// creation fails.
func createSaved(ctx context.Context, tx pgx.Tx, p RunCreateParams) (*creation, error) {
	c, err := newCreation(p)
	if err != nil {
		return nil, err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, translate(err)
	}
	if err := c.createIn(ctx, sp); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = sp.Rollback(rctx)
		return nil, translate(err)
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, translate(err)
	}
	return c, nil
}

// refused reports whether a run's creation failed for the request it is,
// which trying again would not mend, rather than for the database.
func refused(err error) bool {
	var busy *agentd.BusyError
	var pending *agentd.PendingCallsError
	return errors.As(err, &busy) || errors.As(err, &pending) || errors.Is(err, agentd.ErrConversationNotFound) ||
		errors.Is(err, ErrInvalidValue) || errors.Is(err, ErrConstraint) || errors.Is(err, agentd.ErrQuotaExceeded)
}

// pauseIfFailing pauses schedule id, locked by the caller, when it is not
// paused and its consecutive failures reached maxFailures (0: never),
// saying so (reason: "N consecutive runs failed" and last); it tells the
// tenant's webhooks (schedule.paused) in the same transaction. It returns
// the paused schedule, nil when it did not pause it.
func pauseIfFailing(ctx context.Context, tx pgx.Tx, id string, maxFailures int, last string) (*agentd.Schedule, error) {
	if maxFailures <= 0 {
		return nil, nil
	}
	tag, err := tx.Exec(ctx, `UPDATE schedules SET paused = true, updated_at = now(),
			paused_reason = consecutive_failures || ' consecutive runs failed' || $2
		WHERE id = $1 AND NOT paused AND consecutive_failures >= $3`, id, last, maxFailures)
	if err != nil {
		return nil, fmt.Errorf("pause schedule: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, nil
	}
	sc, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s WHERE s.id = $1`, id))
	if err != nil {
		return nil, err
	}
	if err := notifyTenant(ctx, tx, sc.TenantID, string(agentd.EventSchedulePaused), map[string]any{"schedule": sc.View()}); err != nil {
		return nil, fmt.Errorf("tell of the pause: %w", err)
	}
	return &sc, nil
}

// ScheduleSettleParams are the inputs of ScheduleSettle.
type ScheduleSettleParams struct {
	// Limit caps the schedules settled in one transaction.
	Limit int
	// MaxFailures is how many failures in a row pause a schedule (0: never).
	MaxFailures int
}

// ScheduleSettle counts the ends of the schedules' runs that were not
// counted yet, in the order of their slots, up to the first that has not
// ended: a completed run sets a schedule's consecutive failures to zero, a
// failed or timed out one adds one (a cancelled one neither). A schedule
// whose failures reach p.MaxFailures pauses itself. It returns the
// schedules that paused.
func (s *Store) ScheduleSettle(ctx context.Context, p ScheduleSettleParams) ([]agentd.Schedule, error) {
	var paused []agentd.Schedule
	err := s.tx(ctx, func(tx pgx.Tx) error {
		paused = nil
		ids, err := queryAll(ctx, tx, scanString, `SELECT id::text FROM schedules
			WHERE last_slot IS DISTINCT FROM counted_through LIMIT $1 FOR UPDATE SKIP LOCKED`, p.Limit)
		if err != nil {
			return fmt.Errorf("unsettled schedules: %w", err)
		}
		for _, id := range ids {
			last, err := settleOne(ctx, tx, id)
			if err != nil {
				return fmt.Errorf("settle schedule %s: %w", id, err)
			}
			if last == "" {
				continue
			}
			sc, err := pauseIfFailing(ctx, tx, id, p.MaxFailures, "; last: "+last)
			if err != nil {
				return err
			}
			if sc != nil {
				paused = append(paused, *sc)
			}
		}
		return nil
	})
	return paused, err
}

// endedRun is a schedule's run, as settleOne counts it.
type endedRun struct {
	id     string
	slot   time.Time
	status agentd.RunStatus
	reason string
}

// settleOne counts the ended runs of schedule id, locked by the caller,
// after its counted_through. It returns the latest failed run it counted,
// as "<run id> <terminal reason>" ("" when it counted none).
func settleOne(ctx context.Context, tx pgx.Tx, id string) (string, error) {
	runs, err := queryAll(ctx, tx, func(row pgx.Row) (endedRun, error) {
		var r endedRun
		err := row.Scan(&r.id, &r.slot, &r.status, &r.reason)
		return r, translate(err)
	}, `SELECT r.id::text, r.scheduled_for, r.status, coalesce(r.terminal_reason, '') FROM runs r, schedules s
		WHERE s.id = $1 AND r.schedule_id = s.id AND (s.counted_through IS NULL OR r.scheduled_for > s.counted_through)
		ORDER BY r.scheduled_for LIMIT 100`, id)
	if err != nil {
		return "", err
	}
	if len(runs) == 0 {
		// Its runs are gone (their conversations were deleted): nothing is
		// left to count.
		_, err = tx.Exec(ctx, `UPDATE schedules SET counted_through = last_slot WHERE id = $1`, id)
		return "", err
	}
	var through *time.Time
	var lastFailed string
	delta, reset := 0, false // failures to add, after setting them to zero when reset
	for _, r := range runs {
		if !r.status.Terminal() {
			break
		}
		switch r.status {
		case agentd.StatusCompleted:
			reset, delta, lastFailed = true, 0, ""
		case agentd.StatusFailed, agentd.StatusTimedOut:
			delta++
			lastFailed = r.id + " " + r.reason
		}
		slot := r.slot
		through = &slot
	}
	if through == nil {
		return "", nil
	}
	_, err = tx.Exec(ctx, `UPDATE schedules SET counted_through = $2,
			consecutive_failures = CASE WHEN $3 THEN 0 ELSE consecutive_failures END + $4, updated_at = now()
		WHERE id = $1`, id, *through, reset, delta)
	return lastFailed, err
}
