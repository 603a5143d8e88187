package run_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/run"
)

func TestModelFaultsAreRetriedAndPartialTextRetracted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	// Step 1 fails with a 500 once; step 2's stream is cut after half its text.
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/fault 500@0\n/fault truncate@1\n/say a fairly long final answer", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 2 {
		t.Fatalf("steps %d %v", len(steps), err)
	}
	if steps[0].ModelAttempts != 2 || steps[1].ModelAttempts != 2 || steps[1].Transition != "model_retry" {
		t.Fatalf("model attempts %d and %d, transition %q", steps[0].ModelAttempts, steps[1].ModelAttempts, steps[1].Transition)
	}
	if b.fake.Calls() != 4 {
		t.Fatalf("model calls %d, want 4", b.fake.Calls())
	}
	evs := b.events(t, r.ID)
	c := countTypes(evs)
	if c["step.retracted"] != 1 {
		t.Fatalf("event counts %v", c)
	}
	// The retraction follows the cut text and precedes the re-asked text.
	var sawDelta, sawRetract bool
	for _, e := range evs {
		switch {
		case e.Type == "message.delta" && !sawRetract:
			sawDelta = true
		case e.Type == "step.retracted":
			sawRetract = true
		}
	}
	if !sawDelta || !sawRetract {
		t.Fatal("no streamed text before the retraction")
	}
}

func TestMaxStepsEndsRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/next\n/call calculator {\"expression\":\"2\"}\n/say never", agentd.RunParams{MaxSteps: 1})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonMaxSteps || r.StepCount != 1 {
		t.Fatalf("run ended %s/%s after %d steps", r.Status, r.TerminalReason, r.StepCount)
	}
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	total := b.create(t, "/stream 100 50", agentd.RunParams{Timeouts: agentd.Timeouts{TotalMS: 300}})
	step := b.create(t, "/call blocker {}\n/say never", agentd.RunParams{Timeouts: agentd.Timeouts{StepMS: 300}})
	for _, c := range []struct {
		id     string
		reason agentd.Reason
	}{{total.ID, agentd.ReasonTimedOutTotal}, {step.ID, agentd.ReasonTimedOutStep}} {
		r := b.wait(t, c.id, nil)
		if r.Status != agentd.StatusTimedOut || r.TerminalReason != c.reason {
			t.Fatalf("run ended %s/%s, want timed_out/%s", r.Status, r.TerminalReason, c.reason)
		}
		if evs := b.events(t, c.id); evs[len(evs)-1].Type != "run.timed_out" {
			t.Fatalf("last event %s", evs[len(evs)-1].Type)
		}
	}
}

func TestInvalidArgumentsGoBackToTheModel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call calculator {\"expr\":1}\n/call no_such_tool {}\n/say repaired", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s", r.Status)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	for _, c := range steps[0].Calls {
		if c.Status != agentd.CallFailed || len(c.Attempts) != 0 || len(c.Error) == 0 {
			t.Fatalf("call %s: %s with %d attempts, error %s", c.Name, c.Status, len(c.Attempts), c.Error)
		}
	}
	msgs, _ := b.store.MessagesList(context.Background(), r.ConversationID, 0, 100)
	if len(msgs) != 5 || !msgs[2].Content[0].IsError || !msgs[3].Content[0].IsError {
		t.Fatalf("tool errors not given to the model: %d messages", len(msgs))
	}
}

func TestShutdownHandsRunsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := 30 * time.Second // a takeover must not wait for the TTL
	e1 := b.engine(t, ttl)
	r := b.create(t, "/call blocker {}\n/say finished", agentd.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e1.Stop(ctx); err == nil {
		t.Fatal("stop reported no run handed back")
	}
	start := time.Now()
	b.engine(t, ttl)
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.Epoch != 2 {
		t.Fatalf("run ended %s at epoch %d", r.Status, r.Epoch)
	}
	if waited := time.Since(start); waited > ttl/2 {
		t.Fatalf("takeover waited %v: the lease was not handed back", waited)
	}
}

func TestInterruptThenResumeReusesCommittedResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call effect {}\n/next\n/stream 100 20", agentd.RunParams{OnDisconnect: "interrupt"})
	// Interrupt while step 2 streams its answer.
	b.wait(t, r.ID, func(agentd.Run) bool {
		evs, _ := b.store.EventsAfter(context.Background(), r.ID, 0, 1000)
		return countTypes(evs)["message.delta"] >= 2
	})
	if _, err := b.store.RunInterrupt(context.Background(), r.ID); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusInterrupted || r.TerminalReason != agentd.ReasonInterrupted {
		t.Fatalf("run ended %s/%s, want interrupted", r.Status, r.TerminalReason)
	}
	before := b.events(t, r.ID)
	if before[len(before)-1].Type != "run.interrupted" {
		t.Fatalf("last event %s", before[len(before)-1].Type)
	}
	if _, err := b.store.RunResume(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool {
		return r.Status == agentd.StatusCompleted || r.Status == agentd.StatusFailed
	})
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("resumed run ended %s/%s", r.Status, r.TerminalReason)
	}
	if reqs, keys := b.sink.Count("/ok"), len(b.sink.Keys("/ok")); reqs != 1 || keys != 1 {
		t.Fatalf("side effect ran %d times, want once", reqs)
	}
	after := b.events(t, r.ID) // gapless from 1, so the resumed stream continued the same seq
	c := countTypes(after[len(before):])
	if c["run.resumed"] != 1 || c["step.retracted"] != 1 || c["run.completed"] != 1 {
		t.Fatalf("events after resume %v", c)
	}
}

func TestRateLimitAndHangingStreamAreRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	// Step 1 answers 429 (Retry-After: 1) once; step 2's stream hangs once
	// and is cut by the 300 ms idle timeout.
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/fault 429@0\n/fault hang@1\n/say done",
		agentd.RunParams{Timeouts: agentd.Timeouts{IdleMS: 300}})
	start := time.Now()
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Fatalf("run took %v: Retry-After of 1 s was not honoured", elapsed)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if len(steps) != 2 || steps[0].ModelAttempts != 2 || steps[1].ModelAttempts != 2 {
		t.Fatalf("model attempts per step: %+v", steps)
	}
	if b.fake.Cancelled() != 1 {
		t.Fatalf("the hanging request was not cut (cancelled %d)", b.fake.Cancelled())
	}
}

func TestFinalModelErrorsEndTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		status int
		body   string
		reason agentd.Reason
	}{
		{401, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`, agentd.ReasonModelError},
		{400, `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`, agentd.ReasonContextOverflow},
	} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		}))
		e := run.New(run.Config{Store: b.store, Tools: b.reg, LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond,
			ModelBackoff: 10 * time.Millisecond, Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k"})})
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := b.create(t, "hello", agentd.RunParams{})
		r = b.wait(t, r.ID, nil)
		e.Stop(context.Background())
		srv.Close()
		if r.Status != agentd.StatusFailed || r.TerminalReason != c.reason {
			t.Fatalf("status %d: run ended %s/%s, want failed/%s", c.status, r.Status, r.TerminalReason, c.reason)
		}
		if calls.Load() != 1 {
			t.Fatalf("status %d: the model was asked %d times; a final error is not retried", c.status, calls.Load())
		}
		steps, _ := b.store.StepsList(context.Background(), r.ID)
		if len(steps) != 1 || steps[0].Status != agentd.StepFailed || len(steps[0].Error) == 0 {
			t.Fatalf("status %d: step %+v", c.status, steps)
		}
	}
}

func TestShutdownStopsAtStepBoundaryAndHandsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := 30 * time.Second // a takeover must not wait for the TTL
	e1 := b.engine(t, ttl)
	// Each model response takes about 300 ms; there are three.
	r := b.create(t, "/call calculator {\"expression\":\"1\"}\n/next\n/call calculator {\"expression\":\"2\"}\n/stream 6 50", agentd.RunParams{})
	// Stop once a tool result is in: the run then stops at a boundary after
	// a step with tools.
	for deadline := time.Now().Add(5 * time.Second); countTypes(b.events(t, r.ID))["tool_call.completed"] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no tool call completed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := time.Now()
	if err := e1.Stop(ctx); err != nil {
		t.Fatalf("stop: %v (the run should have reached a step boundary within the grace period)", err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("stop took %v", d)
	}
	mid, _ := b.store.RunGet(context.Background(), "default", r.ID)
	if mid.Status != agentd.StatusRunning || mid.LeaseOwner != "" {
		t.Fatalf("after stop the run is %s with lease owner %q; want running and handed back", mid.Status, mid.LeaseOwner)
	}
	// The boundary it stopped at is committed: no step is left open.
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.Status != agentd.StepCompleted {
			t.Fatalf("step %d is %s at hand-back", s.Seq, s.Status)
		}
	}
	start := time.Now()
	b.engine(t, ttl)
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.Epoch != 2 {
		t.Fatalf("run ended %s at epoch %d", r.Status, r.Epoch)
	}
	if waited := time.Since(start); waited > ttl/2 {
		t.Fatalf("takeover waited %v: the lease was not handed back", waited)
	}
	if c := countTypes(b.events(t, r.ID)); c["step.retracted"] != 0 || c["tool_call.reused"] != 0 {
		t.Fatalf("a step was re-asked or a call recovered: %v", c)
	}
}
