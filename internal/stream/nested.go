package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/agentd/agentd"
)

// A run's own stream forwards the events of the child runs of its calls of
// sub-agents (DESIGN: sub-agents), so that a client sees a child start,
// stream its text, call its tools and end, nested under the call that
// started it. A forwarded event is an SSE event named agent.event
// (agentd.EventAgentEvent) whose data is the child's own envelope (its
// run_id names the child, its seq is the child's), with no id: the
// stream's Last-Event-ID stays the parent's. A stream attaches to a child
// when it sends the agent.started that names it (a grandchild's comes
// forwarded in turn), and to the run's open children as it starts (a
// client that reconnects after an agent.started); it sends a child's
// events from its first, so a client that comes back may see some again,
// and tells them apart by run_id and seq. A child that ended, or that
// fell behind its feed, is left; the child's own stream is the whole of
// it. Encoders (the AI SDK's, the Responses API's) get the run's own
// events only.

// maxNested caps the child runs one stream follows.
const maxNested = 64

// nested is what a stream knows of the children it follows.
type nested struct {
	ctx    context.Context // ends when the stream does
	cancel context.CancelFunc
	ch     chan nestedBatch // what the children's feeds hand, one goroutine a child
	runs   map[string]*nestedRun
	wg     sync.WaitGroup
}

// nestedRun is one child the stream follows (sub nil: left).
type nestedRun struct {
	sub  *subscriber
	last int64
}

// nestedBatch is a batch of child runID's feed; nil b: the feed dropped
// the subscription for falling behind.
type nestedBatch struct {
	runID string
	b     *batch
}

// nestCh is the channel of the children's batches (nil, which never
// delivers, before the stream follows any).
func (s *sse) nestCh() <-chan nestedBatch {
	if s.nest == nil {
		return nil
	}
	return s.nest.ch
}

// attachOpen follows the children of the run that have not ended, for a
// stream of a client that came back, which may be past their
// agent.started (a failed read: none).
func (s *sse) attachOpen() end {
	if s.enc != nil || !s.resumed {
		return endNone
	}
	ctx, cancel := context.WithTimeout(s.ctx, dbTimeout)
	ids, err := s.hub.store.ChildRuns(ctx, s.runID)
	cancel()
	if err != nil {
		s.hub.log.WarnContext(s.ctx, "read the open children of a run", "run_id", s.runID, "error", err)
		return endNone
	}
	for _, id := range ids {
		if e := s.attach(id); e != endNone {
			return e
		}
	}
	return endNone
}

// attachNamed follows the child that ev, an agent.started of the run or
// of a child it follows, names.
func (s *sse) attachNamed(ev agentd.Event) end {
	if s.enc != nil || ev.Type != agentd.EventAgentStarted {
		return endNone
	}
	var env struct {
		Data struct {
			RunID string `json:"run_id"`
		} `json:"data"`
	}
	if json.Unmarshal(ev.Data, &env) != nil || env.Data.RunID == "" {
		return endNone
	}
	return s.attach(env.Data.RunID)
}

// attach subscribes the stream to child runID's feed, once, and sends its
// stored events.
func (s *sse) attach(runID string) end {
	if s.nest == nil {
		ctx, cancel := context.WithCancel(s.ctx)
		s.nest = &nested{ctx: ctx, cancel: cancel, ch: make(chan nestedBatch, subscriberBuffer), runs: map[string]*nestedRun{}}
	}
	n := s.nest
	if _, ok := n.runs[runID]; ok || len(n.runs) >= maxNested {
		return endNone
	}
	h := s.hub
	h.mu.Lock()
	if h.stopped || h.deleted.hasLocked(runID) {
		h.mu.Unlock()
		return endNone
	}
	sub := h.subscribeLocked(runID)
	h.mu.Unlock()
	r := &nestedRun{sub: sub}
	n.runs[runID] = r
	n.wg.Go(func() { n.relay(runID, sub) })
	return s.nestedCatchUp(runID, r)
}

// relay hands the batches of one child's subscription to the stream, until
// the stream ends or the feed drops it.
func (n *nested) relay(runID string, sub *subscriber) {
	for {
		select {
		case b := <-sub.ch:
			select {
			case n.ch <- nestedBatch{runID: runID, b: b}:
			case <-n.ctx.Done():
				return
			}
		case <-sub.gone:
			select {
			case n.ch <- nestedBatch{runID: runID}:
			case <-n.ctx.Done():
			}
			return
		case <-n.ctx.Done():
			return
		}
	}
}

// detachAll ends the stream's subscriptions to children, and their relays.
func (s *sse) detachAll() {
	if s.nest == nil {
		return
	}
	s.nest.cancel()
	s.nest.wg.Wait()
	for id := range s.nest.runs {
		s.detach(id)
	}
}

// detach leaves child runID: its subscription ends, and it is not
// followed again.
func (s *sse) detach(runID string) {
	r := s.nest.runs[runID]
	if r == nil || r.sub == nil {
		return
	}
	s.hub.mu.Lock()
	s.hub.removeLocked(r.sub)
	s.hub.mu.Unlock()
	r.sub = nil
}

// deliverNested forwards what a child's batch adds to what was forwarded
// of it, replaying a gap first.
func (s *sse) deliverNested(nb nestedBatch) end {
	r := s.nest.runs[nb.runID]
	if r == nil || r.sub == nil {
		return endNone
	}
	if nb.b == nil {
		s.detach(nb.runID) // it fell behind: its own stream has it
		return endNone
	}
	for _, ev := range nb.b.events {
		if ev.Seq <= r.last {
			continue
		}
		if ev.Seq > r.last+1 {
			if e := s.nestedCatchUp(nb.runID, r); e != endNone {
				return e
			}
			if r.sub == nil {
				return s.flush() // it ended
			}
			if ev.Seq <= r.last {
				continue
			}
		}
		if e := s.forward(nb.runID, r, ev); e != endNone {
			return e
		}
		if r.sub == nil {
			return s.flush()
		}
	}
	if nb.b.upTo > r.last {
		if e := s.nestedCatchUp(nb.runID, r); e != endNone {
			return e
		}
	}
	return s.flush()
}

// nestedCatchUp forwards the stored events of child runID after r.last. A
// failed read leaves the child.
func (s *sse) nestedCatchUp(runID string, r *nestedRun) end {
	for r.sub != nil {
		// From the database, not the feed's memory: that may hold only the
		// child's first events, the rest to come from its feed, and the
		// parent's end may come first.
		ctx, cancel := context.WithTimeout(s.ctx, dbTimeout)
		evs, err := s.hub.store.EventsReplay(ctx, runID, r.last, pageSize)
		more := len(evs) == pageSize
		cancel()
		if err != nil {
			if s.ctx.Err() != nil {
				return s.ctxEnd()
			}
			s.hub.log.WarnContext(s.ctx, "replay a child run's events", "run_id", runID, "error", err)
			s.detach(runID)
			return endNone
		}
		for _, ev := range evs {
			if e := s.forward(runID, r, ev); e != endNone {
				return e
			}
		}
		if !more {
			break
		}
	}
	return endNone
}

// settleNested forwards, before ev of the run is sent, what the children
// it follows have committed: a child's end comes before the end of the
// call it answers, and before the run's, whatever order the feeds hand
// them in.
func (s *sse) settleNested(ev agentd.Event) end {
	if s.nest == nil || !(ev.Type.Terminal() || ev.Type == agentd.EventToolCallCompleted &&
		bytes.Contains(ev.Data, []byte(`"resolved_by":"`+agentd.ResolvedByAgent+`"`))) {
		return endNone
	}
	for id, r := range s.nest.runs {
		if r.sub != nil {
			if e := s.nestedCatchUp(id, r); e != endNone {
				return e
			}
		}
	}
	return endNone
}

// forward writes one event of child runID as agent.event, follows the
// child it starts in turn, and leaves the child at its end.
func (s *sse) forward(runID string, r *nestedRun, ev agentd.Event) end {
	if e := s.write([]byte("event: " + agentd.EventAgentEvent + "\n")); e != endNone {
		return e
	}
	if e := s.data(ev.Data); e != endNone {
		return e
	}
	r.last = ev.Seq
	s.hub.metrics.sent.Inc()
	if ev.Type.Terminal() {
		s.detach(runID)
		return endNone
	}
	return s.attachNamed(ev)
}
