package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// RunResolveAction records a client's decision on the tool call a waiting run
// asks about and queues the run again. ErrRunNotFound, ErrRunNotWaiting,
// ErrActionMismatch and a *DecisionError say why nothing changed.
func (s *Store) RunResolveAction(ctx context.Context, p agentd.ActionParams) (agentd.Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
			p.RunID, p.TenantID))
		if err != nil {
			return notFound(err, agentd.ErrRunNotFound)
		}
		lastSeq, err = resolveLocked(ctx, tx, r, p, agentd.ResolvedByClient)
		return err
	})
	if err != nil {
		return agentd.Run{}, err
	}
	s.publish(p.RunID, lastSeq)
	return s.RunGet(ctx, p.TenantID, p.RunID)
}

// resolveLocked applies decision p to r, whose row the caller has locked,
// as resolvedBy (a client, or the action timeout), and queues r again. It
// returns the run's new last event seq.
func resolveLocked(ctx context.Context, tx pgx.Tx, r agentd.Run, p agentd.ActionParams, resolvedBy string) (int64, error) {
	if r.Status != agentd.StatusRequiresAction {
		return 0, fmt.Errorf("run is %s: %w", r.Status, agentd.ErrRunNotWaiting)
	}
	var action agentd.RequiredAction
	_ = json.Unmarshal(r.RequiredAction, &action)
	if (p.ToolCallID != "" && action.ToolCallID != p.ToolCallID) || (p.CallID != "" && action.CallID != p.CallID) {
		return 0, agentd.ErrActionMismatch
	}
	p.ToolCallID = action.ToolCallID
	if !p.Decision.Answers(action.Type) {
		return 0, &agentd.DecisionError{Decision: p.Decision, Asks: action.Type}
	}
	if p.Decision == agentd.DecisionOutputs {
		return resolveOutputs(ctx, tx, r, action, p, resolvedBy)
	}
	kind := func(k agentd.ErrorKind) agentd.ErrorKind {
		if resolvedBy == agentd.ResolvedByActionTimeout {
			return agentd.ToolErrActionTimeout
		}
		return k
	}
	var data agentd.Payload
	var err error
	switch p.Decision {
	case agentd.DecisionApprove:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'planned' WHERE id = $1 AND status = 'awaiting_approval'`, p.ToolCallID)
		data = agentd.ToolCallApprovedData{Actor: p.Actor, ResolvedBy: resolvedBy, Status: agentd.CallPlanned, ToolCallID: p.ToolCallID}
	case agentd.DecisionReject:
		data, err = endCall(ctx, tx, endCallParams{actor: p.Actor, id: p.ToolCallID, from: agentd.CallAwaitingApproval, to: agentd.CallRejected,
			resolvedBy: resolvedBy,
			err:        agentd.ErrorDetail{Kind: kind(agentd.ToolErrRejected), Message: cmp.Or(p.Message, "the call was rejected by the client")}})
	case agentd.DecisionResult:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'succeeded', result = $2, error = NULL, finished_at = now()
			WHERE id = $1 AND status = 'unknown'`, p.ToolCallID, []byte(p.Result))
		if err == nil && p.Artifact != nil {
			a := p.Artifact
			_, err = tx.Exec(ctx, insertArtifact, a.ID, r.ID, p.ToolCallID, a.MediaType, a.Size(), a.SHA256, a.Content)
		}
		data = agentd.ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, Result: p.Result, Status: agentd.CallSucceeded,
			ToolCallID: p.ToolCallID}
	case agentd.DecisionFail:
		data, err = endCall(ctx, tx, endCallParams{actor: p.Actor, id: p.ToolCallID, from: agentd.CallUnknown, to: agentd.CallFailed,
			resolvedBy: resolvedBy,
			err:        agentd.ErrorDetail{Kind: kind(agentd.ToolErrClient), Message: cmp.Or(p.Message, "the tool call was failed by the client")}})
	case agentd.DecisionRetry:
		_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'running', error = NULL WHERE id = $1 AND status = 'unknown'`, p.ToolCallID)
		data = agentd.ToolCallRetryAllowedData{Actor: p.Actor, ResolvedBy: resolvedBy, Retry: true, Status: agentd.CallRunning,
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
	return requeue(ctx, tx, r, p.Actor, []agentd.EventIn{agentd.EventOf(r.StepCount, data)})
}

// resolveOutputs answers each client tool call the run waits for with its
// output or its error, and queues the run again.
func resolveOutputs(ctx context.Context, tx pgx.Tx, r agentd.Run, action agentd.RequiredAction, p agentd.ActionParams, resolvedBy string) (int64, error) {
	if len(p.Outputs) != len(action.Calls) {
		return 0, agentd.ErrOutputsMismatch
	}
	want := map[string]bool{}
	for _, c := range action.Calls {
		want[c.ToolCallID] = true
	}
	evs := make([]agentd.EventIn, 0, len(p.Outputs))
	for _, o := range p.Outputs {
		if !want[o.ToolCallID] {
			return 0, agentd.ErrOutputsMismatch
		}
		delete(want, o.ToolCallID) // each once
		d := agentd.ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, ToolCallID: o.ToolCallID}
		var err error
		if o.Error != "" {
			kind := agentd.ToolErrClient
			if resolvedBy == agentd.ResolvedByActionTimeout {
				kind = agentd.ToolErrActionTimeout
			}
			d.Status, d.Error = agentd.CallFailed, &agentd.ErrorDetail{Kind: kind, Message: o.Error}
			_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = 'failed', error = $2, finished_at = now(), decided_by = $3
				WHERE id = $1 AND status = 'awaiting_client'`, o.ToolCallID, mustJSON(d.Error), nullIfEmpty(p.Actor))
		} else {
			d.Status, d.Result = agentd.CallSucceeded, o.Output
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
		evs = append(evs, agentd.EventOf(r.StepCount, d))
	}
	return requeue(ctx, tx, r, p.Actor, evs)
}

// requeue appends evs to the log of r, a run whose decision was recorded,
// and queues it again, with the rest of its total timeout.
func requeue(ctx context.Context, tx pgx.Tx, r agentd.Run, actor string, evs []agentd.EventIn) (int64, error) {
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
	from, to   agentd.CallStatus
	resolvedBy string
	err        agentd.ErrorDetail
}

// endCall moves a call waiting for a client's decision to a final status
// with an error, and returns the event data that says so.
func endCall(ctx context.Context, tx pgx.Tx, p endCallParams) (agentd.Payload, error) {
	b, err := json.Marshal(p.err)
	if err != nil {
		return nil, err
	}
	_, err = tx.Exec(ctx, `UPDATE tool_calls SET status = $3, error = $4, finished_at = now()
		WHERE id = $1 AND status = $2`, p.id, p.from, p.to, b)
	return agentd.ToolCallCompletedData{Actor: p.actor, Error: &p.err, ResolvedBy: p.resolvedBy, Status: p.to, ToolCallID: p.id}, err
}
