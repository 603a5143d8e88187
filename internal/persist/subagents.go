package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// Sub-agents (DESIGN: sub-agents). A call of a sub-agent (awaiting_agent)
// starts one child run, whose row names its parent run and the call; the
// parent waits in requires_action (agent_runs) without a worker. A child's
// end answers its call in a transaction that locks the parent alone, as a
// client's decision does: children never write the log of a parent that
// runs. Whatever an instance's death leaves undone between a child's end
// and its answer, or between a parent's cancel and its children's, the
// sweeper (ChildrenSweep) does.

// childEnded is true of a child run (ch) that ended for good; an
// interrupted child may be resumed, and answers nothing yet.
const childEnded = `ch.status IN ('completed', 'failed', 'cancelled', 'timed_out')`

// MaxAgentResultBytes caps the answer of a sub-agent's run that its call
// gives the parent's model; the whole answer is the child run's output.
const MaxAgentResultBytes = 64 << 10

// AnswerParent answers the calls of run parentID whose child runs have
// ended, if it waits for them, and queues it again once none is left
// waiting. A run that waits for no child is left as it is, as is one that
// is gone.
func (s *Store) AnswerParent(ctx context.Context, parentID string) error {
	var last int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 FOR UPDATE`, parentID))
		if errors.Is(err, agentd.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		last, _, err = answerLocked(ctx, tx, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("answer the parent run %s: %w", parentID, err)
	}
	s.publish(parentID, last)
	return nil
}

// endedChild is a call of a sub-agent whose child run ended.
type endedChild struct {
	toolCallID, callID, name, runID string
	status                          agentd.RunStatus
	output, errJSON                 []byte
	usage                           agentd.Usage // the child's, with its own children's
}

// answerLocked answers the calls of r, whose row the caller has locked,
// that wait for child runs that ended, when r waits for them: each call
// succeeds with its child's answer, or fails with a tool error that says
// how the child ended; once no call waits, r is queued again. It returns
// r's new last event seq (0: no event) and how many calls it answered.
func answerLocked(ctx context.Context, tx pgx.Tx, r agentd.Run) (int64, int, error) {
	if r.Status != agentd.StatusRequiresAction || r.Action().Type != agentd.ActionAgentRuns {
		return 0, 0, nil
	}
	ended, err := queryAll(ctx, tx, func(row pgx.Row) (endedChild, error) {
		var e endedChild
		err := row.Scan(&e.toolCallID, &e.callID, &e.name, &e.runID, &e.status, &e.output, &e.errJSON,
			&e.usage.InputTokens, &e.usage.OutputTokens, &e.usage.CachedInputTokens, &e.usage.ReasoningTokens)
		return e, translate(err)
	}, `SELECT c.id::text, c.call_id, c.name, ch.id::text, ch.status, ch.output, ch.error,
			ch.input_tokens, ch.output_tokens, ch.cached_input_tokens, ch.reasoning_tokens
		FROM tool_calls c JOIN runs ch ON ch.parent_tool_call_id = c.id
		WHERE c.run_id = $1 AND c.status = 'awaiting_agent' AND `+childEnded+` ORDER BY c.created_at, c.position`, r.ID)
	if err != nil || len(ended) == 0 {
		return 0, 0, err
	}
	evs := make([]agentd.EventIn, 0, len(ended))
	var usage agentd.Usage
	for _, e := range ended {
		res := childResolution(e)
		if err := applyResolution(ctx, tx, r.ID, e.toolCallID, res, nil, ""); err != nil {
			return 0, 0, err
		}
		evs = append(evs, agentd.EventOf(r.StepCount, res.Event))
		usage = usage.Add(e.usage)
	}
	// A parent's usage is its own and its children's, counted once: the
	// call is answered (no longer awaiting_agent) in the same transaction.
	if _, err := tx.Exec(ctx, `UPDATE runs SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
		cached_input_tokens = cached_input_tokens + $4, reasoning_tokens = reasoning_tokens + $5 WHERE id = $1`,
		r.ID, usage.InputTokens, usage.OutputTokens, usage.CachedInputTokens, usage.ReasoningTokens); err != nil {
		return 0, 0, fmt.Errorf("add the children's usage: %w", err)
	}
	var waiting int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM tool_calls WHERE run_id = $1 AND status = 'awaiting_agent'`,
		r.ID).Scan(&waiting); err != nil {
		return 0, 0, err
	}
	if waiting == 0 {
		last, err := requeue(ctx, tx, r, "", evs)
		return last, len(ended), err
	}
	last, err := appendEvents(ctx, tx, r.ID, r.LastEventSeq, evs)
	if err == nil {
		_, err = tx.Exec(ctx, `UPDATE runs SET last_event_seq = $2, updated_at = now() WHERE id = $1`, r.ID, last)
	}
	return last, len(ended), err
}

// childResolution is what the end of child e does to its call: a completed
// child's answer (its output's text, cut to MaxAgentResultBytes) is the
// call's result; any other end fails the call, which the parent's model
// is told.
func childResolution(e endedChild) agentd.Resolution {
	res := agentd.Resolution{From: agentd.CallAwaitingAgent, To: agentd.CallSucceeded}
	if e.status == agentd.StatusCompleted {
		var parts []agentd.Part
		_ = json.Unmarshal(e.output, &parts) // a completed run's output is its parts
		res.Result = mustJSON(cutAnswer(agentd.TextOf(parts), e.runID))
	} else {
		var runErr agentd.ErrorDetail
		_ = json.Unmarshal(e.errJSON, &runErr)
		msg := fmt.Sprintf("the sub-agent's run %s ended %s", e.runID, e.status)
		if runErr.Message != "" {
			msg += ": " + runErr.Message
		}
		res.To, res.Error = agentd.CallFailed, &agentd.ErrorDetail{Kind: agentd.ToolErrAgent, Message: msg}
	}
	res.Event = agentd.ToolCallCompletedData{CallID: e.callID, Error: res.Error, Name: e.name, ResolvedBy: agentd.ResolvedByAgent,
		Result: res.Result, Status: res.To, ToolCallID: e.toolCallID}
	return res
}

// cutAnswer cuts a sub-agent's answer to MaxAgentResultBytes, saying so.
func cutAnswer(text, runID string) string {
	if len(text) <= MaxAgentResultBytes {
		return text
	}
	cut := text[:MaxAgentResultBytes]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + fmt.Sprintf("\n[cut at %d bytes; the whole answer is the output of run %s]", MaxAgentResultBytes, runID)
}

// ChildrenOpen returns the child runs of run parentID that have not ended
// for good (those its calls of sub-agents wait for), oldest first.
func (s *Store) ChildrenOpen(ctx context.Context, parentID string) ([]agentd.Run, error) {
	return queryAll(ctx, s.pool, scanRun, `SELECT `+runColumns+` FROM runs
		WHERE parent_run_id = $1 AND status NOT IN ('completed', 'failed', 'cancelled', 'timed_out')
		ORDER BY created_at, id`, parentID)
}

// ChildRuns returns the ids of the open child runs of run parentID
// (ChildrenOpen's), for the streams that follow them.
func (s *Store) ChildRuns(ctx context.Context, parentID string) ([]string, error) {
	return queryAll(ctx, s.pool, scanString, `SELECT id::text FROM runs
		WHERE parent_run_id = $1 AND status NOT IN ('completed', 'failed', 'cancelled', 'timed_out')
		ORDER BY created_at, id`, parentID)
}

// cancelChildren cancels the open child runs of run parentID, and theirs,
// as actor asked. An error leaves the rest to the sweeper.
func (s *Store) cancelChildren(ctx context.Context, parentID, actor string) error {
	children, err := s.ChildrenOpen(ctx, parentID)
	if err != nil {
		return err
	}
	for _, ch := range children {
		if _, err := s.RunCancel(ctx, ch.TenantID, ch.ID, actor); err != nil && !errors.Is(err, agentd.ErrRunFinished) {
			return fmt.Errorf("cancel child run %s: %w", ch.ID, err)
		}
	}
	return nil
}

// ChildrenSweep does what an instance that died may have left undone of
// sub-agents: it answers the parents whose children ended (AnswerParent),
// and cancels the open children of runs that were cancelled. It returns
// how many calls it answered and how many children it cancelled.
func (s *Store) ChildrenSweep(ctx context.Context, limit int) (answered, cancelled int, err error) {
	last := map[string]int64{}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		clear(last)
		answered = 0
		parents, err := queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs WHERE status = 'requires_action' AND id IN (
				SELECT c.run_id FROM tool_calls c JOIN runs ch ON ch.parent_tool_call_id = c.id
				WHERE c.status = 'awaiting_agent' AND `+childEnded+`)
			LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		for _, r := range parents {
			seq, n, err := answerLocked(ctx, tx, r)
			if err != nil {
				return fmt.Errorf("answer run %s: %w", r.ID, err)
			}
			last[r.ID], answered = seq, answered+n
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	s.published(last)
	type orphan struct{ tenant, id, actor string }
	orphans, err := queryAll(ctx, s.pool, func(row pgx.Row) (orphan, error) {
		var o orphan
		err := row.Scan(&o.tenant, &o.id, &o.actor)
		return o, translate(err)
	}, `SELECT ch.tenant_id, ch.id::text, coalesce(p.cancelled_by, '') FROM runs ch JOIN runs p ON p.id = ch.parent_run_id
		WHERE ch.parent_run_id IS NOT NULL AND ch.status NOT IN ('completed', 'failed', 'cancelled', 'timed_out')
		AND p.status = 'cancelled' LIMIT $1`, limit)
	if err != nil {
		return answered, 0, err
	}
	for _, o := range orphans {
		if _, err := s.RunCancel(ctx, o.tenant, o.id, o.actor); err != nil && !errors.Is(err, agentd.ErrRunFinished) {
			return answered, cancelled, fmt.Errorf("cancel child run %s: %w", o.id, err)
		}
		cancelled++
	}
	return answered, cancelled, nil
}
