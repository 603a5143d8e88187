package runspec_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// TestOverAnAgent: a run's fields replace its agent's where it gives them
// (tools and metadata whole, sampling and timeouts field by field), the
// agent's stand where it does not, and the builder's ceilings apply to the
// result.
func TestOverAnAgent(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	agent := runspec.Request{Model: ptr("agent-model"), Instructions: ptr("Be {{tone}}."), Tools: ptr([]string{"calculator"}),
		MaxSteps: ptr(4), Metadata: json.RawMessage(`{"from":"agent"}`),
		Sampling: &runspec.Sampling{Temperature: ptr(0.5), TopP: ptr(0.9)},
		Timeouts: &runspec.Timeouts{StepMS: ptr(int64(1000)), ToolMS: ptr(int64(2000))}}
	ref := &agentd.AgentRef{Name: "a", Version: 3}
	over := runspec.Over(agent, runspec.Request{Input: user("hi"), InputText: true, MaxSteps: ptr(2),
		Sampling: &runspec.Sampling{Temperature: ptr(1.0)}, Timeouts: &runspec.Timeouts{ToolMS: ptr(int64(3000))},
		Variables: map[string]string{"tone": "brief", "unused": "x"}})
	over.Agent = ref
	spec, err := b.Build(over)
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Params
	if spec.Model != "agent-model" || p.Instructions != "Be brief." || !slices.Equal(p.Tools, []string{"calculator"}) ||
		p.MaxSteps != 2 || string(p.Metadata) != `{"from":"agent"}` || p.Agent != ref {
		t.Fatalf("spec %+v", spec)
	}
	if *p.Sampling.Temperature != 1.0 || *p.Sampling.TopP != 0.9 || p.Timeouts.StepMS != 1000 || p.Timeouts.ToolMS != 3000 {
		t.Fatalf("sampling %+v, timeouts %+v", p.Sampling, p.Timeouts)
	}
	// The agent's max_steps above the server's ceiling is refused, as a
	// run's own would be.
	agent.MaxSteps = ptr(runspec.DefaultMaxStepsLimit + 1)
	_, err = b.Build(runspec.Over(agent, runspec.Request{Input: user("hi"), InputText: true, Variables: map[string]string{"tone": "x"}}))
	var fe *runspec.FieldError
	if !errors.As(err, &fe) || fe.Field != "max_steps" {
		t.Fatalf("an agent's max_steps past the ceiling: %v", err)
	}
}

// TestVariables: {{name}} placeholders (spaces inside the braces allowed)
// are filled from the variables, a value's own braces are left as they
// are, and a missing variable, a bad name or too many are refused, naming
// the field. A run that neither gives variables nor starts from an agent
// keeps its instructions as they are.
func TestVariables(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	build := func(instr string, vars map[string]string) (string, error) {
		spec, err := b.Build(runspec.Request{Input: user("hi"), InputText: true, Instructions: &instr, Variables: vars})
		return spec.Params.Instructions, err
	}
	if got, err := build("Hi {{ who }}, {{who}}: {{what}}.", map[string]string{"who": "Ann", "what": "{{who}}"}); err != nil ||
		got != "Hi Ann, Ann: {{who}}." {
		t.Fatalf("filled %q, %v", got, err)
	}
	if got, err := build("Keep {{this}}.", nil); err != nil || got != "Keep {{this}}." {
		t.Fatalf("without variables: %q, %v", got, err)
	}
	if got := runspec.Placeholders("{{a}} {{ b }} {{a}} {{1x}}"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("placeholders %v", got)
	}
	many := map[string]string{}
	for i := range runspec.MaxVariables + 1 {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	for _, c := range []struct {
		vars  map[string]string
		field string
	}{
		{map[string]string{}, "variables.who"},
		{map[string]string{"who": "x", "not a name": "y"}, "variables"},
		{map[string]string{"who": "nul\x00"}, "variables.who"},
		{many, "variables"},
	} {
		_, err := build("Hi {{who}}", c.vars)
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("variables %d: %v, want a refusal of %s", len(c.vars), err, c.field)
		}
	}
}

// TestRequestOfRebuildsTheRun: the request RequestOf gives back builds the
// same parameters as the request a run was built from, sampling, client
// tools, timeouts and loop limits included.
func TestRequestOfRebuildsTheRun(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	req := runspec.Request{Input: user("hi"), InputText: true, Model: ptr("x"), Instructions: ptr("be brief"),
		Tools: ptr([]string{"calculator"}), MaxSteps: ptr(7), CompactAt: ptr(0.5), CompactThreshold: ptr(3000), IfBusy: ptr("enqueue"), OnDisconnect: ptr("interrupt"),
		ClientTools: &[]runspec.ClientTool{{Name: ptr("ask"), Description: ptr("asks"), Parameters: json.RawMessage(`{"type":"object"}`)}},
		Timeouts:    &runspec.Timeouts{StepMS: ptr(int64(5000))}, LoopLimits: &runspec.LoopLimits{IdenticalCalls: ptr(9)},
		Sampling: &runspec.Sampling{MaxOutputTokens: ptr(100), Temperature: ptr(0.3), ParallelToolCalls: ptr(false),
			ToolChoice: &agentd.ToolChoice{Mode: agentd.ToolChoiceTool, Name: "calculator"},
			Format:     &runspec.OutputFormat{Type: ptr("json_schema"), Name: ptr("a"), Schema: json.RawMessage(`{"type":"object"}`)}},
		Metadata: json.RawMessage(`{"k":"v"}`)}
	first, err := b.Build(req)
	if err != nil {
		t.Fatal(err)
	}
	again := runspec.RequestOf(first.Model, first.Params)
	again.Input, again.InputText = user("hi"), true
	second, err := b.Build(again)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(first)
	c, _ := json.Marshal(second)
	if string(a) != string(c) {
		t.Fatalf("rebuilt\n%s\nwant\n%s", c, a)
	}
}
