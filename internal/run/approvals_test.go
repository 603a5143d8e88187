package run_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// TestApprovalsCarried: a run that ends at its client's calls
// (ClientToolsEnd) ends at a call that needs an approval, having made the
// step's other calls and given their results; the next run of the
// conversation brings the decisions, takes the decided calls over in its
// first step, makes the approved one once (with its key) and gives the
// model the rejection of the other; a decision on a call that no longer
// waits is refused.
func TestApprovalsCarried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, runConfig())
	ctx := context.Background()
	ends := agentd.RunParams{MaxSteps: 10, ClientToolsEnd: true, ApprovalTools: []string{"effect"}}
	a := b.create(t, "/call calculator {\"expression\":\"2+3\"}\n/call guarded {}\n/call effect {}\n/say done", ends)
	a = b.wait(t, a.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if a.Status != agentd.StatusCompleted || a.TerminalReason != agentd.ReasonClientToolCalls {
		t.Fatalf("the first run ended %s/%s, want completed/client_tool_calls", a.Status, a.TerminalReason)
	}
	steps, err := b.store.StepsList(ctx, a.ID)
	if err != nil || len(steps) != 1 || len(steps[0].Calls) != 3 {
		t.Fatalf("the first run's steps: %+v (%v)", steps, err)
	}
	waiting := map[string]string{}
	for _, c := range steps[0].Calls {
		want := agentd.CallAwaitingApproval // guarded by its operator, effect by the run
		if c.Name == "calculator" {
			want = agentd.CallSucceeded
		}
		if c.Status != want {
			t.Fatalf("call %s is %s, want %s", c.Name, c.Status, want)
		}
		if want == agentd.CallAwaitingApproval {
			waiting[c.Name] = c.ID
		}
	}
	if b.sink.Count("/guarded")+b.sink.Count("/ok") != 0 {
		t.Fatal("a call that waits for its approval was made")
	}

	create := func(ds ...agentd.ApprovalDecision) (agentd.Run, error) {
		r, _, err := b.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake", ConversationID: a.ConversationID,
			Params: agentd.RunParams{MaxSteps: 10, ClientToolsEnd: true, Approvals: ds}})
		return r, err
	}
	var perr *agentd.PendingCallsError
	if _, err := create(agentd.ApprovalDecision{ToolCallID: waiting["guarded"], Approve: true}); !errors.As(err, &perr) ||
		len(perr.MissingApprovals) != 1 || perr.MissingApprovals[0] != waiting["effect"] {
		t.Fatalf("one decision of two: %v", err)
	}
	r, err := create(agentd.ApprovalDecision{ToolCallID: waiting["effect"], Approve: false, Reason: "not this one"},
		agentd.ApprovalDecision{ToolCallID: waiting["guarded"], Approve: true})
	if err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonCompleted {
		t.Fatalf("the second run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	if b.sink.Count("/guarded") != 1 || b.sink.Count("/ok") != 0 {
		t.Fatalf("the approved call was made %d times, the rejected one %d", b.sink.Count("/guarded"), b.sink.Count("/ok"))
	}
	if keys := b.sink.Keys("/guarded"); len(keys) != 1 {
		t.Fatalf("idempotency keys of the approved call: %v", keys)
	}
	steps, err = b.store.StepsList(ctx, r.ID)
	if err != nil || len(steps) != 2 || len(steps[0].Calls) != 2 {
		t.Fatalf("the second run's steps: %+v (%v)", steps, err)
	}
	for _, c := range steps[0].Calls {
		want := map[string]agentd.CallStatus{"guarded": agentd.CallSucceeded, "effect": agentd.CallRejected}[c.Name]
		if c.Status != want || c.ID != waiting[c.Name] {
			t.Fatalf("the second run's call %s (%s) is %s, want %s", c.Name, c.ID, c.Status, want)
		}
	}
	if old, _ := b.store.StepsList(ctx, a.ID); len(old[0].Calls) != 1 || old[0].Calls[0].Name != "calculator" {
		t.Fatalf("the first run's step keeps %+v", old[0].Calls)
	}
	// The conversation: the model's calls, then one result each, in the
	// order of the calls' runs, then the answer.
	msgs, err := b.store.MessagesList(ctx, a.ConversationID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		switch m.Role {
		case agentd.RoleTool:
			got = append(got, "tool:"+m.Content[0].ToolCallID)
		default:
			got = append(got, string(m.Role))
		}
	}
	calls := map[string]string{}
	for _, c := range steps[0].Calls {
		calls[c.Name] = c.CallID
	}
	want := "user assistant tool:" + callIDOf(t, a, b, "calculator") + " tool:" + calls["guarded"] + " tool:" + calls["effect"] + " assistant"
	if strings.Join(got, " ") != want {
		t.Fatalf("messages\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	last := msgs[len(msgs)-2]
	if !strings.Contains(last.Content[0].Content, "not this one") {
		t.Fatalf("the rejection the model got: %+v", last.Content)
	}
	if _, err := create(agentd.ApprovalDecision{ToolCallID: waiting["guarded"], Approve: true}); !errors.As(err, &perr) ||
		len(perr.UnknownApprovals) != 1 {
		t.Fatalf("a decision on a call that no longer waits: %v", err)
	}
}

// callIDOf is the model's call id of the first run's call of tool name.
func callIDOf(t *testing.T, a agentd.Run, b *bundle, name string) string {
	t.Helper()
	steps, err := b.store.StepsList(context.Background(), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range steps[0].Calls {
		if c.Name == name {
			return c.CallID
		}
	}
	t.Fatalf("the first run has no call of %s", name)
	return ""
}
