package persist

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// This file is the approvals a run brings for its conversation's previous
// run, which ended at calls waiting for a client's approval
// (ReasonClientToolCalls, the Responses API's mcp_approval_request): the
// creation records each decision on its call, and the run's first step
// takes the calls over (CallsAdopt) to make them.

// pendingApproval is a call that waits for an approval in a run that
// ended there.
type pendingApproval struct {
	id, callID, name, key string
	arguments             json.RawMessage
	effect                agentd.Effect
}

// decideApprovals checks that the run's approvals decide each call that
// its conversation's previous run ended at waiting for an approval, once,
// and no other, adding what does not to perr; it returns the decisions
// with their calls filled in, in the order of the calls, to be recorded
// (recordApprovals) when perr stays empty. Without a transaction (a new
// conversation), nothing waits.
func (c *creation) decideApprovals(ctx context.Context, tx pgx.Tx, perr *agentd.PendingCallsError) ([]agentd.ApprovalDecision, error) {
	given := map[string]agentd.ApprovalDecision{}
	for _, d := range c.p.Params.Approvals {
		if _, dup := given[d.ToolCallID]; dup {
			perr.UnknownApprovals = append(perr.UnknownApprovals, d.ToolCallID)
		}
		given[d.ToolCallID] = d
	}
	var pending []pendingApproval
	if tx != nil && c.p.ConversationID != "" {
		rows, err := tx.Query(ctx, `SELECT tc.id::text, tc.call_id, tc.name, tc.arguments, tc.effect, tc.idempotency_key
			FROM tool_calls tc JOIN steps s ON s.id = tc.step_id JOIN runs r ON r.id = s.run_id
			WHERE r.conversation_id = $1 AND r.terminal_reason = 'client_tool_calls' AND tc.status = 'awaiting_approval'
			ORDER BY s.seq, tc.position`, c.p.ConversationID)
		if err != nil {
			return nil, fmt.Errorf("pending approvals: %w", err)
		}
		for rows.Next() {
			var p pendingApproval
			if err := rows.Scan(&p.id, &p.callID, &p.name, &p.arguments, &p.effect, &p.key); err != nil {
				rows.Close()
				return nil, err
			}
			pending = append(pending, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	waits := map[string]bool{}
	decided := make([]agentd.ApprovalDecision, 0, len(pending))
	for _, p := range pending {
		waits[p.id] = true
		d, ok := given[p.id]
		if !ok {
			perr.MissingApprovals = append(perr.MissingApprovals, p.id)
			continue
		}
		d.CallID, d.Name, d.Arguments, d.Effect, d.IdempotencyKey = p.callID, p.name, p.arguments, p.effect, p.key
		decided = append(decided, d)
	}
	for _, d := range c.p.Params.Approvals {
		if !waits[d.ToolCallID] {
			perr.UnknownApprovals = append(perr.UnknownApprovals, d.ToolCallID)
		}
	}
	return decided, nil
}

// recordApprovals records each decision on its call, by the run's actor:
// an approved call is planned, to be made by the new run; a rejected one
// is rejected with its reason. The new run's parameters keep the decisions
// with their calls.
func (c *creation) recordApprovals(ctx context.Context, tx pgx.Tx, decided []agentd.ApprovalDecision) error {
	for _, d := range decided {
		var errJSON []byte
		status := agentd.CallPlanned
		if !d.Approve {
			status = agentd.CallRejected
			var err error
			if errJSON, err = json.Marshal(agentd.Rejection(d.Reason)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE tool_calls SET status = $2, error = $3, decided_by = $4,
			finished_at = CASE WHEN $2 = 'rejected' THEN now() END
			WHERE id = $1 AND status = 'awaiting_approval'`, d.ToolCallID, status, errJSON, nullIfEmpty(c.p.Actor)); err != nil {
			return fmt.Errorf("record approval of %s: %w", d.ToolCallID, err)
		}
	}
	c.p.Params.Approvals = decided
	params, err := json.Marshal(c.p.Params)
	if err != nil {
		return fmt.Errorf("encode params: %w", err)
	}
	c.params = params
	return nil
}

// CallsAdopt makes calls that an earlier run of the conversation planned
// and a client decided (RunParams.Approvals) calls of a run's step, in
// their order, so that the step's tool phase makes them.
type CallsAdopt struct {
	RunID, StepID string
	IDs           []string
}

func (o CallsAdopt) queue(b *batch) error {
	b.exec("adopt calls", `UPDATE tool_calls SET run_id = $1, step_id = $2, position = array_position($3::uuid[], id) - 1
		WHERE id = ANY($3::uuid[]) AND status IN ('planned', 'rejected')`, o.RunID, o.StepID, o.IDs)
	return nil
}
