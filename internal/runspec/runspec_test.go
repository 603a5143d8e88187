package runspec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

func ptr[T any](v T) *T { return &v }

func user(text string) []agentd.InputMessage {
	return []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}
}

func builder(t *testing.T, d runspec.Defaults) *runspec.Builder {
	t.Helper()
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	return runspec.New(d, reg)
}

// TestDefaultsAndCeilings: what a request leaves out takes the server's
// defaults, a default above its ceiling is lowered to it, and a 0 asks for
// the ceiling.
func TestDefaultsAndCeilings(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m", Timeouts: agentd.Timeouts{StepMS: 5_000_000}})
	spec, err := b.Build(runspec.Request{Input: user("hi"), InputText: true})
	if err != nil {
		t.Fatal(err)
	}
	want := agentd.Timeouts{TotalMS: runspec.DefaultTotalMS, StepMS: runspec.DefaultMaxStepMS, IdleMS: runspec.DefaultIdleMS,
		ToolMS: runspec.DefaultToolMS, ActionMS: runspec.DefaultActionMS}
	if spec.Model != "m" || spec.Params.MaxSteps != runspec.DefaultMaxSteps || spec.Params.Timeouts != want ||
		spec.Params.IfBusy != agentd.IfBusyReject || spec.Params.OnDisconnect != agentd.OnDisconnectContinue ||
		spec.OnQuota != agentd.OnQuotaQueue || spec.Params.Tools != nil || spec.Params.LoopLimits != (agentd.LoopLimits{}.OrDefaults()) {
		t.Fatalf("spec %+v", spec)
	}
	spec, err = b.Build(runspec.Request{Input: user("hi"), Timeouts: &runspec.Timeouts{TotalMS: ptr[int64](0), ToolMS: ptr[int64](7)},
		Tools: &[]string{"calculator", "calculator"}, IfBusy: ptr("enqueue"), OnQuota: ptr("reject"),
		Metadata: json.RawMessage(` { "a" : 1 } `)})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Params.Timeouts.TotalMS != runspec.DefaultMaxTotalMS || spec.Params.Timeouts.ToolMS != 7 ||
		len(spec.Params.Tools) != 1 || spec.Params.IfBusy != agentd.IfBusyEnqueue || spec.OnQuota != agentd.OnQuotaReject ||
		string(spec.Params.Metadata) != `{"a":1}` {
		t.Fatalf("spec %+v", spec)
	}
}

// TestRefusalsNameTheField: every refusal is a *FieldError naming the
// field as the request's JSON does, or an *UnknownToolError.
func TestRefusalsNameTheField(t *testing.T) {
	b := builder(t, runspec.Defaults{})
	many := make([]agentd.InputMessage, runspec.MaxInputMessages+1)
	for i := range many {
		many[i] = agentd.InputMessage{Role: agentd.RoleUser, Content: "x"}
	}
	for _, c := range []struct {
		name  string
		req   runspec.Request
		field string
	}{
		{"no input", runspec.Request{Model: ptr("m")}, "input"},
		{"blank text", runspec.Request{Model: ptr("m"), Input: user("  "), InputText: true}, "input"},
		{"NUL in text", runspec.Request{Model: ptr("m"), Input: user("a\x00b"), InputText: true}, "input"},
		{"too many", runspec.Request{Model: ptr("m"), Input: many}, "input"},
		{"bad role", runspec.Request{Model: ptr("m"), Input: []agentd.InputMessage{{Role: "tool", Content: "x"}}}, "input[0].role"},
		{"empty content", runspec.Request{Model: ptr("m"), Input: []agentd.InputMessage{{Role: "user", Content: "a"}, {Role: "user"}}}, "input[1].content"},
		{"no default model", runspec.Request{Input: user("x")}, "model"},
		{"long model", runspec.Request{Model: ptr(strings.Repeat("m", 257)), Input: user("x")}, "model"},
		{"max_steps", runspec.Request{Model: ptr("m"), Input: user("x"), MaxSteps: ptr(101)}, "max_steps"},
		{"step timeout", runspec.Request{Model: ptr("m"), Input: user("x"), Timeouts: &runspec.Timeouts{StepMS: ptr[int64](-1)}}, "timeouts.step_ms"},
		{"if_busy", runspec.Request{Model: ptr("m"), Input: user("x"), IfBusy: ptr("wait")}, "if_busy"},
		{"compact_at", runspec.Request{Model: ptr("m"), Input: user("x"), CompactAt: ptr(1.0)}, "compact_at"},
		{"compact_threshold", runspec.Request{Model: ptr("m"), Input: user("x"), CompactThreshold: ptr(0)}, "compact_threshold"},
		{"huge compact_threshold", runspec.Request{Model: ptr("m"), Input: user("x"), CompactThreshold: ptr(runspec.MaxCompactThreshold + 1)}, "compact_threshold"},
		{"loop limit", runspec.Request{Model: ptr("m"), Input: user("x"), LoopLimits: &runspec.LoopLimits{IdenticalCalls: ptr(0)}}, "loop_limits.identical_calls"},
		{"metadata", runspec.Request{Model: ptr("m"), Input: user("x"), Metadata: json.RawMessage(`[1]`)}, "metadata"},
		{"client tool named as a server tool", runspec.Request{Model: ptr("m"), Input: user("x"),
			ClientTools: &[]runspec.ClientTool{{Name: ptr("calculator")}}}, "client_tools[0].name"},
		{"client tool parameters", runspec.Request{Model: ptr("m"), Input: user("x"),
			ClientTools: &[]runspec.ClientTool{{Name: ptr("ask"), Parameters: json.RawMessage(`{"type":"string"}`)}}}, "client_tools[0].parameters"},
	} {
		_, err := b.Build(c.req)
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.name, err, c.field)
		}
	}
	_, err := b.Build(runspec.Request{Model: ptr("m"), Input: user("x"), Tools: &[]string{"calculator", "rm_rf"}})
	var ut *runspec.UnknownToolError
	if !errors.As(err, &ut) || ut.Tool != "rm_rf" {
		t.Fatalf("err %v, want the unknown tool rm_rf", err)
	}
}

// TestInputCallsAndOutputs: calls a client sends back with its history are
// each followed by their output, before the next message; outputs first in
// the input answer what the conversation waits for (the store checks
// that); any other output answers nothing and is refused.
func TestInputCallsAndOutputs(t *testing.T) {
	t.Parallel()
	b := builder(t, runspec.Defaults{Model: "m"})
	u := agentd.InputMessage{Role: agentd.RoleUser, Content: "q"}
	call := agentd.InputMessage{Role: agentd.RoleAssistant, ToolCalls: []agentd.InputCall{{ID: "c1", Name: "weather", Arguments: `{}`}}}
	out := func(id string) agentd.InputMessage {
		return agentd.InputMessage{Role: agentd.RoleTool, ToolCallID: id, Content: "sunny"}
	}
	for _, c := range []struct {
		name  string
		input []agentd.InputMessage
		field string // "" when accepted
	}{
		{"a call and its output", []agentd.InputMessage{u, call, out("c1"), u}, ""},
		{"outputs first", []agentd.InputMessage{out("c0"), u}, ""},
		{"a message before the output", []agentd.InputMessage{u, call, u, out("c1")}, "input[2]"},
		{"no output", []agentd.InputMessage{u, call}, "input"},
		{"an output of nothing", []agentd.InputMessage{u, out("c9")}, "input[1].call_id"},
		{"bad arguments", []agentd.InputMessage{u, {Role: agentd.RoleAssistant,
			ToolCalls: []agentd.InputCall{{ID: "c1", Name: "w", Arguments: "{"}}}, out("c1")}, "input[1].tool_calls[0].arguments"},
		{"calls of a user", []agentd.InputMessage{{Role: agentd.RoleUser, Content: "q", ToolCalls: call.ToolCalls}}, "input[0]"},
	} {
		_, err := b.Build(runspec.Request{Input: c.input})
		var fe *runspec.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: %v, want an error about %s", c.name, err, c.field)
		}
	}
}
