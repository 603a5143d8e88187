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

// notifiedEvents is a NotifiedPublisher that keeps what it is told, by way.
type notifiedEvents struct {
	mu               sync.Mutex
	handed, notified map[string][]agentd.Event
}

func (n *notifiedEvents) Published(string, int64) {}

func (n *notifiedEvents) PublishedEvents(runID string, evs []agentd.Event) {
	n.mu.Lock()
	n.handed[runID] = append(n.handed[runID], evs...)
	n.mu.Unlock()
}

func (n *notifiedEvents) PublishedNotified(runID string, evs []agentd.Event) {
	n.mu.Lock()
	n.notified[runID] = append(n.notified[runID], evs...)
	n.mu.Unlock()
}

// TestTickNotifiesItsRuns: with a NotifiedPublisher, the transaction of a
// tick's deferred writes notifies ChannelEvents of each run's last seq
// itself, as the run's listeners read it ("run_id:last_seq"), and the
// publisher is told with PublishedNotified, the events as stored; a write
// committed at once (Exec) is told with PublishedEvents, for the publisher
// to notify.
func TestTickNotifiesItsRuns(t *testing.T) {
	t.Parallel()
	pub := &notifiedEvents{handed: map[string][]agentd.Event{}, notified: map[string][]agentd.Event{}}
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: pub})
	ctx, cancel := context.WithCancel(context.Background())
	const runs = 4
	fences := claimedRuns(t, s, runs)
	pub.mu.Lock()
	clear(pub.handed) // the runs' creations
	pub.mu.Unlock()

	heard := make(chan string, 4*runs)
	listening := make(chan struct{})
	var once sync.Once
	var lw sync.WaitGroup
	lw.Go(func() {
		_ = s.Listen(ctx, []string{persist.ChannelEvents}, func() { once.Do(func() { close(listening) }) },
			func(_, payload string) { heard <- payload })
	})
	defer func() { cancel(); lw.Wait() }()
	<-listening

	s.StartGroupCommit(1, 64, persist.DeferTick(20*time.Millisecond))
	defer s.StopGroupCommit()
	delta := []agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "x"})}
	var wg sync.WaitGroup
	for _, f := range fences {
		wg.Go(func() {
			if _, err := s.ExecDeferred(ctx, f, delta); err != nil {
				t.Errorf("deferred write: %v", err)
			}
		})
	}
	wg.Wait()
	want := map[string]bool{}
	for _, f := range fences {
		want[f.RunID+":2"] = true // run.created, then the delta
	}
	for len(want) > 0 {
		select {
		case p := <-heard:
			delete(want, p)
		case <-time.After(10 * time.Second):
			t.Fatalf("notifications not heard: %v", want)
		}
	}
	pub.mu.Lock()
	for _, f := range fences {
		stored, err := s.EventsAfter(ctx, f.RunID, 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := pub.notified[f.RunID]
		if len(got) != 1 || len(stored) != 1 || got[0].Seq != 2 || string(got[0].Data) != string(stored[0].Data) {
			t.Errorf("run %s: told %+v, stored %+v", f.RunID, got, stored)
		}
		if len(pub.handed[f.RunID]) != 0 {
			t.Errorf("run %s: the tick's write was told as one to notify: %+v", f.RunID, pub.handed[f.RunID])
		}
	}
	pub.mu.Unlock()

	// A tick of one run's write (committed alone) notifies it too.
	if _, err := s.ExecDeferred(ctx, fences[1], delta); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-heard:
		if p != fences[1].RunID+":3" {
			t.Errorf("heard %q, want %s:3", p, fences[1].RunID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone tick's notification not heard")
	}

	if _, err := s.Exec(ctx, fences[0], delta); err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if got := pub.notified[fences[1].RunID]; len(got) != 2 || got[1].Seq != 3 {
		t.Errorf("a lone tick's write: told %+v, want seq 3 as notified", got)
	}
	if got := pub.handed[fences[0].RunID]; len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("a write committed at once: handed %+v, want seq 3 to notify", got)
	}
}
