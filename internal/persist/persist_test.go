package persist_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func createRun(t *testing.T, s *persist.Store, key string) agentd.Run {
	t.Helper()
	r, _, err := s.RunCreate(context.Background(), persist.RunCreateParams{
		TenantID: "default", Model: "m", IdempotencyKey: key, RequestHash: "h1",
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: "reject"},
		Input:  []agentd.InputMessage{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return r
}

func TestClaimFenceAndLeaseLost(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	r := createRun(t, s, "")
	if r.Status != agentd.StatusQueued || r.LastEventSeq != 1 {
		t.Fatalf("new run: status %s last seq %d", r.Status, r.LastEventSeq)
	}
	a, err := s.RunClaim(ctx, "w1", time.Minute)
	if err != nil || a.ID != r.ID || a.Epoch != 1 {
		t.Fatalf("claim: %v %+v", err, a)
	}
	if _, err := s.RunClaim(ctx, "w2", time.Minute); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("second claim of a leased run: %v", err)
	}
	f1 := persist.Fence{RunID: r.ID, Epoch: a.Epoch, Worker: "w1"}
	last, err := s.Exec(ctx, f1, []agentd.EventIn{agentd.ClaimedEvent(0, a.Epoch, "w1", false, "")}, persist.StepInsert{ID: agentd.NewID(), RunID: r.ID, Seq: 1})
	if err != nil || last != 2 {
		t.Fatalf("fenced exec: %v last %d", err, last)
	}
	// The lease expires; a second worker takes over with a new epoch.
	if err := s.LeaseRelease(ctx, f1); err != nil {
		t.Fatal(err)
	}
	b, err := s.RunClaim(ctx, "w2", time.Minute)
	if err != nil || b.Epoch != 2 || b.PrevStatus != agentd.StatusRunning {
		t.Fatalf("takeover: %v epoch %d", err, b.Epoch)
	}
	_, err = s.Exec(ctx, f1, []agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "late"})}, persist.StepInsert{ID: agentd.NewID(), RunID: r.ID, Seq: 2})
	if !errors.Is(err, persist.ErrLeaseLost) {
		t.Fatalf("stale write: got %v, want ErrLeaseLost", err)
	}
	if _, err := s.LeaseExtend(ctx, f1, time.Minute); !errors.Is(err, persist.ErrLeaseLost) {
		t.Fatalf("stale extend: %v", err)
	}
	st, err := s.RunStateLoad(ctx, r.ID)
	if err != nil || len(st.Steps) != 1 || st.Run.LastEventSeq != 2 {
		t.Fatalf("state after stale write: %v steps %d last seq %d", err, len(st.Steps), st.Run.LastEventSeq)
	}
	evs, err := s.EventsAfter(ctx, r.ID, 0, 100)
	if err != nil || len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 {
		t.Fatalf("events: %v %+v", err, evs)
	}
}

func TestRunCreateIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := s.RunCreate(context.Background(), persist.RunCreateParams{
				TenantID: "default", Model: "m", IdempotencyKey: "k1", RequestHash: "h1",
				Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "hi"}},
			})
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("duplicates created different runs: %v", ids)
		}
	}
	_, _, err := s.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "m",
		IdempotencyKey: "k1", RequestHash: "other", Input: []agentd.InputMessage{{Role: "user", Content: "x"}}})
	if !errors.Is(err, agentd.ErrIdempotencyMismatch) {
		t.Fatalf("different body: %v", err)
	}
	runs, err := s.RunList(context.Background(), agentd.RunListParams{TenantID: "default", Limit: 10})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs stored: %d %v", len(runs), err)
	}
}

func TestBusyConversationRejects(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	r := createRun(t, s, "")
	_, _, err := s.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "m",
		ConversationID: r.ConversationID, Params: agentd.RunParams{IfBusy: "reject"},
		Input: []agentd.InputMessage{{Role: "user", Content: "again"}}})
	var busy *agentd.BusyError
	if !errors.As(err, &busy) || busy.RunID != r.ID {
		t.Fatalf("busy: %v", err)
	}
}

func TestClaimStartStartsTheFirstStepOnce(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	r := createRun(t, s, "")
	a, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || a.ID != r.ID || a.Epoch != 1 || a.StartedStep == "" || a.StepCount != 1 || a.LastEventSeq != 3 {
		t.Fatalf("claim: %v %+v", err, a)
	}
	st, err := s.RunStateLoad(ctx, r.ID)
	if err != nil || len(st.Steps) != 1 || st.Steps[0].ID != a.StartedStep || st.Steps[0].Seq != 1 || st.Steps[0].Status != agentd.StepRunning {
		t.Fatalf("state: %v %+v", err, st.Steps)
	}
	evs, err := s.EventsAfter(ctx, r.ID, 0, 100)
	if err != nil || len(evs) != 3 {
		t.Fatalf("events: %v %d", err, len(evs))
	}
	want := []string{
		`{"seq":2,"type":"run.started","run_id":"` + r.ID + `","step":0,"at":"`,
		`{"seq":3,"type":"step.started","run_id":"` + r.ID + `","step":1,"at":"`,
	}
	wantData := []string{`"data":{"epoch":1,"worker":"w1"}}`, `"data":{"transition":null}}`}
	for i, e := range evs[1:] {
		if e.Seq != int64(i+2) || !strings.HasPrefix(string(e.Data), want[i]) || !strings.HasSuffix(string(e.Data), wantData[i]) {
			t.Fatalf("event %d: seq %d %s", i+2, e.Seq, e.Data)
		}
	}
	// Taken over (or resumed), the run is not new: the claim starts nothing.
	if err := s.LeaseRelease(ctx, persist.Fence{RunID: r.ID, Epoch: a.Epoch, Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	b, err := s.RunClaimStart(ctx, "w2", time.Minute)
	if err != nil || b.Epoch != 2 || b.StartedStep != "" || b.StepCount != 1 || b.LastEventSeq != 3 {
		t.Fatalf("second claim: %v %+v", err, b)
	}
	if evs, _ := s.EventsAfter(ctx, r.ID, 0, 100); len(evs) != 3 {
		t.Fatalf("events after the second claim: %d", len(evs))
	}
}

// RunClaimStartID claims the one queued run it names, as RunClaimStart
// would, and nothing that is not claimable: a run behind another of its
// conversation, a run of a tenant at its cap, a run already claimed.
func TestClaimStartIDClaimsOnlyThatRun(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	older, r := createRun(t, s, ""), createRun(t, s, "")
	c, err := s.RunClaimStartID(ctx, "w1", time.Minute, r.ID)
	if err != nil || c.ID != r.ID || c.Epoch != 1 || c.PrevStatus != agentd.StatusQueued || c.StartedStep == "" || c.LastEventSeq != 3 {
		t.Fatalf("claim by id: %v %+v", err, c)
	}
	if _, err := s.RunClaimStartID(ctx, "w2", time.Minute, r.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("a claimed run claimed again: %v", err)
	}
	if got, _ := s.RunByID(ctx, older.ID); got.Status != agentd.StatusQueued {
		t.Fatalf("the older run is %s", got.Status)
	}
	// Queued behind the conversation's running run.
	next, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: r.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: "enqueue"}, Input: []agentd.InputMessage{{Role: "user", Content: "next"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunClaimStartID(ctx, "w1", time.Minute, next.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("a run behind its conversation's run claimed: %v", err)
	}
	// A cap of one run in progress per tenant: r holds it.
	capped := persisttest.Open(t, persist.Config{URL: url, TenantRunsInProgress: 1})
	if _, err := capped.RunClaimStartID(ctx, "w1", time.Minute, older.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("a run of a tenant at its cap claimed: %v", err)
	}
	if c, err := s.RunClaimStartID(ctx, "w1", time.Minute, older.ID); err != nil || c.ID != older.ID {
		t.Fatalf("without the cap: %v %+v", err, c)
	}
}

// What RunCreateState says of a new run is what a read of it finds.
func TestRunCreateStateMatchesTheStore(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	st, created, err := s.RunCreateState(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params:   agentd.RunParams{MaxSteps: 4, IfBusy: "reject"},
		Input:    []agentd.InputMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
		ClaimFor: &persist.ClaimFor{Worker: "w1", TTL: time.Minute, StepID: agentd.NewID()}})
	if err != nil || !created || st.Run.Status != agentd.StatusRunning || st.Run.LeaseOwner != "w1" {
		t.Fatalf("create: %v %v %+v", err, created, st.Run)
	}
	got, err := s.RunStateLoad(ctx, st.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 2 || len(st.Messages) != 2 || len(got.Steps) != 1 || len(st.Steps) != 1 {
		t.Fatalf("messages %d/%d steps %d/%d", len(st.Messages), len(got.Messages), len(st.Steps), len(got.Steps))
	}
	for i, m := range got.Messages {
		k := st.Messages[i]
		if k.ID != m.ID || k.Seq != m.Seq || k.Role != m.Role || k.Status != m.Status || len(k.Content) != 1 || k.Content[0] != m.Content[0] {
			t.Fatalf("message %d: created %+v, stored %+v", i, k, m)
		}
	}
	if k, g := st.Steps[0], got.Steps[0]; k.ID != g.ID || k.Seq != g.Seq || k.Status != g.Status || k.ModelAttempts != g.ModelAttempts {
		t.Fatalf("step: created %+v, stored %+v", k, g)
	}
	if st.Run.StepCount != got.Run.StepCount || st.Run.LastEventSeq != got.Run.LastEventSeq || st.Run.Epoch != got.Run.Epoch {
		t.Fatalf("run: created %+v, stored %+v", st.Run, got.Run)
	}
	// The new conversation's counter starts past its input: the next
	// message is 3, whoever appends it (once the first run ended, a new
	// run's input is numbered at once).
	if _, err := s.Exec(ctx, persist.Fence{RunID: st.Run.ID, Epoch: st.Run.Epoch, Worker: "w1"},
		[]agentd.EventIn{agentd.RunEndEvent(1, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: st.Run.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	next, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: st.Run.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: "enqueue"}, Input: []agentd.InputMessage{{Role: "user", Content: "and then"}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := s.MessagesList(ctx, st.Run.ConversationID, 0, 10)
	if err != nil || len(msgs) != 3 || msgs[2].Seq != 3 || msgs[2].RunID != next.ID {
		t.Fatalf("messages after a second run's input: %v %+v", err, msgs)
	}
}

// A run created with its conversation is one implicit transaction: when a
// statement of it fails (here, an input message of a role the table refuses,
// after the conversation and the run were sent), nothing of it is kept.
func TestRunCreateIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	for _, claim := range []*persist.ClaimFor{nil, {Worker: "w1", TTL: time.Minute, StepID: agentd.NewID()}} {
		_, _, err := s.RunCreateState(ctx, persist.RunCreateParams{TenantID: "t1", Model: "m",
			Params:   agentd.RunParams{MaxSteps: 4, IfBusy: "reject"},
			Input:    []agentd.InputMessage{{Role: "user", Content: "hi"}, {Role: "robot", Content: "beep"}},
			ClaimFor: claim})
		if err == nil {
			t.Fatalf("claim %v: a message of role robot was stored", claim)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM conversations) + (SELECT count(*) FROM runs)
		+ (SELECT count(*) FROM messages) + (SELECT count(*) FROM steps) + (SELECT count(*) FROM run_events)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows kept of failed creations", n)
	}
	// The store is still usable.
	createRun(t, s, "")
}
