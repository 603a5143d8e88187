package stream

import (
	"testing"
	"time"
)

// TestForgetDropsWhatTheHubKept: forgetting deleted runs drops the first
// events the Hub kept of a new one and the recent events of a shared feed,
// keeps none of theirs afterwards, and tells the feed's streams, once.
func TestForgetDropsWhatTheHubKept(t *testing.T) {
	h := New(Config{})
	h.PublishedEvents("new", evs(1, 3, 10))
	f := &feed{runID: "followed", subs: map[*subscriber]struct{}{}, runGone: make(chan struct{})}
	f.recent.told = -1
	f.recent.share(true)
	f.recent.add(evs(1, 5, 10), 5)
	f.hand(evs(6, 6, 10))
	h.mu.Lock()
	h.feeds[f.runID] = f
	kept := h.fresh.keptSinceLocked("new", time.Time{}) && len(f.recent.events) == 5
	h.mu.Unlock()
	if !kept {
		t.Fatal("the Hub kept nothing to forget")
	}

	h.Forget("new", f.runID)
	h.Forget(f.runID) // again: nothing more happens
	h.mu.Lock()
	fresh, deleted := h.fresh.keptSinceLocked("new", time.Time{}), h.deleted.hasLocked("new") && h.deleted.hasLocked(f.runID)
	h.mu.Unlock()
	if fresh || !deleted {
		t.Fatalf("after Forget: first events kept %v, runs known deleted %v", fresh, deleted)
	}
	select {
	case <-f.runGone:
	default:
		t.Fatal("the feed's streams were not told")
	}
	f.recent.share(true)
	f.recent.add(evs(6, 8, 10), 8)
	f.recent.seed(evs(1, 2, 10))
	if n := len(f.recent.events); n != 0 || len(f.takeHanded(5)) != 0 {
		t.Fatalf("the deleted run's feed keeps %d events", n)
	}
}
