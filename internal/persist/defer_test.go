package persist_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestDeferredWritesShareATick: the deferred writes of many runs, made
// within one tick, are committed together in a transaction or two, each
// under its own run's fence (a stale one is refused, alone, and the others
// commit); each writer learns its own last seq; and a write held when group
// commit stops is committed then.
func TestDeferredWritesShareATick(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	const runs = 32
	fences := claimedRuns(t, s, runs)
	s.StartGroupCommit(1, 64, persist.DeferTick(200*time.Millisecond))
	if got := s.DeferTicks(); got != 200*time.Millisecond {
		t.Fatalf("DeferTicks %v", got)
	}
	delta := []agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "x"})}

	before := s.GroupCommitStats()
	var wg sync.WaitGroup
	lasts := make([]int64, runs)
	errs := make([]error, runs)
	start := time.Now()
	for i, f := range fences {
		wg.Go(func() { lasts[i], errs[i] = s.ExecDeferred(ctx, f, delta) })
	}
	wg.Wait()
	took := time.Since(start)
	after := s.GroupCommitStats()
	for i, err := range errs {
		if err != nil || lasts[i] != 2 {
			t.Fatalf("run %d: last seq %d, %v", i, lasts[i], err)
		}
	}
	if tx := after.Transactions - before.Transactions; tx > 2 || after.Requests-before.Requests != runs {
		t.Fatalf("%d deferred writes took %d transactions (%d requests)", runs, tx, after.Requests-before.Requests)
	}
	if took < 100*time.Millisecond {
		t.Fatalf("the deferred writes were committed after %v, before the tick", took)
	}

	// One run's fence is stale: its write is refused, and only its.
	stale := fences[0]
	stale.Epoch--
	errs = make([]error, runs)
	for i, f := range fences {
		if i == 0 {
			f = stale
		}
		wg.Go(func() { _, errs[i] = s.ExecDeferred(ctx, f, delta) })
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 0) != errors.Is(err, persist.ErrLeaseLost) || (i > 0 && err != nil) {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	for i, f := range fences {
		evs, err := s.EventsAfter(ctx, f.RunID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := 3
		if i == 0 {
			want = 2
		}
		if len(evs) != want {
			t.Fatalf("run %d has %d events, want %d", i, len(evs), want)
		}
	}

	// FlushDeferred brings the tick forward: a held write commits at once.
	held := make(chan time.Time, 1)
	go func() {
		if _, err := s.ExecDeferred(ctx, fences[2], delta); err != nil {
			t.Errorf("a write flushed early: %v", err)
		}
		held <- time.Now()
	}()
	time.Sleep(20 * time.Millisecond)
	flushed := time.Now()
	s.FlushDeferred()
	if at := <-held; at.Sub(flushed) > 150*time.Millisecond {
		t.Fatalf("the held write committed %v after FlushDeferred, as late as its tick", at.Sub(flushed))
	}

	// A write held for the tick when group commit stops is committed.
	done := make(chan error, 1)
	go func() {
		_, err := s.ExecDeferred(ctx, fences[1], delta)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	s.StopGroupCommit()
	if err := <-done; err != nil {
		t.Fatalf("a write held at the stop: %v", err)
	}
	if evs, _ := s.EventsAfter(ctx, fences[1].RunID, 0, 100); len(evs) != 4 {
		t.Fatalf("run 1 has %d events after the stop, want 4", len(evs))
	}
	// Stopped, a deferred write commits at once.
	if s.DeferTicks() != 0 {
		t.Fatal("DeferTicks after the stop")
	}
	if _, err := s.ExecDeferred(ctx, fences[1], delta); err != nil {
		t.Fatal(err)
	}
}
