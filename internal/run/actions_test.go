package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

func TestReconcilerDecidesUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call reconciled_effect {}\n/say done", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s", r.Status, r.TerminalReason)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	c := steps[0].Calls[0]
	if c.Status != agentd.CallSucceeded || !strings.Contains(string(c.Result), "reconciled") || len(c.Attempts) != 1 || c.Attempts[0].Status != agentd.AttemptUnknown {
		t.Fatalf("call %s result %s, %d attempts", c.Status, c.Result, len(c.Attempts))
	}
	if reqs := b.sink.Count("/slow"); reqs != 1 {
		t.Fatalf("effect called %d times", reqs)
	}
	if reqs := b.sink.Count("/reconcile"); reqs != 1 {
		t.Fatalf("reconciler called %d times", reqs)
	}
}

func TestClientResolvesUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	ctx := context.Background()
	for _, decision := range []agentd.Decision{agentd.DecisionRetry, agentd.DecisionResult, agentd.DecisionFail} {
		r := b.create(t, "/call retry_effect {}\n/say done", agentd.RunParams{})
		r = b.wait(t, r.ID, nil)
		if r.Status != agentd.StatusRequiresAction {
			t.Fatalf("run ended %s, want requires_action", r.Status)
		}
		var action struct {
			ToolCallID string `json:"tool_call_id"`
		}
		json.Unmarshal(r.RequiredAction, &action)
		if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: agentd.NewID(), Decision: decision}); !errors.Is(err, agentd.ErrActionMismatch) {
			t.Fatalf("resolving another call: %v", err)
		}
		if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: decision, Result: json.RawMessage(`{"done":"by hand"}`)}); err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, r.ID, func(r agentd.Run) bool {
			return r.Status == agentd.StatusCompleted || r.Status == agentd.StatusFailed
		})
		if r.Status != agentd.StatusCompleted {
			t.Fatalf("%s: run ended %s/%s", decision, r.Status, r.TerminalReason)
		}
		steps, _ := b.store.StepsList(ctx, r.ID)
		c := steps[0].Calls[0]
		want := map[agentd.Decision]agentd.CallStatus{agentd.DecisionRetry: agentd.CallSucceeded, agentd.DecisionResult: agentd.CallSucceeded,
			agentd.DecisionFail: agentd.CallFailed}[decision]
		attempts := map[agentd.Decision]int{agentd.DecisionRetry: 2, agentd.DecisionResult: 1, agentd.DecisionFail: 1}[decision]
		if c.Status != want || len(c.Attempts) != attempts {
			t.Fatalf("%s: call %s with %d attempts", decision, c.Status, len(c.Attempts))
		}
		if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: decision}); err == nil {
			t.Fatalf("%s: resolving a finished run succeeded", decision)
		}
	}
	// Only the explicit retry sent the key a second time.
	if reqs, keys := b.sink.Count("/block"), len(b.sink.Keys("/block")); reqs != 4 || keys != 3 {
		t.Fatalf("sink saw %d requests with %d keys, want 4 and 3", reqs, keys)
	}
}

func TestApprovalGatesTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	ctx := context.Background()
	for _, decision := range []agentd.Decision{agentd.DecisionApprove, agentd.DecisionReject} {
		r := b.create(t, "/call guarded {}\n/call calculator {\"expression\":\"1+1\"}\n/say done", agentd.RunParams{})
		r = b.wait(t, r.ID, nil)
		var action agentd.RequiredAction
		json.Unmarshal(r.RequiredAction, &action)
		if r.Status != agentd.StatusRequiresAction || action.Type != agentd.ActionToolApproval {
			t.Fatalf("run is %s with %s, want requires_action tool_approval", r.Status, r.RequiredAction)
		}
		steps, _ := b.store.StepsList(ctx, r.ID)
		if steps[0].Calls[1].Status != agentd.CallSucceeded || steps[0].Calls[0].Status != agentd.CallAwaitingApproval {
			t.Fatalf("before the decision: %s and %s", steps[0].Calls[0].Status, steps[0].Calls[1].Status)
		}
		var de *agentd.DecisionError
		if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: agentd.DecisionRetry}); !errors.As(err, &de) || de.Asks != agentd.ActionToolApproval {
			t.Fatalf("retry of an approval: %v", err)
		}
		if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: decision, Message: "not today"}); err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
		if r.Status != agentd.StatusCompleted {
			t.Fatalf("%s: run ended %s", decision, r.Status)
		}
		steps, _ = b.store.StepsList(ctx, r.ID)
		want := map[agentd.Decision]agentd.CallStatus{agentd.DecisionApprove: agentd.CallSucceeded, agentd.DecisionReject: agentd.CallRejected}[decision]
		if c := steps[0].Calls[0]; c.Status != want {
			t.Fatalf("%s: guarded call is %s, want %s", decision, c.Status, want)
		}
	}
	// Only the approved call reached the tool.
	if reqs, keys := b.sink.Count("/guarded"), len(b.sink.Keys("/guarded")); reqs != 1 || keys != 1 {
		t.Fatalf("guarded tool called %d times with %d keys, want once", reqs, keys)
	}
}
