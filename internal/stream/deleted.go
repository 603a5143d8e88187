package stream

// maxDeleted is how many deleted runs the Hub remembers, so that it refuses
// their streams without reading them. A run it has let go is read by its
// next stream (admit), which finds it missing just the same.
const maxDeleted = 4096

// deleted is the set of the last maxDeleted runs the Hub learnt were
// deleted: from Forget (a conversation deleted on this instance), from its
// poll (RunHeads answers only the runs that exist) or from a read of one
// run. The oldest go first.
type deleted struct {
	ids  map[string]struct{}
	ring [maxDeleted]string // the runs kept, in the order they came; next is the oldest
	next int
}

// putLocked remembers runID; it reports whether it was new. The caller
// holds Hub.mu.
func (d *deleted) putLocked(runID string) bool {
	if _, ok := d.ids[runID]; ok {
		return false
	}
	if d.ids == nil {
		d.ids = map[string]struct{}{}
	}
	delete(d.ids, d.ring[d.next])
	d.ring[d.next] = runID
	d.next = (d.next + 1) % maxDeleted
	d.ids[runID] = struct{}{}
	return true
}

// hasLocked reports whether runID is remembered deleted. The caller holds
// Hub.mu.
func (d *deleted) hasLocked(runID string) bool {
	_, ok := d.ids[runID]
	return ok
}

// Forget tells the Hub that runs were deleted (their conversation was, or
// retention took them): the open streams of each end at once, without a
// terminal event, a new stream of it is refused with agentd.ErrRunNotFound,
// and what the Hub kept of its events (a new run's first events, a feed's
// recent ones) goes. Other instances learn of it from their poll, which
// finds the run missing. It never blocks on the database.
func (h *Hub) Forget(runIDs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range runIDs {
		if !h.deleted.putLocked(id) {
			continue
		}
		h.fresh.takeLocked(id)
		if f := h.feeds[id]; f != nil {
			f.endLocked()
		}
	}
}

// endLocked ends the feed of a deleted run: its streams are told (runGone
// is closed, once) and what it holds of the run's events goes. The streams
// leave the feed as they end, and the feed stops with the last of them.
// The caller holds Hub.mu.
func (f *feed) endLocked() {
	select {
	case <-f.runGone:
		return
	default:
	}
	close(f.runGone)
	f.recent.forget()
	f.hmu.Lock()
	f.handed = nil
	f.hmu.Unlock()
}
