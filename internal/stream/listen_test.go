package stream_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client/sse"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/stream"
)

// feedReads counts the feeds' reads of events (a stream's replay reads
// through EventsReplay, not counted), per run.
type feedReads struct {
	*persist.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *feedReads) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	c.mu.Lock()
	c.n[runID]++
	c.mu.Unlock()
	return c.Store.EventsAfter(ctx, runID, after, limit)
}

func (c *feedReads) of(runID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[runID]
}

// TestReconnectedListenerReadsOnlyWhatItMissed: when the Hub's LISTEN
// connection breaks and comes back, a run whose events were committed
// meanwhile without a notification reaching the Hub reaches its streams at
// once (not at the next slow poll), and the feed of a run that did not move
// reads nothing.
func TestReconnectedListenerReadsOnlyWhatItMissed(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	hub := stream.New(stream.Config{Poll: time.Hour})
	store := publishing(t, url, hub)
	// silent commits as another instance whose notification was lost.
	silent := persisttest.Open(t, persist.Config{URL: url})
	reads := &feedReads{Store: store, n: map[string]int{}}
	inst := newInstance(t, hub, reads, nil)
	moved, still := newRun(t, store), newRun(t, store)

	c := client(t)
	resp := get(t, c, inst.srv.URL+"/runs/"+moved.RunID+"/events", nil)
	if resp == nil {
		t.FailNow()
	}
	t.Cleanup(func() { resp.Body.Close() })
	movedEvs := make(chan sseEvent, 100)
	go func() {
		defer close(movedEvs)
		r := &sseReader{sse.NewReader(resp.Body)}
		for {
			ev, err := r.next()
			if err != nil {
				return
			}
			movedEvs <- ev
		}
	}()
	stillGot := []chan []sseEvent{make(chan []sseEvent, 1)}
	stillResp := get(t, c, inst.srv.URL+"/runs/"+still.RunID+"/events", nil)
	go func() { stillGot[0] <- readAll(t, stillResp) }()
	if !waitFor(10*time.Second, func() bool { return hub.SubscriberCount() == 2 }) {
		t.Fatalf("subscribers: %+v", hub.Stats())
	}
	waitEvent := func(seq int64, what string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-movedEvs:
				if !ok {
					t.Fatalf("the stream ended before event %d", seq)
				}
				if ev.ID == strconv.FormatInt(seq, 10) {
					return
				}
			case <-timeout:
				t.Fatalf("event %d (%s) did not reach the stream", seq, what)
			}
		}
	}
	appendEvents(t, store, moved, 1, 1, 10)
	head, err := store.RunHead(context.Background(), moved.RunID)
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(head.LastEventSeq, "committed here")

	appendEvents(t, silent, moved, 2, 2, 10)
	for deadline := time.Now().Add(10 * time.Second); persisttest.TerminateListeners(t, url) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the Hub has no LISTEN connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitEvent(head.LastEventSeq+2, "committed while the listener was down")

	complete(t, store, still)
	wantTranscripts(t, store, still.RunID, stillGot)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hub.Stop(ctx); err != nil { // its feeds' reads are over
		t.Fatal(err)
	}
	if n := reads.of(still.RunID); n != 0 {
		t.Fatalf("the feed of a run that did not move read it %d times after the listener reconnected", n)
	}
}
