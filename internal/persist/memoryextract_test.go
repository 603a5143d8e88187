package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// noPayload is a payload of no delivery: the tests here have no webhook.
func noPayload(context.Context, agentd.RunReader, agentd.OutboxEntry) (json.RawMessage, bool, error) {
	return nil, false, nil
}

// extracting is a run's memory that asks for extraction to ns.
func extracting(ns ...string) *agentd.RunMemory {
	return &agentd.RunMemory{Search: [][]string{ns}, Extract: &agentd.RunMemoryExtract{Namespace: ns, Model: "small"}}
}

// endedRun creates a run of params p with input, and ends it with status
// (cancelled: by a client, before it ran); a completed run answers out.
func endedRun(t *testing.T, s *persist.Store, p agentd.RunParams, status agentd.RunStatus, input, out string) agentd.Run {
	t.Helper()
	ctx := context.Background()
	p.MaxSteps, p.IfBusy = 4, agentd.IfBusyReject
	if status == agentd.StatusCancelled {
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "acme", Model: "m", Params: p,
			Input: []agentd.InputMessage{{Role: "user", Content: input}}})
		if err != nil {
			t.Fatal(err)
		}
		if r, err = s.RunCancel(ctx, "acme", r.ID, "key:x"); err != nil {
			t.Fatal(err)
		}
		return r
	}
	st, _, err := s.RunCreateState(ctx, persist.RunCreateParams{TenantID: "acme", Model: "m", Params: p, Actor: "key:creator",
		Input:    []agentd.InputMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: input}},
		ClaimFor: &persist.ClaimFor{Worker: "w1", TTL: time.Minute, StepID: agentd.NewID()}})
	if err != nil {
		t.Fatal(err)
	}
	reason, end := agentd.ReasonCompleted, persist.RunEnd{ID: st.Run.ID, Status: status}
	switch status {
	case agentd.StatusCompleted:
		end.Output = []agentd.Part{{Type: agentd.PartText, Text: out}}
	default:
		reason = agentd.ReasonModelError
	}
	end.Reason = reason
	if _, err := s.Exec(ctx, persist.Fence{RunID: st.Run.ID, Epoch: st.Run.Epoch, Worker: "w1"},
		[]agentd.EventIn{agentd.RunEndEvent(1, status, reason, nil, "")}, end); err != nil {
		t.Fatal(err)
	}
	return st.Run
}

func dispatchAll(t *testing.T, s *persist.Store) {
	t.Helper()
	for {
		n, err := s.OutboxDispatch(context.Background(), 100, noPayload)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

func extractions(t *testing.T, s *persist.Store, runID string) []agentd.MemoryExtraction {
	t.Helper()
	list, err := s.MemoryExtractionList(context.Background(), agentd.MemoryExtractionList{Tenant: "acme", RunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestExtractionJobOncePerCompletedRun: dispatching the outbox makes one
// extraction job for each run that completed and asked for one, whatever
// dispatches it (twice, at once, or a second completed row of the run):
// none for a run that failed or was cancelled, one whose memory is off,
// one that asked for no extraction, one not stored, or a fork.
func TestExtractionJobOncePerCompletedRun(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	want := endedRun(t, s, agentd.RunParams{Memory: extracting("users", "ann")}, agentd.StatusCompleted, "hi", "hello")
	var none []agentd.Run
	for _, c := range []struct {
		p      agentd.RunParams
		status agentd.RunStatus
	}{
		{agentd.RunParams{Memory: extracting("users", "ann")}, agentd.StatusFailed},
		{agentd.RunParams{Memory: extracting("users", "ann")}, agentd.StatusCancelled},
		{agentd.RunParams{Memory: &agentd.RunMemory{Off: true, Extract: extracting("x").Extract}}, agentd.StatusCompleted},
		{agentd.RunParams{Memory: &agentd.RunMemory{Search: [][]string{{"users"}}}}, agentd.StatusCompleted},
		{agentd.RunParams{}, agentd.StatusCompleted},
		{agentd.RunParams{Memory: extracting("users", "ann"), ForkedFrom: &agentd.ForkRef{RunID: want.ID, Step: 1}},
			agentd.StatusCompleted},
	} {
		none = append(none, endedRun(t, s, c.p, c.status, "hi", "hello"))
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.OutboxDispatch(ctx, 100, noPayload); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	dispatchAll(t, s)
	// Another completed row of the run (no path writes one; the job's
	// uniqueness holds anyway).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (run_id, tenant_id, event_type, seq) VALUES ($1, 'acme', 'run.completed', 99)`,
		want.ID); err != nil {
		t.Fatal(err)
	}
	dispatchAll(t, s)
	got := extractions(t, s, want.ID)
	if len(got) != 1 || got[0].Status != agentd.ExtractionPending || got[0].Namespace.String() != "users/ann" ||
		got[0].Model != "small" || got[0].TenantID != "acme" || got[0].Attempts != 0 {
		t.Fatalf("the completed run's jobs: %+v", got)
	}
	for _, r := range none {
		if got := extractions(t, s, r.ID); len(got) != 0 {
			t.Errorf("run %s (%s, %+v): jobs %+v", r.ID, r.Status, r.Params.Memory, got)
		}
	}
	if all := extractions(t, s, ""); len(all) != 1 {
		t.Fatalf("every job: %+v", all)
	}
	if _, err := s.MemoryExtractionGet(ctx, "other", got[0].ID); !errors.Is(err, agentd.ErrMemoryExtractionNotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
}

// claim claims up to max jobs for worker, each held for lease.
func claim(t *testing.T, s *persist.Store, worker string, max int, lease time.Duration) []agentd.MemoryExtraction {
	t.Helper()
	got, err := s.MemoryExtractionClaim(context.Background(), persist.ExtractionClaim{Worker: worker, Max: max,
		Lease: lease, Model: "server-default", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestExtractionClaimLeaseRetry: a claim holds a job for its lease (a
// second claim skips it), a lease that ends makes it due again with the
// next attempt, and the attempt that lost it can end it neither way; a
// retry makes it due at its time; an attempt left unfinished at the cap
// fails the job; the server's model fills in a run's that named none.
func TestExtractionClaimLeaseRetry(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	mem := extracting("users", "bo")
	mem.Extract.Model = ""
	r := endedRun(t, s, agentd.RunParams{Memory: mem}, agentd.StatusCompleted, "hi", "hello")
	dispatchAll(t, s)
	a := claim(t, s, "a", 5, 200*time.Millisecond)
	if len(a) != 1 || a[0].RunID != r.ID || a[0].Attempts != 1 || a[0].Status != agentd.ExtractionRunning ||
		a[0].LeasedBy != "a" || a[0].Model != "server-default" {
		t.Fatalf("first claim: %+v", a)
	}
	if b := claim(t, s, "b", 5, time.Minute); len(b) != 0 {
		t.Fatalf("a held job claimed again: %+v", b)
	}
	time.Sleep(300 * time.Millisecond)
	b := claim(t, s, "b", 5, time.Minute)
	if len(b) != 1 || b[0].Attempts != 2 || b[0].LeasedBy != "b" {
		t.Fatalf("claim after the lease ended: %+v", b)
	}
	// a's attempt lost its job: it can neither finish it nor retry it.
	if _, err := s.MemoryExtractionDone(ctx, persist.ExtractionDone{ID: a[0].ID, Attempt: 1, TenantID: "acme",
		Call: extractionCall(r, 1)}); !errors.Is(err, agentd.ErrExtractionLeaseLost) {
		t.Fatalf("done of a lost attempt: %v", err)
	}
	if err := s.MemoryExtractionRetry(ctx, persist.ExtractionRetry{ID: a[0].ID, Attempt: 1, Error: "late",
		RetryAt: time.Now()}); !errors.Is(err, agentd.ErrExtractionLeaseLost) {
		t.Fatalf("retry of a lost attempt: %v", err)
	}
	// b's attempt fails: due again in 300 ms, not before.
	if err := s.MemoryExtractionRetry(ctx, persist.ExtractionRetry{ID: b[0].ID, Attempt: 2, Error: "model 500",
		RetryAt: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	x, err := s.MemoryExtractionGet(ctx, "acme", b[0].ID)
	if err != nil || x.Status != agentd.ExtractionPending || x.Error != "model 500" || x.LeasedBy != "" {
		t.Fatalf("after a retry: %v %+v", err, x)
	}
	if c := claim(t, s, "c", 5, time.Minute); len(c) != 0 {
		t.Fatalf("claimed before its retry was due: %+v", c)
	}
	time.Sleep(400 * time.Millisecond)
	c := claim(t, s, "c", 5, 100*time.Millisecond)
	if len(c) != 1 || c[0].Attempts != 3 {
		t.Fatalf("claim of the retry: %+v", c)
	}
	// Attempt 3 of 3 is left unfinished: the next claim fails the job.
	time.Sleep(200 * time.Millisecond)
	if d := claim(t, s, "d", 5, time.Minute); len(d) != 0 {
		t.Fatalf("claimed past the cap: %+v", d)
	}
	x, err = s.MemoryExtractionGet(ctx, "acme", c[0].ID)
	if err != nil || x.Status != agentd.ExtractionFailed || x.FinishedAt == nil || x.Attempts != 3 || x.Error == "" {
		t.Fatalf("after the last attempt was left: %v %+v", err, x)
	}
	if v := x.View(); v.NextAttemptAt != nil || v.Error == nil {
		t.Fatalf("a failed job's view: %+v", v)
	}
}

// extractionCall is the ledger's row of attempt n of run r's extraction.
func extractionCall(r agentd.Run, n int) persist.LedgerInsert {
	return persist.LedgerInsert{TenantID: r.TenantID, RunID: r.ID, N: n, Kind: agentd.ModelCallExtraction,
		Model: "small", Provider: "openai", InputTokens: 100, OutputTokens: 20, Cost: 0.25, Agent: "concierge"}
}

// TestExtractionDoneAtomic: an attempt's end writes its items (with their
// provenance), its model call's ledger row and the job's end at once, or
// nothing: a write past a limit leaves no item, no ledger row, and the job
// running; an item unchanged is not written again; a retry whose model
// answered records its call.
func TestExtractionDoneAtomic(t *testing.T) {
	t.Parallel()
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), MemoryLimits: agentd.MemoryLimits{BytesPerItem: 100}})
	ctx := context.Background()
	r := endedRun(t, s, agentd.RunParams{Memory: extracting("users", "cy")}, agentd.StatusCompleted, "hi", "hello")
	dispatchAll(t, s)
	job := claim(t, s, "a", 1, time.Minute)[0]
	put := func(key, value string) agentd.MemoryWrite {
		return agentd.MemoryWrite{Namespace: job.Namespace, Key: key, Value: value, Source: agentd.MemoryFromExtraction,
			Actor: "agent:concierge", ExtractedFrom: r.ID}
	}
	calls := func() (n int, cost float64) {
		rows, err := s.Usage(ctx, agentd.UsageQuery{Tenant: "acme", From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			n, cost = n+int(row.Calls), cost+row.Cost
		}
		return n, cost
	}
	// Past the limit of an item's bytes: nothing is written.
	_, err := s.MemoryExtractionDone(ctx, persist.ExtractionDone{ID: job.ID, Attempt: 1, TenantID: "acme",
		Writes: []agentd.MemoryWrite{put("home", "Porto"), put("big", string(make([]byte, 200)))}, Call: extractionCall(r, 1)})
	var limit *agentd.MemoryLimitError
	if !errors.As(err, &limit) {
		t.Fatalf("a write past the limit: %v", err)
	}
	if _, err := s.MemoryGet(ctx, "acme", job.Namespace, "home", agentd.MemoryRead{}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("an item of the refused attempt: %v", err)
	}
	if n, _ := calls(); n != 0 {
		t.Fatalf("ledger rows of the refused attempt: %d", n)
	}
	// An item already holding its value is not written again.
	if _, err := s.MemoryPut(ctx, "acme", agentd.MemoryWrite{Namespace: job.Namespace, Key: "diet", Value: "vegetarian",
		Source: agentd.MemoryFromAPI}); err != nil {
		t.Fatal(err)
	}
	n, err := s.MemoryExtractionDone(ctx, persist.ExtractionDone{ID: job.ID, Attempt: 1, TenantID: "acme",
		Writes: []agentd.MemoryWrite{put("home", "Porto"), put("diet", "vegetarian")}, Call: extractionCall(r, 1)})
	if err != nil || n != 1 {
		t.Fatalf("done: %v, wrote %d", err, n)
	}
	it, err := s.MemoryGet(ctx, "acme", job.Namespace, "home", agentd.MemoryRead{})
	if err != nil || it.Value != "Porto" || it.Version != 1 || it.Source != agentd.MemoryFromExtraction ||
		it.ExtractedFrom != r.ID || it.Actor != "agent:concierge" {
		t.Fatalf("the item: %v %+v", err, it)
	}
	if d, err := s.MemoryGet(ctx, "acme", job.Namespace, "diet", agentd.MemoryRead{}); err != nil || d.Version != 1 ||
		d.Source != agentd.MemoryFromAPI {
		t.Fatalf("the unchanged item: %v %+v", err, d)
	}
	if n, cost := calls(); n != 1 || cost != 0.25 {
		t.Fatalf("ledger: %d calls, cost %v", n, cost)
	}
	x, err := s.MemoryExtractionGet(ctx, "acme", job.ID)
	if err != nil || x.Status != agentd.ExtractionDone || x.Items != 1 || x.FinishedAt == nil || x.LeasedBy != "" {
		t.Fatalf("the job: %v %+v", err, x)
	}
	// Done once: the attempt's second end is refused, and writes nothing.
	if _, err := s.MemoryExtractionDone(ctx, persist.ExtractionDone{ID: job.ID, Attempt: 1, TenantID: "acme",
		Writes: []agentd.MemoryWrite{put("home", "Braga")}, Call: extractionCall(r, 1)}); !errors.Is(err, agentd.ErrExtractionLeaseLost) {
		t.Fatalf("a second done: %v", err)
	}
	if it, _ := s.MemoryGet(ctx, "acme", job.Namespace, "home", agentd.MemoryRead{}); it.Value != "Porto" {
		t.Fatalf("the item after a second done: %+v", it)
	}

	// A failed attempt whose model answered is in the ledger all the same.
	r2 := endedRun(t, s, agentd.RunParams{Memory: extracting("users", "di")}, agentd.StatusCompleted, "hi", "hello")
	dispatchAll(t, s)
	job2 := claim(t, s, "a", 1, time.Minute)[0]
	call := extractionCall(r2, 1)
	if err := s.MemoryExtractionRetry(ctx, persist.ExtractionRetry{ID: job2.ID, Attempt: 1, Error: "no JSON",
		Call: &call}); err != nil {
		t.Fatal(err)
	}
	if x, _ := s.MemoryExtractionGet(ctx, "acme", job2.ID); x.Status != agentd.ExtractionFailed || x.Error != "no JSON" {
		t.Fatalf("a job that failed: %+v", x)
	}
	if n, cost := calls(); n != 2 || cost != 0.5 {
		t.Fatalf("ledger after a failed attempt: %d calls, cost %v", n, cost)
	}
}

// TestRunInput: a run's input is its user's messages, not its system
// prompt nor another run's.
func TestRunInput(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	r := endedRun(t, s, agentd.RunParams{}, agentd.StatusCompleted, "I moved to Porto", "noted")
	msgs, err := s.RunInput(context.Background(), r.ID)
	if err != nil || len(msgs) != 1 || msgs[0].Role != agentd.RoleUser || msgs[0].Content[0].Text != "I moved to Porto" {
		t.Fatalf("input: %v %+v", err, msgs)
	}
}
