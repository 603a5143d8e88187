package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// Evaluations (migrations/00051_evals.sql, docs/evals.md): made with a
// row per case, version and repetition (EvalCreate); taken by one
// instance's driver for a lease at a time (EvalClaim); each row's run
// made in the transaction that records it on the row (EvalStart), scored
// once (EvalScore); ended when every row is scored (EvalFinish), or
// cancelled by a client (EvalCancel).

const evalColumns = `id::text, tenant_id, agent, versions, baseline, candidate, dataset, dataset_version, repeat,
	concurrency, status, error, metadata, actor, runs, scored, created_at, finished_at`

func scanEval(row pgx.Row) (agentd.Evaluation, error) {
	var e agentd.Evaluation
	err := row.Scan(&e.ID, &e.TenantID, &e.Agent, &e.Versions, &e.Baseline, &e.Candidate, &e.Dataset, &e.DatasetVersion,
		&e.Repeat, &e.Concurrency, &e.Status, &e.Error, &e.Metadata, &e.Actor, &e.Runs, &e.Scored, &e.CreatedAt, &e.FinishedAt)
	return e, err
}

const evalRunColumns = `eval_id::text, case_seq, case_id, version, rep, coalesce(run_id::text, ''), passed, scores, scored_at`

func scanEvalRun(row pgx.Row) (agentd.EvalRun, error) {
	var r agentd.EvalRun
	var scores []byte
	err := row.Scan(&r.EvalID, &r.CaseSeq, &r.CaseID, &r.Version, &r.Rep, &r.RunID, &r.Passed, &scores, &r.ScoredAt)
	if err == nil && scores != nil {
		err = json.Unmarshal(scores, &r.Scores)
	}
	return r, err
}

// EvalCreate keeps a new evaluation with one row for each of its cases,
// versions and repetitions, none made yet; agentd.ErrEvalsRunning when
// the tenant has as many running as it may.
func (s *Store) EvalCreate(ctx context.Context, p agentd.EvalCreate) (agentd.Evaluation, error) {
	e := p.Eval
	var seqs, reps []int32
	var ids, versions []string
	for r := 1; r <= e.Repeat; r++ {
		for _, c := range p.Cases {
			for _, v := range e.Versions {
				seqs, ids, versions, reps = append(seqs, int32(c.Seq)), append(ids, c.Case.ID), append(versions, v), append(reps, int32(r))
			}
		}
	}
	var out agentd.Evaluation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The tenant's lock: two creations at once count each other.
		var running int
		if err := tx.QueryRow(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('evals:' || $1, 0))::text, (SELECT count(*)
			FROM evals WHERE tenant_id = $1 AND status = 'running')`, e.TenantID).Scan(new(string), &running); err != nil {
			return err
		}
		if running >= agentd.MaxRunningEvals {
			return agentd.ErrEvalsRunning
		}
		var err error
		out, err = scanEval(tx.QueryRow(ctx, `INSERT INTO evals (id, tenant_id, agent, versions, baseline, candidate, dataset,
			dataset_version, repeat, concurrency, metadata, actor, runs)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING `+evalColumns,
			e.ID, e.TenantID, e.Agent, e.Versions, e.Baseline, nullJSON(e.Candidate), e.Dataset, e.DatasetVersion, e.Repeat,
			e.Concurrency, nullJSON(e.Metadata), e.Actor, len(seqs)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO eval_runs (eval_id, case_seq, case_id, version, rep)
			SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::int[])`, e.ID, seqs, ids, versions, reps)
		return err
	})
	return out, translate(err)
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return []byte(b)
}

// EvalGet returns a tenant's evaluation; agentd.ErrEvalNotFound.
func (s *Store) EvalGet(ctx context.Context, tenantID, id string) (agentd.Evaluation, error) {
	e, err := scanEval(s.pool.QueryRow(ctx, `SELECT `+evalColumns+` FROM evals WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	return e, notFound(translate(err), agentd.ErrEvalNotFound)
}

// EvalList returns a page of a tenant's evaluations, newest first: those
// made before the one named by before ("": from the newest).
func (s *Store) EvalList(ctx context.Context, tenantID, before string, limit int) ([]agentd.Evaluation, error) {
	if before == "" {
		return queryAll(ctx, s.pool, scanEval, `SELECT `+evalColumns+` FROM evals WHERE tenant_id = $1
			ORDER BY created_at DESC, id DESC LIMIT $2`, tenantID, limit)
	}
	return queryAll(ctx, s.pool, scanEval, `SELECT `+evalColumns+` FROM evals e WHERE tenant_id = $1
		AND (created_at, id) < (SELECT created_at, id FROM evals WHERE id = $3 AND tenant_id = $1)
		ORDER BY created_at DESC, id DESC LIMIT $2`, tenantID, limit, before)
}

// EvalRuns returns the rows of an evaluation, by repetition, case and
// version, with their runs' statuses and times.
func (s *Store) EvalRuns(ctx context.Context, evalID string) ([]agentd.EvalRun, error) {
	return queryAll(ctx, s.pool, func(row pgx.Row) (agentd.EvalRun, error) {
		var r agentd.EvalRun
		var scores []byte
		var created *time.Time
		err := row.Scan(&r.EvalID, &r.CaseSeq, &r.CaseID, &r.Version, &r.Rep, &r.RunID, &r.Passed, &scores, &r.ScoredAt,
			&r.RunStatus, &created, &r.RunFinishedAt)
		if created != nil {
			r.RunCreatedAt = *created
		}
		if err == nil && scores != nil {
			err = json.Unmarshal(scores, &r.Scores)
		}
		return r, err
	}, `SELECT e.eval_id::text, e.case_seq, e.case_id, e.version, e.rep, coalesce(e.run_id::text, ''), e.passed, e.scores,
			e.scored_at, coalesce(r.status, ''), r.created_at, r.finished_at
		FROM eval_runs e LEFT JOIN runs r ON r.id = e.run_id
		WHERE e.eval_id = $1 ORDER BY e.rep, e.case_seq, e.version`, evalID)
}

// EvalClaim takes a running evaluation whose lease is free (or ended),
// other than those of skip, for owner until lease from now; ok is false
// when there is none.
func (s *Store) EvalClaim(ctx context.Context, owner string, lease time.Duration, skip []string) (e agentd.Evaluation, ok bool, err error) {
	e, err = scanEval(s.pool.QueryRow(ctx, `UPDATE evals SET lease_owner = $1, lease_until = now() + $2::interval
		WHERE id = (SELECT id FROM evals WHERE status = 'running' AND (lease_until IS NULL OR lease_until < now())
			AND NOT (id::text = ANY(coalesce($3::text[], '{}'))) ORDER BY lease_until NULLS FIRST, created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+evalColumns, owner, lease.String(), skip))
	if err == pgx.ErrNoRows {
		return e, false, nil
	}
	return e, err == nil, translate(err)
}

// EvalRelease gives up owner's lease of an evaluation, so that its next
// pass may be any instance's.
func (s *Store) EvalRelease(ctx context.Context, id, owner string) error {
	_, err := s.pool.Exec(ctx, `UPDATE evals SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2`, id, owner)
	return translate(err)
}

// EvalInFlight returns the rows of an evaluation whose runs were made and
// are not scored, with their runs' statuses.
func (s *Store) EvalInFlight(ctx context.Context, evalID string) ([]agentd.EvalRun, error) {
	return queryAll(ctx, s.pool, func(row pgx.Row) (agentd.EvalRun, error) {
		var r agentd.EvalRun
		err := row.Scan(&r.EvalID, &r.CaseSeq, &r.CaseID, &r.Version, &r.Rep, &r.RunID, &r.RunStatus)
		return r, err
	}, `SELECT e.eval_id::text, e.case_seq, e.case_id, e.version, e.rep, e.run_id::text, coalesce(r.status, '')
		FROM eval_runs e LEFT JOIN runs r ON r.id = e.run_id
		WHERE e.eval_id = $1 AND e.run_id IS NOT NULL AND e.scored_at IS NULL ORDER BY e.rep, e.case_seq, e.version`, evalID)
}

// EvalPending returns up to limit rows of an evaluation whose runs are
// not made yet, in the order they are to be made: by repetition, then
// case, then version, so that the versions of a case run side by side.
func (s *Store) EvalPending(ctx context.Context, evalID string, limit int) ([]agentd.EvalRun, error) {
	return queryAll(ctx, s.pool, scanEvalRun, `SELECT `+evalRunColumns+` FROM eval_runs
		WHERE eval_id = $1 AND run_id IS NULL ORDER BY rep, case_seq, version LIMIT $2`, evalID, limit)
}

// LiveQueued reports whether a tenant has a run waiting in its queue that
// is not an evaluation's: evaluations' runs go behind them.
func (s *Store) LiveQueued(ctx context.Context, tenantID string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE tenant_id = $1 AND status = 'queued'
		AND NOT params ? 'eval')`, tenantID).Scan(&ok)
	return ok, translate(err)
}

// EvalStart creates run rc of a row of an evaluation and records it on
// the row in one transaction, when owner still holds the evaluation and
// the row has no run yet (made is false otherwise: another pass made it,
// or the evaluation ended or changed hands). A run refused for its
// request is not an error: refused says why, and nothing is made.
func (s *Store) EvalStart(ctx context.Context, owner string, row agentd.EvalRun, rc agentd.RunCreate) (made bool, refusedWhy string, err error) {
	var c *creation
	err = s.tx(ctx, func(tx pgx.Tx) error {
		c, made, refusedWhy = nil, false, ""
		var held bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM evals WHERE id = $1 AND status = 'running' AND lease_owner = $2
			FOR UPDATE)`, row.EvalID, owner).Scan(&held); err != nil || !held {
			return err
		}
		tag, err := tx.Exec(ctx, `SELECT 1 FROM eval_runs WHERE eval_id = $1 AND case_seq = $2 AND version = $3 AND rep = $4
			AND run_id IS NULL FOR UPDATE`, row.EvalID, row.CaseSeq, row.Version, row.Rep)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if c, err = createSaved(ctx, tx, CreateOf(rc)); err != nil {
			if !refused(err) {
				return err
			}
			c, refusedWhy = nil, err.Error()
			return nil
		}
		made = true
		_, err = tx.Exec(ctx, `UPDATE eval_runs SET run_id = $5 WHERE eval_id = $1 AND case_seq = $2 AND version = $3 AND rep = $4`,
			row.EvalID, row.CaseSeq, row.Version, row.Rep, c.runID)
		return err
	})
	if err != nil {
		return false, "", translate(err)
	}
	if c != nil {
		s.published(c.cancelled)
		if s.pub != nil {
			s.pub.PublishedEvents(c.state.Run.ID, c.events())
		}
	}
	return made, refusedWhy, nil
}

// EvalScore records the scores of a row once: a second score of the same
// row changes nothing (scored is false).
func (s *Store) EvalScore(ctx context.Context, row agentd.EvalRun) (scored bool, err error) {
	scores, err := json.Marshal(row.Scores)
	if err != nil {
		return false, err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE eval_runs SET passed = $5, scores = $6, scored_at = now()
			WHERE eval_id = $1 AND case_seq = $2 AND version = $3 AND rep = $4 AND scored_at IS NULL`,
			row.EvalID, row.CaseSeq, row.Version, row.Rep, row.Passed, scores)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		scored = true
		_, err = tx.Exec(ctx, `UPDATE evals SET scored = scored + 1 WHERE id = $1`, row.EvalID)
		return err
	})
	return scored, translate(err)
}

// EvalFinish ends a running evaluation with status and, for a failed
// one, why.
func (s *Store) EvalFinish(ctx context.Context, id string, status agentd.EvalStatus, why string) error {
	_, err := s.pool.Exec(ctx, `UPDATE evals SET status = $2, error = $3, finished_at = now(), lease_owner = NULL,
		lease_until = NULL WHERE id = $1 AND status = 'running'`, id, status, why)
	return translate(err)
}

// EvalCancel cancels a tenant's running evaluation and returns it with
// the ids of its runs made and not scored, which the caller cancels;
// agentd.ErrEvalNotFound, agentd.ErrEvalEnded.
func (s *Store) EvalCancel(ctx context.Context, tenantID, id string) (agentd.Evaluation, []string, error) {
	var e agentd.Evaluation
	var runs []string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		e, err = scanEval(tx.QueryRow(ctx, `SELECT `+evalColumns+` FROM evals WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID))
		if err != nil {
			return notFound(translate(err), agentd.ErrEvalNotFound)
		}
		if e.Status.Ended() {
			return agentd.ErrEvalEnded
		}
		if e, err = scanEval(tx.QueryRow(ctx, `UPDATE evals SET status = 'cancelled', finished_at = now(), lease_owner = NULL,
			lease_until = NULL WHERE id = $1 RETURNING `+evalColumns, id)); err != nil {
			return err
		}
		runs, err = queryAll(ctx, tx, func(row pgx.Row) (string, error) {
			var id string
			return id, row.Scan(&id)
		}, `SELECT run_id::text FROM eval_runs WHERE eval_id = $1 AND run_id IS NOT NULL AND scored_at IS NULL`, id)
		return err
	})
	if err != nil {
		return e, nil, fmt.Errorf("cancel evaluation %s: %w", id, err)
	}
	return e, runs, nil
}
