package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestClaimNextInTheStopsTransaction: a stop's write that carries the claim
// of the next queued run (persist.ClaimNext) claims it in its own
// transaction, after the stop: a run enqueued behind the stopping run of
// its conversation is claimed with its first step started and its pending
// input numbered. A claim that the server refuses does not fail the write
// it goes with: the write commits without it.
func TestClaimNextInTheStopsTransaction(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	s.StartGroupCommit(1, 64)
	t.Cleanup(s.StopGroupCommit)
	ctx := context.Background()
	first, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || c1.ID != first.ID {
		t.Fatalf("claim the first run: %v", err)
	}
	second, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: first.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyEnqueue}, Input: []agentd.InputMessage{{Role: "user", Content: "q2"}}})
	if err != nil || second.Status != agentd.StatusQueued {
		t.Fatalf("enqueue: %v (%s)", err, second.Status)
	}
	stop := func(c persist.Claim, next *persist.ClaimNext) {
		t.Helper()
		f := persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w1"}
		end := persist.RunEnd{ID: c.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}
		ev := agentd.RunEndEvent(1, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")
		if _, err := s.Exec(ctx, f, []agentd.EventIn{ev}, end, next); err != nil {
			t.Fatalf("stop of %s with the claim of the next: %v", c.ID, err)
		}
		if r, err := s.RunByID(ctx, c.ID); err != nil || r.Status != agentd.StatusCompleted {
			t.Fatalf("stopped run: %s %v", r.Status, err)
		}
	}

	next := s.ClaimNext(second.ID, "w1", time.Minute)
	stop(c1, next)
	c2, claimed := next.Claimed()
	if !claimed || c2.ID != second.ID || c2.Status != agentd.StatusRunning || c2.Epoch != 1 || c2.LeaseOwner != "w1" ||
		c2.StartedStep == "" || c2.InputNumbered != 1 || c2.PrevStatus != agentd.StatusQueued {
		t.Fatalf("the claim of the run behind: claimed %v, %+v", claimed, c2)
	}
	evs, err := s.EventsAfter(ctx, second.ID, 0, 100)
	if err != nil || len(evs) != int(c2.LastEventSeq) || evs[len(evs)-1].Type != agentd.EventStepStarted {
		t.Fatalf("the claimed run's events (last seq %d): %v %+v", c2.LastEventSeq, err, evs)
	}

	// The server refuses the claim (no run has that id's syntax): the stop
	// commits all the same, and nothing is claimed.
	bad := s.ClaimNext("not-a-run", "w1", time.Minute)
	stop(c2, bad)
	if _, claimed := bad.Claimed(); claimed {
		t.Fatal("a refused claim reports a claim")
	}
	// A run that is not claimable (cancelled) is not claimed, and the stop
	// commits.
	third := createRun(t, s, "")
	c3, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || c3.ID != third.ID {
		t.Fatalf("claim the third run: %v", err)
	}
	fourth := createRun(t, s, "")
	if _, err := s.RunCancel(ctx, "default", fourth.ID, "local"); err != nil {
		t.Fatal(err)
	}
	gone := s.ClaimNext(fourth.ID, "w1", time.Minute)
	stop(c3, gone)
	if _, claimed := gone.Claimed(); claimed {
		t.Fatal("claimed a cancelled run")
	}
}
