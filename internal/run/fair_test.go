package run_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
)

// createFor creates a run of tenant with input on store.
func createFor(t *testing.T, store *persist.Store, tenant, input string, reject bool) (agentd.Run, error) {
	t.Helper()
	r, _, err := store.RunCreate(context.Background(), persist.RunCreateParams{
		TenantID: tenant, Model: "fake", Params: agentd.RunParams{MaxSteps: 5},
		Input: []agentd.InputMessage{{Role: "user", Content: input}}, RejectOverQuota: reject,
	})
	return r, err
}

// countRuns counts tenant's runs by status.
func countRuns(t *testing.T, store *persist.Store, tenant string) map[agentd.RunStatus]int {
	t.Helper()
	runs, err := store.RunList(context.Background(), agentd.RunListParams{TenantID: tenant, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := map[agentd.RunStatus]int{}
	for _, r := range runs {
		n[r.Status]++
	}
	return n
}

// TestClaimsAreFairBetweenTenants: one tenant's queue does not hold back
// another tenant's run. Tenant A queues 10 runs, then tenant B one; two
// workers start: B's run is among the first three to start (the claim takes
// the tenant with the fewest running runs), not the eleventh (oldest
// first).
func TestClaimsAreFairBetweenTenants(t *testing.T) {
	b := setup(t)
	var ids []string
	for range 10 {
		r, err := createFor(t, b.store, "acme", "/stream 4 25", false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	other, err := createFor(t, b.store, "globex", "/say hi", false)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 50 * time.Millisecond})
	b.wait(t, other.ID, nil)
	for _, id := range ids {
		b.wait(t, id, nil)
	}
	type started struct {
		id string
		at time.Time
	}
	var order []started
	for _, id := range append(ids, other.ID) {
		r, err := b.store.RunByID(context.Background(), id)
		if err != nil || r.StartedAt == nil || r.Status != agentd.StatusCompleted {
			t.Fatalf("run %s: %+v %v", id, r, err)
		}
		order = append(order, started{id, *r.StartedAt})
	}
	slices.SortFunc(order, func(x, y started) int { return x.at.Compare(y.at) })
	rank := slices.IndexFunc(order, func(s started) bool { return s.id == other.ID }) + 1
	if rank > 3 {
		t.Fatalf("tenant B's run started %d of 11, behind tenant A's queue", rank)
	}
	t.Logf("tenant B's run started %d of 11", rank)
}

// TestTenantRunsInProgressCap: with a cap of 2 runs in progress per tenant,
// tenant A's 12 runs that hang hold 2 of the 4 workers and the rest wait
// queued; tenant B's run starts and completes meanwhile; on_quota: reject
// refuses A's next run with ErrQuotaExceeded and accepts B's.
func TestTenantRunsInProgressCap(t *testing.T) {
	b := setup(t)
	capped := persisttest.Open(t, persist.Config{URL: b.url, TenantRunsInProgress: 2})
	capped.StartGroupCommit(1, 64)
	t.Cleanup(capped.StopGroupCommit)
	var hanging []string
	for range 12 {
		// blocker hangs until its call is cancelled (30 s timeout).
		r, err := createFor(t, capped, "acme", "/call blocker {}", false)
		if err != nil {
			t.Fatal(err)
		}
		hanging = append(hanging, r.ID)
	}
	b.start(t, run.Config{Store: capped, Workers: 4, LeaseTTL: 10 * time.Second, PollInterval: 50 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for countRuns(t, capped, "acme")[agentd.StatusRunning] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("tenant A's runs did not start: %v", countRuns(t, capped, "acme"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := createFor(t, capped, "acme", "/say over", true); !errors.Is(err, agentd.ErrQuotaExceeded) {
		t.Fatalf("tenant A at its cap with on_quota reject: %v, want ErrQuotaExceeded", err)
	}
	other, err := createFor(t, capped, "globex", "/say hi", true)
	if err != nil {
		t.Fatalf("tenant B under its cap: %v", err)
	}
	if r := b.wait(t, other.ID, nil); r.Status != agentd.StatusCompleted {
		t.Fatalf("tenant B's run: %s %s", r.Status, r.TerminalReason)
	}
	n := countRuns(t, capped, "acme")
	if n[agentd.StatusRunning] != 2 || n[agentd.StatusQueued] != 10 {
		t.Fatalf("tenant A's runs while B's ran: %v, want 2 running and 10 queued", n)
	}
	for _, id := range hanging {
		if _, err := capped.RunCancel(context.Background(), "acme", id, "local"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range hanging {
		b.wait(t, id, nil)
	}
}

// TestQueuedRunsStartInTheOrderAccepted: runs created through the engine
// while its one worker is busy wait in its queue and start in the order
// they were accepted, each as the run before it ends, with no poll and no
// search (the poll interval is a minute); between tenants the queue is fair
// as the claim is: tenant B's run, accepted after tenant A's five, starts
// second.
func TestQueuedRunsStartInTheOrderAccepted(t *testing.T) {
	b := setup(t)
	e := b.start(t, run.Config{Workers: 1, LeaseTTL: 10 * time.Second, PollInterval: time.Minute})
	create := func(tenant, input string) agentd.Run {
		t.Helper()
		r, created, err := e.Service().Create(context.Background(), agentd.RunCreate{TenantID: tenant, Spec: agentd.RunSpec{Model: "fake",
			Params: agentd.RunParams{MaxSteps: 5}, Input: []agentd.InputMessage{{Role: "user", Content: input}}}})
		if err != nil || !created {
			t.Fatalf("create: %v (created %v)", err, created)
		}
		return r
	}
	// The first run takes the worker (at its creation, or through the
	// queue when the dispatcher's start-up search held the slot for a
	// moment): a tenant of its own, so that either way neither acme nor
	// globex was served before.
	first := create("initech", "/stream 20 25")
	b.wait(t, first.ID, func(r agentd.Run) bool { return r.Status == agentd.StatusRunning })
	var queued []agentd.Run
	for i := range 5 {
		queued = append(queued, create("acme", "/say a"+string(rune('0'+i))))
	}
	queued = append(queued, create("globex", "/say b"))
	for _, r := range queued {
		if r.Status != agentd.StatusQueued {
			t.Fatalf("run %s created %s while the worker was busy", r.ID, r.Status)
		}
	}
	var order []string
	var at []time.Time
	for _, r := range append([]agentd.Run{first}, queued...) {
		r = b.wait(t, r.ID, nil)
		if r.Status != agentd.StatusCompleted || r.StartedAt == nil {
			t.Fatalf("run %s ended %s", r.ID, r.Status)
		}
		order, at = append(order, r.ID), append(at, *r.StartedAt)
	}
	started := slices.Clone(order)
	slices.SortStableFunc(started, func(x, y string) int {
		return at[slices.Index(order, x)].Compare(at[slices.Index(order, y)])
	})
	// Accepted: first, a0..a4, b. Started: first; a0 (neither tenant has
	// a run executing, nor was served yet: a0 is older); b (still none
	// executing, and globex was served less recently); a1..a4.
	want := []string{first.ID, queued[0].ID, queued[5].ID, queued[1].ID, queued[2].ID, queued[3].ID, queued[4].ID}
	if !slices.Equal(started, want) {
		t.Fatalf("runs started in the order %v, want %v", started, want)
	}
}

// TestARunQueuedBehindItsConversationStartsWhenItEnds: a run created with
// if_busy enqueue behind its conversation's run starts as soon as that run
// ends on this instance, taking its worker, with no poll (the poll
// interval is a minute) and no other instance.
func TestARunQueuedBehindItsConversationStartsWhenItEnds(t *testing.T) {
	b := setup(t)
	e := b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: time.Minute})
	first := createVia(t, e.Service().Create, "", "/stream 10 20", "")
	b.wait(t, first.ID, func(r agentd.Run) bool { return r.Status == agentd.StatusRunning })
	next := createVia(t, e.Service().Create, first.ConversationID, "/say next", agentd.IfBusyEnqueue)
	if next.Status != agentd.StatusQueued {
		t.Fatalf("the run behind its conversation's run is %s", next.Status)
	}
	done := b.wait(t, first.ID, nil)
	if r := b.wait(t, next.ID, nil); r.Status != agentd.StatusCompleted || r.StartedAt == nil || r.StartedAt.Before(*done.FinishedAt) {
		t.Fatalf("the queued run: %s, started %v, after the first ended at %v", r.Status, r.StartedAt, done.FinishedAt)
	}
}
