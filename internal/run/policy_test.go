package run_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// rewriter is a Go hook: it sends calculator "1+1" as "2+2", then the JSON
// policies decide.
type rewriter struct{ tools.Policies }

func (h rewriter) Before(ctx context.Context, c tools.HookCall) (tools.Verdict, error) {
	if c.Tool == "calculator" && strings.Contains(string(c.Arguments), "1+1") {
		return tools.Verdict{Action: tools.PolicyAllow, Policy: "rewriter", Arguments: json.RawMessage(`{"expression":"2+2"}`)}, nil
	}
	return h.Policies.Before(ctx, c)
}

// TestPolicyHooks: the operator's policies deny a call (the model is told
// why, the tool is not called), make one wait for approval, redact a
// result before it is kept; a Go hook rewrites arguments; every decision
// is on the call and its event.
func TestPolicyHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ps, err := tools.ParsePolicies([]byte(`{"policies": [
		{"tool": "calculator", "arguments": {"/expression": "*7*"}, "action": "deny", "reason": "no sevens here"},
		{"tool": "calculator", "arguments": {"/expression": "3*3"}, "action": "allow", "redact": ["/result"]},
		{"tool": "effect", "action": "require_approval"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	effect, _ := b.reg.Get("effect")
	reg, err := tools.NewRegistry(tools.Calculator(), effect)
	if err != nil {
		t.Fatal(err)
	}
	reg.SetHook(rewriter{ps})
	b.start(t, run.Config{Tools: reg, Workers: 2})
	ctx := context.Background()

	r := b.wait(t, b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/call calculator {\"expression\":\"3*3\"}\n/call calculator {\"expression\":\"1+1\"}\n/say done", agentd.RunParams{}).ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s: %s", r.Status, r.Error)
	}
	steps, err := b.store.StepsList(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	calls := steps[0].Calls
	var denied struct{ Kind, Message string }
	json.Unmarshal(calls[0].Error, &denied)
	var decisions [3]tools.Verdict
	for i := range decisions {
		json.Unmarshal(calls[i].Policy, &decisions[i])
	}
	if calls[0].Status != agentd.CallFailed || calls[0].ToolCall.Attempts != 0 || denied.Kind != "policy" || denied.Message != "no sevens here" ||
		decisions[0].Action != tools.PolicyDeny || decisions[0].Policy != "policies[0]" {
		t.Fatalf("the denied call: %s %d %s %s", calls[0].Status, calls[0].ToolCall.Attempts, calls[0].Error, calls[0].Policy)
	}
	if calls[1].Status != agentd.CallSucceeded || string(calls[1].Result) != `{"result": "[redacted]"}` {
		t.Fatalf("the redacted call: %s %s", calls[1].Status, calls[1].Result)
	}
	if calls[2].Status != agentd.CallSucceeded || !strings.Contains(string(calls[2].Result), "4") ||
		!strings.Contains(string(calls[2].Arguments), "2+2") || !decisions[2].Rewritten || decisions[1].Policy != "policies[1]" {
		t.Fatalf("the rewritten call: %s %s %s", calls[2].Arguments, calls[2].Result, calls[2].Policy)
	}
	// The model was told of the denial.
	msgs, _ := b.store.MessagesList(ctx, r.ConversationID, 0, 100)
	told := false
	for _, m := range msgs {
		told = told || (m.Role == agentd.RoleTool && strings.Contains(m.Content[0].Content, "no sevens here"))
	}
	if !told {
		t.Fatal("the model was not told why the call was denied")
	}
	created := 0
	for _, e := range b.events(t, r.ID) {
		if e.Type == "tool_call.created" && strings.Contains(string(e.Data), `"policy":{"action":"deny"`) {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d tool_call.created events carry the denial", created)
	}

	w := b.wait(t, b.create(t, "/call effect {}\n/say done", agentd.RunParams{}).ID, nil)
	var action struct{ Type string }
	json.Unmarshal(w.RequiredAction, &action)
	if w.Status != agentd.StatusRequiresAction || action.Type != string(agentd.ActionToolApproval) || b.sink.Count("/ok") != 0 {
		t.Fatalf("the call a policy holds: run %s, action %s, the tool ran %d times", w.Status, action.Type, b.sink.Count("/ok"))
	}
}
