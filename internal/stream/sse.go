package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/agentd/agentd"
)

// StreamRun serves the events of runID after seq after as an SSE response:
// it subscribes to the run's live events, replays the stored ones from the
// database, then tails the live ones, with no gap and no duplicate, until
// the run's terminal event, the client's departure, or Stop. runID is the
// run's canonical id (lowercase); the caller has checked that the run
// exists and that the client may read it.
//
// Before it writes anything it may return ErrEnded (the run has ended with
// no event after after: the caller answers 204, which tells EventSource to
// stop reconnecting), agentd.ErrRunNotFound (the run was deleted since the
// caller checked it: see Forget) or ErrStopped (the Hub is not serving
// streams). Once the stream has started it returns a nil error and reports
// whether the stream ended before the terminal event because of the
// client: it went away, its connection broke, or it could not keep up and
// was dropped (then it may come back with Last-Event-ID). Hub shutdown, the
// run's deletion and database errors are not the client's doing.
func (h *Hub) StreamRun(w http.ResponseWriter, r *http.Request, runID string, after int64) (clientLeft bool, err error) {
	return h.StreamRunAs(w, r, runID, after, nil)
}

// Encoder writes a run's events in another wire format than agentd's own
// SSE events (which a nil Encoder means). Each stream has an Encoder of its
// own; its methods are called from the stream's goroutine only, in order.
type Encoder interface {
	// Start sets the response's headers and returns what is written first.
	Start(h http.Header) []byte
	// Event returns what is written for ev (nil: nothing), and whether
	// the stream ends after it. followed says that events after ev are
	// already known: ev is not the run's last one yet.
	Event(ev agentd.Event, followed bool) (out []byte, end bool)
	// Heartbeat returns what is written when nothing happened for a while.
	Heartbeat() []byte
}

// StreamRunAs is StreamRun with the events written by enc (nil: agentd's
// own SSE events). The stream ends where enc says, or where StreamRun's
// does for other reasons.
func (h *Hub) StreamRunAs(w http.ResponseWriter, r *http.Request, runID string, after int64, enc Encoder) (clientLeft bool, err error) {
	pastEnd, err := h.admit(r.Context(), runID, after) // pastEnd: the client says it is past the run's last event
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	if !h.started || h.stopped || h.ctx.Err() != nil {
		h.mu.Unlock()
		return false, ErrStopped
	}
	if h.deleted.hasLocked(runID) { // since admit
		h.mu.Unlock()
		return false, agentd.ErrRunNotFound
	}
	sub := h.subscribeLocked(runID) // before the replay, so that nothing falls between the two
	// The gauge moves with the count, under h.mu: whoever reads Stats
	// then reads the same number of streams from the gauge.
	h.streams++
	h.metrics.clients.Inc()
	h.wg.Add(1)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.removeLocked(sub)
		h.streams--
		h.metrics.clients.Dec()
		h.mu.Unlock()
		h.wg.Done()
	}()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()

	s := &sse{hub: h, w: w, rc: http.NewResponseController(w), ctx: ctx, client: r.Context(), runID: runID, last: after,
		pastEnd: pastEnd, feed: sub.feed, enc: enc, resumed: after > 0}
	end := s.serve(sub)
	switch end {
	case endWriteTimeout:
		h.countDrop(dropWriteTimeout)
	case endError:
		h.log.ErrorContext(ctx, "event stream ended on a database error", "run_id", runID, "last_event_id", s.last)
	}
	return end == endClient || end == endWriteTimeout || end == endWriteError || end == endDropped, nil
}

// admit says, before a stream of runID after seq after writes anything,
// whether it may start: ErrStopped when the Hub was never started,
// agentd.ErrRunNotFound when the run was deleted, ErrEnded when it has
// stopped (ended or was interrupted) with no event after after. pastEnd
// says that the run has no event up to after yet (the client's position is
// past its log), so that the stream ends with the run rather than waiting
// for an event it will never send.
//
// It reads the run for a position past 0, and for a stream from the start
// of a run the Hub knows nothing of. A run that has a feed here exists, or
// the feed's poll finds it deleted within a poll interval and ends its
// streams; so does a run created here less than a poll interval ago (the
// client that created it streams it: the read would be one more query on
// that path), whose deletion on another instance could not be told here
// otherwise. A failed read says nothing: the stream then goes on as for a
// live run.
func (h *Hub) admit(ctx context.Context, runID string, after int64) (pastEnd bool, err error) {
	h.mu.Lock()
	started, gone := h.started, h.deleted.hasLocked(runID)
	known := h.feeds[runID] != nil || h.fresh.keptSinceLocked(runID, time.Now().Add(-h.poll))
	h.mu.Unlock()
	switch {
	case !started:
		return false, ErrStopped
	case gone:
		return false, agentd.ErrRunNotFound
	case after == 0 && known:
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	head, err := h.store.RunHead(ctx, runID)
	switch {
	case errors.Is(err, agentd.ErrNotFound):
		h.Forget(runID)
		return false, agentd.ErrRunNotFound
	case err != nil:
		return false, nil
	case after > 0 && head.Status.Stopped() && head.LastEventSeq <= after:
		return false, ErrEnded
	}
	return head.LastEventSeq < after, nil
}

// end says why a stream ended.
type end int

const (
	endNone         end = iota // not ended
	endTerminal                // the run's terminal event was sent
	endClient                  // the request's context ended
	endStopped                 // the Hub stopped
	endDropped                 // the client fell behind the feed
	endWriteTimeout            // a write missed its deadline
	endWriteError              // a write failed otherwise (the connection broke)
	endError                   // the database failed
	endDeleted                 // the run was deleted
)

// sse is one event stream being served.
type sse struct {
	hub     *Hub
	w       http.ResponseWriter
	rc      *http.ResponseController
	ctx     context.Context // ends with the client's request or the Hub
	client  context.Context // the request's
	runID   string
	pastEnd bool      // the client's position was past the run's log: end with the run
	feed    *feed     // the run's, which the stream is subscribed to
	last    int64     // the seq of the last event sent
	movedAt time.Time // when the write deadline was last moved
	scratch [64]byte  // for "id:" and "event:" lines
	enc     Encoder   // nil: agentd's own events
	nest    *nested   // the child runs it follows (nested.go); nil: none
	resumed bool      // the client came back (Last-Event-ID): it may be past agent.started events
}

func (s *sse) serve(sub *subscriber) end {
	defer s.detachAll()
	if s.enc != nil {
		start := s.enc.Start(s.w.Header())
		s.w.WriteHeader(http.StatusOK)
		if e := s.write(start); e != endNone {
			return e
		}
		return s.run(sub)
	}
	hdr := s.w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	line := strconv.AppendInt(append(s.scratch[:0], "retry: "...), s.hub.retry.Milliseconds(), 10)
	if e := s.write(append(line, "\n\n"...)); e != endNone {
		return e
	}
	return s.run(sub)
}

// run sends what the stream has to send after its start: the stored
// events, then the live ones.
func (s *sse) run(sub *subscriber) end {
	if e := s.flush(); e != endNone {
		return e
	}
	if e := s.catchUp(); e != endNone {
		return e
	}
	if e := s.attachOpen(); e != endNone {
		return e
	}
	if s.pastEnd && s.endedBehind() {
		return endTerminal
	}
	hb := time.NewTicker(s.hub.heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return s.ctxEnd()
		case <-sub.gone:
			return endDropped
		case <-s.feed.runGone:
			return endDeleted
		case b := <-sub.ch:
			if e := s.deliverPending(sub, b); e != endNone {
				return e
			}
		case nb := <-s.nestCh():
			if e := s.deliverNested(nb); e != endNone {
				return e
			}
		case <-hb.C:
			if e := s.heartbeat(); e != endNone {
				return e
			}
		}
	}
}

func (s *sse) ctxEnd() end {
	if s.client.Err() != nil {
		return endClient
	}
	return endStopped
}

// catchUp sends the stored events after s.last that the feed will not
// bring, a page at a time.
func (s *sse) catchUp() end {
	for {
		ctx, cancel := context.WithTimeout(s.ctx, dbTimeout)
		evs, more, err := s.feed.recent.eventsAfter(ctx, s.hub.store, s.runID, s.last, pageSize)
		cancel()
		if err != nil {
			if s.ctx.Err() != nil {
				return s.ctxEnd()
			}
			s.hub.log.ErrorContext(s.ctx, "replay events", "run_id", s.runID, "error", err)
			return endError
		}
		for i, ev := range evs {
			if e := s.event(ev, false, i < len(evs)-1 || more); e != endNone {
				return e
			}
		}
		if e := s.flush(); e != endNone {
			return e
		}
		if !more {
			return endNone
		}
	}
}

// deliverPending delivers b and the batches that are waiting behind it,
// then flushes: a client that fell behind gets what it missed in one write.
func (s *sse) deliverPending(sub *subscriber, b *batch) end {
	for {
		if e := s.deliver(b); e != endNone {
			return e
		}
		select {
		case b = <-sub.ch:
			continue
		default:
		}
		return s.flush()
	}
}

// deliver writes what a live batch adds to what was sent: events at or
// below s.last are dropped, and a gap before the batch (or up to its upTo)
// is replayed first.
func (s *sse) deliver(b *batch) end {
	if s.pastEnd && len(b.events) == 0 && s.endedBehind() {
		// The feed's first read of the run: events committed before it
		// come to no subscriber live, so the run may have ended unseen.
		return endTerminal
	}
	for i, ev := range b.events {
		if ev.Seq <= s.last {
			if s.pastEnd && ev.Type.Terminal() {
				return endTerminal // nothing this client has not seen will follow
			}
			continue
		}
		if ev.Seq > s.last+1 {
			if e := s.catchUp(); e != endNone {
				return e
			}
			if ev.Seq <= s.last {
				continue
			}
		}
		if e := s.event(ev, true, i < len(b.events)-1 || b.upTo > ev.Seq); e != endNone {
			return e
		}
	}
	if b.upTo > s.last {
		return s.catchUp()
	}
	return endNone
}

// event writes one stored event. After a terminal one it flushes and
// returns endTerminal, unless followed says that later events are known: a
// run that ended and was resumed goes on past its old end, and a replay
// follows it to its real end.
func (s *sse) event(ev agentd.Event, live, followed bool) end {
	if s.enc != nil {
		return s.encoded(ev, followed)
	}
	if e := s.settleNested(ev); e != endNone {
		return e
	}
	b := strconv.AppendInt(append(s.scratch[:0], "id: "...), ev.Seq, 10)
	b = append(append(append(b, "\nevent: "...), ev.Type...), '\n')
	if e := s.write(b); e != endNone {
		return e
	}
	if e := s.data(ev.Data); e != endNone {
		return e
	}
	s.last = ev.Seq
	s.hub.metrics.sent.Inc()
	if live {
		s.hub.metrics.lag.Observe(time.Since(ev.CreatedAt).Seconds())
	}
	if e := s.attachNamed(ev); e != endNone {
		return e
	}
	if ev.Type.Terminal() && !followed {
		if e := s.flush(); e != endNone {
			return e
		}
		return endTerminal
	}
	return endNone
}

// encoded writes one stored event as the stream's Encoder says.
func (s *sse) encoded(ev agentd.Event, followed bool) end {
	out, stop := s.enc.Event(ev, followed)
	if len(out) > 0 {
		if e := s.write(out); e != endNone {
			return e
		}
	}
	s.last = ev.Seq
	s.hub.metrics.sent.Inc()
	if stop {
		if e := s.flush(); e != endNone {
			return e
		}
		return endTerminal
	}
	return endNone
}

// data writes a "data:" field and the blank line that ends the event. JSON
// text has no raw newline, but a line of its own per newline keeps the
// bytes a client reassembles the same if one ever appears.
func (s *sse) data(d []byte) end {
	for {
		line, rest, more := bytes.Cut(d, []byte("\n"))
		if e := s.write(append(s.scratch[:0], "data: "...)); e != endNone {
			return e
		}
		if e := s.write(line); e != endNone {
			return e
		}
		if !more {
			return s.write([]byte("\n\n"))
		}
		if e := s.write([]byte("\n")); e != endNone {
			return e
		}
		d = rest
	}
}

// endedBehind reads whether the run has stopped behind the position of a
// client that is past its log. A stream that is past the log learns of the
// run's end from a live terminal event, which it misses when the run ended
// between its first read of the run and its subscription, or before the
// feed's first read; it reads the run after subscribing and at the feed's
// first read for that. A failed read says no: the heartbeat reads again. A
// run that is not found was deleted, which ends the stream too.
func (s *sse) endedBehind() bool {
	ctx, cancel := context.WithTimeout(s.ctx, dbTimeout)
	defer cancel()
	run, err := s.hub.store.RunHead(ctx, s.runID)
	if errors.Is(err, agentd.ErrNotFound) {
		s.hub.Forget(s.runID)
		return true
	}
	return err == nil && run.Status.Stopped() && run.LastEventSeq <= s.last
}

// heartbeat writes the un-stored heartbeat event, with the run as read for
// the run's streams at most half a heartbeat (and at most a second) ago. A
// failed read of the run skips one beat.
func (s *sse) heartbeat() end {
	if s.enc != nil {
		if e := s.write(s.enc.Heartbeat()); e != endNone {
			return e
		}
		return s.flush()
	}
	ctx, cancel := context.WithTimeout(s.ctx, dbTimeout)
	// The Hub's poll keeps the head at most a poll interval old; a read
	// here is needed only when the poll is slower than half a heartbeat.
	run, err := s.feed.beat.get(ctx, s.hub.store, s.runID, max(s.hub.heartbeat/2, s.hub.poll+s.hub.poll/2))
	cancel()
	switch {
	case errors.Is(err, agentd.ErrNotFound):
		s.hub.Forget(s.runID)
		return endDeleted
	case err != nil:
		if s.ctx.Err() != nil {
			return s.ctxEnd()
		}
		s.hub.log.WarnContext(s.ctx, "heartbeat: read run", "run_id", s.runID, "error", err)
		return endNone
	}
	if s.pastEnd && run.Status.Stopped() && run.LastEventSeq <= s.last {
		return endTerminal // the run ended behind the client's position
	}
	data, err := json.Marshal(struct {
		Status    agentd.RunStatus `json:"status"`
		Step      int              `json:"step"`
		UpdatedAt time.Time        `json:"updated_at"`
	}{run.Status, run.StepCount, run.UpdatedAt.UTC()})
	if err != nil {
		return endError // cannot happen for these types
	}
	if e := s.write([]byte("event: " + agentd.EventHeartbeat + "\n")); e != endNone {
		return e
	}
	if e := s.data(data); e != endNone {
		return e
	}
	return s.flush()
}

// write writes p under a write deadline. The response buffers small
// writes; the deadline bounds the ones that reach the connection.
func (s *sse) write(p []byte) end {
	if e := s.deadline(); e != endNone {
		return e
	}
	if _, err := s.w.Write(p); err != nil {
		return writeEnd(err)
	}
	return endNone
}

func (s *sse) flush() end {
	if e := s.deadline(); e != endNone {
		return e
	}
	if err := s.rc.Flush(); err != nil {
		return writeEnd(err)
	}
	return endNone
}

// deadline moves the write deadline to WriteTimeout from now. Events take
// several small writes, so it moves only when a tenth of the timeout has
// passed since the last move: a blocked write gets 90 to 100% of it.
func (s *sse) deadline() end {
	now := time.Now()
	if now.Sub(s.movedAt) < s.hub.writeTO/10 {
		return endNone
	}
	s.movedAt = now
	err := s.rc.SetWriteDeadline(now.Add(s.hub.writeTO))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return endWriteError
	}
	return endNone
}

func writeEnd(err error) end {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return endWriteTimeout
	}
	return endWriteError
}
