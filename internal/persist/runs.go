package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// Channels of the LISTEN/NOTIFY bridge.
const (
	ChannelRuns   = "agentd_runs"   // payload: run id, and the worker that claims it (NotifyPayload); a run became claimable
	ChannelCancel = "agentd_cancel" // payload: run id; a cancel was requested
	ChannelEvents = "agentd_events" // payload: "run_id:last_seq"
)

const runColumns = `id, tenant_id, conversation_id, status, coalesce(terminal_reason, ''), model, params,
	coalesce(idempotency_key, ''), epoch, coalesce(lease_owner, ''), lease_expires_at, deadline_at,
	cancel_requested_at, interrupt_requested_at, required_action, last_event_seq, step_count,
	input_tokens, output_tokens, cached_input_tokens, reasoning_tokens, error,
	created_at, started_at, finished_at, updated_at, stall_claims,
	coalesce(created_by, ''), coalesce(cancelled_by, ''), coalesce(resumed_by, ''), output, inputs_pending, inputs_unapplied`

func scanRun(row pgx.Row) (agentd.Run, error) {
	var r agentd.Run
	var params []byte
	err := row.Scan(&r.ID, &r.TenantID, &r.ConversationID, &r.Status, &r.TerminalReason, &r.Model, &params,
		&r.IdempotencyKey, &r.Epoch, &r.LeaseOwner, &r.LeaseExpiresAt, &r.DeadlineAt,
		&r.CancelRequestedAt, &r.InterruptRequestedAt, &r.RequiredAction, &r.LastEventSeq, &r.StepCount,
		&r.Usage.InputTokens, &r.Usage.OutputTokens, &r.Usage.CachedInputTokens, &r.Usage.ReasoningTokens, &r.Error,
		&r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.UpdatedAt, &r.StallClaims,
		&r.CreatedBy, &r.CancelledBy, &r.ResumedBy, &r.Output, &r.InputsPending, &r.InputsUnapplied)
	if err != nil {
		return agentd.Run{}, translate(err)
	}
	if err := json.Unmarshal(params, &r.Params); err != nil {
		return agentd.Run{}, fmt.Errorf("decode run params: %w", err)
	}
	return r, nil
}

func (s *Store) runByKey(ctx context.Context, p RunCreateParams) (agentd.Run, bool, error) {
	var hash string
	row := s.pool.QueryRow(ctx, `SELECT coalesce(request_hash, ''), `+runColumns+` FROM runs
		WHERE tenant_id = $1 AND idempotency_key = $2`, p.TenantID, p.IdempotencyKey)
	r, err := scanRun(scanPrefix{row, []any{&hash}})
	if errors.Is(err, agentd.ErrNotFound) {
		return agentd.Run{}, false, nil
	}
	if err != nil {
		return agentd.Run{}, false, err
	}
	if hash != p.RequestHash {
		return r, true, agentd.ErrIdempotencyMismatch
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
func (s *Store) RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	return r, notFound(err, agentd.ErrRunNotFound)
}

// RunOfToolCall returns the tenant's run that made tool call id;
// ErrRunNotFound when there is none.
func (s *Store) RunOfToolCall(ctx context.Context, tenantID, callID string) (agentd.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs
		WHERE id = (SELECT run_id FROM tool_calls WHERE id = $1) AND tenant_id = $2`, callID, tenantID))
	return r, notFound(err, agentd.ErrRunNotFound)
}

// RunByID returns a run whatever its tenant (for the engine and the
// streams); ErrRunNotFound when there is none.
func (s *Store) RunByID(ctx context.Context, id string) (agentd.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1`, id))
	return r, notFound(err, agentd.ErrRunNotFound)
}

// RunList returns a tenant's runs, newest first, each with the start of
// its input (Run.InputText); from the read replica when p.MayLag and it is
// fresh.
func (s *Store) RunList(ctx context.Context, p agentd.RunListParams) ([]agentd.Run, error) {
	var conv, status, before *string
	if p.ConversationID != "" {
		conv = &p.ConversationID
	}
	if p.Status != "" {
		s := string(p.Status)
		status = &s
	}
	if p.Before != "" {
		before = &p.Before
	}
	return lagging(ctx, s, p.MayLag, func(q querier) ([]agentd.Run, error) {
		return queryAll(ctx, q, scanListedRun, `SELECT coalesce(left(i.text, `+strconv.Itoa(agentd.InputPreviewLen)+`), ''), `+runColumns+`
		FROM runs LEFT JOIN LATERAL (SELECT `+messageText+` AS text FROM messages m
			WHERE m.conversation_id = runs.conversation_id AND m.run_id = runs.id AND m.role = 'user' ORDER BY m.seq LIMIT 1) i ON true
		WHERE tenant_id = $1 AND ($2::uuid IS NULL OR conversation_id = $2)
		AND ($3::text IS NULL OR status = $3) AND ($4::uuid IS NULL OR id < $4)
		AND ($6 = '' OR params->'agent'->>'name' = $6) AND ($7 = 0 OR (params->'agent'->>'version')::int = $7)
		AND ($8::uuid IS NULL OR parent_run_id = $8) AND ($9::uuid IS NULL OR schedule_id = $9)
		AND ($10 = '' OR strpos(lower(i.text), lower($10)) > 0)
		ORDER BY id DESC LIMIT $5`, p.TenantID, conv, status, before, p.Limit, p.Agent, p.AgentVersion, nullIfEmpty(p.ParentRunID),
			nullIfEmpty(p.ScheduleID), p.Text)
	})
}

// messageText is the text of message m: its text parts, a line between
// two.
const messageText = `(SELECT string_agg(x.p->>'text', E'\n' ORDER BY x.o)
	FROM jsonb_array_elements(m.content) WITH ORDINALITY AS x(p, o) WHERE x.p->>'type' = 'text')`

// scanListedRun scans a run of RunList: the start of its input, then the
// run.
func scanListedRun(row pgx.Row) (agentd.Run, error) {
	var text string
	r, err := scanRun(scanPrefix{row, []any{&text}})
	r.InputText = text
	return r, err
}

// RunInputText returns the text of what run id was asked: its messages
// from its user (its input, and input it took while it worked) before its
// first answer, a blank line between two.
func (s *Store) RunInputText(ctx context.Context, id string) (string, error) {
	// messages has no index on run_id: the run's conversation finds them.
	var text string
	err := s.pool.QueryRow(ctx, `WITH r AS (SELECT id, conversation_id FROM runs WHERE id = $1),
		mine AS (SELECT m.* FROM messages m, r WHERE m.conversation_id = r.conversation_id AND m.run_id = r.id)
		SELECT coalesce(string_agg(`+messageText+`, E'\n\n' ORDER BY m.seq), '') FROM mine m
		WHERE m.role = 'user' AND m.seq < coalesce((SELECT min(seq) FROM mine WHERE role = 'assistant'), 2147483647)`, id).Scan(&text)
	return text, err
}

// RunCancel asks a run to stop. A queued, interrupted or waiting run is
// cancelled at once; a running one is flagged and its executor, on whichever
// instance, is told through NOTIFY. Cancelling a cancelled run is a no-op; a
// run that ended otherwise gives ErrRunFinished; an unknown run
// ErrRunNotFound.
//
// actor is who asks: it is kept as the run's cancelled_by and in its
// run.cancelled event.
func (s *Store) RunCancel(ctx context.Context, tenantID, id, actor string) (agentd.Run, error) {
	var lastSeq int64
	var parent *agentd.ParentRef
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID))
		if err != nil {
			return notFound(err, agentd.ErrRunNotFound)
		}
		if noop, _, err := agentd.CancelOf(r.Status); noop || err != nil {
			return err
		}
		lastSeq, err = endLocked(ctx, tx, r, agentd.StatusCancelled, agentd.ReasonCancelled, actor)
		parent = r.Params.Parent
		return err
	})
	if err != nil {
		return agentd.Run{}, err
	}
	s.publish(id, lastSeq)
	// A cancelled parent's children are cancelled; a child's end answers
	// its parent's call. What an error here leaves undone, the sweeper
	// does (ChildrenSweep).
	_ = s.cancelChildren(ctx, id, actor)
	if parent != nil {
		_ = s.AnswerParent(ctx, parent.RunID)
	}
	return s.RunGet(ctx, tenantID, id)
}

// endLocked cancels (or times out) r, whose row the caller has locked, as
// actor asked (empty: no client did): a running run is flagged and its
// executor told; any other run nobody executes is ended here with status
// and reason, and what it left open is closed (closeOpen). It returns the
// run's new last event seq when it appended events, else 0.
func endLocked(ctx context.Context, tx pgx.Tx, r agentd.Run, status agentd.RunStatus, reason agentd.Reason, actor string) (int64, error) {
	if _, flag, _ := agentd.CancelOf(r.Status); flag {
		if _, err := tx.Exec(ctx, `UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now(),
			cancelled_by = CASE WHEN cancel_requested_at IS NULL THEN $2 ELSE cancelled_by END
			WHERE id = $1`, r.ID, nullIfEmpty(actor)); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelCancel, r.ID)
		return 0, err
	}
	evs, unresolved, err := closeOpen(ctx, tx, r, reason)
	if err != nil {
		return 0, err
	}
	var runErr *agentd.ErrorDetail
	if status == agentd.StatusTimedOut {
		runErr = agentd.TimedOutWaitingError()
	}
	evs = append(evs, agentd.WithUnresolved(agentd.RunEndEvent(r.StepCount, status, reason, runErr, actor), unresolved))
	return endNow(ctx, tx, r, evs, RunEnd{Status: status, Reason: reason, Error: runErr, Actor: actor})
}

// closeOpen closes what a run that nobody executes left open as it ends for
// reason: its unfinished step is aborted (failed when it timed out), and
// each call that did not run (planned, waiting for approval, or allowed a
// retry) is rejected, with a tool_call.completed event each. A side effect
// whose outcome is unknown stays unknown, since it may have happened: its
// error notes the end, and the run's end lists it as unresolved. The
// inputs the run had yet to apply are unapplied, with an event each.
func closeOpen(ctx context.Context, tx pgx.Tx, r agentd.Run, reason agentd.Reason) (evs []agentd.EventIn, unresolved []string, err error) {
	if _, err := tx.Exec(ctx, `UPDATE steps SET status = $2, finished_at = now()
		WHERE run_id = $1 AND status IN ('running', 'acting')`, r.ID, agentd.StepEndOf(reason)); err != nil {
		return nil, nil, fmt.Errorf("close steps: %w", err)
	}
	notRun := agentd.NotRunError(reason)
	rejected, err := queryAll(ctx, tx, scanString, `WITH c AS (
			UPDATE tool_calls SET status = 'rejected', error = $2, finished_at = now()
			WHERE step_id IN (SELECT id FROM steps WHERE run_id = $1) AND status IN ('planned', 'awaiting_approval', 'awaiting_client', 'awaiting_agent', 'running')
			RETURNING id, step_id, position
		)
		SELECT c.id::text FROM c JOIN steps s ON s.id = c.step_id ORDER BY s.seq, c.position`, r.ID, mustJSON(notRun))
	if err != nil {
		return nil, nil, fmt.Errorf("reject calls that did not run: %w", err)
	}
	for _, id := range rejected {
		errData := notRun
		evs = append(evs, agentd.EventOf(r.StepCount, agentd.ToolCallCompletedData{Error: &errData, ResolvedBy: string(reason),
			Status: agentd.CallRejected, ToolCallID: id}))
	}
	unresolved, err = queryAll(ctx, tx, scanString, `WITH c AS (
			UPDATE tool_calls SET error = $2 WHERE step_id IN (SELECT id FROM steps WHERE run_id = $1) AND status = 'unknown'
			RETURNING id, step_id, position
		)
		SELECT c.id::text FROM c JOIN steps s ON s.id = c.step_id ORDER BY s.seq, c.position`, r.ID, mustJSON(agentd.UnresolvedError(reason)))
	if err != nil {
		return nil, nil, fmt.Errorf("note unknown outcomes: %w", err)
	}
	unapplied, err := unapplyLocked(ctx, tx, r, reason)
	return append(evs, unapplied...), unresolved, err
}

func scanString(row pgx.Row) (string, error) {
	var s string
	err := row.Scan(&s)
	return s, translate(err)
}

// mustJSON encodes a value that cannot fail to encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("persist: encode %T: %v", v, err))
	}
	return b
}

// RunsSweep resolves what runs wait for once their action timeout passed
// (a waiting run's deadline_at is the action's, its total timeout paused):
// an approval is rejected, an unknown outcome failed, each with an error of
// kind action_timeout that says so, and the run is queued again, so that
// the model learns of it and no run waits forever. (Runs left running by a
// dead worker need no sweeper: any worker claims them once their lease
// expires.) It returns how many it resolved.
func (s *Store) RunsSweep(ctx context.Context, limit int) (int, error) {
	ended := map[string]int64{}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		clear(ended)
		runs, err := queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs
			WHERE status = 'requires_action' AND deadline_at < now() AND required_action->>'type' <> 'agent_runs'
			ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		for _, r := range runs {
			p := agentd.TimeoutDecision(r, r.Action())
			last, err := resolveLocked(ctx, tx, r, p, agentd.ResolvedByActionTimeout)
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
//
// actor is who asks: it is kept as the run's resumed_by and in the
// run.resumed event of its next claim.
func (s *Store) RunResume(ctx context.Context, tenantID, id, actor string) (agentd.Run, error) {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The conversation's lock first, as a creation takes it: the run
		// takes the last place in its queue (migration 00028).
		var status agentd.RunStatus
		_, err := tx.Exec(ctx, `SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM runs
			WHERE id = $1 AND tenant_id = $2) FOR UPDATE`, id, tenantID)
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID).Scan(&status)
		}
		if err != nil {
			return notFound(translate(err), agentd.ErrRunNotFound)
		}
		if noop, err := agentd.ResumeOf(status); noop || err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued', terminal_reason = NULL, error = NULL,
			deadline_at = NULL, cancel_requested_at = NULL, interrupt_requested_at = NULL, finished_at = NULL, updated_at = now(),
			resumed_by = $2, cancelled_by = NULL, queue_seq = nextval('runs_queue_seq')
			WHERE id = $1`, id, nullIfEmpty(actor)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, restoreInput, id); err != nil {
			return fmt.Errorf("restore input: %w", err)
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, id)
		return err
	})
	if err != nil {
		return agentd.Run{}, err
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
func (s *Store) RunInterrupt(ctx context.Context, id string) (agentd.Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return notFound(err, agentd.ErrRunNotFound)
		}
		switch flag, end := agentd.InterruptOf(r.Status); {
		case flag:
			if _, err := tx.Exec(ctx, `UPDATE runs SET interrupt_requested_at = coalesce(interrupt_requested_at, now()),
				updated_at = now() WHERE id = $1`, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelCancel, id+InterruptPayload)
			return err
		case end:
			lastSeq, err = endNow(ctx, tx, r,
				[]agentd.EventIn{agentd.RunEndEvent(r.StepCount, agentd.StatusInterrupted, agentd.ReasonInterrupted, nil, "")},
				RunEnd{Status: agentd.StatusInterrupted, Reason: agentd.ReasonInterrupted})
			return err
		}
		return nil
	})
	if err != nil {
		return agentd.Run{}, err
	}
	s.publish(id, lastSeq)
	return s.RunByID(ctx, id)
}

// newID returns a new UUIDv7.
func newID() string { return agentd.NewID() }

// RunCancelledBy returns who asked for the run's cancel ("" when nobody
// said, or no cancel was asked).
func (s *Store) RunCancelledBy(ctx context.Context, runID string) (string, error) {
	var actor string
	err := s.pool.QueryRow(ctx, `SELECT coalesce(cancelled_by, '') FROM runs WHERE id = $1`, runID).Scan(&actor)
	return actor, translate(err)
}

// nullIfEmpty is s, or SQL NULL when s is empty.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// abortUnanswered marks aborted the input of run that ends cancelled or
// interrupted before any answer of its own was committed: a later run of
// the conversation must not be sent a question nobody answered (the model
// is sent completed messages only). A resume gives it back (restoreInput).
//
// The input of a run queued behind another (pending, not yet numbered) is
// marked aborted too, and keeps its provisional seq: a resume gives it
// back pending, and the run's claim numbers it whatever its status.
var abortUnanswered = `UPDATE messages SET status = 'aborted'
	WHERE run_id = $1 AND status IN ('completed', 'pending') AND role IN ('user', 'system')
	AND NOT EXISTS (SELECT 1 FROM messages a WHERE a.run_id = $1 AND a.role = 'assistant')`

// restoreInput undoes abortUnanswered for a run queued again: its input is
// completed again, or pending while it has its provisional seq.
var restoreInput = `UPDATE messages SET status = CASE WHEN seq >= ` + strconv.Itoa(PendingSeq) + ` THEN 'pending' ELSE 'completed' END
	WHERE run_id = $1 AND status = 'aborted' AND role IN ('user', 'system')`

// pauseBudget keeps what is left of a run's total timeout as it starts to
// wait for a client, and makes its deadline the action timeout's.
var pauseBudget = `UPDATE runs SET
	budget_left_ms = CASE WHEN deadline_at IS NULL THEN NULL
		ELSE greatest(0, (extract(epoch FROM deadline_at - now()) * 1000)::bigint) END,
	deadline_at = now() + coalesce(nullif((params->'timeouts'->>'action_ms')::bigint, 0), ` + strconv.Itoa(agentd.DefaultActionMS) + `)
		* interval '1 millisecond'
	WHERE id = $1`

// resumeBudget gives a run that got its decision back what was left of its
// total timeout.
const resumeBudget = `UPDATE runs SET
	deadline_at = CASE WHEN budget_left_ms IS NULL THEN NULL ELSE now() + budget_left_ms * interval '1 millisecond' END,
	budget_left_ms = NULL
	WHERE id = $1`
