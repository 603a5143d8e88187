package stream

import (
	"context"
	"time"

	"github.com/agentd/agentd"
)

// stops reports whether ev says that its run stopped where a client is to
// look: it ended, was interrupted, or waits for a decision.
func stops(ev agentd.Event) bool {
	return ev.Type.Terminal() || ev.Type == agentd.EventRunRequiresAction
}

// waitPoll is how often a wait whose subscription the feed dropped reads
// the run's events instead.
const waitPoll = 200 * time.Millisecond

// WaitStop waits until run runID has an event after seq after that stops
// it (a terminal event, run.interrupted, run.requires_action), or until
// ctx ends: stopped says which. It follows the run's feed as a stream
// does, so that a wait costs no query while nothing happens; a run this
// instance does not execute is seen through the notifications every
// instance gets. Errors: ErrStopped, agentd.ErrRunNotFound (deleted), and
// the database's.
func (h *Hub) WaitStop(ctx context.Context, runID string, after int64) (stopped bool, err error) {
	h.mu.Lock()
	if !h.started || h.stopped || h.ctx.Err() != nil {
		h.mu.Unlock()
		return false, ErrStopped
	}
	if h.deleted.hasLocked(runID) {
		h.mu.Unlock()
		return false, agentd.ErrRunNotFound
	}
	sub := h.subscribeLocked(runID) // before the read, so that nothing falls between the two
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.removeLocked(sub)
		h.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()
	last := after
	var ticker *time.Ticker
	catchUp := func() (bool, error) { return h.waitCatchUp(ctx, sub, runID, &last) }
	var poll <-chan time.Time // set once the feed dropped the subscription
	defer func() {
		if poll != nil {
			ticker.Stop()
		}
	}()
	for read := true; ; {
		if read {
			if done, err := catchUp(); done || err != nil {
				return done, ctxErr(ctx, err)
			}
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-sub.feed.runGone:
			return false, agentd.ErrRunNotFound
		case <-sub.gone:
			sub.gone = nil // closed: read the run instead, now and then
			ticker = time.NewTicker(waitPoll)
			poll, read = ticker.C, true
		case <-poll:
			read = true
		case b := <-sub.ch:
			read = false
			for _, ev := range b.events {
				switch {
				case ev.Seq <= last:
				case ev.Seq > last+1:
					read = true // a gap: what it missed is read first
				case stops(ev):
					return true, nil
				default:
					last = ev.Seq
				}
				if read {
					break
				}
			}
			read = read || b.upTo > last
		}
	}
}

// ctxErr is err, or nil when ctx ended (the wait's end is no error).
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// waitCatchUp reads run runID's events after *last for WaitStop: true when
// one stops the run.
func (h *Hub) waitCatchUp(ctx context.Context, sub *subscriber, runID string, last *int64) (bool, error) {
	for {
		rctx, rcancel := context.WithTimeout(ctx, dbTimeout)
		evs, more, err := sub.feed.recent.eventsAfter(rctx, h.store, runID, *last, pageSize)
		rcancel()
		if err != nil {
			return false, err
		}
		for _, ev := range evs {
			if ev.Seq > *last {
				*last = ev.Seq
				if stops(ev) {
					return true, nil
				}
			}
		}
		if !more {
			return false, nil
		}
	}
}
