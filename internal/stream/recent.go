package stream

import (
	"context"
	"slices"
	"sync"

	"github.com/agentd/agentd"
)

// recentBytes caps the event data a feed keeps in memory; above it, the
// oldest events go until half of it is left. A run's subscribers mostly
// join together, at its start, and replay the same first events; a client
// rejoining far behind reads the database as before. A feed keeps events
// only while it has more than one subscriber: a run's only stream would
// never read them again.
const recentBytes = 32 << 10

// recent is what a feed remembers for the streams that join its run: the
// latest contiguous events it or a replay read, and the seq up to which the
// feed has told its subscribers about every event. A joining stream replays
// from it what it holds, and otherwise from the database, in one read for
// the streams that need the same events at the same time.
//
// Events are never modified once read, so a slice handed out stays valid
// however recent changes later: it replaces its slice, or appends past the
// end of every slice it handed out.
type recent struct {
	mu     sync.Mutex
	events []agentd.Event    // contiguous seqs, ascending
	bytes  int               // of the events' data
	told   int64             // every event up to told went to the subscribers through the feed; -1: none yet
	loads  map[pageKey]*load // database reads in flight
	shared bool              // the feed has more than one subscriber: events are kept
	gone   bool              // the run was deleted: nothing is kept
}

// forget drops the events held and keeps none from now on: the run was
// deleted.
func (r *recent) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone, r.shared = true, false
	r.events, r.bytes = nil, 0
}

// share says whether the feed has more than one subscriber; the events held
// go when it has not. The caller holds Hub.mu.
func (r *recent) share(shared bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shared = shared && !r.gone
	if !r.shared {
		r.events, r.bytes = nil, 0
	}
}

// seed holds evs, a run's first events (contiguous from seq 1), when it
// holds nothing, whether the feed is shared or not: the first stream of a
// new feed replays them from here. The caller holds Hub.mu.
func (r *recent) seed(evs []agentd.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 && !r.gone {
		r.events, r.bytes = slices.Clip(evs), dataBytes(evs)
	}
}

// add records what the feed handed its subscribers: events (contiguous and
// ascending), and that every event up to upTo was told. The caller holds
// Hub.mu, so a stream subscribes either before this (and gets the batch) or
// after it (and finds it here).
func (r *recent) add(events []agentd.Event, upTo int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.merge(events)
	r.told = max(r.told, upTo)
}

// merge adds contiguous ascending events, while the feed is shared: they
// join the held ones when the two overlap or touch, and replace them when
// they hold them or are newer. Older, separate events are not kept. The
// caller holds r.mu.
func (r *recent) merge(evs []agentd.Event) {
	if len(evs) == 0 || !r.shared {
		return
	}
	first, last := evs[0].Seq, evs[len(evs)-1].Seq
	switch {
	case len(r.events) == 0, first <= r.lo() && last >= r.hi(), first > r.hi()+1:
		r.events, r.bytes = slices.Clone(evs), dataBytes(evs)
	case first <= r.hi()+1 && last > r.hi(): // extends the end
		added := evs[r.hi()+1-first:]
		r.events, r.bytes = append(r.events, added...), r.bytes+dataBytes(added)
	case first < r.lo() && last+1 >= r.lo(): // extends the front
		added := evs[:r.lo()-first]
		r.events, r.bytes = slices.Concat(added, r.events), r.bytes+dataBytes(added)
	default:
		return
	}
	if r.bytes <= recentBytes {
		return
	}
	k := 0
	for ; k < len(r.events)-1 && r.bytes > recentBytes/2; k++ {
		r.bytes -= len(r.events[k].Data)
	}
	// A copy, so that the dropped events are not kept alive by the array.
	r.events = slices.Clone(r.events[k:])
}

// dataBytes is the size of the events' data.
func dataBytes(evs []agentd.Event) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Data)
	}
	return n
}

func (r *recent) lo() int64 { return r.events[0].Seq }
func (r *recent) hi() int64 { return r.events[len(r.events)-1].Seq }

// held returns up to limit held events after seq after, whether it could
// answer, and whether the stream must ask again after the last of them for
// events it may not get from the feed. It can answer when it holds the
// event after after, or when the feed has told its subscribers every event
// up to after: the later ones reach a subscribed stream through the feed.
// The caller holds r.mu.
func (r *recent) held(after int64, limit int) (evs []agentd.Event, ok, more bool) {
	if len(r.events) > 0 && r.lo() <= after+1 && after < r.hi() {
		evs = r.events[after+1-r.lo():]
		evs = evs[:min(len(evs), limit)]
		return evs, true, len(evs) == limit || evs[len(evs)-1].Seq < r.told
	}
	if r.told >= 0 && after >= r.told && (len(r.events) == 0 || after >= r.hi()) {
		return nil, true, false
	}
	return nil, false, false
}

// eventsAfter returns up to limit stored events of the run after seq after,
// for the replay of a stream subscribed to the feed, and whether the stream
// must ask again after the last of them. They come from memory when recent
// holds them, and otherwise from the database; streams that need the same
// page at the same time share one read of it.
func (r *recent) eventsAfter(ctx context.Context, store Store, runID string, after int64, limit int) (evs []agentd.Event, more bool, err error) {
	key := pageKey{after, limit}
	for {
		r.mu.Lock()
		if evs, ok, more := r.held(after, limit); ok {
			r.mu.Unlock()
			return evs, more, nil
		}
		if l := r.loads[key]; l != nil {
			r.mu.Unlock()
			select {
			case <-l.done:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			if l.err != nil {
				continue // the reader's failure (it may have left): try again
			}
			// The read may have begun before this stream subscribed: what
			// the feed told its subscribers since then is read again.
			r.mu.Lock()
			last := after
			if len(l.evs) > 0 {
				last = l.evs[len(l.evs)-1].Seq
			}
			more := len(l.evs) == limit || last < r.told
			r.mu.Unlock()
			return l.evs, more, nil
		}
		l := &load{done: make(chan struct{})}
		if r.loads == nil {
			r.loads = map[pageKey]*load{}
		}
		r.loads[key] = l
		r.mu.Unlock()
		// This read begins after the stream subscribed: whatever it misses
		// reaches the stream through the feed.
		l.evs, l.err = store.EventsReplay(ctx, runID, after, limit)
		r.mu.Lock()
		delete(r.loads, key)
		close(l.done)
		if l.err == nil {
			r.merge(l.evs)
		}
		r.mu.Unlock()
		return l.evs, len(l.evs) == limit, l.err
	}
}

// pageKey names a database read of a run's events.
type pageKey struct {
	after int64
	limit int
}

// load is a database read of a run's events in flight; evs and err are set
// when done is closed.
type load struct {
	done chan struct{}
	evs  []agentd.Event
	err  error
}
