package api

import (
	"context"
	"slices"

	"github.com/agentd/agentd"
)

// Sub-agents (DESIGN: sub-agents): a run's "tools" may name agents of its
// tenant ({"type": "agent", "agent": "<name>"}), each offered to its model
// as a tool of the agent's name. They are pinned at their latest versions
// when the run is composed; the engine starts a child run of one when the
// model calls it (compose.Composer.Child composes it).

// viewWithChildren is the view of run r, with what the children it waits
// for wait for themselves: each of its required_action's agents that
// waits for a decision carries the child's required_action (that of a
// child that waits for its own sub-agents carries theirs, in turn).
func (s *server) viewWithChildren(ctx context.Context, r agentd.Run) (runJSON, error) {
	v := runView(r)
	if v.RequiredAction == nil || v.RequiredAction.Type != agentd.ActionAgentRuns {
		return v, nil
	}
	agents, err := s.childActions(ctx, r.ID, v.RequiredAction.Agents, agentd.DefaultAgentDepth+8)
	v.RequiredAction.Agents = agents
	return v, err
}

// childActions puts on agents, the calls of run parentID's sub-agents, the
// required actions of their children, depth levels deep.
func (s *server) childActions(ctx context.Context, parentID string, agents []agentd.AgentCall, depth int) ([]agentd.AgentCall, error) {
	if depth == 0 {
		return agents, nil
	}
	children, err := s.store.ChildrenOpen(ctx, parentID)
	if err != nil {
		return agents, err
	}
	out := slices.Clone(agents)
	for i, a := range out {
		for _, ch := range children {
			if ch.ID == a.RunID {
				out[i].InputsPending = ch.InputsPending
			}
			if ch.ID != a.RunID || ch.Status != agentd.StatusRequiresAction {
				continue
			}
			action := ch.Action()
			if action.Type == agentd.ActionAgentRuns {
				if action.Agents, err = s.childActions(ctx, ch.ID, action.Agents, depth-1); err != nil {
					return agents, err
				}
			}
			out[i].RequiredAction = &action
		}
	}
	return out, nil
}

// delegate points decision p, made on a run that waits for its sub-agents,
// at the descendant run that waits for it: the one whose required action
// names p's call (tool_call_id or call_id, or for tool outputs the calls
// they answer). A decision that names no such call is left on the run,
// which refuses it.
func (s *server) delegate(ctx context.Context, p agentd.ActionParams) (agentd.ActionParams, error) {
	run, err := s.store.RunGet(ctx, p.TenantID, p.RunID)
	if err != nil || run.Status != agentd.StatusRequiresAction || run.Action().Type != agentd.ActionAgentRuns {
		return p, err
	}
	v, err := s.viewWithChildren(ctx, run)
	if err != nil {
		return p, err
	}
	if id := waiterOf(v.RequiredAction.Agents, p); id != "" {
		p.RunID = id
	}
	return p, nil
}

// waiterOf is the run among agents' children (and theirs) whose required
// action p answers; "": none.
func waiterOf(agents []agentd.AgentCall, p agentd.ActionParams) string {
	for _, a := range agents {
		ra := a.RequiredAction
		switch {
		case ra == nil:
		case ra.Type == agentd.ActionAgentRuns:
			if id := waiterOf(ra.Agents, p); id != "" {
				return id
			}
		case names(*ra, p):
			return a.RunID
		}
	}
	return ""
}

// names reports whether decision p names the call that action asks about.
func names(action agentd.RequiredAction, p agentd.ActionParams) bool {
	if p.Decision == agentd.DecisionOutputs {
		for _, o := range p.Outputs {
			for _, c := range action.Calls {
				if c.ToolCallID == o.ToolCallID {
					return true
				}
			}
		}
		return false
	}
	return (p.ToolCallID != "" && p.ToolCallID == action.ToolCallID) || (p.ToolCallID == "" && p.CallID != "" && p.CallID == action.CallID)
}
