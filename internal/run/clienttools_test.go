package run_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
)

// TestClientTools: the model's calls of a run's client tools wait, all of
// the step's together, for the client's outputs, across a restart of the
// engine; the server's own calls of the step run first; the outputs go to
// the model and the run continues.
func TestClientTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.start(t, runConfig())
	ctx := context.Background()
	params := agentd.RunParams{MaxSteps: 10, ClientTools: []agentd.ClientTool{
		{Name: "pick_color", Description: "ask the user", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "read_gps", Description: "where the device is", Parameters: json.RawMessage(`{"type":"object"}`)},
	}}
	r := b.create(t, "/call pick_color {\"hint\":\"warm\"}\n/call calculator {\"expression\":\"2+3\"}\n/call read_gps {}\n/say done", params)
	r = b.wait(t, r.ID, nil)
	var action agentd.RequiredAction
	if err := json.Unmarshal(r.RequiredAction, &action); err != nil || r.Status != agentd.StatusRequiresAction ||
		action.Type != agentd.ActionClientToolCalls || len(action.Calls) != 2 {
		t.Fatalf("run %s, required action %s", r.Status, r.RequiredAction)
	}
	if action.Calls[0].Name != "pick_color" || action.Calls[1].Name != "read_gps" || string(action.Calls[0].Arguments) != `{"hint": "warm"}` && string(action.Calls[0].Arguments) != `{"hint":"warm"}` {
		t.Fatalf("calls %+v", action.Calls)
	}
	steps, _ := b.store.StepsList(ctx, r.ID)
	for _, c := range steps[0].Calls {
		want := agentd.CallAwaitingClient
		if c.Name == "calculator" {
			want = agentd.CallSucceeded // the server's call ran
		}
		if c.Status != want {
			t.Fatalf("call %s is %s, want %s", c.Name, c.Status, want)
		}
	}
	// The engine stops; another answers the run once the outputs are in.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	first.Stop(sctx)
	cancel()
	b.start(t, runConfig())
	if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
		Decision: agentd.DecisionOutputs, Outputs: []agentd.ToolOutput{{ToolCallID: action.Calls[0].ToolCallID}}}); err == nil {
		t.Fatal("one output of two was taken")
	}
	if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID, Decision: agentd.DecisionOutputs,
		Outputs: []agentd.ToolOutput{
			{ToolCallID: action.Calls[1].ToolCallID, Error: "no GPS on this device"},
			{ToolCallID: action.Calls[0].ToolCallID, Output: json.RawMessage(`{"color":"amber"}`)},
		}}); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	// The model was sent the outputs.
	msgs, err := b.store.MessagesList(ctx, r.ConversationID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, m := range msgs {
		if m.Role == agentd.RoleTool {
			tools = append(tools, m.Content[0].Content)
		}
	}
	if got := strings.Join(tools, " | "); !strings.Contains(got, `"amber"`) || !strings.Contains(got, "no GPS on this device") {
		t.Fatalf("tool messages: %s", got)
	}
	// Arguments the client tool's schema refuses go back to the model.
	strict := agentd.RunParams{MaxSteps: 5, ClientTools: []agentd.ClientTool{{Name: "pick_color",
		Parameters: json.RawMessage(`{"type":"object","properties":{"hint":{"type":"string"}},"required":["hint"]}`)}}}
	r = b.wait(t, b.create(t, "/call pick_color {}\n/say done", strict).ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	steps, _ = b.store.StepsList(ctx, r.ID)
	if c := steps[0].Calls[0]; r.Status != agentd.StatusCompleted || c.Status != agentd.CallFailed || !strings.Contains(string(c.Error), "missing property") {
		t.Fatalf("a client call with bad arguments: run %s, call %s %s", r.Status, c.Status, c.Error)
	}
}

func runConfig() run.Config {
	return run.Config{LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond, Workers: 2}
}
