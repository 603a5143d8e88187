package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/vocab"

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
	Decision vocab.Decision   // what the client decided
	Asks     vocab.ActionType // the type of the run's required action
}

func (e *DecisionError) Error() string {
	return "decision " + string(e.Decision) + " does not answer what the run asks (" + string(e.Asks) + ")"
}

// ActionParams resolve what a requires_action run waits for.
//
// The call is named by ToolCallID (agentd's id), by CallID (the model's),
// or by both, which must then name the same call.
type ActionParams struct {
	TenantID, RunID, ToolCallID string
	CallID                      string
	Decision                    vocab.Decision
	Result                      json.RawMessage // for vocab.DecisionResult
	Artifact                    *tools.Artifact // the whole result, when Result is its preview
	Message                     string          // for vocab.DecisionFail and vocab.DecisionReject: what the model is told
	Actor                       string          // who decides: kept on the call (decided_by), the run (resumed_by) and the event
	// Outputs, for vocab.DecisionOutputs, answer every client tool call the
	// run waits for.
	Outputs []ToolOutput
}

// ToolOutput is a client's answer to one client tool call: its output (a
// result), or the error the model is told.
type ToolOutput struct {
	ToolCallID string
	Output     json.RawMessage
	Artifact   *tools.Artifact // the whole output, when Output is its preview
	Error      string          // when set, the call failed
}

// ErrOutputsMismatch: a tool_outputs action that does not answer exactly
// the client tool calls the run waits for.
var ErrOutputsMismatch = errors.New("the outputs do not answer the client tool calls the run waits for")

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
		lastSeq, err = resolveLocked(ctx, tx, r, p, event.ResolvedByClient)
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.publish(p.RunID, lastSeq)
	return s.RunGet(ctx, p.TenantID, p.RunID)
}

// resolveLocked applies decision p to r, whose row the caller has locked,
// as resolvedBy (a client, or the action timeout), and queues r again. It
// returns the run's new last event seq.
func resolveLocked(ctx context.Context, tx pgx.Tx, r Run, p ActionParams, resolvedBy string) (int64, error) {
	if r.Status != vocab.StatusRequiresAction {
		return 0, fmt.Errorf("run is %s: %w", r.Status, ErrRunNotWaiting)
	}
	var action event.RequiredAction
	_ = json.Unmarshal(r.RequiredAction, &action)
	if (p.ToolCallID != "" && action.ToolCallID != p.ToolCallID) || (p.CallID != "" && action.CallID != p.CallID) {
		return 0, ErrActionMismatch
	}
	p.ToolCallID = action.ToolCallID
	if !p.Decision.Answers(action.Type) {
		return 0, &DecisionError{Decision: p.Decision, Asks: action.Type}
	}
	if p.Decision == vocab.DecisionOutputs {
		return resolveOutputs(ctx, tx, r, action, p, resolvedBy)
	}
	kind := func(k vocab.ToolErrorKind) string {
		if resolvedBy == event.ResolvedByActionTimeout {
			return string(vocab.ToolErrActionTimeout)
		}
		return string(k)
	}
	var data event.Payload
	var err error
	switch p.Decision {
	case vocab.DecisionApprove:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'planned' WHERE id = $1 AND status = 'awaiting_approval'`, p.ToolCallID)
		data = event.ToolCallApprovedData{Actor: p.Actor, ResolvedBy: resolvedBy, Status: vocab.CallPlanned, ToolCallID: p.ToolCallID}
	case vocab.DecisionReject:
		data, err = endCall(ctx, tx, endCallParams{actor: p.Actor, id: p.ToolCallID, from: vocab.CallAwaitingApproval, to: vocab.CallRejected,
			resolvedBy: resolvedBy,
			err:        event.Error{Kind: kind(vocab.ToolErrRejected), Message: cmp.Or(p.Message, "the call was rejected by the client")}})
	case vocab.DecisionResult:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'succeeded', result = $2, error = NULL, finished_at = now()
			WHERE id = $1 AND status = 'unknown'`, p.ToolCallID, []byte(p.Result))
		if err == nil && p.Artifact != nil {
			a := p.Artifact
			_, err = tx.Exec(ctx, insertArtifact, a.ID, r.ID, p.ToolCallID, a.MediaType, a.Size(), a.SHA256, a.Content)
		}
		data = event.ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, Result: p.Result, Status: vocab.CallSucceeded,
			ToolCallID: p.ToolCallID}
	case vocab.DecisionFail:
		data, err = endCall(ctx, tx, endCallParams{actor: p.Actor, id: p.ToolCallID, from: vocab.CallUnknown, to: vocab.CallFailed,
			resolvedBy: resolvedBy,
			err:        event.Error{Kind: kind(vocab.ToolErrClient), Message: cmp.Or(p.Message, "the tool call was failed by the client")}})
	case vocab.DecisionRetry:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'running', error = NULL WHERE id = $1 AND status = 'unknown'`, p.ToolCallID)
		data = event.ToolCallRetryAllowedData{Actor: p.Actor, ResolvedBy: resolvedBy, Retry: true, Status: vocab.CallRunning,
			ToolCallID: p.ToolCallID}
	default:
		return 0, fmt.Errorf("unknown decision %q", p.Decision)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve tool call: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE tool_calls SET decided_by = $2 WHERE id = $1`, p.ToolCallID, nullIfEmpty(p.Actor)); err != nil {
		return 0, fmt.Errorf("record who decided: %w", err)
	}
	return requeue(ctx, tx, r, p.Actor, []event.In{event.Of(r.StepCount, data)})
}

// resolveOutputs answers each client tool call the run waits for with its
// output or its error, and queues the run again.
func resolveOutputs(ctx context.Context, tx pgx.Tx, r Run, action event.RequiredAction, p ActionParams, resolvedBy string) (int64, error) {
	if len(p.Outputs) != len(action.Calls) {
		return 0, ErrOutputsMismatch
	}
	want := map[string]bool{}
	for _, c := range action.Calls {
		want[c.ToolCallID] = true
	}
	evs := make([]event.In, 0, len(p.Outputs))
	for _, o := range p.Outputs {
		if !want[o.ToolCallID] {
			return 0, ErrOutputsMismatch
		}
		delete(want, o.ToolCallID) // each once
		d := event.ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, ToolCallID: o.ToolCallID}
		var err error
		if o.Error != "" {
			kind := string(vocab.ToolErrClient)
			if resolvedBy == event.ResolvedByActionTimeout {
				kind = string(vocab.ToolErrActionTimeout)
			}
			d.Status, d.Error = vocab.CallFailed, &event.Error{Kind: kind, Message: o.Error}
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'failed', error = $2, finished_at = now(), decided_by = $3
				WHERE id = $1 AND status = 'awaiting_client'`, o.ToolCallID, mustJSON(d.Error), nullIfEmpty(p.Actor))
		} else {
			d.Status, d.Result = vocab.CallSucceeded, o.Output
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'succeeded', result = $2, finished_at = now(), decided_by = $3
				WHERE id = $1 AND status = 'awaiting_client'`, o.ToolCallID, []byte(o.Output), nullIfEmpty(p.Actor))
			if err == nil && o.Artifact != nil {
				a := o.Artifact
				_, err = tx.Exec(ctx, insertArtifact, a.ID, r.ID, o.ToolCallID, a.MediaType, a.Size(), a.SHA256, a.Content)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("record a client tool's output: %w", err)
		}
		evs = append(evs, event.Of(r.StepCount, d))
	}
	return requeue(ctx, tx, r, p.Actor, evs)
}

// requeue appends evs to the log of r, a run whose decision was recorded,
// and queues it again, with the rest of its total timeout.
func requeue(ctx context.Context, tx pgx.Tx, r Run, actor string, evs []event.In) (int64, error) {
	lastSeq, err := appendEvents(ctx, tx, r.ID, r.LastEventSeq, evs)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued', required_action = NULL, last_event_seq = $2,
		resumed_by = $3, updated_at = now() WHERE id = $1`, r.ID, lastSeq, nullIfEmpty(actor)); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, resumeBudget, r.ID); err != nil {
		return 0, fmt.Errorf("give back the total timeout: %w", err)
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, r.ID)
	return lastSeq, err
}

// endCallParams say which call endCall ends, from which status to which,
// and with what error the model is told.
type endCallParams struct {
	actor      string
	id         string
	from, to   vocab.CallStatus
	resolvedBy string
	err        event.Error
}

// endCall moves a call waiting for a client's decision to a final status
// with an error, and returns the event data that says so.
func endCall(ctx context.Context, tx pgx.Tx, p endCallParams) (event.Payload, error) {
	b, err := json.Marshal(p.err)
	if err != nil {
		return nil, err
	}
	_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = $3, error = $4, finished_at = now()
		WHERE id = $1 AND status = $2`, p.id, p.from, p.to, b)
	return event.ToolCallCompletedData{Actor: p.actor, Error: &p.err, ResolvedBy: p.resolvedBy, Status: p.to, ToolCallID: p.id}, err
}
