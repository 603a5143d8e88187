package run_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// lateDeltas delivers the deferred writes (a streamed answer's later
// deltas) as a server that answers too late does: the writer is told that
// its write failed when its context ends, and the database gets the write
// after that, once release is closed.
type lateDeltas struct {
	*persist.Store
	release chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error // of the writes delivered late
}

func (l *lateDeltas) ExecDeferred(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error) {
	<-ctx.Done()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		<-l.release
		_, err := l.Store.Exec(context.Background(), f, evs, ops...)
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
	}()
	return 0, ctx.Err()
}

// TestADeltaDeliveredAfterTheEndIsRefused: a streamed delta whose write the
// run's deadline cut, but which the database gets after the run's end
// committed, is refused by the run's fence: the terminal event stays the
// run's last.
func TestADeltaDeliveredAfterTheEndIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	late := &lateDeltas{Store: b.store, release: make(chan struct{})}
	b.start(t, run.Config{Store: late, LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, Workers: 2})
	// The deadline leaves a busy machine time to stream a delta or more.
	r := b.create(t, "/stream 100 50", agentd.RunParams{Timeouts: agentd.Timeouts{TotalMS: 2000}})
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusTimedOut {
		t.Fatalf("run ended %s/%s, want timed_out", r.Status, r.TerminalReason)
	}
	close(late.release)
	late.wg.Wait()
	if len(late.errs) == 0 {
		t.Fatal("no delta was written late")
	}
	for _, err := range late.errs {
		if !errors.Is(err, persist.ErrLeaseLost) {
			t.Fatalf("a delta written after the run's end: %v, want ErrLeaseLost", err)
		}
	}
	if evs := b.events(t, r.ID); evs[len(evs)-1].Type != agentd.EventRunTimedOut {
		t.Fatalf("last event %s, want run.timed_out", evs[len(evs)-1].Type)
	}
}
