package stream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd"
)

// batch is what a feed hands its subscribers after one read: the events it
// read (shared, read-only) and the seq up to which it has read everything.
// A batch without events only moves upTo (the feed's starting position).
type batch struct {
	events []agentd.Event
	upTo   int64
}

// subscriber is one stream's subscription to a run's feed.
type subscriber struct {
	feed *feed
	ch   chan *batch   // batches, shared by all the feed's subscribers and never changed once sent
	gone chan struct{} // closed when the Hub drops the subscriber for falling behind
}

// feed reads one run's new events once per wake-up for every subscriber of
// the run on this instance. Its goroutine runs while the run has
// subscribers.
type feed struct {
	runID string
	subs  map[*subscriber]struct{} // under Hub.mu
	wakeC chan struct{}            // capacity 1: wake-ups coalesce
	quit  chan struct{}            // closed under Hub.mu when the last subscriber leaves
	want  atomic.Int64             // the highest seq known to be committed
	read  atomic.Int64             // the highest seq handed to the subscribers; -1: not positioned

	// runGone is closed under Hub.mu when the run is found deleted: its
	// streams end (endLocked).
	runGone chan struct{}

	hmu    sync.Mutex
	handed []agentd.Event // committed events handed over by this instance's commits, not read yet

	beat beat // the run as the streams' heartbeats last read it

	// recent keeps the run's latest events this instance read, so that a
	// stream joining the run replays them from memory: subscribers of one
	// run mostly arrive together, and each replaying from the database
	// would read the same rows once per subscriber.
	recent recent
}

// notify says that events up to seq are committed.
func (f *feed) notify(seq int64) {
	for {
		cur := f.want.Load()
		if seq <= cur || f.want.CompareAndSwap(cur, seq) {
			break
		}
	}
	f.signal()
}

// maxHanded caps the events waiting in a feed's hand-over; beyond it they
// are dropped and read from the database instead.
const maxHanded = 1024

// hand gives the feed events this instance just committed, so that it need
// not read them back.
func (f *feed) hand(evs []agentd.Event) {
	f.hmu.Lock()
	defer f.hmu.Unlock()
	if len(f.handed)+len(evs) > maxHanded {
		f.handed = nil
		return
	}
	f.handed = append(f.handed, evs...)
}

// takeHanded returns the handed events that follow seq last without a gap,
// and forgets them all.
func (f *feed) takeHanded(last int64) []agentd.Event {
	f.hmu.Lock()
	evs := f.handed
	f.handed = nil
	f.hmu.Unlock()
	for len(evs) > 0 && evs[0].Seq <= last {
		evs = evs[1:]
	}
	n := 0
	for n < len(evs) && evs[n].Seq == last+1+int64(n) {
		n++
	}
	return evs[:n]
}

func (f *feed) signal() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
}

// subscribeLocked subscribes to runID's feed, starting the feed if it is the
// first subscriber. The caller holds h.mu and has checked !h.stopped.
func (h *Hub) subscribeLocked(runID string) *subscriber {
	f := h.feeds[runID]
	if f == nil {
		f = &feed{
			runID:   runID,
			subs:    map[*subscriber]struct{}{},
			wakeC:   make(chan struct{}, 1),
			quit:    make(chan struct{}),
			runGone: make(chan struct{}),
		}
		f.recent.told = -1
		f.read.Store(-1)
		h.feeds[runID] = f
		h.wg.Add(1)
		go h.runFeed(f)
	}
	s := &subscriber{feed: f, ch: make(chan *batch, subscriberBuffer), gone: make(chan struct{})}
	f.subs[s] = struct{}{}
	f.recent.share(len(f.subs) > 1)
	if evs := h.fresh.takeLocked(runID); evs != nil {
		// The run was created here a moment ago: its first stream replays
		// its first events from memory.
		f.recent.seed(evs)
	}
	h.subscribers++
	return s
}

// removeLocked ends a subscription, and the feed with its last subscriber.
// It reports whether s was still subscribed. The caller holds h.mu.
func (h *Hub) removeLocked(s *subscriber) bool {
	f := s.feed
	if _, ok := f.subs[s]; !ok {
		return false
	}
	delete(f.subs, s)
	f.recent.share(len(f.subs) > 1)
	h.subscribers--
	if len(f.subs) == 0 {
		close(f.quit)
		if h.feeds[f.runID] == f {
			delete(h.feeds, f.runID)
		}
	}
	return true
}

// fanOut hands b to every subscriber of f. A subscriber whose buffer is full
// is dropped rather than waited for: it must not slow the feed or the others.
func (h *Hub) fanOut(f *feed, b *batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.recent.add(b.events, b.upTo)
	for s := range f.subs {
		select {
		case s.ch <- b:
		default:
			h.removeLocked(s)
			close(s.gone)
			h.countDrop(dropSlow)
		}
	}
}

// deliveredLocked reports whether the feed has handed its subscribers every
// event known to be committed, and each subscriber has taken what it was
// handed. The caller holds h.mu.
func (f *feed) deliveredLocked() bool {
	if r := f.read.Load(); r < 0 || f.want.Load() > r {
		return false
	}
	for s := range f.subs {
		if len(s.ch) > 0 {
			return false
		}
	}
	return true
}

// runFeed is the goroutine of a feed. It first learns the run's last seq
// (events before it are the subscribers' own replay), then reads new events
// on each wake-up: a commit here, a notification, or the Hub's poll (see
// poller) that found the run past what the feed read. Until it is
// positioned it tries again at each poll interval.
func (h *Hub) runFeed(f *feed) {
	defer h.wg.Done()
	var retry <-chan time.Time // set while the feed is not positioned
	last := int64(-1)          // not positioned yet
	for {
		switch {
		case last < 0:
			if last = h.position(f); last < 0 {
				retry = time.After(h.poll)
			}
		default:
			if f.want.Load() > last {
				last = h.read(f, last)
			}
		}
		f.read.Store(last)
		select {
		case <-f.quit:
			return
		case <-h.ctx.Done():
			return
		case <-f.wakeC:
		case <-retry:
		}
	}
}

// position returns the run's last committed seq, and tells the subscribers,
// so that one whose replay ended before it reads the difference itself. It
// returns -1 when the database could not say. A run that is not found was
// deleted: its streams end (Forget).
func (h *Hub) position(f *feed) int64 {
	ctx, cancel := context.WithTimeout(h.ctx, dbTimeout)
	defer cancel()
	head, err := h.store.RunHead(ctx, f.runID)
	switch {
	case errors.Is(err, agentd.ErrNotFound):
		h.Forget(f.runID)
		return 0
	case err != nil:
		if h.ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream feed: read run", "run_id", f.runID, "error", err)
		}
		return -1
	}
	h.fanOut(f, &batch{upTo: head.LastEventSeq})
	return head.LastEventSeq
}

// read hands the subscribers the run's events after last: those this
// instance's commits handed over, then, when more are known to be
// committed, those it reads from the database, a page at a time. It
// returns the new last seq.
func (h *Hub) read(f *feed, last int64) int64 {
	if evs := f.takeHanded(last); len(evs) > 0 {
		last = evs[len(evs)-1].Seq
		h.fanOut(f, &batch{events: evs, upTo: last})
		if f.want.Load() <= last {
			return last
		}
	}
	for {
		ctx, cancel := context.WithTimeout(h.ctx, dbTimeout)
		evs, err := h.store.EventsAfter(ctx, f.runID, last, pageSize)
		cancel()
		if err != nil {
			if h.ctx.Err() == nil {
				h.log.WarnContext(h.ctx, "stream feed: read events", "run_id", f.runID, "error", err)
			}
			return last
		}
		if len(evs) > 0 {
			last = evs[len(evs)-1].Seq
			h.fanOut(f, &batch{events: evs, upTo: last})
		}
		if len(evs) < pageSize {
			return last
		}
		select {
		case <-f.quit:
			return last
		default:
		}
	}
}

// beat is a run read for heartbeats, shared by the streams of the run whose
// heartbeats fall close together: they read it once, not once each.
type beat struct {
	mu      sync.Mutex
	head    agentd.RunHead
	at      time.Time     // when head was read; zero: never
	loading chan struct{} // closed when the read in flight ends; nil: none
}

// set keeps head, just read by the Hub's poll.
func (b *beat) set(head agentd.RunHead) {
	b.mu.Lock()
	b.head, b.at = head, time.Now()
	b.mu.Unlock()
}

// get returns the run's head as read at most maxAge ago (by the Hub's poll,
// or here), reading it when it must; streams that need it while it is read
// wait for that read.
func (b *beat) get(ctx context.Context, store Store, runID string, maxAge time.Duration) (agentd.RunHead, error) {
	for {
		b.mu.Lock()
		if !b.at.IsZero() && time.Since(b.at) <= maxAge {
			head := b.head
			b.mu.Unlock()
			return head, nil
		}
		if wait := b.loading; wait != nil {
			b.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return agentd.RunHead{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		b.loading = done
		b.mu.Unlock()
		head, err := store.RunHead(ctx, runID)
		b.mu.Lock()
		b.loading = nil
		close(done)
		if err == nil {
			b.head, b.at = head, time.Now()
		}
		b.mu.Unlock()
		return head, err
	}
}
