package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// steer sends text to run id as its input (with key, when not empty).
func (b *bundle) steer(t *testing.T, id, text, key string, when agentd.InputWhen) agentd.RunInput {
	t.Helper()
	in, _, err := b.store.InputAccept(context.Background(), agentd.InputCreate{TenantID: "default", RunID: id,
		Source: agentd.InputFromClient, When: when, IdempotencyKey: key, RequestHash: "h:" + key,
		Messages: []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}})
	if err != nil {
		t.Fatalf("steer %q: %v", text, err)
	}
	return in
}

// waitEvent waits until run id has an event of type typ.
func (b *bundle) waitEvent(t *testing.T, id string, typ agentd.EventType) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range b.events(t, id) {
			if e.Type == typ {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("run %s has no %s event", id, typ)
}

// transcript is the run's conversation as "role: text" lines, with a
// tool call as "call NAME" and a result as "result".
func (b *bundle) transcript(t *testing.T, conv string) []string {
	t.Helper()
	msgs, err := b.store.MessagesList(context.Background(), conv, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		for _, p := range m.Content {
			switch p.Type {
			case agentd.PartText:
				out = append(out, string(m.Role)+": "+p.Text)
			case agentd.PartToolCall:
				out = append(out, "call "+p.Name)
			case agentd.PartToolResult:
				out = append(out, "result")
			}
		}
	}
	return out
}

// inputs returns run id's inputs.
func (b *bundle) inputs(t *testing.T, id string) []agentd.RunInput {
	t.Helper()
	ins, err := b.store.InputList(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func TestSteerDuringAnswerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/stream 20 50", agentd.RunParams{})
	b.waitEvent(t, r.ID, agentd.EventMessageDelta)
	in := b.steer(t, r.ID, "/say steered", "", "")
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || !strings.Contains(string(r.Output), "steered") {
		t.Fatalf("run %s/%s, output %s; want completed with the steered answer", r.Status, r.TerminalReason, r.Output)
	}
	got := strings.Join(b.transcript(t, r.ConversationID), " | ")
	if !strings.HasSuffix(got, "user: /say steered | assistant: steered") || strings.Count(got, "/say steered") != 1 {
		t.Fatalf("transcript %s", got)
	}
	ins := b.inputs(t, r.ID)
	if len(ins) != 1 || ins[0].ID != in.ID || ins[0].Status != agentd.InputApplied || ins[0].Step != 2 {
		t.Fatalf("inputs %+v; want the one applied before step 2", ins)
	}
	types := countTypes(b.events(t, r.ID))
	if types["input.accepted"] != 1 || types["input.applied"] != 1 || types["step.started"] != 2 {
		t.Fatalf("events %v", types)
	}
}

func TestSteerDuringToolAppliedAfterItsResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	// The input comes while the call the model asked for runs (600 ms):
	// it is applied after the call's result, before the model is asked
	// again.
	r := b.create(t, "/call delayed {}\n/say first", agentd.RunParams{})
	b.waitEvent(t, r.ID, agentd.EventToolCallCreated)
	b.steer(t, r.ID, "/say after the tool", "", "")
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	got := strings.Join(b.transcript(t, r.ConversationID), " | ")
	want := "call delayed | result | user: /say after the tool | assistant: after the tool"
	if !strings.HasSuffix(got, want) {
		t.Fatalf("transcript %s; want it to end %s", got, want)
	}
}

func TestCancelledRunShowsInputUnapplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/stream 50 100", agentd.RunParams{})
	b.waitEvent(t, r.ID, agentd.EventMessageDelta)
	in := b.steer(t, r.ID, "/say never", "", "")
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCancelled || r.InputsUnapplied != 1 || r.InputsPending != 0 {
		t.Fatalf("run %s, %d unapplied, %d pending; want cancelled with 1 unapplied", r.Status, r.InputsUnapplied, r.InputsPending)
	}
	ins := b.inputs(t, r.ID)
	if len(ins) != 1 || ins[0].ID != in.ID || ins[0].Status != agentd.InputUnapplied || ins[0].Reason != agentd.ReasonCancelled {
		t.Fatalf("inputs %+v", ins)
	}
	evs := b.events(t, r.ID)
	if n := len(evs); evs[n-1].Type != agentd.EventRunCancelled || evs[n-2].Type != agentd.EventInputUnapplied {
		t.Fatalf("last events %s, %s; want input.unapplied then run.cancelled", evs[n-2].Type, evs[n-1].Type)
	}
	if _, _, err := b.store.InputAccept(context.Background(), agentd.InputCreate{TenantID: "default", RunID: r.ID,
		Messages: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "late"}}}); err == nil {
		t.Fatal("an ended run took input")
	}
}

func TestConcurrentSteersAppliedOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/stream 30 50", agentd.RunParams{})
	b.waitEvent(t, r.ID, agentd.EventMessageDelta)
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		for range 2 { // each sent twice at once, as a retry would
			wg.Go(func() { b.steer(t, r.ID, fmt.Sprintf("/say s%02d", i), fmt.Sprintf("k%d-%s", i, r.ID), "") })
		}
	}
	wg.Wait()
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	ins := b.inputs(t, r.ID)
	if len(ins) != n {
		t.Fatalf("%d inputs, want %d", len(ins), n)
	}
	// The conversation holds each input once, in the order accepted.
	var order []string
	for _, line := range b.transcript(t, r.ConversationID) {
		if text, ok := strings.CutPrefix(line, "user: /say s"); ok {
			order = append(order, text)
		}
	}
	if len(order) != n {
		t.Fatalf("%d input messages in the conversation, want %d", len(order), n)
	}
	for k, in := range ins {
		if in.N != k+1 || in.Status != agentd.InputApplied {
			t.Fatalf("input %d: n %d, %s", k, in.N, in.Status)
		}
		if want := strings.TrimPrefix(in.Messages[0].Content[0].Text, "/say s"); order[k] != want {
			t.Fatalf("message %d is %s, input n=%d says %s", k, order[k], in.N, want)
		}
	}
}

func TestSteerNowCutsTheModelCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/stream 40 100", agentd.RunParams{})
	b.waitEvent(t, r.ID, agentd.EventMessageDelta)
	b.steer(t, r.ID, "/say now", "", agentd.InputNow)
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || !strings.Contains(string(r.Output), "now") || r.StepCount != 1 {
		t.Fatalf("run %s, %d steps, output %s; want completed in one step with the steered answer", r.Status, r.StepCount, r.Output)
	}
	var retracted bool
	for _, e := range b.events(t, r.ID) {
		retracted = retracted || (e.Type == agentd.EventStepRetracted && strings.Contains(string(e.Data), `"steered"`))
	}
	if !retracted {
		t.Fatal("no step.retracted (steered) event")
	}
}

func TestSteerWaitsForAnApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call guarded {}\n/say guarded done", agentd.RunParams{})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status == agentd.StatusRequiresAction })
	b.steer(t, r.ID, "/say after the approval", "", "")
	if got, _ := b.store.RunGet(context.Background(), "default", r.ID); got.InputsPending != 1 {
		t.Fatalf("pending %d while waiting, want 1", got.InputsPending)
	}
	var action agentd.RequiredAction
	if err := json.Unmarshal(r.RequiredAction, &action); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.RunResolveAction(context.Background(), agentd.ActionParams{TenantID: "default", RunID: r.ID,
		ToolCallID: action.ToolCallID, Decision: agentd.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	got := strings.Join(b.transcript(t, r.ConversationID), " | ")
	if r.Status != agentd.StatusCompleted || !strings.HasSuffix(got, "call guarded | result | user: /say after the approval | assistant: after the approval") {
		t.Fatalf("run %s; transcript %s", r.Status, got)
	}
}

func TestSteerAcrossACrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := 600 * time.Millisecond
	e1 := b.engine(t, ttl)
	r := b.create(t, "/call blocker {}\n/say blocked", agentd.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	in := b.steer(t, r.ID, "/say after the crash", "", "")
	e1.Abandon() // accepted, not applied: the next claim applies it
	b.engine(t, ttl)
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	got := strings.Join(b.transcript(t, r.ConversationID), " | ")
	if strings.Count(got, "user: /say after the crash") != 1 || !strings.HasSuffix(got, "assistant: after the crash") {
		t.Fatalf("transcript %s", got)
	}
	if ins := b.inputs(t, r.ID); len(ins) != 1 || ins[0].ID != in.ID || ins[0].Status != agentd.InputApplied {
		t.Fatalf("inputs %+v", ins)
	}
}

// answerHook serves on_answer: it answers decide's text as a continue
// ("" answers nothing), and records the idempotency keys it was called with.
type answerHook struct {
	mu     sync.Mutex
	keys   []string
	calls  []tools.AnswerCall
	decide func(c tools.AnswerCall) string
}

func (h *answerHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var c tools.AnswerCall
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.keys = append(h.keys, r.Header.Get("Idempotency-Key"))
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	if text := h.decide(c); text != "" {
		_ = json.NewEncoder(w).Encode(map[string]string{"continue": text})
	}
}

func (b *bundle) hookedEngine(t *testing.T, h http.Handler, max int) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	hooks, err := tools.ParseLoopHooks([]byte(fmt.Sprintf(`{"hooks": {"on_answer": {"url": %q, "max_continues": %d}}}`, srv.URL, max)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, run.Config{LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, Workers: 4, Hooks: hooks})
}

func TestOnAnswerHookContinuesTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := &answerHook{decide: func(c tools.AnswerCall) string {
		if c.Answer == "first" {
			return "/say second"
		}
		return ""
	}}
	b.hookedEngine(t, h, 3)
	r := b.create(t, "/say first", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonCompleted || !strings.Contains(string(r.Output), "second") {
		t.Fatalf("run %s/%s output %s; want completed with the second answer", r.Status, r.TerminalReason, r.Output)
	}
	got := strings.Join(b.transcript(t, r.ConversationID), " | ")
	if got != "user: /say first | assistant: first | user: /say second | assistant: second" {
		t.Fatalf("transcript %s", got)
	}
	ins := b.inputs(t, r.ID)
	if len(ins) != 1 || ins[0].Source != agentd.InputFromHook || ins[0].Status != agentd.InputApplied {
		t.Fatalf("inputs %+v; want the hook's continue, applied", ins)
	}
	var outcomes []string
	for _, e := range b.events(t, r.ID) {
		if e.Type == agentd.EventHookCalled {
			p, err := agentd.Envelope{Type: e.Type, Data: payloadOf(t, e)}.Payload()
			if err != nil {
				t.Fatal(err)
			}
			outcomes = append(outcomes, p.(agentd.HookCalledData).Outcome)
		}
	}
	if strings.Join(outcomes, ",") != "continue,none" {
		t.Fatalf("hook.called outcomes %v, want continue then none", outcomes)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.keys) != 2 || h.keys[0] == h.keys[1] || !strings.HasPrefix(h.keys[0], "on_answer:") || h.calls[1].Continues != 1 {
		t.Fatalf("hook keys %v, calls %+v", h.keys, h.calls)
	}
}

func TestOnAnswerHookThatWouldLoopEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.hookedEngine(t, &answerHook{decide: func(tools.AnswerCall) string { return "/say again" }}, 2)
	r := b.create(t, "/say first", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonMaxContinues {
		t.Fatalf("run %s/%s; want completed with max_continues", r.Status, r.TerminalReason)
	}
	if ins := b.inputs(t, r.ID); len(ins) != 2 {
		t.Fatalf("%d inputs from the hook, want 2 (its max_continues)", len(ins))
	}
	if r.StepCount != 3 {
		t.Fatalf("%d steps, want 3: the answer, then one per continue", r.StepCount)
	}
}

// payloadOf is the data of event e's envelope.
func payloadOf(t *testing.T, e agentd.Event) json.RawMessage {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(e.Data, &env); err != nil {
		t.Fatal(err)
	}
	return env.Data
}
