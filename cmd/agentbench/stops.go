package main

import (
	"slices"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// stops is the store's Publisher of a benchmark that drives the engine in
// this process: it calls fn with the status of each run whose executor
// committed the event that says it stopped (its end, or
// run.requires_action), as the store hands the executor's commits to its
// publisher. fn must not block for long: it runs after the commit, on the
// committer's goroutine.
type stops func(runID string, status agentd.RunStatus)

var _ persist.Publisher = stops(nil)

// Published implements persist.Publisher: a commit whose events are not
// handed over (a creation, a claim) stops no run of a benchmark.
func (stops) Published(string, int64) {}

// PublishedEvents implements persist.Publisher.
func (fn stops) PublishedEvents(runID string, evs []agentd.Event) {
	for _, e := range evs {
		if !slices.Contains(agentd.OutboxEventTypes(), e.Type) {
			continue
		}
		status := agentd.StatusRequiresAction
		for _, s := range agentd.RunStatuses() {
			if s.EndEvent() == e.Type {
				status = s
			}
		}
		fn(runID, status)
	}
}
