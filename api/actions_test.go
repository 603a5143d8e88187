package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// waitingRun makes a run that waits for a decision on a side-effect call, as
// the engine leaves one, and returns it with the call's id.
func waitingRun(t *testing.T, b *bundle) (runID, callID string) {
	t.Helper()
	ctx := context.Background()
	created := b.createRun(`{"input":"charge the card"}`)
	c, err := b.store.RunClaim(ctx, "w", time.Minute)
	if err != nil || c.ID != created.ID {
		t.Fatalf("claim: %v", err)
	}
	f := persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}
	stepID, callID := agentd.NewID(), agentd.NewID()
	_, err = b.store.Exec(ctx, f, nil,
		persist.StepInsert{ID: stepID, RunID: c.ID, Seq: 1},
		persist.ToolCallInsert{ID: callID, RunID: c.ID, StepID: stepID, CallID: "call_1", Name: "charge",
			Arguments: json.RawMessage(`{}`), IdempotencyKey: c.ID + ":1:call_1", Effect: "side_effect"},
		persist.ToolCallFinish{ID: callID, Status: agentd.CallUnknown},
		persist.LedgerInsert{TenantID: c.TenantID, RunID: c.ID, StepID: stepID, StepSeq: 1, N: 1, Kind: agentd.ModelCallStep,
			Model: "m", Provider: "openai", InputTokens: 10, OutputTokens: 2, PriceVersion: "p", Cost: 0.5},
		persist.RunEnd{ID: c.ID, Status: agentd.StatusRequiresAction,
			RequiredAction: &agentd.RequiredAction{Type: agentd.ActionToolOutcomeUnknown, ToolCallID: callID, CallID: "call_1",
				Step: 1, Name: "charge", IdempotencyKey: c.ID + ":1:call_1", Arguments: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	return c.ID, callID
}

func TestResolveAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, callID := waitingRun(t, b)
	path := "/runs/" + id + "/actions"
	for _, c := range []struct{ body, field string }{
		{`{"decision":"retry"}`, "tool_call_id"},
		{fmt.Sprintf(`{"tool_call_id":%q}`, callID), "decision"},
		{fmt.Sprintf(`{"tool_call_id":%q,"decision":"maybe"}`, callID), "decision"},
		{fmt.Sprintf(`{"tool_call_id":%q,"decision":"result"}`, callID), "result"},
		{fmt.Sprintf(`{"tool_call_id":%q,"decision":"retry","result":1}`, callID), "result"},
		{fmt.Sprintf(`{"tool_call_id":%q,"decision":"retry","error":"x"}`, callID), "error"},
	} {
		p := wantProblem(t, b.do(http.MethodPost, path, c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Fatalf("%s: field %q, want %q", c.body, p.Field, c.field)
		}
	}
	wantProblem(t, b.do(http.MethodPost, path, fmt.Sprintf(`{"tool_call_id":%q,"decision":"retry"}`, agentd.NewID())),
		http.StatusConflict, "action_mismatch")
	if p := wantProblem(t, b.do(http.MethodPost, path, fmt.Sprintf(`{"tool_call_id":%q,"decision":"approve"}`, callID)),
		http.StatusUnprocessableEntity, "invalid_field"); p.Field != "decision" || !strings.Contains(p.Detail, "tool_outcome_unknown") {
		t.Fatalf("approve of an unknown outcome: %+v", p)
	}
	wantProblem(t, b.do(http.MethodPost, "/runs/"+agentd.NewID()+"/actions", fmt.Sprintf(`{"tool_call_id":%q,"decision":"retry"}`, callID)),
		http.StatusNotFound, "run_not_found")
	run := want[agentd.RunView](t, b.do(http.MethodPost, path, fmt.Sprintf(`{"tool_call_id":%q,"decision":"result","result":{"charged":true}}`, callID)), http.StatusOK)
	if run.Status != "queued" || run.Cost != 0.5 {
		t.Fatalf("status %s, cost %v after the decision (the ledger's is 0.5)", run.Status, run.Cost)
	}
	steps, err := b.store.StepsList(context.Background(), id)
	if err != nil || steps[0].Calls[0].Status != agentd.CallSucceeded || string(steps[0].Calls[0].Result) != `{"charged": true}` {
		t.Fatalf("call after the decision: %v %+v", err, steps)
	}
	wantProblem(t, b.do(http.MethodPost, path, fmt.Sprintf(`{"tool_call_id":%q,"decision":"retry"}`, callID)),
		http.StatusConflict, "run_not_waiting")
}

// TestResolveActionByCallID: a tool_call_id that is not a UUID (the model's
// id sent in the wrong field) is refused with a detail that says so and
// names call_id; the call may be named by its call_id, or by both ids when
// they agree.
func TestResolveActionByCallID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, callID := waitingRun(t, b)
	path := "/runs/" + id + "/actions"
	p := wantProblem(t, b.do(http.MethodPost, path, `{"tool_call_id":"call_1","decision":"retry"}`),
		http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "tool_call_id" || !strings.Contains(p.Detail, `not "call_1"`) || !strings.Contains(p.Detail, "call_id") ||
		strings.Contains(p.Detail, "is required") {
		t.Fatalf("a non-UUID tool_call_id: %+v", p)
	}
	wantProblem(t, b.do(http.MethodPost, path, `{"call_id":"call_2","decision":"retry"}`), http.StatusConflict, "action_mismatch")
	wantProblem(t, b.do(http.MethodPost, path, fmt.Sprintf(`{"tool_call_id":%q,"call_id":"call_2","decision":"retry"}`, callID)),
		http.StatusConflict, "action_mismatch")
	if p := wantProblem(t, b.do(http.MethodPost, path, `{"call_id":"","decision":"retry"}`), http.StatusUnprocessableEntity,
		"invalid_field"); p.Field != "call_id" {
		t.Fatalf("an empty call_id: %+v", p)
	}
	run := want[runBody](t, b.do(http.MethodPost, path, `{"call_id":"call_1","decision":"retry"}`), http.StatusOK)
	if run.Status != "queued" {
		t.Fatalf("status %s after the decision by call_id", run.Status)
	}
	steps, err := b.store.StepsList(context.Background(), id)
	if err != nil || steps[0].Calls[0].Status != agentd.CallRunning {
		t.Fatalf("call after retry by call_id: %v %+v", err, steps)
	}
}

func TestIdempotentChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.createRun(`{"input":"hi"}`)
	path := "/runs/" + run.ID
	first := want[runBody](t, b.do(http.MethodPost, path+"/cancel", "", "Idempotency-Key", "c1"), http.StatusOK)
	if first.Status != "cancelled" {
		t.Fatalf("cancel: %s", first.Status)
	}
	// The run moves on (resumed), yet a repeat of the cancel with its key
	// answers as the first time, and does not cancel again.
	want[runBody](t, b.do(http.MethodPost, path+"/resume", ""), http.StatusOK)
	again := b.do(http.MethodPost, path+"/cancel", "", "Idempotency-Key", "c1")
	replayed := want[runBody](t, again, http.StatusOK)
	if again.header.Get("Idempotent-Replayed") != "true" || replayed.Status != "cancelled" || replayed.UpdatedAt != first.UpdatedAt {
		t.Fatalf("repeat: replayed %q, status %s", again.header.Get("Idempotent-Replayed"), replayed.Status)
	}
	now := want[runBody](t, b.do(http.MethodGet, path, ""), http.StatusOK)
	if now.Status != "queued" {
		t.Fatalf("the repeated cancel changed the run: %s", now.Status)
	}
	// The same key on another request.
	wantProblem(t, b.do(http.MethodPost, path+"/resume", "", "Idempotency-Key", "c1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	wantProblem(t, b.do(http.MethodPost, path+"/actions", `{"decision":"retry","tool_call_id":"`+run.ID+`"}`, "Idempotency-Key", "a1"),
		http.StatusConflict, "run_not_waiting")
	wantProblem(t, b.do(http.MethodPost, path+"/actions", `{"decision":"fail","tool_call_id":"`+run.ID+`"}`, "Idempotency-Key", "a1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	// A stored problem is replayed too.
	p := b.do(http.MethodPost, path+"/actions", `{"decision":"retry","tool_call_id":"`+run.ID+`"}`, "Idempotency-Key", "a1")
	if wantProblem(t, p, http.StatusConflict, "run_not_waiting"); p.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the stored problem was not replayed")
	}
	wantProblem(t, b.do(http.MethodPost, path+"/cancel", "", "Idempotency-Key", strings.Repeat("k", 300)), http.StatusUnprocessableEntity, "invalid_field")
}

// clientWaitingRun makes a run that waits for the outputs of two client
// tool calls, as the engine leaves it.
func clientWaitingRun(t *testing.T, b *bundle) (runID string, calls []string) {
	t.Helper()
	ctx := context.Background()
	created := b.createRun(`{"input":"pick", "client_tools": [{"name": "pick_color"}]}`)
	c, err := b.store.RunClaim(ctx, "w", time.Minute)
	if err != nil || c.ID != created.ID {
		t.Fatalf("claim: %v", err)
	}
	f := persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}
	stepID := agentd.NewID()
	ops := []persist.Op{persist.StepInsert{ID: stepID, RunID: c.ID, Seq: 1}}
	action := agentd.RequiredAction{Type: agentd.ActionClientToolCalls, Step: 1, Name: "pick_color", Arguments: json.RawMessage(`{}`)}
	for i := range 2 {
		id, callID := agentd.NewID(), fmt.Sprintf("call_%d", i)
		calls = append(calls, id)
		ops = append(ops, persist.ToolCallInsert{ID: id, RunID: c.ID, StepID: stepID, Position: i, CallID: callID, Name: "pick_color",
			Arguments: json.RawMessage(`{}`), IdempotencyKey: c.ID + ":1:" + callID, Effect: "side_effect", Status: agentd.CallAwaitingClient})
		action.Calls = append(action.Calls, agentd.ClientCall{Arguments: json.RawMessage(`{}`), CallID: callID, Name: "pick_color", ToolCallID: id})
	}
	action.ToolCallID, action.CallID, action.IdempotencyKey = calls[0], "call_0", c.ID+":1:call_0"
	ops = append(ops, persist.RunEnd{ID: c.ID, Status: agentd.StatusRequiresAction, RequiredAction: &action})
	if _, err := b.store.Exec(ctx, f, nil, ops...); err != nil {
		t.Fatal(err)
	}
	return c.ID, calls
}

// TestToolOutputs: a run waiting for client tool calls takes their outputs
// in one tool_outputs action, each call once, idempotently; anything else
// is refused naming the field.
func TestToolOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, calls := clientWaitingRun(t, b)
	path := "/runs/" + id + "/actions"
	for _, c := range []struct{ body, field string }{
		{`{"type":"tool_outputs"}`, "outputs"},
		{`{"type":"outputs","outputs":[]}`, "type"},
		{fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"output":1,"error":"x"}]}`, calls[0]), "outputs[0].output"},
		{fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q}]}`, calls[0]), "outputs[0].output"},
		{`{"type":"tool_outputs","outputs":[{"tool_call_id":"nope","output":1}]}`, "outputs[0].tool_call_id"},
		{fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"output":1}]}`, calls[0]), "outputs"},
		{fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"output":1},{"tool_call_id":%q,"output":2}]}`, calls[0], calls[0]), "outputs[1].tool_call_id"},
		{fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"output":1},{"tool_call_id":%q,"output":2}]}`, calls[0], agentd.NewID()), "outputs"},
		{fmt.Sprintf(`{"tool_call_id":%q,"decision":"approve"}`, calls[0]), "decision"},
	} {
		p := wantProblem(t, b.do(http.MethodPost, path, c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Fatalf("%s: field %q, want %q (%s)", c.body, p.Field, c.field, p.Detail)
		}
	}
	body := fmt.Sprintf(`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"error":"the user closed the dialog"},{"tool_call_id":%q,"output":{"color":"amber"}}]}`,
		calls[1], calls[0])
	first := b.do(http.MethodPost, path, body, "Idempotency-Key", "outputs-1")
	run := want[runBody](t, first, http.StatusOK)
	if run.Status != "queued" {
		t.Fatalf("after the outputs the run is %s", run.Status)
	}
	again := b.do(http.MethodPost, path, body, "Idempotency-Key", "outputs-1")
	if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Fatalf("the same key again: %d %v", again.status, again.header)
	}
	steps, err := b.store.StepsList(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range steps[0].Calls {
		got[c.ID] = string(c.Status)
	}
	if got[calls[0]] != "succeeded" || got[calls[1]] != "failed" {
		t.Fatalf("calls after the outputs: %v", got)
	}
	wantProblem(t, b.do(http.MethodPost, path, body), http.StatusConflict, "run_not_waiting")
}
