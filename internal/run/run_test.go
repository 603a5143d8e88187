package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx pools and http keep-alive connections close asynchronously.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

type bundle struct {
	store *persist.Store
	url   string
	fake  *fakellm.Server
	model llm.Model
	reg   *tools.Registry
	sink  *webhooktest.Sink
}

func setup(t *testing.T) *bundle {
	t.Helper()
	store, url := persisttest.New(t)
	// Registered before the cleanups below and those of the engines, so it
	// runs after them (last-in first-out): every engine has stopped, and the
	// store and its database are still there.
	t.Cleanup(func() { checkStoredEvents(t, store) })
	// Text deltas wait for a shared tick, as in cmd/server.
	store.StartGroupCommit(2, 64, persist.DeferTick(50*time.Millisecond))
	t.Cleanup(store.StopGroupCommit) // after the engines stop (cleanups run last-in first-out)
	fake := fakellm.New()
	fsrv := httptest.NewServer(fake)
	t.Cleanup(fsrv.Close)
	// /block hangs the first time per key (until its request is cancelled),
	// so that a retry with the same key answers.
	sk := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/flaky":     webhooktest.FailFirst(2),
		"/slow":      webhooktest.Hang(),
		"/reconcile": webhooktest.Reconcile("/slow"),
		"/block":     webhooktest.First(1, webhooktest.Block(), webhooktest.OK()),
		"/ok":        webhooktest.OK(),
		"/guarded":   webhooktest.OK(),
		"/delayed":   webhooktest.Delay(600*time.Millisecond, 600*time.Millisecond),
	})
	obj := json.RawMessage(`{"type":"object"}`)
	var hooks []tools.Tool
	for _, h := range []struct {
		name, path string
		effect     agentd.Effect
		timeoutMS  int
		reconcile  string
	}{
		{"reconciled_effect", "/slow", agentd.EffectSideEffect, 300, "/reconcile"},
		{"guarded", "/guarded", agentd.EffectSideEffect, 2000, ""},
		{"retry_effect", "/block", agentd.EffectSideEffect, 300, ""},
		{"flaky", "/flaky", agentd.EffectIdempotent, 2000, ""},
		{"slow_effect", "/slow", agentd.EffectSideEffect, 300, ""},
		{"effect", "/ok", agentd.EffectSideEffect, 2000, ""},
		{"blocker", "/block", agentd.EffectIdempotent, 30000, ""},
		{"block_effect", "/block", agentd.EffectSideEffect, 30000, ""},
		{"delayed", "/delayed", agentd.EffectIdempotent, 5000, ""},
	} {
		var reconcile string
		if h.reconcile != "" {
			reconcile = sk.URL + h.reconcile
		}
		tool, err := tools.NewWebhook(tools.WebhookConfig{Name: h.name, Description: h.name, Parameters: obj,
			URL: sk.URL + h.path, Effect: h.effect, TimeoutMS: h.timeoutMS, ReconcileURL: reconcile,
			NeedsApproval: h.name == "guarded"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		hooks = append(hooks, tool)
	}
	reg, err := tools.NewRegistry(append(hooks, tools.Calculator(), tools.Clock())...)
	if err != nil {
		t.Fatal(err)
	}
	model := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fsrv.URL + "/v1", APIKey: "test"})
	return &bundle{store: store, url: url, fake: fake, model: model, reg: reg, sink: sk}
}

func (b *bundle) engine(t *testing.T, ttl time.Duration) *run.Engine {
	t.Helper()
	return b.start(t, run.Config{LeaseTTL: ttl, PollInterval: 200 * time.Millisecond, ModelBackoff: 20 * time.Millisecond, Workers: 4})
}

// start starts an engine as cfg says, on the bundle's store, model and
// tools unless cfg names others, and stops it when t ends.
func (b *bundle) start(t *testing.T, cfg run.Config) *run.Engine {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = b.store
	}
	if cfg.Model == nil {
		cfg.Model = b.model
	}
	if cfg.Tools == nil {
		cfg.Tools = b.reg
	}
	e := run.New(cfg)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e
}

func (b *bundle) create(t *testing.T, input string, p agentd.RunParams) agentd.Run {
	t.Helper()
	if p.MaxSteps == 0 {
		p.MaxSteps = 10
	}
	r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{
		TenantID: "default", Model: "fake", Params: p, Input: []agentd.InputMessage{{Role: "user", Content: input}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wait polls until the run leaves queued/running (or until cond holds).
func (b *bundle) wait(t *testing.T, id string, cond func(agentd.Run) bool) agentd.Run {
	t.Helper()
	return persisttest.WaitRun(t, b.store, id, cond, 20*time.Second)
}

func (b *bundle) events(t *testing.T, id string) []agentd.Event {
	t.Helper()
	evs, err := b.store.EventsAfter(context.Background(), id, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event seqs not gapless from 1: index %d has seq %d", i, e.Seq)
		}
		var env struct {
			Seq   int64            `json:"seq"`
			Type  agentd.EventType `json:"type"`
			RunID string           `json:"run_id"`
		}
		if err := json.Unmarshal(e.Data, &env); err != nil || env.Seq != e.Seq || env.Type != e.Type || env.RunID != id {
			t.Fatalf("event %d envelope %s does not match its row (%v)", e.Seq, e.Data, err)
		}
	}
	return evs
}

// checkStoredEvents checks the stored events of every run of the test's
// tenant against openapi.yaml, and its outbox against its events, however
// the run was created and wherever it stopped.
func checkStoredEvents(t *testing.T, store *persist.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before string
	for {
		runs, err := store.RunList(ctx, agentd.RunListParams{TenantID: "default", Before: before, Limit: 500})
		if err != nil {
			t.Errorf("list runs to check their events: %v", err)
			return
		}
		for _, r := range runs {
			evs, err := store.EventsAfter(ctx, r.ID, 0, 100000)
			if err != nil {
				t.Errorf("events of run %s: %v", r.ID, err)
				return
			}
			spectest.CheckEvents(t, evs)
			checkOutbox(t, ctx, store, r, evs)
		}
		if len(runs) < 500 {
			return
		}
		before = runs[len(runs)-1].ID
	}
}

func countTypes(evs []agentd.Event) map[string]int {
	m := map[string]int{}
	for _, e := range evs {
		m[string(e.Type)]++
	}
	return m
}

func TestRunTwoToolsThenOneCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call calculator {\"expression\":\"1+2\"}\n/call clock {}\n/next\n/call calculator {\"expression\":\"2*3\"}\n/say done", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	ctx := context.Background()
	steps, err := b.store.StepsList(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || len(steps[0].Calls) != 2 || len(steps[1].Calls) != 1 || len(steps[2].Calls) != 0 {
		t.Fatalf("steps: %d (calls per step not 2,1,0)", len(steps))
	}
	if r.StepCount != 3 {
		t.Fatalf("run step_count %d, want 3", r.StepCount)
	}
	var sum agentd.Usage
	for i, s := range steps {
		if s.Status != agentd.StepCompleted || s.Seq != i+1 {
			t.Fatalf("step %d: status %s seq %d", i, s.Status, s.Seq)
		}
		sum = sum.Add(s.Usage)
		for _, c := range s.Calls {
			if c.Status != agentd.CallSucceeded || c.ToolCall.Attempts != 1 || len(c.Attempts) != 1 {
				t.Fatalf("call %s: status %s attempts %d", c.Name, c.Status, c.ToolCall.Attempts)
			}
			if want := fmt.Sprintf("%s:%d:%s", r.ID, s.Seq, c.CallID); c.IdempotencyKey != want {
				t.Fatalf("idempotency key %q, want %q", c.IdempotencyKey, want)
			}
		}
	}
	if got := steps[1].Calls[0].Result; !strings.Contains(string(got), "6") {
		t.Fatalf("calculator result %s", got)
	}
	fu := b.fake.UsageTotal()
	want := agentd.Usage{InputTokens: fu.PromptTokens, OutputTokens: fu.CompletionTokens, CachedInputTokens: fu.CachedTokens, ReasoningTokens: fu.ReasoningTokens}
	if r.Usage != want || sum != want || want.InputTokens == 0 || want.CachedInputTokens == 0 {
		t.Fatalf("usage: run %+v, steps %+v, fake reported %+v", r.Usage, sum, want)
	}
	if b.fake.Calls() != 3 {
		t.Fatalf("model calls %d, want 3", b.fake.Calls())
	}
	// Each model call saw the whole conversation so far, tool results
	// included: steps after the first start from the state the execution
	// kept, not from a read.
	var sent []string
	for _, req := range b.fake.Requests() {
		var roles []string
		for _, m := range req.Sent {
			var msg struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}
			json.Unmarshal(m, &msg)
			if msg.Role == "tool" && strings.Contains(msg.Content, "did not complete") {
				msg.Role = "unanswered"
			}
			roles = append(roles, msg.Role)
		}
		sent = append(sent, strings.Join(roles, ","))
	}
	if want := "[user user,assistant,tool,tool user,assistant,tool,tool,assistant,tool]"; fmt.Sprint(sent) != want {
		t.Fatalf("messages sent to the model per call: %v, want %v", sent, want)
	}
	msgs, err := b.store.MessagesList(ctx, r.ConversationID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		roles[i] = string(m.Role)
		if m.Seq != i+1 || m.Status != agentd.MessageCompleted {
			t.Fatalf("message %d: seq %d status %s", i, m.Seq, m.Status)
		}
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool,assistant,tool,assistant" {
		t.Fatalf("message roles %s", got)
	}
	if last := msgs[len(msgs)-1]; last.Content[0].Text != "done" {
		t.Fatalf("final answer %+v", last.Content)
	}
	evs := b.events(t, r.ID)
	c := countTypes(evs)
	if evs[0].Type != "run.created" || evs[len(evs)-1].Type != "run.completed" || c["run.started"] != 1 ||
		c["step.started"] != 3 || c["step.completed"] != 3 || c["tool_call.created"] != 3 ||
		c["tool_attempt.started"] != 3 || c["tool_call.completed"] != 3 || c["message.completed"] != 3 {
		t.Fatalf("event counts %v", c)
	}
	if r.LastEventSeq != int64(len(evs)) {
		t.Fatalf("run.last_event_seq %d, events %d", r.LastEventSeq, len(evs))
	}
}

func TestIdempotentWebhookRetriedSideEffectTimeoutUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call flaky {}\n/next\n/call slow_effect {}\n/say never", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusRequiresAction {
		t.Fatalf("run ended %s/%s, want requires_action", r.Status, r.TerminalReason)
	}
	var action struct {
		Type       string `json:"type"`
		ToolCallID string `json:"tool_call_id"`
	}
	if err := json.Unmarshal(r.RequiredAction, &action); err != nil || action.Type != "tool_outcome_unknown" {
		t.Fatalf("required action %s", r.RequiredAction)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps %d %v", len(steps), err)
	}
	flaky := steps[0].Calls[0]
	if flaky.Status != agentd.CallSucceeded || len(flaky.Attempts) != 3 ||
		flaky.Attempts[0].Status != agentd.AttemptFailed || flaky.Attempts[1].Status != agentd.AttemptFailed ||
		flaky.Attempts[2].Status != agentd.AttemptSucceeded {
		t.Fatalf("flaky call: %s with %d attempts", flaky.Status, len(flaky.Attempts))
	}
	if reqs, keys := b.sink.Count("/flaky"), len(b.sink.Keys("/flaky")); reqs != 3 || keys != 1 {
		t.Fatalf("sink saw /flaky %d times with %d keys, want 3 and 1", reqs, keys)
	}
	slow := steps[1].Calls[0]
	if slow.Status != agentd.CallUnknown || len(slow.Attempts) != 1 || slow.Attempts[0].Status != agentd.AttemptUnknown || action.ToolCallID != slow.ID {
		t.Fatalf("side-effect call: %s with %d attempts", slow.Status, len(slow.Attempts))
	}
	if reqs := b.sink.Count("/slow"); reqs != 1 {
		t.Fatalf("side-effect webhook called %d times, want 1", reqs)
	}
	c := countTypes(b.events(t, r.ID))
	if c["tool_attempt.failed"] != 3 || c["tool_call.unknown"] != 1 || c["run.requires_action"] != 1 {
		t.Fatalf("event counts %v", c)
	}
}

func TestTakeoverAfterCrashReusesCommittedWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := 600 * time.Millisecond
	e1 := b.engine(t, ttl)
	r := b.create(t, "/call calculator {\"expression\":\"2+2\"}\n/next\n/call effect {}\n/call blocker {}\n/say finished", agentd.RunParams{})
	// Wait until the first engine is inside the blocking tool of step 2:
	// step 1 and the side effect of step 2 are committed by then.
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	committed, err := b.store.RunGet(context.Background(), "default", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	modelCalls := b.fake.Calls()
	if modelCalls != 2 {
		t.Fatalf("model calls before the crash %d, want 2", modelCalls)
	}
	e1.Abandon() // the first engine dies: no more writes, no lease release
	start := time.Now()
	b.engine(t, ttl)
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	t.Logf("taken over and finished %v after the crash", time.Since(start))
	if r.Epoch != committed.Epoch+1 {
		t.Fatalf("epoch %d, want %d", r.Epoch, committed.Epoch+1)
	}
	// One more model call: the final answer. Steps 1 and 2 were not re-asked.
	if got := b.fake.Calls(); got != modelCalls+1 {
		t.Fatalf("model calls %d, want %d", got, modelCalls+1)
	}
	if reqs, keys := b.sink.Count("/ok"), len(b.sink.Keys("/ok")); reqs != 1 || keys != 1 {
		t.Fatalf("side effect ran %d times (%d keys), want once", reqs, keys)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 3 {
		t.Fatalf("steps %d %v", len(steps), err)
	}
	blocker := steps[1].Calls[1]
	if blocker.Status != agentd.CallSucceeded || len(blocker.Attempts) != 2 || blocker.Attempts[0].Status != agentd.AttemptUnknown ||
		blocker.Attempts[0].Epoch != committed.Epoch || blocker.Attempts[1].Epoch != r.Epoch {
		t.Fatalf("blocking call: %s, %d attempts", blocker.Status, len(blocker.Attempts))
	}
	c := countTypes(b.events(t, r.ID))
	if c["tool_call.reused"] != 1 || c["run.resumed"] != 1 {
		t.Fatalf("event counts %v", c)
	}
	// The first engine's late write is refused.
	_, err = b.store.Exec(context.Background(), persist.Fence{RunID: r.ID, Epoch: committed.Epoch, Worker: e1.WorkerID()},
		[]agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "late"})})
	if !errors.Is(err, persist.ErrLeaseLost) {
		t.Fatalf("late write of the dead worker: %v, want ErrLeaseLost", err)
	}
}

func TestCancelDuringTool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/next\n/call block_effect {}\n/say never", agentd.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	start := time.Now()
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, nil)
	elapsed := time.Since(start)
	if r.Status != agentd.StatusCancelled || r.TerminalReason != agentd.ReasonCancelled {
		t.Fatalf("run ended %s/%s", r.Status, r.TerminalReason)
	}
	if elapsed > time.Second {
		t.Fatalf("cancel took %v, want under 1s", elapsed)
	}
	for i := 0; i < 100 && b.sink.Cancels("/block") != 1; i++ {
		time.Sleep(10 * time.Millisecond) // the server notices the hang-up asynchronously
	}
	if b.sink.Cancels("/block") != 1 {
		t.Fatalf("the tool's request context was not cancelled")
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if len(steps) != 2 || steps[0].Calls[0].Status != agentd.CallSucceeded || steps[1].Calls[0].Status != agentd.CallUnknown {
		t.Fatalf("committed results not kept: %d steps", len(steps))
	}
	if evs := b.events(t, r.ID); evs[len(evs)-1].Type != "run.cancelled" {
		t.Fatalf("last event %s", evs[len(evs)-1].Type)
	}
}

func TestCancelDuringStreamingModelCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/next\n/stream 200 20", agentd.RunParams{})
	// Wait until some text of step 2 is committed.
	b.wait(t, r.ID, func(agentd.Run) bool {
		evs, _ := b.store.EventsAfter(context.Background(), r.ID, 0, 1000)
		return countTypes(evs)["message.delta"] >= 2
	})
	start := time.Now()
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, nil)
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("cancel took %v, want under 1s", elapsed)
	}
	if r.Status != agentd.StatusCancelled {
		t.Fatalf("run ended %s", r.Status)
	}
	deadline := time.Now().Add(2 * time.Second)
	for b.fake.Cancelled() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b.fake.Cancelled() != 1 {
		t.Fatalf("the model request's context was not cancelled")
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if len(steps) != 2 || steps[0].Status != agentd.StepCompleted || steps[1].Status != agentd.StepAborted {
		t.Fatalf("steps after cancel: %+v", steps)
	}
}
