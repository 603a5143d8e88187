package stream

import "agentd/internal/persist"

// maxFresh is how many runs' first events the Hub keeps for streams that
// have not subscribed yet.
const maxFresh = 1024

// fresh is what the Hub keeps of the runs created here that no stream of
// this instance follows yet: the events of their creation (from seq 1),
// which the client that created a run usually asks for a moment later
// (POST /runs then GET /runs/{id}/events, or "stream": true). The run's
// first feed starts with them, so that its first stream replays them from
// memory instead of reading them back. The oldest go past maxFresh runs.
type fresh struct {
	events map[string][]persist.Event
	order  []string // run ids, oldest first; may name runs already taken
}

// putLocked keeps evs, a run's first committed events. The caller holds
// Hub.mu.
func (f *fresh) putLocked(runID string, evs []persist.Event) {
	if f.events == nil {
		f.events = map[string][]persist.Event{}
	}
	if _, ok := f.events[runID]; ok {
		return
	}
	for len(f.events) >= maxFresh && len(f.order) > 0 {
		delete(f.events, f.order[0])
		f.order = f.order[1:]
	}
	if len(f.order) >= 2*maxFresh { // ids of runs taken meanwhile
		f.order = compact(f.order, f.events)
	}
	f.events[runID] = evs
	f.order = append(f.order, runID)
}

// takeLocked returns and forgets the first events kept of a run, nil when
// none are. The caller holds Hub.mu.
func (f *fresh) takeLocked(runID string) []persist.Event {
	evs, ok := f.events[runID]
	if ok {
		delete(f.events, runID)
	}
	return evs
}

// compact returns the ids of order still in events, in order, in a new
// slice.
func compact(order []string, events map[string][]persist.Event) []string {
	kept := make([]string, 0, len(events))
	for _, id := range order {
		if _, ok := events[id]; ok {
			kept = append(kept, id)
		}
	}
	return kept
}
