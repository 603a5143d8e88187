package run_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"agentd/internal/event"
	"agentd/internal/persist"
	"agentd/internal/run"
	"agentd/internal/vocab"
)

func (b *bundle) createOn(t *testing.T, conv, input string, ifBusy vocab.IfBusy) (persist.Run, error) {
	t.Helper()
	r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake",
		ConversationID: conv, Params: persist.RunParams{MaxSteps: 10, IfBusy: ifBusy},
		Input: []persist.InputMessage{{Role: "user", Content: input}}})
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
			var be *persist.BusyError
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
	first := b.create(t, "/say first", persist.RunParams{}) // queued: the conversation is busy
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
	first := b.create(t, "/stream 4 30", persist.RunParams{})
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
	all := []persist.Run{b.wait(t, first.ID, nil)}
	for id := range ids {
		all = append(all, b.wait(t, id, nil))
	}
	for _, r := range all {
		if r.Status != vocab.StatusCompleted {
			t.Fatalf("run %s ended %s", r.ID, r.Status)
		}
	}
	// No two runs of the conversation overlapped.
	for i, a := range all {
		for _, c := range all[i+1:] {
			if a.StartedAt.Before(*c.FinishedAt) && c.StartedAt.Before(*a.FinishedAt) {
				t.Fatalf("runs %s and %s overlapped", a.ID, c.ID)
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
	busy := b.create(t, "/call blocker {}\n/say never", persist.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	next, err := b.createOn(t, busy.ConversationID, "/say next", "interrupt")
	if err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, busy.ID, nil); r.Status != vocab.StatusCancelled {
		t.Fatalf("busy run ended %s, want cancelled", r.Status)
	}
	if r := b.wait(t, next.ID, nil); r.Status != vocab.StatusCompleted {
		t.Fatalf("new run ended %s", r.Status)
	}
}

func TestCancelWhileAwaitingActionUnwedgesConversation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	r := b.create(t, "/call slow_effect {}\n/say never", persist.RunParams{})
	if r = b.wait(t, r.ID, nil); r.Status != vocab.StatusRequiresAction {
		t.Fatalf("run is %s, want requires_action", r.Status)
	}
	if _, err := b.createOn(t, r.ConversationID, "/say blocked", "reject"); err == nil {
		t.Fatal("a run waiting on an action did not keep its conversation busy")
	}
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if c := steps[0].Calls[0]; c.Status != vocab.CallUnknown || !strings.Contains(string(c.Error), "ended (cancelled)") {
		t.Fatalf("the awaited side effect is %s (%s), want still unknown, the cancel noted", c.Status, c.Error)
	}
	next, err := b.createOn(t, r.ConversationID, "/say free again", "reject")
	if err != nil {
		t.Fatalf("conversation still wedged: %v", err)
	}
	if n := b.wait(t, next.ID, nil); n.Status != vocab.StatusCompleted {
		t.Fatalf("next run ended %s", n.Status)
	}
}

func TestSweeperTimesOutRunWaitingPastDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, run.Config{LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, SweepInterval: 100 * time.Millisecond})
	r := b.create(t, "/call slow_effect {}\n/say never", persist.RunParams{Timeouts: persist.Timeouts{TotalMS: 1500}})
	r = b.wait(t, r.ID, func(r persist.Run) bool { return r.Status != vocab.StatusQueued && r.Status != vocab.StatusRunning })
	if r.Status != vocab.StatusRequiresAction {
		t.Fatalf("run is %s, want requires_action first", r.Status)
	}
	r = b.wait(t, r.ID, func(r persist.Run) bool { return r.Status != vocab.StatusRequiresAction })
	if r.Status != vocab.StatusTimedOut || r.TerminalReason != vocab.ReasonTimedOutTotal {
		t.Fatalf("run ended %s/%s, want timed_out/timed_out_total", r.Status, r.TerminalReason)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	// The side effect's outcome is unknown, and stays so; the step is closed.
	if c := steps[0].Calls[0]; c.Status != vocab.CallUnknown || steps[0].Status != vocab.StepFailed {
		t.Fatalf("awaited call is %s, its step %s; want unknown and failed", c.Status, steps[0].Status)
	}
	evs := b.events(t, r.ID)
	if last := evs[len(evs)-1]; last.Type != event.RunTimedOut || !strings.Contains(string(last.Data), `"unresolved_tool_calls":["`+steps[0].Calls[0].ID+`"]`) {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
}
