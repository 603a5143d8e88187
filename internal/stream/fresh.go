package stream

import (
	"time"

	"github.com/agentd/agentd"
)

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
	runs map[string]freshRun
	ring [maxFresh]string // the runs kept, in the order they came; next is the oldest
	next int
}

// freshRun is a run's first events and when they were kept.
type freshRun struct {
	events []agentd.Event
	at     time.Time
}

// putLocked keeps evs, a run's first committed events (a run has them put
// once). The caller holds Hub.mu.
func (f *fresh) putLocked(runID string, evs []agentd.Event) {
	if f.runs == nil {
		f.runs = map[string]freshRun{}
	}
	delete(f.runs, f.ring[f.next]) // taken already, or the oldest
	f.ring[f.next] = runID
	f.next = (f.next + 1) % maxFresh
	f.runs[runID] = freshRun{events: evs, at: time.Now()}
}

// takeLocked returns and forgets the first events kept of a run, nil when
// none are. The caller holds Hub.mu.
func (f *fresh) takeLocked(runID string) []agentd.Event {
	r, ok := f.runs[runID]
	if ok {
		delete(f.runs, runID)
	}
	return r.events
}

// keptSinceLocked reports whether the first events of a run were kept after
// since: the run was created here since then. The caller holds Hub.mu.
func (f *fresh) keptSinceLocked(runID string, since time.Time) bool {
	r, ok := f.runs[runID]
	return ok && r.at.After(since)
}
