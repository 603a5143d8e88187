package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// runningRun creates a run and claims it, as a worker would: it is
// running, and nothing executes it.
func runningRun(t *testing.T, b *bundle) agentd.Run {
	t.Helper()
	created := b.createRun(`{"input":"hi"}`)
	c, err := b.store.RunClaim(context.Background(), "w", time.Minute)
	if err != nil || c.ID != created.ID {
		t.Fatalf("claim: %v", err)
	}
	return c.Run
}

// cancelView is what a cancel answers of the run.
type cancelView struct {
	Status            string  `json:"status"`
	CancelRequestedAt *string `json:"cancel_requested_at"`
	FinishedAt        *string `json:"finished_at"`
}

// TestCancelAnswersWhatTheRunDid: a cancel of a running run answers once
// the run has stopped, 200 and how it ended, when its executor stops it
// within the wait; 202 and the run still running, with its
// cancel_requested_at, when nothing stops it; a repeat of either with its
// Idempotency-Key answers the same.
func TestCancelAnswersWhatTheRunDid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// An executor that stops its run when told, as the engine does.
	stopping := runningRun(t, b)
	done := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if r, err := b.store.RunGet(ctx, "default", stopping.ID); err != nil || r.CancelRequestedAt != nil {
				break
			}
		}
		f := persist.Fence{RunID: stopping.ID, Epoch: stopping.Epoch, Worker: "w"}
		_, err := b.store.Exec(ctx, f, []agentd.EventIn{agentd.RunEndEvent(0, agentd.StatusCancelled, agentd.ReasonCancelled, nil, "local")},
			persist.RunEnd{ID: stopping.ID, Status: agentd.StatusCancelled, Reason: agentd.ReasonCancelled})
		done <- err
	}()
	r := b.do("POST", "/runs/"+stopping.ID+"/cancel", "", "Idempotency-Key", "stop-1")
	if err := <-done; err != nil {
		t.Fatalf("end the run: %v", err)
	}
	got := want[cancelView](t, r, http.StatusOK)
	if got.Status != "cancelled" || got.FinishedAt == nil || got.CancelRequestedAt == nil {
		t.Fatalf("a cancel its executor carried out answered %+v", got)
	}
	again := b.do("POST", "/runs/"+stopping.ID+"/cancel", "", "Idempotency-Key", "stop-1")
	if again.status != http.StatusOK || string(again.body) != string(r.body) {
		t.Fatalf("the repeat answered %d %s, not the first answer", again.status, again.body)
	}

	// A run whose executor does not stop it within the wait.
	stuck := runningRun(t, b)
	r = b.do("POST", "/runs/"+stuck.ID+"/cancel", "", "Idempotency-Key", "stop-2")
	got = want[cancelView](t, r, http.StatusAccepted)
	if got.Status != "running" || got.CancelRequestedAt == nil || got.FinishedAt != nil {
		t.Fatalf("a cancel under way answered %+v", got)
	}
	again = b.do("POST", "/runs/"+stuck.ID+"/cancel", "", "Idempotency-Key", "stop-2")
	if again.status != http.StatusAccepted || string(again.body) != string(r.body) {
		t.Fatalf("the repeat answered %d %s, not the first answer", again.status, again.body)
	}
	var view map[string]json.RawMessage
	if err := json.Unmarshal(b.do("GET", "/runs/"+stuck.ID, "").body, &view); err != nil || string(view["cancel_requested_at"]) == "null" {
		t.Fatalf("GET of a run told to stop: cancel_requested_at %s (%v)", view["cancel_requested_at"], err)
	}

	// A queued run is cancelled at once: 200, as before.
	queued := b.createRun(`{"input":"later"}`)
	if got := want[cancelView](t, b.do("POST", "/runs/"+queued.ID+"/cancel", ""), http.StatusOK); got.Status != "cancelled" {
		t.Fatalf("a queued run's cancel answered %+v", got)
	}
}
