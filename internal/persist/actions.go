package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Errors of RunResolveAction.
var (
	// ErrRunNotWaiting: the run is not in requires_action.
	ErrRunNotWaiting = errors.New("run is not waiting for an action")
	// ErrActionMismatch: the run waits for an action about another tool call.
	ErrActionMismatch = errors.New("the run waits for an action about another tool call")
)

// DecisionError says that a decision does not answer what the run asks:
// approve or reject answer an approval (tool_approval); result, retry or
// fail an unknown outcome (tool_outcome_unknown).
type DecisionError struct {
	Decision string // what the client decided
	Asks     string // the type of the run's required action
}

func (e *DecisionError) Error() string {
	return "decision " + e.Decision + " does not answer what the run asks (" + e.Asks + ")"
}

// Kinds of required action.
const (
	ActionToolOutcomeUnknown = "tool_outcome_unknown"
	ActionToolApproval       = "tool_approval"
)

// Decisions a client may take on a tool call whose outcome is unknown.
const (
	DecisionResult = "result" // it happened; here is its result
	DecisionRetry  = "retry"  // it did not happen; attempt it again with the same key
	DecisionFail   = "fail"   // give up on it; the model sees an error

	DecisionApprove = "approve" // an approval: run the call
	DecisionReject  = "reject"  // an approval: do not; the model sees an error
)

// ActionParams resolve what a requires_action run waits for.
type ActionParams struct {
	TenantID, RunID, ToolCallID string
	Decision                    string
	Result                      json.RawMessage // for DecisionResult
	Message                     string          // for DecisionFail and DecisionReject: what the model is told
}

// RunResolveAction records a client's decision on the tool call a waiting run
// asks about and queues the run again. ErrRunNotFound, ErrRunNotWaiting,
// ErrActionMismatch and a *DecisionError say why nothing changed.
func (s *Store) RunResolveAction(ctx context.Context, p ActionParams) (Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
			p.RunID, p.TenantID))
		if err != nil {
			return notFound(err, ErrRunNotFound)
		}
		if r.Status != StatusRequiresAction {
			return fmt.Errorf("run is %s: %w", r.Status, ErrRunNotWaiting)
		}
		var action struct {
			Type       string `json:"type"`
			ToolCallID string `json:"tool_call_id"`
		}
		_ = json.Unmarshal(r.RequiredAction, &action)
		if action.ToolCallID != p.ToolCallID {
			return ErrActionMismatch
		}
		approval := p.Decision == DecisionApprove || p.Decision == DecisionReject
		if approval != (action.Type == ActionToolApproval) {
			return &DecisionError{Decision: p.Decision, Asks: action.Type}
		}
		var data map[string]any
		switch p.Decision {
		case DecisionApprove:
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'planned' WHERE id = $1 AND status = 'awaiting_approval'`, p.ToolCallID)
			data = map[string]any{"tool_call_id": p.ToolCallID, "status": CallPlanned, "resolved_by": "client"}
		case DecisionReject:
			data, err = endCall(ctx, tx, p.ToolCallID, CallAwaitingApproval, CallRejected, "rejected",
				cmp.Or(p.Message, "the call was rejected by the client"))
		case DecisionResult:
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'succeeded', result = $2, error = NULL, finished_at = now()
				WHERE id = $1 AND status = 'unknown'`, p.ToolCallID, []byte(p.Result))
			data = map[string]any{"tool_call_id": p.ToolCallID, "status": CallSucceeded, "result": p.Result, "resolved_by": "client"}
		case DecisionFail:
			data, err = endCall(ctx, tx, p.ToolCallID, CallUnknown, CallFailed, "client",
				cmp.Or(p.Message, "the tool call was failed by the client"))
		case DecisionRetry:
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'running', error = NULL WHERE id = $1 AND status = 'unknown'`, p.ToolCallID)
			data = map[string]any{"tool_call_id": p.ToolCallID, "status": CallRunning, "retry": true, "resolved_by": "client"}
		default:
			return fmt.Errorf("unknown decision %q", p.Decision)
		}
		if err != nil {
			return fmt.Errorf("resolve tool call: %w", err)
		}
		typ := "tool_call.completed"
		switch p.Decision {
		case DecisionRetry:
			typ = "tool_call.retry_allowed"
		case DecisionApprove:
			typ = "tool_call.approved"
		}
		lastSeq, err = appendEvents(ctx, tx, r.ID, r.LastEventSeq, []EventIn{{Type: typ, Step: r.StepCount, Data: data}})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued', required_action = NULL, last_event_seq = $2,
			updated_at = now() WHERE id = $1`, r.ID, lastSeq); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, r.ID)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.publish(p.RunID, lastSeq)
	return s.RunGet(ctx, p.TenantID, p.RunID)
}

// endCall moves a call waiting for a client's decision (from) to a final
// status (to) with an error the model is told, and returns the event data.
func endCall(ctx context.Context, tx pgx.Tx, id, from, to, kind, msg string) (map[string]any, error) {
	errData := map[string]any{"message": msg, "kind": kind}
	b, err := json.Marshal(errData)
	if err != nil {
		return nil, err
	}
	_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = $3, error = $4, finished_at = now()
		WHERE id = $1 AND status = $2`, id, from, to, b)
	return map[string]any{"tool_call_id": id, "status": to, "error": errData, "resolved_by": "client"}, err
}
