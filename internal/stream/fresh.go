package stream

import "github.com/agentd/agentd"

// maxFresh is how many runs' first events the Hub keeps for streams that
// have not subscribed yet.
const maxFresh = 1024

// fresh is what the Hub keeps of the runs created here that no stream of
// this instance follows yet: the events of their creation (from seq 1),
// which the client that created a run usually asks for a moment later
// (POST /runs then GET /runs/{id}/events, or "stream": true). The run's
// first feed starts with them, so that its first stream replays them from
// memory instead of reading them back. The oldest of the last maxFresh runs
// kept go first.
type fresh struct {
	events map[string][]agentd.Event
	ring   [maxFresh]string // the runs kept, in the order they came; next is the oldest
	next   int
}

// putLocked keeps evs, a run's first committed events (a run has them put
// once). The caller holds Hub.mu.
func (f *fresh) putLocked(runID string, evs []agentd.Event) {
	if f.events == nil {
		f.events = map[string][]agentd.Event{}
	}
	delete(f.events, f.ring[f.next]) // taken already, or the oldest
	f.ring[f.next] = runID
	f.next = (f.next + 1) % maxFresh
	f.events[runID] = evs
}

// takeLocked returns and forgets the first events kept of a run, nil when
// none are. The caller holds Hub.mu.
func (f *fresh) takeLocked(runID string) []agentd.Event {
	evs, ok := f.events[runID]
	if ok {
		delete(f.events, runID)
	}
	return evs
}
