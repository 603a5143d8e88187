package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"
)

// Composer composes the child run that a call of a sub-agent starts
// (*compose.Composer implements it).
type Composer interface {
	// Child composes the child run that call of sub-agent sub by run
	// parent starts: the agent's definition at its pinned version, for
	// the parent's tenant, its input the call's task, the parent and the
	// depth named on it, keyed by the call. An error that is a
	// *tools.Error fails the call, which the model is told (the agent was
	// deleted, its definition no longer builds); any other leaves the run
	// to its lease, as a failed write does.
	Child(ctx context.Context, parent agentd.Run, sub agentd.SubAgent, call agentd.ToolCall) (agentd.RunCreate, error)
	// Report composes the next run of the conversation of run last, which
	// has ended, with input: a detached sub-agent's report.
	Report(ctx context.Context, last agentd.Run, input []agentd.InputMessage) (agentd.RunCreate, error)
}

// subAgentTools are the run's sub-agents as its model is offered them.
func subAgentTools(p agentd.RunParams) []llm.ToolSpec {
	out := make([]llm.ToolSpec, 0, len(p.SubAgents))
	for _, a := range p.SubAgents {
		desc := a.Description
		if desc == "" {
			desc = "Hand a task to the agent " + a.Name + ", which answers when it is done."
		}
		out = append(out, llm.ToolSpec{Name: a.Name, Description: desc, Parameters: a.Schema()})
	}
	return out
}

// agentCallable checks a call of sub-agent name as it is planned: its
// task (or its arguments against the schema the agent declares), and the
// depth its child would run at.
func (x *execution) agentCallable(st agentd.RunState, name string, args []byte) error {
	sub, _ := st.Run.Params.SubAgent(name)
	if len(sub.Parameters) > 0 {
		if err := tools.ValidateArgs(name, sub.Parameters, args); err != nil {
			return err
		}
	} else if _, err := agentd.SubAgentTask(args); err != nil {
		return &tools.Error{Kind: agentd.ToolErrFinal, Message: err.Error()}
	}
	if depth := st.Run.Params.Depth() + 1; depth > x.d.limits.agentDepth {
		return &tools.Error{Kind: agentd.ToolErrAgent, Message: fmt.Sprintf(
			"not run: sub-agents nest at most %d deep, and this run is at depth %d; do the task without it",
			x.d.limits.agentDepth, depth-1)}
	}
	return nil
}

// awaitAgents starts the child run of each of the step's calls of
// sub-agents, one per call whatever crashes (the call's idempotency key
// is the child's), and stops the run until they end (agent_runs), without
// holding a worker: the children's ends answer the calls and queue the run
// again (persist.AnswerParent). A call whose child cannot start fails at
// once, and the model is told. done is false when no call is left to wait
// for.
func (x *execution) awaitAgents(ctx context.Context, st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) (done bool, err error) {
	var action *agentd.RequiredAction
	var evs []agentd.EventIn
	for i := range calls {
		c := &calls[i]
		if c.Status != agentd.CallAwaitingAgent {
			continue
		}
		child, sub, err := x.startChild(ctx, st, *c)
		if err == nil && sub.Detached {
			// The run goes on: the call's result is a handle to the child,
			// whose end reports back as input (Engine.report).
			x.outbox.add([]agentd.EventIn{agentd.EventOf(step.Seq, agentd.AgentStartedData{Agent: c.Name, CallID: c.CallID,
				Detached: true, RunID: child.ID, ToolCallID: c.ID, Version: sub.Version})})
			x.finishCall(step, c, callOutcome{status: agentd.CallSucceeded, result: detachedResult(c.Name, child.ID)})
			if c.Status != agentd.CallSucceeded {
				return true, errors.New("tool call " + c.ID + " has no committed outcome")
			}
			continue
		}
		var te *tools.Error
		if errors.As(err, &te) {
			x.finishCall(step, c, callOutcome{status: agentd.CallFailed, err: toolErrorData(err)})
			if c.Status != agentd.CallFailed {
				return true, errors.New("tool call " + c.ID + " has no committed outcome")
			}
			continue
		}
		if err != nil {
			return true, fmt.Errorf("start the child run of tool call %s: %w", c.ID, err)
		}
		if action == nil {
			action = &agentd.RequiredAction{Arguments: c.Arguments, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
				Name: c.Name, Step: step.Seq, ToolCallID: c.ID, Type: agentd.ActionAgentRuns}
		}
		action.Agents = append(action.Agents, agentd.AgentCall{Agent: c.Name, CallID: c.CallID, RunID: child.ID, ToolCallID: c.ID})
		evs = append(evs, agentd.EventOf(step.Seq, agentd.AgentStartedData{Agent: c.Name, CallID: c.CallID, RunID: child.ID,
			ToolCallID: c.ID, Version: sub.Version}))
	}
	if action == nil {
		return false, nil
	}
	if err := x.waitFor(st, step, *action, evs...); err != nil {
		return true, err
	}
	// Children that ended before the wait was committed are answered once
	// the execution is gone (launch).
	x.answer = st.Run.ID
	x.log.Info("run waits for sub-agents", "runs", len(action.Agents))
	return true, nil
}

// startChild creates (or finds, after a crash) the child run of call c of
// a sub-agent.
func (x *execution) startChild(ctx context.Context, st agentd.RunState, c agentd.ToolCall) (agentd.Run, agentd.SubAgent, error) {
	sub, _ := st.Run.Params.SubAgent(c.Name)
	if x.d.composer == nil || x.d.spawn == nil {
		return agentd.Run{}, sub, &tools.Error{Kind: agentd.ToolErrAgent, Message: "this server starts no sub-agents"}
	}
	rc, err := x.d.composer.Child(ctx, st.Run, sub, c)
	if err != nil {
		return agentd.Run{}, sub, err
	}
	p := persist.CreateOf(rc)
	p.Tree = &persist.TreeBounds{Root: st.Run.Params.RootRunID(st.Run.ID), Parent: st.Run.ID,
		MaxRuns: x.d.limits.treeRuns, MaxChildren: x.d.limits.children}
	run, _, err := x.d.spawn(ctx, p)
	var tle *agentd.TreeLimitError
	if errors.As(err, &tle) {
		return run, sub, &tools.Error{Kind: agentd.ToolErrAgent, Message: "not run: " + tle.Error() + "; do the task without it"}
	}
	return run, sub, err
}

// answerParent answers, once the execution of a run is gone, the run that
// waits for it (or, after it began to wait for its children, the run
// itself): what an error leaves undone, the sweeper does.
func (e *Engine) answerParent(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 10*time.Second)
	defer cancel()
	if err := e.cfg.Store.AnswerParent(ctx, id); err != nil {
		e.log.Warn("answer the run that waits for sub-agents", "run_id", id, "error", err)
	}
	if _, err := e.reportChildren(ctx, id); err != nil {
		e.log.Warn("report the ends of detached sub-agents", "run_id", id, "error", err)
	}
}

// detachedResult is the result of a call of a detached sub-agent: a handle
// to its child run.
func detachedResult(agent, runID string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"agent": agent, "run_id": runID, "status": "started",
		"note": "started " + agent + " as run " + runID + "; its answer comes back as a message when it ends"})
	return b
}

// maxReportTries bounds how often a report looks for the run to go to
// again, when the one it chose ended meanwhile.
const maxReportTries = 8

// reportChildren reports the ends of the detached children of run
// parentID (of any run, when it is empty) that ended and have not
// reported yet; it returns how many it reported.
func (e *Engine) reportChildren(ctx context.Context, parentID string) (int, error) {
	children, err := e.cfg.Store.ChildrenUnreported(ctx, parentID, 100)
	if err != nil {
		return 0, err
	}
	for i, ch := range children {
		if err := e.report(ctx, ch); err != nil {
			return i, fmt.Errorf("report the end of run %s: %w", ch.ID, err)
		}
	}
	return len(children), nil
}

// report reports the end of detached child run ch, once: as input of its
// parent, at the parent's next step boundary; when the parent has ended,
// of its conversation's run in flight, or the conversation's next run,
// which it starts. A child whose parent was cancelled reports nothing.
func (e *Engine) report(ctx context.Context, ch agentd.Run) error {
	msgs := []agentd.InputMessage{{Role: agentd.RoleUser, Content: childReport(ch)}}
	key := "agent:" + ch.ID
	target := ch.Params.Parent.RunID
	for range maxReportTries {
		_, _, err := e.cfg.Store.ChildReport(ctx, ch.ID, agentd.InputCreate{TenantID: ch.TenantID, RunID: target,
			Source: agentd.InputFromAgent, Messages: msgs, IdempotencyKey: key, RequestHash: key})
		var ended *agentd.RunEndedError
		if !errors.As(err, &ended) {
			return err
		}
		if ended.Status == agentd.StatusCancelled && ended.RunID == ch.Params.Parent.RunID {
			return e.cfg.Store.ChildReportDropped(ctx, ch.ID)
		}
		last, err := e.cfg.Store.RunOfConversation(ctx, ch.TenantID, ended.ConversationID)
		if err != nil {
			return err
		}
		if agentd.Steerable(last.Status) {
			target = last.ID
			continue
		}
		rc, err := e.cfg.Composer.Report(ctx, last, msgs)
		if err != nil {
			return err
		}
		rc.IdempotencyKey, rc.RequestHash, rc.ReportOf = key, key, ch.ID
		rc.Spec.Params.IfBusy = agentd.IfBusyReject
		_, _, err = e.create(ctx, persist.CreateOf(rc))
		var busy *agentd.BusyError
		switch {
		case errors.As(err, &busy):
			target = busy.RunID
		case errors.Is(err, agentd.ErrInputsChanged):
			return nil // reported meanwhile
		default:
			return err
		}
	}
	return errors.New("the conversation's runs kept changing")
}

// childReport is what a detached child run's end tells the run it
// reports to: its answer, or how it ended.
func childReport(ch agentd.Run) string {
	name := "the agent"
	if ch.Params.Agent != nil {
		name = "the agent " + ch.Params.Agent.Name
	}
	if ch.Status == agentd.StatusCompleted {
		var parts []agentd.Part
		_ = json.Unmarshal(ch.Output, &parts)
		return fmt.Sprintf("[%s, run %s, which you started, answered]\n\n%s", name, ch.ID, agentd.TextOf(parts))
	}
	why := string(ch.TerminalReason)
	if d := agentd.StoredAs[agentd.ErrorDetail](ch.Error); d != nil && d.Message != "" {
		why += ": " + d.Message
	}
	return fmt.Sprintf("[%s, run %s, which you started, ended %s (%s)]", name, ch.ID, ch.Status, why)
}
