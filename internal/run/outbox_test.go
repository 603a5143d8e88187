package run_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// checkOutbox checks invariant 12 on run id: its outbox holds exactly one
// row per event of its log that tells it stopped (an end, or
// run.requires_action), at that event's seq and type, of the run's tenant.
func checkOutbox(t *testing.T, ctx context.Context, store *persist.Store, r agentd.Run, evs []agentd.Event) {
	t.Helper()
	rows, err := store.OutboxOf(ctx, r.ID)
	if err != nil {
		t.Errorf("outbox of run %s: %v", r.ID, err)
		return
	}
	var want []agentd.OutboxEntry
	for _, e := range evs {
		if slices.Contains(agentd.OutboxEventTypes(), e.Type) {
			want = append(want, agentd.OutboxEntry{RunID: r.ID, TenantID: r.TenantID, EventType: e.Type, Seq: e.Seq})
		}
	}
	got := make([]agentd.OutboxEntry, len(rows))
	for i, o := range rows {
		got[i] = agentd.OutboxEntry{RunID: o.RunID, TenantID: o.TenantID, EventType: o.EventType, Seq: o.Seq}
	}
	if !slices.Equal(got, want) {
		t.Errorf("run %s (%s): outbox %+v, want one row per stop event %+v", r.ID, r.Status, got, want)
	}
}

// TestEveryStopWritesOneOutboxRow ends runs in every way a run stops (the
// executor's end, completed or failed or timed out; the executor's wait
// for a client; the cancel of a run nobody executes; an if_busy: interrupt
// of a waiting run; the interrupt of a queued run; a run resumed after its
// end and ending again), and finds one outbox row for each stop, in the
// stop's transaction (checkOutbox; every test of this package checks every
// run so when it ends).
func TestEveryStopWritesOneOutboxRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := b.engine(t, 5*time.Second).Service()

	completed := b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/say 42", agentd.RunParams{})
	timedOut := b.create(t, "/stream 50 100", agentd.RunParams{Timeouts: agentd.Timeouts{TotalMS: 300}})
	overflow, _, err := b.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake-1k",
		Params: agentd.RunParams{MaxSteps: 3}, Input: []agentd.InputMessage{{Role: "user", Content: strings.Repeat("too long ", 1000)}}})
	if err != nil {
		t.Fatal(err)
	}
	waiting := b.create(t, "/call guarded {}\n/say done", agentd.RunParams{})
	interrupted := b.create(t, "/call guarded {}\n/say done", agentd.RunParams{})
	for _, c := range []struct {
		run  agentd.Run
		want agentd.RunStatus
	}{
		{completed, agentd.StatusCompleted}, {timedOut, agentd.StatusTimedOut}, {overflow, agentd.StatusFailed},
		{waiting, agentd.StatusRequiresAction}, {interrupted, agentd.StatusRequiresAction},
	} {
		if r := b.wait(t, c.run.ID, nil); r.Status != c.want {
			t.Fatalf("run %s is %s, want %s", c.run.ID, r.Status, c.want)
		}
	}

	// A cancel ends the waiting run where it is (endLocked).
	if r, err := svc.Cancel(ctx, "default", waiting.ID, "local"); err != nil || r.Status != agentd.StatusCancelled {
		t.Fatalf("cancel: %v (%s)", err, r.Status)
	}
	// An if_busy: interrupt run cancels the waiting run before it starts.
	next, _, err := svc.Create(ctx, agentd.RunCreate{TenantID: "default", Spec: agentd.RunSpec{Model: "fake",
		ConversationID: interrupted.ConversationID, Input: []agentd.InputMessage{{Role: "user", Content: "/say next"}},
		Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyInterrupt}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, next.ID, nil); r.Status != agentd.StatusCompleted {
		t.Fatalf("the interrupting run is %s", r.Status)
	}
	if r := b.wait(t, interrupted.ID, nil); r.Status != agentd.StatusCancelled {
		t.Fatalf("the interrupted run is %s, want cancelled", r.Status)
	}
	// A resumed run ends again: a second end, a second row.
	if _, err := svc.Resume(ctx, "default", timedOut.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t, timedOut.ID, func(r agentd.Run) bool { return r.Status.Terminal() && r.FinishedAt != nil && r.Epoch > 1 }); !r.Status.Terminal() {
		t.Fatalf("the resumed run is %s", r.Status)
	}

	ran := []agentd.Run{completed, timedOut, overflow, waiting, interrupted, next}
	for _, r := range ran {
		r, err := b.store.RunGet(ctx, "default", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkOutbox(t, ctx, b.store, r, b.events(t, r.ID))
	}
	rows, err := b.store.OutboxOf(ctx, timedOut.ID)
	if err != nil || len(rows) != 2 {
		t.Fatalf("the resumed run has %d outbox rows (%v), want 2", len(rows), err)
	}
}

// TestInterruptOfAQueuedRunWritesItsOutboxRow: a queued run nobody
// executes, interrupted because its stream's client left, ends with its
// event and its row in one transaction.
func TestInterruptOfAQueuedRunWritesItsOutboxRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.create(t, "/say never", agentd.RunParams{OnDisconnect: agentd.OnDisconnectInterrupt})
	if _, err := b.store.RunInterrupt(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	r, err := b.store.RunGet(ctx, "default", r.ID)
	if err != nil || r.Status != agentd.StatusInterrupted {
		t.Fatalf("run is %s (%v), want interrupted", r.Status, err)
	}
	evs := b.events(t, r.ID)
	checkOutbox(t, ctx, b.store, r, evs)
	if rows, _ := b.store.OutboxOf(ctx, r.ID); len(rows) != 1 || rows[0].EventType != agentd.EventRunInterrupted {
		t.Fatalf("outbox %+v, want one run.interrupted", rows)
	}
}
