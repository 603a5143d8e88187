package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/vocab"
)

func TestReconcilerDecidesUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call reconciled_effect {}\n/say done", persist.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != vocab.StatusCompleted {
		t.Fatalf("run ended %s/%s", r.Status, r.TerminalReason)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	c := steps[0].Calls[0]
	if c.Status != vocab.CallSucceeded || !strings.Contains(string(c.Result), "reconciled") || len(c.Attempts) != 1 || c.Attempts[0].Status != vocab.AttemptUnknown {
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
	for _, decision := range []vocab.Decision{vocab.DecisionRetry, vocab.DecisionResult, vocab.DecisionFail} {
		r := b.create(t, "/call retry_effect {}\n/say done", persist.RunParams{})
		r = b.wait(t, r.ID, nil)
		if r.Status != vocab.StatusRequiresAction {
			t.Fatalf("run ended %s, want requires_action", r.Status)
		}
		var action struct {
			ToolCallID string `json:"tool_call_id"`
		}
		json.Unmarshal(r.RequiredAction, &action)
		if _, err := b.store.RunResolveAction(ctx, persist.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: persist.NewID(), Decision: decision}); !errors.Is(err, persist.ErrActionMismatch) {
			t.Fatalf("resolving another call: %v", err)
		}
		if _, err := b.store.RunResolveAction(ctx, persist.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: decision, Result: json.RawMessage(`{"done":"by hand"}`)}); err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, r.ID, func(r persist.Run) bool {
			return r.Status == vocab.StatusCompleted || r.Status == vocab.StatusFailed
		})
		if r.Status != vocab.StatusCompleted {
			t.Fatalf("%s: run ended %s/%s", decision, r.Status, r.TerminalReason)
		}
		steps, _ := b.store.StepsList(ctx, r.ID)
		c := steps[0].Calls[0]
		want := map[vocab.Decision]vocab.CallStatus{vocab.DecisionRetry: vocab.CallSucceeded, vocab.DecisionResult: vocab.CallSucceeded,
			vocab.DecisionFail: vocab.CallFailed}[decision]
		attempts := map[vocab.Decision]int{vocab.DecisionRetry: 2, vocab.DecisionResult: 1, vocab.DecisionFail: 1}[decision]
		if c.Status != want || len(c.Attempts) != attempts {
			t.Fatalf("%s: call %s with %d attempts", decision, c.Status, len(c.Attempts))
		}
		if _, err := b.store.RunResolveAction(ctx, persist.ActionParams{TenantID: "default", RunID: r.ID,
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
	for _, decision := range []vocab.Decision{vocab.DecisionApprove, vocab.DecisionReject} {
		r := b.create(t, "/call guarded {}\n/call calculator {\"expression\":\"1+1\"}\n/say done", persist.RunParams{})
		r = b.wait(t, r.ID, nil)
		var action event.RequiredAction
		json.Unmarshal(r.RequiredAction, &action)
		if r.Status != vocab.StatusRequiresAction || action.Type != vocab.ActionToolApproval {
			t.Fatalf("run is %s with %s, want requires_action tool_approval", r.Status, r.RequiredAction)
		}
		steps, _ := b.store.StepsList(ctx, r.ID)
		if steps[0].Calls[1].Status != vocab.CallSucceeded || steps[0].Calls[0].Status != vocab.CallAwaitingApproval {
			t.Fatalf("before the decision: %s and %s", steps[0].Calls[0].Status, steps[0].Calls[1].Status)
		}
		var de *persist.DecisionError
		if _, err := b.store.RunResolveAction(ctx, persist.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: vocab.DecisionRetry}); !errors.As(err, &de) || de.Asks != vocab.ActionToolApproval {
			t.Fatalf("retry of an approval: %v", err)
		}
		if _, err := b.store.RunResolveAction(ctx, persist.ActionParams{TenantID: "default", RunID: r.ID,
			ToolCallID: action.ToolCallID, Decision: decision, Message: "not today"}); err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, r.ID, func(r persist.Run) bool { return r.Status.Terminal() })
		if r.Status != vocab.StatusCompleted {
			t.Fatalf("%s: run ended %s", decision, r.Status)
		}
		steps, _ = b.store.StepsList(ctx, r.ID)
		want := map[vocab.Decision]vocab.CallStatus{vocab.DecisionApprove: vocab.CallSucceeded, vocab.DecisionReject: vocab.CallRejected}[decision]
		if c := steps[0].Calls[0]; c.Status != want {
			t.Fatalf("%s: guarded call is %s, want %s", decision, c.Status, want)
		}
	}
	// Only the approved call reached the tool.
	if reqs, keys := b.sink.Count("/guarded"), len(b.sink.Keys("/guarded")); reqs != 1 || keys != 1 {
		t.Fatalf("guarded tool called %d times with %d keys, want once", reqs, keys)
	}
}
