package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// Sub-agents (DESIGN: sub-agents): a run's "tools" may name agents of its
// tenant ({"type": "agent", "agent": "<name>"}), each offered to its model
// as a tool of the agent's name. They are pinned at their latest versions
// when the run is created; the engine starts a child run of one when the
// model calls it (ChildSpecs gives the child's spec).

// subAgents resolves the agents a run names among its tools to the
// tenant's agents at their latest versions: each named once, and no other
// tool of the run of that name (the model tells tools apart by name only).
func (s *server) subAgents(ctx context.Context, names []string, spec agentd.RunSpec, reg *tools.Registry) ([]agentd.SubAgent, error) {
	if len(names) == 0 {
		return nil, nil
	}
	out := make([]agentd.SubAgent, 0, len(names))
	for i, n := range names {
		_, client := spec.Params.ClientTool(n)
		_, server := reg.Get(n)
		switch {
		case slices.Contains(names[:i], n):
			return nil, specFieldError("tools", "names the agent %q twice", n)
		case client || (server && (spec.Params.Tools == nil || slices.Contains(spec.Params.Tools, n))):
			return nil, specFieldError("tools", "names the agent %q and a tool of the same name; the model tells "+
				"tools apart by name only, so leave one out", n)
		}
		a, err := s.store.AgentGet(ctx, TenantFromContext(ctx), n, 0)
		if errors.Is(err, agentd.ErrAgentNotFound) {
			return nil, specFieldError("tools", "the tenant has no agent named %q (see GET /agents)", n)
		}
		if err != nil {
			return nil, err
		}
		sub := agentd.SubAgent{Name: a.Name, Version: a.Version, Description: a.Description}
		var def agentDefinition
		if decodeStrict(a.Definition, &def, "") == nil && !isNull(def.InputSchema) {
			sub.Parameters = def.InputSchema
		}
		out = append(out, sub)
	}
	return out, nil
}

// maxCycleSearch bounds the agents a cycle search reads.
const maxCycleSearch = 1000

// agentCycle returns the chain of agents by which agent name, handing work
// to subs, would come back to itself, following each agent's latest
// version ("": none).
func (s *server) agentCycle(ctx context.Context, tenant, name string, subs []agentd.SubAgent) (string, error) {
	type path []string
	var queue []path
	for _, a := range subs {
		queue = append(queue, path{name, a.Name})
	}
	seen := map[string]bool{}
	for len(queue) > 0 && len(seen) < maxCycleSearch {
		p := queue[0]
		queue = queue[1:]
		last := p[len(p)-1]
		if last == name {
			return strings.Join(p, " → "), nil
		}
		if seen[last] {
			continue
		}
		seen[last] = true
		a, err := s.store.AgentGet(ctx, tenant, last, 0)
		if errors.Is(err, agentd.ErrAgentNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		var def agentDefinition
		if decodeStrict(a.Definition, &def, "") != nil {
			continue
		}
		req, err := def.request()
		if err != nil {
			continue
		}
		for _, n := range req.SubAgents {
			queue = append(queue, append(slices.Clone(p), n))
		}
	}
	return "", nil
}

// ChildSpecFunc gives the spec of the child run a call of sub-agent sub
// by run parent starts (run.SubAgentFunc).
type ChildSpecFunc func(ctx context.Context, parent agentd.Run, sub agentd.SubAgent) (agentd.RunSpec, error)

// ChildSpecs returns the engine's hook for sub-agents of the server cfg
// describes: a child run's spec is built as POST /runs builds a run of
// the agent's version, for the parent's tenant and actor, with the
// parent's variables. What the definition no longer builds (the agent
// was deleted, a tool it names is gone) is a *tools.Error, which fails the
// call; the model is told.
func ChildSpecs(cfg Config) ChildSpecFunc {
	return newServer(cfg).childSpec
}

func (s *server) childSpec(ctx context.Context, parent agentd.Run, sub agentd.SubAgent) (agentd.RunSpec, error) {
	ctx = context.WithValue(ctx, keyCaller, &caller{Principal: auth.Principal{Tenant: parent.TenantID, Actor: parent.CreatedBy},
		tenant: parent.TenantID})
	version := sub.Version
	sr := runspec.Request{Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "task"}}, InputText: true,
		Variables: parent.Params.Variables}
	sr, err := s.withAgent(ctx, sr, agentFields{Agent: &sub.Name, AgentVersion: &version})
	var spec agentd.RunSpec
	if err == nil {
		spec, err = s.build(ctx, sr)
	}
	var fe *runspec.FieldError
	if errors.As(err, &fe) {
		return spec, &tools.Error{Kind: agentd.ToolErrAgent, Message: fmt.Sprintf("the agent %s version %d cannot start: %s",
			sub.Name, sub.Version, fe.Error())}
	}
	return spec, err
}

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
