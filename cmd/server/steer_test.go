package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// Steering across a crash, with real processes (invariant 14, "Accepted
// input is applied input, once"): an input whose 202 a client got is
// applied by whichever process takes the run over, exactly once, wherever
// the SIGKILL falls. The engine's own tests (internal/run/steer_test.go)
// abandon an executor in-process; these kill the process.

// TestSteerCrashBeforeApply kills the process with SIGKILL right after
// the 202 of a steer, while the run streams an answer and before the input
// is applied; a process started after it takes the run over and applies
// the input once: the run's answer is the steer's.
func TestSteerCrashBeforeApply(t *testing.T) {
	e := newSteerEnv(t)
	a := e.start(t)
	ctx := testCtx(t)
	run, err := a.c.CreateRun(ctx, client.CreateRun{Input: "/stream 40 100"}) // 4 s of answer
	if err != nil {
		t.Fatal(err)
	}
	followUntil(t, a.c, run.ID, agentd.EventMessageDelta)
	const text = "/say steered across the kill"
	in, err := a.c.SteerRun(ctx, run.ID, client.SteerInput{Text: text, IdempotencyKey: "steer-before-apply"})
	if err != nil {
		t.Fatalf("SteerRun: %v", err)
	}
	a.kill(t)
	killed := time.Now()
	if got := a.wire.last(t, http.MethodPost, "/runs/"+run.ID+"/input").Status; got != http.StatusAccepted || in.Status != agentd.InputPending {
		t.Fatalf("steer answered %d with an input %s, want 202 and pending", got, in.Status)
	}
	// What the killed process left: the input committed, not applied.
	pending, err := e.store.InputList(context.Background(), run.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != in.ID || pending[0].Status != agentd.InputPending {
		t.Fatalf("after the kill the inputs are %+v, want %s pending", pending, in.ID)
	}

	b := e.start(t)
	ended := runEnded(t, b.c, run.ID)
	t.Logf("run %s %v after the SIGKILL (lease TTL 1s)", ended.Status, time.Since(killed).Round(time.Millisecond))
	e.checkSteeredOnce(t, b.c, run.ID, in.ID, text, "steered across the kill")
}

// TestSteerCrashAfterApply kills the process with SIGKILL as soon as
// input.applied is committed, while the model call that reads the input
// streams its answer: the input applied after a slow tool's result, before
// the next step's model call. A process started after it takes the run
// over, and finds the input applied: it asks the model again without
// applying it a second time (one user message, one input.applied).
func TestSteerCrashAfterApply(t *testing.T) {
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/slow": webhooktest.Block()})
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"slow","description":"a slow lookup",
		"parameters":{"type":"object"},"url":%q,"effect":"read_only","timeout_ms":20000}]}`, sink.URL+"/slow")), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newSteerEnv(t, "AGENTD_TOOLS_FILE="+toolsFile)
	a := e.start(t)
	ctx := testCtx(t)
	run, err := a.c.CreateRun(ctx, client.CreateRun{Input: "/call slow {}\n/say not steered"})
	if err != nil {
		t.Fatal(err)
	}
	sink.WaitEntered(t, "/slow", 20*time.Second)
	// The step that reads the input streams its answer for 2 s: the
	// SIGKILL falls in it.
	const text = "/stream 20 100\n/say the answer the steer asked for"
	in, err := a.c.SteerRun(ctx, run.ID, client.SteerInput{Text: text, IdempotencyKey: "steer-after-apply"})
	if err != nil {
		t.Fatalf("SteerRun: %v", err)
	}
	sink.Release()
	applied := followUntil(t, a.c, run.ID, agentd.EventInputApplied)
	a.kill(t)
	killed := time.Now()

	// What the killed process left: the input applied, before a step
	// that has not completed.
	ins, err := e.store.InputList(context.Background(), run.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].Status != agentd.InputApplied {
		t.Fatalf("after the kill the inputs are %+v, want %s applied", ins, in.ID)
	}
	left := e.storedEvents(t, run.ID)
	for _, ev := range left[applied.Seq:] {
		if ev.Type == agentd.EventStepCompleted || ev.Type.Terminal() {
			t.Fatalf("the kill came too late: after input.applied (seq %d) the log has %s (seq %d): %s",
				applied.Seq, ev.Type, ev.Seq, eventTypes(left))
		}
	}
	t.Logf("killed at seq %d, %d events after input.applied (seq %d, step %d)", len(left), len(left)-int(applied.Seq), applied.Seq, applied.Step)

	b := e.start(t)
	ended := runEnded(t, b.c, run.ID)
	t.Logf("run %s %v after the SIGKILL (lease TTL 1s)", ended.Status, time.Since(killed).Round(time.Millisecond))
	evs := e.checkSteeredOnce(t, b.c, run.ID, in.ID, text, "the answer the steer asked for")
	if n := sink.Count("/slow"); n != 1 {
		t.Errorf("the tool ran %d times, want once (its result was committed before the kill)", n)
	}
	t.Logf("events: %s", eventTypes(evs))
}

// TestSteerCrashRetried sends a steer whose 202 never reaches the client:
// the process commits the input, answers 202, and is killed (SIGKILL)
// before the answer is sent on. The SDK tries the call again with the same
// Idempotency-Key, and the process that took over answers the input the
// killed one made (200, Idempotent-Replayed), which the run applies once;
// sent again once the run has completed, the key still answers that input.
func TestSteerCrashRetried(t *testing.T) {
	e := newSteerEnv(t)
	a := e.start(t)
	ctx := testCtx(t)
	run, err := a.c.CreateRun(ctx, client.CreateRun{Input: "/stream 40 100"})
	if err != nil {
		t.Fatal(err)
	}
	followUntil(t, a.c, run.ID, agentd.EventMessageDelta)

	p := newKillingProxy(t, a.child)
	c, w := wiredClient(p.URL, client.WithRetries(4, 100*time.Millisecond))
	const text, key = "/say the retried steer", "steer-retried"
	type steered struct {
		in  *client.Input
		err error
	}
	done := make(chan steered, 1)
	go func() {
		in, err := c.SteerRun(ctx, run.ID, client.SteerInput{Text: text, IdempotencyKey: key})
		done <- steered{in, err}
	}()
	select {
	case <-p.killed:
	case <-time.After(20 * time.Second):
		t.Fatal("the steer never reached the process")
	}
	killed := time.Now()
	if got := p.victimStatus(); got != http.StatusAccepted {
		t.Fatalf("the killed process answered the steer %d, want 202", got)
	}
	b := e.start(t)
	p.Switch(b.addr)
	var first steered
	select {
	case first = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("SteerRun did not return")
	}
	if first.err != nil {
		t.Fatalf("SteerRun across the kill: %v", first.err)
	}
	w.mu.Lock()
	for _, a := range w.answers {
		if a.Path == "/runs/"+run.ID+"/input" && a.Status != http.StatusOK {
			t.Errorf("the client got a %d for the steer, want only the replay's 200", a.Status)
		}
	}
	w.mu.Unlock()
	ans := w.last(t, http.MethodPost, "/runs/"+run.ID+"/input")
	if ans.Status != http.StatusOK || ans.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the retry was answered %d, Idempotent-Replayed %q; want 200 and true", ans.Status, ans.Header.Get("Idempotent-Replayed"))
	}

	ended := runEnded(t, b.c, run.ID)
	t.Logf("run %s %v after the SIGKILL (lease TTL 1s)", ended.Status, time.Since(killed).Round(time.Millisecond))

	// The same key once more, to the process that took over, now that the
	// run has completed: the same input, applied.
	again, err := b.c.SteerRun(ctx, run.ID, client.SteerInput{Text: text, IdempotencyKey: key})
	if err != nil {
		t.Fatalf("SteerRun again after the end: %v", err)
	}
	ans = b.wire.last(t, http.MethodPost, "/runs/"+run.ID+"/input")
	if ans.Status != http.StatusOK || ans.Header.Get("Idempotent-Replayed") != "true" || again.ID != first.in.ID {
		t.Errorf("the key sent again after the end: %d, Idempotent-Replayed %q, input %s; want 200, true and %s",
			ans.Status, ans.Header.Get("Idempotent-Replayed"), again.ID, first.in.ID)
	}
	if again.Status != agentd.InputApplied {
		t.Logf("the replay after the end shows the input %s", again.Status)
	}
	e.checkSteeredOnce(t, b.c, run.ID, first.in.ID, text, "the retried steer")
}
