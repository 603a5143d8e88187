package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// Memory extraction's jobs (migrations/00048_memory_extractions.sql,
// docs/memory.md): made by OutboxDispatch for a run that completed and
// asked for them (queueExtraction), claimed for a lease
// (MemoryExtractionClaim), and ended by the attempt that holds them, in a
// transaction that checks its hold: done with the items it writes and its
// model call's ledger row (MemoryExtractionDone), or due again later, or
// failed (MemoryExtractionRetry).

// extractParams are the parameters of a run (r) that say whether memory
// is extracted from it once it completed (agentd.RunParams.ExtractsMemory),
// as a JSON object of RunParams' fields.
const extractParams = `jsonb_build_object('memory', r.params->'memory', 'unstored', r.params->'unstored',
	'forked_from', r.params->'forked_from')`

// insertExtraction is a run's extraction job, unless it has one.
const insertExtraction = `INSERT INTO memory_extractions (id, tenant_id, run_id, namespace, model)
	VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id) DO NOTHING`

// queueExtraction queues the extraction job of d's run, when d is the end
// of a run that completed and asked for one.
func queueExtraction(b *batch, d dueEntry) error {
	if d.params == nil {
		return nil
	}
	var p agentd.RunParams
	if err := json.Unmarshal(d.params, &p); err != nil {
		return fmt.Errorf("extraction of run %s: %w", d.e.RunID, err)
	}
	if !p.ExtractsMemory() {
		return nil
	}
	x := p.Memory.Extract
	b.exec("insert memory extraction", insertExtraction, newID(), d.e.TenantID, d.e.RunID,
		agentd.Namespace(x.Namespace).String(), nullIfEmpty(x.Model))
	return nil
}

const extractionColumns = `id::text, tenant_id, run_id::text, namespace, coalesce(model, ''), status, attempts,
	next_attempt_at, coalesce(leased_by, ''), coalesce(error, ''), items, created_at, finished_at`

func scanExtraction(row pgx.Row) (agentd.MemoryExtraction, error) {
	var x agentd.MemoryExtraction
	var ns string
	err := row.Scan(&x.ID, &x.TenantID, &x.RunID, &ns, &x.Model, &x.Status, &x.Attempts, &x.NextAttempt, &x.LeasedBy,
		&x.Error, &x.Items, &x.CreatedAt, &x.FinishedAt)
	x.Namespace = agentd.ParseNamespace(ns)
	return x, notFound(translate(err), agentd.ErrMemoryExtractionNotFound)
}

// ExtractionClaim says which due extraction jobs an instance takes.
type ExtractionClaim struct {
	// Worker names the instance's worker that holds them.
	Worker string
	// Max is how many at most (the worker's free slots).
	Max int
	// Lease is how long an attempt holds its job: past it, the job is due
	// again, and the next claim begins its next attempt.
	Lease time.Duration
	// Model is the model of the jobs whose run named none (the server's
	// default), kept in the job by its first claim.
	Model string
	// MaxAttempts is the cap of a job's attempts: a job whose attempt
	// MaxAttempts was left unfinished (its lease ended) fails.
	MaxAttempts int
}

// giveUpExtractions fails the jobs whose last attempt ($1) was left
// unfinished by its instance, skipping those another instance holds.
const giveUpExtractions = `UPDATE memory_extractions SET status = 'failed', finished_at = now(), leased_by = NULL,
		error = 'attempt ' || attempts || ' did not finish (its instance stopped, or its lease ended), and it was the last'
	WHERE id IN (SELECT id FROM memory_extractions
		WHERE status = 'running' AND next_attempt_at <= now() AND attempts >= $1 FOR UPDATE SKIP LOCKED)`

// claimExtractions begins the next attempt of up to $1 due jobs, the
// longest due first, skipping those another instance holds: each is
// running, held by $2 until its lease ($3 seconds) ends.
const claimExtractions = `WITH due AS (
		SELECT id AS due_id FROM memory_extractions WHERE status IN ('pending', 'running') AND next_attempt_at <= now()
		ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
	UPDATE memory_extractions m SET status = 'running', attempts = m.attempts + 1, leased_by = $2,
		next_attempt_at = now() + make_interval(secs => $3), model = coalesce(m.model, nullif($4, ''))
	FROM due WHERE m.id = due.due_id RETURNING ` + extractionColumns

// MemoryExtractionClaim takes up to p.Max due extraction jobs for
// p.Worker, in one transaction: it begins each one's next attempt and
// holds it for p.Lease. It first fails the jobs whose last attempt was
// left unfinished.
func (s *Store) MemoryExtractionClaim(ctx context.Context, p ExtractionClaim) ([]agentd.MemoryExtraction, error) {
	var out []agentd.MemoryExtraction
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, giveUpExtractions, p.MaxAttempts); err != nil {
			return err
		}
		var err error
		out, err = queryAll(ctx, tx, scanExtraction, claimExtractions, p.Max, p.Worker, p.Lease.Seconds(), p.Model)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim memory extractions: %w", err)
	}
	return out, nil
}

// ExtractionDone is the end of an extraction attempt that succeeded.
type ExtractionDone struct {
	// ID and Attempt name the job and the attempt (its count of
	// attempts when it was claimed), which must still hold it.
	ID      string
	Attempt int
	// TenantID is the job's tenant, whose memory Writes go to.
	TenantID string
	// Writes are the items to write (each with its source, actor and
	// extracted_from); an item whose live version holds the same value
	// and data is left as it is.
	Writes []agentd.MemoryWrite
	// Call is the ledger's row of the model call that answered.
	Call LedgerInsert
}

// MemoryExtractionDone ends the attempt p names as done, in one
// transaction: it writes p.Writes (a version each, but for those
// unchanged), records p.Call in the ledger, and marks the job done with
// the count of versions written, which it returns. Nothing of it is
// written when the attempt no longer holds the job
// (agentd.ErrExtractionLeaseLost), or when a write would pass a limit of
// memory (*agentd.MemoryLimitError) or is refused
// (agentd.ErrInvalidValue).
func (s *Store) MemoryExtractionDone(ctx context.Context, p ExtractionDone) (int, error) {
	items := make([]agentd.MemoryItem, len(p.Writes))
	for i, w := range p.Writes {
		if err := checkMemoryWrite(w.MemoryView, w.Namespace, w.Key, w.Source); err != nil {
			return 0, err
		}
		var err error
		if items[i], err = s.memoryItemOf(w); err != nil {
			return 0, err
		}
	}
	var written int
	err := s.memoryRetry(ctx, func(tx pgx.Tx) error {
		if err := holdExtraction(ctx, tx, p.ID, p.Attempt); err != nil {
			return err
		}
		written = 0
		for i, w := range p.Writes {
			wrote, err := s.extractedPut(ctx, tx, p.TenantID, w, items[i])
			if err != nil {
				return err
			}
			if wrote {
				written++
			}
		}
		var b batch
		if err := p.Call.queue(&b); err != nil {
			return err
		}
		b.exec("end memory extraction", `UPDATE memory_extractions SET status = 'done', items = $2, error = NULL,
			leased_by = NULL, finished_at = now() WHERE id = $1`, p.ID, written)
		return b.send(ctx, tx)
	})
	if err != nil {
		return 0, fmt.Errorf("memory extraction %s done: %w", p.ID, err)
	}
	return written, nil
}

// holdExtraction locks job id in tx, and checks that its attempt is
// still attempt: the fence of an attempt's write.
func holdExtraction(ctx context.Context, tx pgx.Tx, id string, attempt int) error {
	var n int
	err := tx.QueryRow(ctx, `SELECT attempts FROM memory_extractions WHERE id = $1 AND status = 'running' FOR UPDATE`,
		id).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && n != attempt) {
		return agentd.ErrExtractionLeaseLost
	}
	return err
}

// extractedPut writes it, the item of w, in tx, unless the item's live
// version already holds its value and data; wrote says whether it did.
func (s *Store) extractedPut(ctx context.Context, tx pgx.Tx, tenant string, w agentd.MemoryWrite,
	it agentd.MemoryItem) (wrote bool, err error) {
	cur, err := memoryLock(ctx, tx, tenant, w.MemoryView, w.Namespace, w.Key)
	if err != nil {
		return false, err
	}
	if cur.live && cur.found {
		var value string
		var data []byte
		if err := tx.QueryRow(ctx, `SELECT value, data FROM memory_items WHERE tenant_id = $1 AND namespace = $2
			AND key = $3 AND overlay IS NOT DISTINCT FROM $4::uuid`, tenant, w.Namespace.String(), w.Key,
			nullable(w.Overlay)).Scan(&value, &data); err != nil {
			return false, err
		}
		if value == w.Value && sameJSON(data, w.Data) {
			return false, nil
		}
	}
	_, err = s.memoryPutLocked(ctx, tx, tenant, w, it, cur)
	return err == nil, err
}

// sameJSON reports whether a (as jsonb gave it back) and b are the same
// JSON value, or both none.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x) // decoded JSON encodes, its keys sorted
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

// ExtractionRetry is the end of an extraction attempt that failed.
type ExtractionRetry struct {
	// ID and Attempt name the job and the attempt, which must still hold
	// it.
	ID      string
	Attempt int
	// Error says why the attempt failed.
	Error string
	// RetryAt is when the job is due again; zero: it failed for good.
	RetryAt time.Time
	// Call, when set, is the ledger's row of the model call that answered
	// (with an answer the attempt could not use): it was spent all the
	// same.
	Call *LedgerInsert
}

// MemoryExtractionRetry ends the attempt p names as failed: its job is
// due again at p.RetryAt, or failed, with p.Error; with p.Call in the
// ledger, in the same transaction. agentd.ErrExtractionLeaseLost: the
// attempt no longer holds its job (nothing is written).
func (s *Store) MemoryExtractionRetry(ctx context.Context, p ExtractionRetry) error {
	status, next := agentd.ExtractionFailed, any(nil)
	if !p.RetryAt.IsZero() {
		status, next = agentd.ExtractionPending, p.RetryAt
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE memory_extractions SET status = $3, next_attempt_at = coalesce($4, next_attempt_at),
				error = $5, leased_by = NULL, finished_at = CASE WHEN $3 = 'failed' THEN now() END
			WHERE id = $1 AND attempts = $2 AND status = 'running'`,
			p.ID, p.Attempt, status, next, ledgerText(p.Error))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return agentd.ErrExtractionLeaseLost
		}
		if p.Call == nil {
			return nil
		}
		var b batch
		if err := p.Call.queue(&b); err != nil {
			return err
		}
		return b.send(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("memory extraction %s attempt %d: %w", p.ID, p.Attempt, err)
	}
	return nil
}

// MemoryExtractionList returns a page of a tenant's extraction jobs,
// newest first: p.Limit of them (0: 100) after the one of id p.Before
// ("": from the newest), of run p.RunID alone when set.
func (s *Store) MemoryExtractionList(ctx context.Context, p agentd.MemoryExtractionList) ([]agentd.MemoryExtraction, error) {
	return queryAll(ctx, s.pool, scanExtraction, `SELECT `+extractionColumns+` FROM memory_extractions x
		WHERE tenant_id = $1 AND ($2 = '' OR run_id = nullif($2, '')::uuid)
		  AND ($3 = '' OR (created_at, id) < (SELECT created_at, id FROM memory_extractions
			WHERE id = nullif($3, '')::uuid AND tenant_id = $1))
		ORDER BY created_at DESC, id DESC LIMIT $4`, p.Tenant, p.RunID, p.Before, limitOr(p.Limit, 100))
}

// MemoryExtractionGet returns a tenant's extraction job;
// agentd.ErrMemoryExtractionNotFound when it has none of that id.
func (s *Store) MemoryExtractionGet(ctx context.Context, tenant, id string) (agentd.MemoryExtraction, error) {
	return scanExtraction(s.pool.QueryRow(ctx, `SELECT `+extractionColumns+` FROM memory_extractions
		WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// RunInput returns the messages a run was given by its user (role user),
// in the order of its conversation: with the run's output, the turn an
// extraction reads.
func (s *Store) RunInput(ctx context.Context, runID string) ([]agentd.Message, error) {
	return queryAll(ctx, s.pool, scanMessage, `SELECT `+messageColumns+` FROM messages
		WHERE run_id = $1 AND role = 'user' AND seq < `+strconv.Itoa(PendingSeq)+` ORDER BY seq`, runID)
}
