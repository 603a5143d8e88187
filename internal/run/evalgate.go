package run

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/tools"
)

// An evaluation's run (RunParams.Eval) never has a side effect: each of
// its tool calls is answered by the result its case recorded for the same
// call, else by the case's stub of the tool, else by the tool itself only
// when the tool is read_only (memory's tools too, whose writes go to the
// run's overlay); a sub-agent's call starts a child that is an
// evaluation's run in turn. Any other call is not made: the run ends
// failed, its error naming the tool (evalRefused).

// evalRefused returns the detail of the end of an evaluation's run when
// one of calls may not be made in it, nil when each may.
func (x *execution) evalRefused(st agentd.RunState, calls []agentd.ToolCall) *agentd.ErrorDetail {
	ev := st.Run.Params.Eval
	if ev == nil {
		return nil
	}
	for _, c := range calls {
		if x.evalAllows(st, ev, c) {
			continue
		}
		return &agentd.ErrorDetail{Kind: agentd.RunErrToolError, Message: fmt.Sprintf(
			"%s: %s may have side effects and case %s has no stub that answers this call (arguments %s); "+
				"add a stub of %s to the case, or mark the tool read_only", agentd.EvalRefusedPrefix, c.Name, ev.Case,
			compactJSON(c.Arguments), c.Name)}
	}
	return nil
}

// evalAllows reports whether call c of an evaluation's run may go on.
func (x *execution) evalAllows(st agentd.RunState, ev *agentd.RunEval, c agentd.ToolCall) bool {
	switch {
	case c.Status == agentd.CallAwaitingAgent, c.Status.Final():
		return true
	case c.Status == agentd.CallAwaitingClient:
		return false // the client is not there: only a stub could answer, and a client's tool has none here
	}
	if _, _, ok := evalAnswer(ev, c); ok {
		return true
	}
	if agentd.IsMemoryTool(c.Name) {
		m := st.Run.Params.Memory
		return m != nil && m.Overlay != ""
	}
	t, ok := x.tools().Get(c.Name)
	return !ok || t.Spec().Effect == agentd.EffectReadOnly // an unknown tool fails the call as it would anyway
}

// evalAnswer is what answers call c of an evaluation's run without its
// tool: the result its case recorded for the same call (the same tool
// with the same arguments), else the first stub of the tool whose match
// the arguments hold.
func evalAnswer(ev *agentd.RunEval, c agentd.ToolCall) (result json.RawMessage, isError, ok bool) {
	var args any
	if json.Unmarshal(c.Arguments, &args) != nil {
		args = nil
	}
	if s, isStr := args.(string); isStr {
		// Arguments the model sent as text that is not JSON are kept as a
		// JSON string; a recorded call holds the same text.
		_ = json.Unmarshal([]byte(s), &args)
	}
	for _, r := range ev.Recorded {
		var rec any
		if r.Tool == c.Name && json.Unmarshal([]byte(r.Arguments), &rec) == nil && eval.Holds(args, rec) && eval.Holds(rec, args) {
			if json.Valid([]byte(r.Result)) {
				return json.RawMessage(r.Result), r.IsError, true
			}
			b, _ := json.Marshal(r.Result)
			return b, r.IsError, true
		}
	}
	for _, s := range ev.Stubs {
		if s.Tool != c.Name {
			continue
		}
		if held, err := eval.ArgumentsHold(c.Arguments, s.Match); err == nil && held {
			return s.Result, s.IsError, true
		}
	}
	return nil, false, false
}

// evalTool answers an evaluation's call in place of its tool.
type evalTool struct {
	spec    tools.Spec
	result  json.RawMessage
	isError bool
}

func (t evalTool) Spec() tools.Spec { return t.spec }

func (t evalTool) Invoke(context.Context, tools.Call) (json.RawMessage, error) {
	if t.isError {
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "stubbed error: " + compactJSON(t.result)}
	}
	return t.result, nil
}

// evalTooled is tool, or what answers c in its place when run is an
// evaluation's.
func evalTooled(run agentd.Run, c agentd.ToolCall, tool tools.Tool) tools.Tool {
	ev := run.Params.Eval
	if ev == nil || tool == nil {
		return tool
	}
	if result, isError, ok := evalAnswer(ev, c); ok {
		return evalTool{spec: tool.Spec(), result: result, isError: isError}
	}
	return tool
}

func compactJSON(b []byte) string {
	var s any
	if json.Unmarshal(b, &s) == nil {
		if str, ok := s.(string); ok {
			return str
		}
	}
	out, err := json.Marshal(json.RawMessage(b))
	if err != nil {
		return string(b)
	}
	return string(out)
}
