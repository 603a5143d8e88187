package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/agentd/agentd"
)

// maxCallEvidence bounds the tool calls a score cites: a run that called
// a tool a hundred times is shown by its first calls.
const maxCallEvidence = 20

// Holds reports whether got holds want, two decoded JSON values: an
// object holds another when it has each of its keys with a value that
// holds that key's value (more keys are fine); an array holds another of
// its length whose elements its elements hold, in order; other values
// (numbers by their value, strings, booleans, null) only themselves.
func Holds(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !Holds(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !Holds(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// ArgumentsHold reports whether a call's arguments (JSON) hold match (a
// JSON value; empty or null: any arguments hold it).
func ArgumentsHold(args, match json.RawMessage) (bool, error) {
	var want any
	if len(match) > 0 {
		if err := json.Unmarshal(match, &want); err != nil {
			return false, fmt.Errorf("match is not JSON: %w", err)
		}
	}
	if want == nil {
		return true, nil
	}
	var got any
	if err := json.Unmarshal(args, &got); err != nil {
		return false, nil // arguments that are not JSON hold nothing
	}
	return Holds(got, want), nil
}

// callsOf is the calls of tool (named), and those among them whose
// arguments hold args (matched).
func callsOf(calls []Call, tool string, args json.RawMessage) (named, matched []Call, err error) {
	for _, c := range calls {
		if c.Tool != tool {
			continue
		}
		named = append(named, c)
		ok, err := ArgumentsHold(c.Arguments, args)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			matched = append(matched, c)
		}
	}
	return named, matched, nil
}

// callEvidence is the evidence of calls, the first maxCallEvidence.
func callEvidence(calls []Call) []agentd.ScoreEvidence {
	calls = calls[:min(len(calls), maxCallEvidence)]
	out := make([]agentd.ScoreEvidence, len(calls))
	for i, c := range calls {
		out[i] = agentd.ScoreEvidence{ToolCallID: c.ID, Step: c.Step, Tool: c.Tool, Arguments: c.Arguments, Status: c.Status}
	}
	return out
}

// toolsCalled is the evidence of which tools the run called: the field
// tool_calls, the tools' names in the order first called.
func toolsCalled(calls []Call) agentd.ScoreEvidence {
	names := []string{}
	for _, c := range calls {
		if !slices.Contains(names, c.Tool) {
			names = append(names, c.Tool)
		}
	}
	return field("tool_calls", names)
}

// what names the calls a check counts: the tool, and the arguments they
// hold if it gives any.
func what(c agentd.Check) string {
	if len(c.Arguments) == 0 || string(c.Arguments) == "null" {
		return c.Tool
	}
	return fmt.Sprintf("%s with arguments holding %s", c.Tool, compact(c.Arguments))
}

// compact is raw on one line, for a reason.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func times(n int) string {
	if n == 1 {
		return "1 time"
	}
	return fmt.Sprintf("%d times", n)
}

// scoreCalled scores a called check: at least one call of the tool whose
// arguments hold the check's, or exactly count of them. Evidence: the
// matching calls; none, the tool's other calls; none, the tools called.
func scoreCalled(c agentd.Check, calls []Call) agentd.Score {
	named, matched, err := callsOf(calls, c.Tool, c.Arguments)
	if err != nil {
		return failed(fmt.Sprintf("the check's arguments are not JSON: %v", err))
	}
	ev := callEvidence(matched)
	switch {
	case len(matched) == 0 && len(named) > 0:
		ev = callEvidence(named)
	case len(matched) == 0:
		ev = []agentd.ScoreEvidence{toolsCalled(calls)}
	}
	n := len(matched)
	if c.Count != nil {
		if n == *c.Count {
			return verdict(true, fmt.Sprintf("%s was called exactly %s", what(c), times(n)), ev...)
		}
		return failed(fmt.Sprintf("%s was called %s, not %d", what(c), times(n), *c.Count), ev...)
	}
	switch {
	case n > 0:
		return verdict(true, fmt.Sprintf("%s was called %s", what(c), times(n)), ev...)
	case len(named) > 0:
		return failed(fmt.Sprintf("%s was called %s, never with arguments holding %s",
			c.Tool, times(len(named)), compact(c.Arguments)), ev...)
	}
	return failed(fmt.Sprintf("%s was not called", c.Tool), ev...)
}

// scoreNotCalled scores a not_called check: no call of the tool has
// arguments that hold the check's. Evidence: the calls that do; none, the
// tool's other calls; none, the tools called.
func scoreNotCalled(c agentd.Check, calls []Call) agentd.Score {
	named, matched, err := callsOf(calls, c.Tool, c.Arguments)
	if err != nil {
		return failed(fmt.Sprintf("the check's arguments are not JSON: %v", err))
	}
	if len(matched) > 0 {
		return failed(fmt.Sprintf("%s was called %s", what(c), times(len(matched))), callEvidence(matched)...)
	}
	if len(named) > 0 {
		return verdict(true, fmt.Sprintf("%s was called %s, never with arguments holding %s",
			c.Tool, times(len(named)), compact(c.Arguments)), callEvidence(named)...)
	}
	return verdict(true, fmt.Sprintf("%s was not called", c.Tool), toolsCalled(calls))
}
