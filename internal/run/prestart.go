package run

import (
	"maps"
	"slices"
	"sync"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// prestarted holds the first attempts committed with a step's model output
// (see startsWithOutput) until the tool is invoked. Calls run in parallel
// take theirs concurrently.
type prestarted struct {
	mu    sync.Mutex
	calls map[string]prestart // by tool call id
}

type prestart struct {
	attemptID, callID, name string
	step, position          int
}

// set replaces what is held by calls.
func (p *prestarted) set(calls map[string]prestart) {
	p.mu.Lock()
	p.calls = calls
	p.mu.Unlock()
}

// take returns the attempt committed for the call, if any, and forgets it:
// the caller invokes the tool under it.
func (p *prestarted) take(toolCallID string) (attemptID string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.calls[toolCallID]
	delete(p.calls, toolCallID)
	return s.attemptID, ok
}

// unbegun closes the attempts never invoked (the run stops first: cancel,
// interrupt, deadline, shutdown), so that none is left running: each
// attempt fails as not begun and its call is planned again, to be attempted
// when the run goes on. It returns the ops and events that say so.
func (p *prestarted) unbegun() ([]persist.Op, []agentd.EventIn) {
	p.mu.Lock()
	calls := p.calls
	p.calls = nil
	p.mu.Unlock()
	ids := slices.SortedFunc(maps.Keys(calls), func(a, b string) int { return calls[a].position - calls[b].position })
	var ops []persist.Op
	var evs []agentd.EventIn
	for _, id := range ids {
		s := calls[id]
		errData := agentd.ErrorDetail{Kind: agentd.ToolErrNotBegun, Message: "the run stopped before the attempt began"}
		ops = append(ops, persist.AttemptFinish{ID: s.attemptID, Status: agentd.AttemptFailed, Error: &errData},
			persist.ToolCallFinish{ID: id, Status: agentd.CallPlanned})
		evs = append(evs, agentd.EventOf(s.step, agentd.ToolAttemptFailedData{Attempt: 1, CallID: s.callID, Error: errData,
			Name: s.name, ToolCallID: id}))
	}
	return ops, evs
}
