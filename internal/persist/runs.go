package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Channels of the LISTEN/NOTIFY bridge.
const (
	ChannelRuns   = "agentd_runs"   // payload: run id; a run became claimable
	ChannelCancel = "agentd_cancel" // payload: run id; a cancel was requested
	ChannelEvents = "agentd_events" // payload: "run_id:last_seq"
)

const runColumns = `id, tenant_id, conversation_id, status, coalesce(terminal_reason, ''), model, params,
	coalesce(idempotency_key, ''), epoch, coalesce(lease_owner, ''), lease_expires_at, deadline_at,
	cancel_requested_at, interrupt_requested_at, required_action, last_event_seq, step_count,
	input_tokens, output_tokens, cached_input_tokens, reasoning_tokens, error,
	created_at, started_at, finished_at, updated_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var params []byte
	err := row.Scan(&r.ID, &r.TenantID, &r.ConversationID, &r.Status, &r.TerminalReason, &r.Model, &params,
		&r.IdempotencyKey, &r.Epoch, &r.LeaseOwner, &r.LeaseExpiresAt, &r.DeadlineAt,
		&r.CancelRequestedAt, &r.InterruptRequestedAt, &r.RequiredAction, &r.LastEventSeq, &r.StepCount,
		&r.Usage.InputTokens, &r.Usage.OutputTokens, &r.Usage.CachedInputTokens, &r.Usage.ReasoningTokens, &r.Error,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.UpdatedAt)
	if err != nil {
		return Run{}, translate(err)
	}
	if err := json.Unmarshal(params, &r.Params); err != nil {
		return Run{}, fmt.Errorf("decode run params: %w", err)
	}
	return r, nil
}

// InputMessage is one message of a run's input.
type InputMessage struct {
	Role    string
	Content string
}

// RunCreateParams are the inputs of RunCreate.
type RunCreateParams struct {
	TenantID       string
	ConversationID string // empty: start a new conversation
	Model          string
	Params         RunParams
	Input          []InputMessage
	IdempotencyKey string // optional
	RequestHash    string // fingerprint of the request, compared on a repeated key
	// ClaimFor, when set, claims the new run for a worker in the same
	// transaction, if it can start at once (its conversation has nothing
	// else in flight): the run is created running at epoch 1 with the
	// worker's lease, and its first step started (see RunClaimStart), so
	// that no claim follows. The run returned then has status running and
	// the worker as its lease owner.
	ClaimFor *ClaimFor
}

// ClaimFor is a worker that takes a new run at creation.
type ClaimFor struct {
	Worker string
	TTL    time.Duration
	StepID string // the id of the run's first step
}

// BusyError says that a conversation already has a run in flight.
type BusyError struct{ RunID string }

func (e *BusyError) Error() string { return "conversation is busy with run " + e.RunID }

// Is makes errors.Is(err, ErrConflict) true for a BusyError.
func (e *BusyError) Is(target error) bool { return target == ErrConflict }

// ErrIdempotencyMismatch: an idempotency key was reused with a different request.
var ErrIdempotencyMismatch = errors.New("idempotency key reused with a different request")

// RunCreate commits a run, its conversation (when new), its input messages and
// its run.created event in one transaction, and wakes the workers. With an
// idempotency key already used for the same request, it returns the first run
// and created=false; for another request, ErrIdempotencyMismatch. A busy
// conversation gives a *BusyError when IfBusy is "reject" (or empty).
func (s *Store) RunCreate(ctx context.Context, p RunCreateParams) (run Run, created bool, err error) {
	st, created, err := s.RunCreateState(ctx, p)
	return st.Run, created, err
}

// RunCreateState is RunCreate that also returns what it knows of the new
// run's state without reading it back: the conversation's messages when it
// started the conversation (nil when the conversation existed), and the first
// step when p.ClaimFor claimed the run. A run found by its idempotency key
// comes with its row only.
func (s *Store) RunCreateState(ctx context.Context, p RunCreateParams) (st RunState, created bool, err error) {
	if p.IdempotencyKey != "" {
		if r, ok, err := s.runByKey(ctx, p); ok || err != nil {
			return RunState{Run: r}, false, err
		}
	}
	var run Run
	runID := newID()
	params, err := json.Marshal(p.Params)
	if err != nil {
		return RunState{}, false, fmt.Errorf("encode params: %w", err)
	}
	dup := errors.New("duplicate")
	cancelled := map[string]int64{} // runs ended by if_busy: interrupt, and their last seq
	var key, hash *string
	// Only a run with a key can conflict: without one, the insert is not a
	// speculative one (which costs an index probe and a WAL record more).
	onKeyConflict := ""
	if p.IdempotencyKey != "" {
		key, hash = &p.IdempotencyKey, &p.RequestHash
		onKeyConflict = `
				ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`
	}
	// queueRun queues the run's row, read back into run (dup when its
	// idempotency key was taken meanwhile), its input messages, its first
	// events, and its first step when it is claimed here (else the wake-up of
	// idle workers). idle says that the conversation has no run in flight.
	queueRun := func(b *batch, convID string, idle bool) error {
		st = RunState{}
		claimed := p.ClaimFor != nil && idle && p.Params.MaxSteps > 0
		if claimed {
			// As RunClaimStart would leave it: running at epoch 1 under the
			// worker's lease, with its first step and three events.
			b.query("insert run", `INSERT INTO runs (id, tenant_id, conversation_id, status, model, params,
				idempotency_key, request_hash, last_event_seq, epoch, lease_owner, lease_expires_at, started_at,
				deadline_at, step_count)
				VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, 3, 1, $8, now() + $9 * interval '1 millisecond', now(),
				CASE WHEN $10::bigint > 0 THEN now() + $10::bigint * interval '1 millisecond' END, 1)`+onKeyConflict+` RETURNING `+runColumns,
				[]any{runID, p.TenantID, convID, p.Model, params, key, hash,
					p.ClaimFor.Worker, p.ClaimFor.TTL.Milliseconds(), p.Params.Timeouts.TotalMS}, scanNewRun(&run, dup))
		} else {
			b.query("insert run", `INSERT INTO runs (id, tenant_id, conversation_id, status, model, params,
				idempotency_key, request_hash, last_event_seq)
				VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, 1)`+onKeyConflict+` RETURNING `+runColumns,
				[]any{runID, p.TenantID, convID, p.Model, params, key, hash}, scanNewRun(&run, dup))
		}
		for i, m := range p.Input {
			op := MessageInsert{ID: newID(), ConversationID: convID, RunID: runID, Role: m.Role,
				Content: []Part{{Type: "text", Text: m.Content}}, Status: MessageCompleted}
			if err := op.queue(b); err != nil {
				return err
			}
			if p.ConversationID == "" { // a new conversation's messages are numbered from 1
				st.Messages = append(st.Messages, op.Message(i+1))
			}
		}
		// run.created, and when the run is claimed here, its start.
		at := eventTime()
		evs := []EventIn{{Type: "run.created", Data: map[string]any{
			"conversation_id": convID, "model": p.Model, "status": StatusQueued}}}
		if claimed {
			evs = append(evs, EventIn{Type: "run.started", Data: map[string]any{"epoch": 1, "worker": p.ClaimFor.Worker}},
				EventIn{Type: "step.started", Step: 1, Data: map[string]any{"transition": nil}})
			b.exec("start step", `INSERT INTO steps (id, run_id, seq, status, model_attempts) VALUES ($1, $2, 1, 'running', 1)`,
				p.ClaimFor.StepID, runID)
			st.Steps = []Step{{ID: p.ClaimFor.StepID, RunID: runID, Seq: 1, Status: StepRunning, ModelAttempts: 1, StartedAt: at}}
		} else {
			b.exec("notify", `SELECT pg_notify($1, $2)`, ChannelRuns, runID)
		}
		rows, err := buildEvents(nil, runID, 0, evs, at)
		if err != nil {
			return err
		}
		queueEvents(b, rows)
		return nil
	}
	// newConversation queues the insert of a new conversation, and returns
	// its id.
	newConversation := func(b *batch) string {
		id := newID()
		b.exec("insert conversation", `INSERT INTO conversations (id, tenant_id) VALUES ($1, $2)`, id, p.TenantID)
		return id
	}
	if p.ConversationID == "" && p.IdempotencyKey == "" {
		// A new conversation has nothing in flight, and a run without a key
		// conflicts with none: the whole creation is one pipelined round
		// trip, one implicit transaction.
		var b batch
		convID := newConversation(&b)
		if err = queueRun(&b, convID, true); err == nil {
			err = translate(b.send(ctx, s.pool))
		}
	} else {
		err = s.tx(ctx, func(tx pgx.Tx) error {
			clear(cancelled)
			idle := true // the conversation has no run in flight
			var b batch
			convID := p.ConversationID
			if convID == "" {
				convID = newConversation(&b)
			} else {
				var id string
				err := tx.QueryRow(ctx, `SELECT id FROM conversations WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
					convID, p.TenantID).Scan(&id)
				if err != nil {
					return fmt.Errorf("lock conversation: %w", notFound(translate(err), ErrConversationNotFound))
				}
				var busy string
				err = tx.QueryRow(ctx, `SELECT id FROM runs WHERE conversation_id = $1
					AND status IN ('queued', 'running', 'requires_action') ORDER BY id LIMIT 1`, convID).Scan(&busy)
				idle = errors.Is(err, pgx.ErrNoRows)
				switch {
				case idle:
				case err != nil:
					return fmt.Errorf("busy check: %w", err)
				case p.Params.IfBusy == "enqueue":
				case p.Params.IfBusy == "interrupt":
					// Cancel every run of the conversation in flight; the new
					// run starts when the last of them has stopped.
					busyRuns, err := queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs WHERE conversation_id = $1
						AND status IN ('queued', 'running', 'requires_action') ORDER BY id FOR UPDATE`, convID)
					if err != nil {
						return fmt.Errorf("interrupt busy runs: %w", err)
					}
					for _, busyRun := range busyRuns {
						last, err := endLocked(ctx, tx, busyRun, StatusCancelled, ReasonCancelled)
						if err != nil {
							return fmt.Errorf("interrupt run %s: %w", busyRun.ID, err)
						}
						if last > 0 {
							cancelled[busyRun.ID] = last
						}
					}
				default:
					return &BusyError{RunID: busy}
				}
			}
			if err := queueRun(&b, convID, idle); err != nil {
				return err
			}
			return b.send(ctx, tx)
		})
	}
	if errors.Is(err, dup) {
		r, ok, err := s.runByKey(ctx, p)
		if err == nil && !ok {
			err = fmt.Errorf("run with idempotency key vanished: %w", ErrConflict)
		}
		return RunState{Run: r}, false, err
	}
	if err != nil {
		return RunState{}, false, err
	}
	s.published(cancelled)
	s.publish(runID, run.LastEventSeq)
	st.Run = run
	return st, true, nil
}

// scanNewRun reads the row of an inserted run into run; dup when there is
// none: its idempotency key was taken meanwhile.
func scanNewRun(run *Run, dup error) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return dup
		}
		r, err := scanRun(rows)
		if err != nil {
			return err
		}
		*run = r
		rows.Close()
		return rows.Err()
	}
}

func (s *Store) runByKey(ctx context.Context, p RunCreateParams) (Run, bool, error) {
	var hash string
	row := s.pool.QueryRow(ctx, `SELECT coalesce(request_hash, ''), `+runColumns+` FROM runs
		WHERE tenant_id = $1 AND idempotency_key = $2`, p.TenantID, p.IdempotencyKey)
	r, err := scanRun(scanPrefix{row, []any{&hash}})
	if errors.Is(err, ErrNotFound) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, err
	}
	if hash != p.RequestHash {
		return r, true, ErrIdempotencyMismatch
	}
	return r, true, nil
}

// scanPrefix scans the leading columns into dst, then the rest as a run.
type scanPrefix struct {
	row pgx.Row
	dst []any
}

func (s scanPrefix) Scan(dest ...any) error {
	return s.row.Scan(append(s.dst, dest...)...)
}

// RunGet returns a run of the tenant; ErrRunNotFound when there is none.
func (s *Store) RunGet(ctx context.Context, tenantID, id string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	return r, notFound(err, ErrRunNotFound)
}

// RunByID returns a run whatever its tenant (for the engine and the
// streams); ErrRunNotFound when there is none.
func (s *Store) RunByID(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1`, id))
	return r, notFound(err, ErrRunNotFound)
}

// RunListParams filter and page RunList.
type RunListParams struct {
	TenantID       string
	ConversationID string // optional
	Status         string // optional
	Before         string // cursor: runs with a smaller id (older)
	Limit          int
}

// RunList returns a tenant's runs, newest first.
func (s *Store) RunList(ctx context.Context, p RunListParams) ([]Run, error) {
	var conv, status, before *string
	if p.ConversationID != "" {
		conv = &p.ConversationID
	}
	if p.Status != "" {
		status = &p.Status
	}
	if p.Before != "" {
		before = &p.Before
	}
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM runs
		WHERE tenant_id = $1 AND ($2::uuid IS NULL OR conversation_id = $2)
		AND ($3::text IS NULL OR status = $3) AND ($4::uuid IS NULL OR id < $4)
		ORDER BY id DESC LIMIT $5`, p.TenantID, conv, status, before, p.Limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// RunCancel asks a run to stop. A queued, interrupted or waiting run is
// cancelled at once; a running one is flagged and its executor, on whichever
// instance, is told through NOTIFY. Cancelling a cancelled run is a no-op; a
// run that ended otherwise gives ErrRunFinished; an unknown run
// ErrRunNotFound.
func (s *Store) RunCancel(ctx context.Context, tenantID, id string) (Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID))
		if err != nil {
			return notFound(err, ErrRunNotFound)
		}
		switch r.Status {
		case StatusCancelled:
			return nil
		case StatusCompleted, StatusFailed, StatusTimedOut:
			return fmt.Errorf("run is %s: %w", r.Status, ErrRunFinished)
		}
		lastSeq, err = endLocked(ctx, tx, r, StatusCancelled, ReasonCancelled)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.publish(id, lastSeq)
	return s.RunGet(ctx, tenantID, id)
}

// endLocked cancels (or times out) r, whose row the caller has locked: a
// running run is flagged and its executor told; any other run nobody
// executes is ended here with status and reason. A run waiting on a decision
// about a tool call has that call rejected, so that nothing waits on it any
// more. It returns the run's new last event seq when it appended events,
// else 0.
func endLocked(ctx context.Context, tx pgx.Tx, r Run, status, reason string) (int64, error) {
	if r.Status == StatusRunning {
		if _, err := tx.Exec(ctx, `UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
			WHERE id = $1`, r.ID); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelCancel, r.ID)
		return 0, err
	}
	var evs []EventIn
	if r.Status == StatusRequiresAction {
		var action struct {
			ToolCallID string `json:"tool_call_id"`
		}
		_ = json.Unmarshal(r.RequiredAction, &action)
		if action.ToolCallID != "" {
			errData := map[string]any{"message": "the run ended (" + reason + ") while waiting for a decision on this call", "kind": reason}
			b, _ := json.Marshal(errData)
			if _, err := tx.Exec(ctx, `UPDATE tool_calls SET status = 'rejected', error = $2, finished_at = now()
				WHERE id = $1 AND status IN ('unknown', 'awaiting_approval')`, action.ToolCallID, b); err != nil {
				return 0, fmt.Errorf("reject tool call: %w", err)
			}
			evs = append(evs, EventIn{Type: "tool_call.completed", Step: r.StepCount, Data: map[string]any{
				"tool_call_id": action.ToolCallID, "status": "rejected", "error": errData, "resolved_by": reason}})
		}
	}
	evs = append(evs, EventIn{Type: "run." + status, Step: r.StepCount,
		Data: map[string]any{"status": status, "reason": reason}})
	lastSeq, err := appendEvents(ctx, tx, r.ID, r.LastEventSeq, evs)
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `UPDATE runs SET status = $3, terminal_reason = $4,
		cancel_requested_at = CASE WHEN $3 = 'cancelled' THEN coalesce(cancel_requested_at, now()) ELSE cancel_requested_at END,
		required_action = NULL, finished_at = now(), updated_at = now(), last_event_seq = $2,
		lease_owner = NULL, lease_expires_at = NULL
		WHERE id = $1`, r.ID, lastSeq, status, reason)
	return lastSeq, err
}

// RunsSweep ends runs that wait for a client past their deadline: they time
// out (timed_out_total) and the awaited call is rejected, so that no run
// waits forever and its conversation is freed. (Runs left running by a dead
// worker need no sweeper: any worker claims them once their lease expires.)
// It returns how many it ended.
func (s *Store) RunsSweep(ctx context.Context, limit int) (int, error) {
	ended := map[string]int64{}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		clear(ended)
		runs, err := queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs
			WHERE status = 'requires_action' AND deadline_at < now()
			ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		for _, r := range runs {
			last, err := endLocked(ctx, tx, r, StatusTimedOut, ReasonTimedOutTotal)
			if err != nil {
				return fmt.Errorf("sweep run %s: %w", r.ID, err)
			}
			ended[r.ID] = last
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.published(ended)
	return len(ended), nil
}

// RunResume re-queues a run that is interrupted, failed, timed out or
// cancelled, with a fresh deadline; it continues from its last committed step.
// A queued, running or waiting run is returned as it is; a completed run gives
// ErrRunCompleted; an unknown run ErrRunNotFound.
func (s *Store) RunResume(ctx context.Context, tenantID, id string) (Run, error) {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID).Scan(&status)
		if err != nil {
			return notFound(translate(err), ErrRunNotFound)
		}
		switch status {
		case StatusQueued, StatusRunning, StatusRequiresAction:
			return nil
		case StatusCompleted:
			return ErrRunCompleted
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued', terminal_reason = NULL, error = NULL,
			deadline_at = NULL, cancel_requested_at = NULL, interrupt_requested_at = NULL, finished_at = NULL, updated_at = now()
			WHERE id = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, id)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	return s.RunGet(ctx, tenantID, id)
}

// InterruptPayload marks a ChannelCancel notification that asks for an
// interrupt rather than a cancel: "<run id>:interrupt".
const InterruptPayload = ":interrupt"

// RunInterrupt asks a run to stop at its next safe point with status
// interrupted (its client went away and it asked for that). A queued run is
// interrupted at once; a running one is flagged and its executor told through
// NOTIFY; a run in any other state is left as it is. It returns the run.
func (s *Store) RunInterrupt(ctx context.Context, id string) (Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return notFound(err, ErrRunNotFound)
		}
		switch r.Status {
		case StatusRunning:
			if _, err := tx.Exec(ctx, `UPDATE runs SET interrupt_requested_at = coalesce(interrupt_requested_at, now()),
				updated_at = now() WHERE id = $1`, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelCancel, id+InterruptPayload)
			return err
		case StatusQueued:
			lastSeq, err = appendEvents(ctx, tx, r.ID, r.LastEventSeq, []EventIn{{Type: "run.interrupted", Step: r.StepCount,
				Data: map[string]any{"status": StatusInterrupted, "reason": ReasonInterrupted}}})
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE runs SET status = 'interrupted', terminal_reason = 'interrupted',
				finished_at = now(), updated_at = now(), last_event_seq = $2 WHERE id = $1`, id, lastSeq)
			return err
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	s.publish(id, lastSeq)
	return s.RunByID(ctx, id)
}

// newID returns a new UUIDv7.
func newID() string { return uuid.Must(uuid.NewV7()).String() }

// NewID returns a new time-ordered id (UUIDv7) for rows the caller names.
func NewID() string { return newID() }
