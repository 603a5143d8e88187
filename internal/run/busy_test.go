package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

func (b *bundle) createOn(t *testing.T, conv, input string, ifBusy agentd.IfBusy) (agentd.Run, error) {
	t.Helper()
	r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake",
		ConversationID: conv, Params: agentd.RunParams{MaxSteps: 10, IfBusy: ifBusy},
		Input: []agentd.InputMessage{{Role: "user", Content: input}}})
	return r, err
}

// raceCreate sends n concurrent creates on conv with if_busy reject and
// counts the runs created and the ones refused because busyRun (or, when
// busyRun is empty, any run) was in the way.
func (b *bundle) raceCreate(t *testing.T, conv, busyRun string, n int) (created, busy int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.createOn(t, conv, "/say again", "reject")
			var be *agentd.BusyError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.As(err, &be) && (busyRun == "" || be.RunID == busyRun):
				busy++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	return created, busy
}

func TestIfBusyRejectUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.create(t, "/say first", agentd.RunParams{}) // queued: the conversation is busy
	if created, busy := b.raceCreate(t, first.ConversationID, first.ID, 10); created != 0 || busy != 10 {
		t.Fatalf("%d created, %d refused as busy; want 0 and 10", created, busy)
	}
	// Once the conversation is idle, exactly one of many concurrent requests wins.
	if _, err := b.store.RunCancel(context.Background(), "default", first.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if created, busy := b.raceCreate(t, first.ConversationID, "", 10); created != 1 || busy != 9 {
		t.Fatalf("idle conversation: %d created, %d refused; want 1 and 9", created, busy)
	}
}

func TestIfBusyEnqueueRunsOneAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.create(t, "/stream 4 30", agentd.RunParams{})
	var wg sync.WaitGroup
	ids := make(chan string, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.createOn(t, first.ConversationID, "/stream 4 30", "enqueue")
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			ids <- r.ID
		}()
	}
	wg.Wait()
	close(ids)
	b.engine(t, 5*time.Second)
	all := []agentd.Run{b.wait(t, first.ID, nil)}
	for id := range ids {
		all = append(all, b.wait(t, id, nil))
	}
	for _, r := range all {
		if r.Status != agentd.StatusCompleted {
			t.Fatalf("run %s ended %s", r.ID, r.Status)
		}
	}
	// No two runs of the conversation overlapped.
	for i, a := range all {
		for _, c := range all[i+1:] {
			if a.StartedAt.Before(*c.FinishedAt) && c.StartedAt.Before(*a.FinishedAt) {
				t.Fatalf("runs overlapped:\n%s\n%s", runTimes(a), runTimes(c))
			}
		}
	}
	msgs, _ := b.store.MessagesList(context.Background(), first.ConversationID, 0, 100)
	if len(msgs) != 12 {
		t.Fatalf("conversation has %d messages, want 12 (6 questions, 6 answers)", len(msgs))
	}
}

func TestIfBusyInterruptCancelsTheBusyRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	busy := b.create(t, "/call blocker {}\n/say never", agentd.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	next, err := b.createOn(t, busy.ConversationID, "/say next", "interrupt")
	if err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, busy.ID, nil); r.Status != agentd.StatusCancelled {
		t.Fatalf("busy run ended %s, want cancelled", r.Status)
	}
	if r := b.wait(t, next.ID, nil); r.Status != agentd.StatusCompleted {
		t.Fatalf("new run ended %s", r.Status)
	}
}

func TestCancelWhileAwaitingActionUnwedgesConversation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call slow_effect {}\n/say never", agentd.RunParams{})
	if r = b.wait(t, r.ID, nil); r.Status != agentd.StatusRequiresAction {
		t.Fatalf("run is %s, want requires_action", r.Status)
	}
	if _, err := b.createOn(t, r.ConversationID, "/say blocked", "reject"); err == nil {
		t.Fatal("a run waiting on an action did not keep its conversation busy")
	}
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if c := steps[0].Calls[0]; c.Status != agentd.CallUnknown || !strings.Contains(string(c.Error), "ended (cancelled)") {
		t.Fatalf("the awaited side effect is %s (%s), want still unknown, the cancel noted", c.Status, c.Error)
	}
	next, err := b.createOn(t, r.ConversationID, "/say free again", "reject")
	if err != nil {
		t.Fatalf("conversation still wedged: %v", err)
	}
	if n := b.wait(t, next.ID, nil); n.Status != agentd.StatusCompleted {
		t.Fatalf("next run ended %s", n.Status)
	}
}

// TestWaitingIsNotRunning: the total timeout counts execution only. A run
// whose total timeout (1.5 s) passes while it waits for a decision is not
// timed out: the decision that comes after 2 s lets it complete. A run
// whose action timeout (600 ms) passes gets its pending call failed, with
// an error that says why, and goes on: the model is told, and answers.
func TestWaitingIsNotRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, run.Config{LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, SweepInterval: 100 * time.Millisecond})
	waiting := func(timeouts agentd.Timeouts) agentd.Run {
		t.Helper()
		r := b.create(t, "/call slow_effect {}\n/say done", agentd.RunParams{Timeouts: timeouts})
		r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status != agentd.StatusQueued && r.Status != agentd.StatusRunning })
		if r.Status != agentd.StatusRequiresAction {
			t.Fatalf("run is %s, want requires_action first", r.Status)
		}
		return r
	}

	decided := waiting(agentd.Timeouts{TotalMS: 1500, ActionMS: 60_000})
	time.Sleep(2 * time.Second) // past the total timeout, all of it spent waiting
	steps, _ := b.store.StepsList(context.Background(), decided.ID)
	if _, err := b.store.RunResolveAction(context.Background(), agentd.ActionParams{TenantID: "default", RunID: decided.ID,
		ToolCallID: steps[0].Calls[0].ID, Decision: agentd.DecisionResult, Result: json.RawMessage(`{"ok": true}`)}); err != nil {
		t.Fatalf("decision after the total timeout's time: %v", err)
	}
	if r := b.wait(t, decided.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
		t.Fatalf("run decided after waiting longer than its total timeout: %s/%s, want completed", r.Status, r.TerminalReason)
	}

	r := waiting(agentd.Timeouts{TotalMS: 60_000, ActionMS: 600})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run past its action timeout: %s/%s, want completed after the call failed", r.Status, r.TerminalReason)
	}
	steps, _ = b.store.StepsList(context.Background(), r.ID)
	c := steps[0].Calls[0]
	if c.Status != agentd.CallFailed || !strings.Contains(string(c.Error), `"kind": "action_timeout"`) ||
		!strings.Contains(string(c.Error), "action timeout (600ms)") {
		t.Fatalf("awaited call is %s (%s); want failed by the action timeout", c.Status, c.Error)
	}
	var resolved bool
	for _, e := range b.events(t, r.ID) {
		if e.Type == agentd.EventToolCallCompleted && strings.Contains(string(e.Data), `"resolved_by":"action_timeout"`) {
			resolved = true
		}
	}
	if !resolved {
		t.Fatal("no tool_call.completed resolved by the action timeout")
	}
}

// runTimes describes when r ran, for a failure's message.
func runTimes(r agentd.Run) string {
	return fmt.Sprintf("%s: created %s, started %s, finished %s, epoch %d, stall claims %d, lease %s",
		r.ID, r.CreatedAt.Format(time.RFC3339Nano), r.StartedAt.Format(time.RFC3339Nano),
		r.FinishedAt.Format(time.RFC3339Nano), r.Epoch, r.StallClaims, r.LeaseOwner)
}
