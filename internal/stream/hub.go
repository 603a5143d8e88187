package stream

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// Store is what the Hub needs of persistence.
type Store interface {
	// EventsAfter returns up to limit events of a run after seq, in order.
	EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error)
	// EventsReplay is EventsAfter for a client's replay of stored events,
	// which a read replica may serve (the feeds' tails use EventsAfter).
	EventsReplay(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error)
	// RunHead returns a run's head; persist.ErrNotFound when there is none.
	RunHead(ctx context.Context, id string) (agentd.RunHead, error)
	// Listen calls fn for each notification on channels, reconnecting until
	// ctx ends, and onConnect after each (re)connection. It returns ctx's error.
	Listen(ctx context.Context, channels []string, onConnect func(), fn func(channel, payload string)) error
	// NotifyMany sends one notification per payload on channel, in one statement.
	NotifyMany(ctx context.Context, channel string, payloads []string) error
	// RunHeads returns the heads of the runs that exist, in one query.
	RunHeads(ctx context.Context, ids []string) ([]agentd.RunHead, error)
	// ChildRuns returns the ids of the child runs of a run's calls of
	// sub-agents that have not ended for good.
	ChildRuns(ctx context.Context, parentID string) ([]string, error)
}

// Defaults of Config.
const (
	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultPoll         = 2 * time.Second
	DefaultNotifyDelay  = 5 * time.Millisecond
	DefaultRetry        = 2 * time.Second
)

const (
	// pageSize is how many events one database read returns, for replays
	// and for feeds.
	pageSize = 1000
	// subscriberBuffer is how many feed batches a subscriber may have
	// waiting before it is dropped. A batch is one feed read (one commit, or
	// one page), shared by every subscriber of the run, so the buffer costs
	// slice headers, not copies of events.
	subscriberBuffer = 128
	// dbTimeout caps each database call the Hub makes.
	dbTimeout = 10 * time.Second
)

// Errors of StreamRun, returned before anything is written.
var (
	// ErrStopped: the Hub is not serving streams: it was stopped (the
	// instance is shutting down), or never started. It is also the cause of
	// the Hub's context once Stop was called.
	ErrStopped = errors.New("stream hub stopped")
	// ErrEnded: the run has ended and has no event after the position asked
	// for; nothing more will come.
	ErrEnded = errors.New("run ended: no event after this position")
)

// Config configures a Hub. Zero durations take the defaults above.
type Config struct {
	Logger *slog.Logger // nil: discard
	// Heartbeat is the interval of the un-stored heartbeat event.
	Heartbeat time.Duration
	// WriteTimeout is the deadline of each write to a client; a client that
	// does not take the bytes in time is dropped.
	WriteTimeout time.Duration
	// Poll is how often the Hub reads the last seq of every run it has
	// feeds for, in one query, even without a wake-up, so that a lost
	// notification only delays.
	Poll time.Duration
	// NotifyDelay is the window over which outgoing notifications are
	// coalesced (one per run, the highest seq).
	NotifyDelay time.Duration
	// Registerer receives the Hub's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Retry is the reconnection delay suggested to clients (SSE "retry:").
	Retry time.Duration
}

// Stats counts what a Hub holds now, for tests and debugging.
type Stats struct {
	Feeds       int   // runs with a feed on this instance
	Subscribers int   // subscriptions across all feeds
	Streams     int   // open SSE responses
	Dropped     int64 // streams ended by the Hub because the client could not keep up, since New
}

// Hub fans a run's committed events out to its SSE clients on this instance.
// It is made first, given to the store as its persist.Publisher, then
// started on that store. Its background goroutines (the listener, the
// notifier and one feed per subscribed run) run from Start, or from the
// first subscription for feeds, until Stop.
type Hub struct {
	store     Store // set by Start
	log       *slog.Logger
	metrics   *metrics
	heartbeat time.Duration
	writeTO   time.Duration
	poll      time.Duration
	delay     time.Duration
	retry     time.Duration

	ctx    context.Context // ends at Stop
	cancel context.CancelCauseFunc

	mu          sync.Mutex
	started     bool
	stopped     bool
	feeds       map[string]*feed
	fresh       fresh   // first events of runs no feed follows yet
	deleted     deleted // runs found deleted: their streams are refused
	subscribers int
	streams     int
	wg          sync.WaitGroup // listener, notifier, feeds, streams; Add only under mu while !stopped
	dropped     atomic.Int64

	nmu     sync.Mutex
	pending map[string]int64 // run id -> highest seq to announce
	nwake   chan struct{}

	pwake chan struct{} // capacity 1: the poller polls now (pollNow)
}

// New returns a Hub; it serves nothing until Start.
func New(cfg Config) *Hub {
	h := &Hub{
		log:       cfg.Logger,
		metrics:   newMetrics(cfg.Registerer),
		heartbeat: orDefault(cfg.Heartbeat, DefaultHeartbeat),
		writeTO:   orDefault(cfg.WriteTimeout, DefaultWriteTimeout),
		poll:      orDefault(cfg.Poll, DefaultPoll),
		delay:     orDefault(cfg.NotifyDelay, DefaultNotifyDelay),
		retry:     orDefault(cfg.Retry, DefaultRetry),
		feeds:     map[string]*feed{},
		pending:   map[string]int64{},
		nwake:     make(chan struct{}, 1),
		pwake:     make(chan struct{}, 1),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Bind gives the Hub the store it listens on and reads from. Call it
// once, before Start: the store is made after the Hub, whose commits the
// Hub publishes (persist.Config.Publisher). It panics when store is nil,
// which is a wiring mistake.
func (h *Hub) Bind(store Store) {
	if store == nil {
		panic("stream: Bind with a nil store")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.store = store
}

// Start starts the listener and the notifier on the bound store, and the
// serving of streams. The Hub runs until Stop: ctx bounds nothing, so that
// at shutdown the streams outlive the draining of runs (whose last events
// still reach them and the other instances) and close only when Stop is
// called. Starting twice does nothing; starting after Stop, or with no
// store bound, is an error.
func (h *Hub) Start(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return ErrStopped
	}
	if h.started {
		return nil
	}
	if h.store == nil {
		return errors.New("stream hub started with no store bound")
	}
	h.started = true
	h.wg.Add(3)
	go h.listen()
	go h.notifier()
	go h.poller()
	return nil
}

// Stop closes every open stream, stops every goroutine of the Hub and waits
// for them until ctx ends (then it returns ctx's error). Notifications still
// queued are sent first. Stopping twice, or before Start, is safe.
func (h *Hub) Stop(ctx context.Context) error {
	h.settle(ctx)
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		h.cancel(ErrStopped)
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxSettle bounds how long Stop waits for the streams to be handed what
// was committed before it.
const maxSettle = time.Second

// settle waits, up to maxSettle or ctx's end, until every feed has handed
// its streams the events known to be committed: the last commits of the
// runs that drained before Stop (their terminal events) reach their
// clients rather than being cut by it.
func (h *Hub) settle(ctx context.Context) {
	deadline := time.Now().Add(maxSettle)
	for time.Now().Before(deadline) && ctx.Err() == nil && !h.deliveredAll() {
		time.Sleep(5 * time.Millisecond)
	}
}

// deliveredAll reports whether every feed has handed its streams what is
// known to be committed (true once the Hub stopped: nothing is handed then).
func (h *Hub) deliveredAll() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return true
	}
	for _, f := range h.feeds {
		if !f.deliveredLocked() {
			return false
		}
	}
	return true
}

// Stats returns what the Hub holds now.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Feeds: len(h.feeds), Subscribers: h.subscribers, Streams: h.streams, Dropped: h.dropped.Load()}
}

// SubscriberCount returns how many subscriptions the Hub holds now.
func (h *Hub) SubscriberCount() int { return h.Stats().Subscribers }

// Published tells the Hub that a commit on this instance appended a run's
// events up to lastSeq: the run's subscribers here are woken at once, and the
// other instances are told by a NOTIFY sent shortly after, coalesced with
// others. It never blocks; it implements persist.Publisher.
func (h *Hub) Published(runID string, lastSeq int64) {
	h.wake(runID, lastSeq)
	if h.ctx.Err() != nil {
		return // stopped: nobody would send it
	}
	h.nmu.Lock()
	if h.pending[runID] < lastSeq {
		h.pending[runID] = lastSeq
	}
	h.nmu.Unlock()
	select {
	case h.nwake <- struct{}{}:
	default:
	}
}

// PublishedEvents is Published with the committed events in hand (in
// order, not to be modified): the run's feed on this instance hands them to
// its subscribers without reading them back. It never blocks; it
// implements persist.Publisher.
func (h *Hub) PublishedEvents(runID string, evs []agentd.Event) {
	if h.handed(runID, evs) {
		h.Published(runID, evs[len(evs)-1].Seq)
	}
}

var _ persist.NotifiedPublisher = (*Hub)(nil)

// PublishedNotified is PublishedEvents for a commit that notified the other
// instances itself: no notification is queued. It implements
// persist.NotifiedPublisher.
func (h *Hub) PublishedNotified(runID string, evs []agentd.Event) {
	if h.handed(runID, evs) {
		h.wake(runID, evs[len(evs)-1].Seq)
	}
}

// handed hands evs to the feed of runID, if this instance has one (else
// keeps a new run's first events for the stream that will follow it), and
// says whether there were any.
func (h *Hub) handed(runID string, evs []agentd.Event) bool {
	if len(evs) == 0 {
		return false
	}
	h.mu.Lock()
	f := h.feeds[runID]
	if f == nil && evs[0].Seq == 1 {
		h.fresh.putLocked(runID, evs)
	}
	h.mu.Unlock()
	if f != nil {
		f.hand(evs)
	}
	return true
}

// wake wakes the feed of runID, if this instance has one, because events up
// to seq exist.
func (h *Hub) wake(runID string, seq int64) {
	h.mu.Lock()
	f := h.feeds[runID]
	h.mu.Unlock()
	if f != nil {
		f.notify(seq)
	}
}

// pollNow makes the poller read the heads of the runs with a feed here at
// once: after a (re)connection of the listener, notifications may have
// been missed. One query tells which feeds are behind; the others, most
// often all of them, read nothing.
func (h *Hub) pollNow() {
	select {
	case h.pwake <- struct{}{}:
	default:
	}
}

// listen holds the Hub's one LISTEN connection until the Hub stops.
func (h *Hub) listen() {
	defer h.wg.Done()
	err := h.store.Listen(h.ctx, []string{persist.ChannelEvents}, h.pollNow, func(_, payload string) {
		runID, seqText, ok := strings.Cut(payload, ":")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if !ok || err != nil {
			h.log.WarnContext(h.ctx, "bad event notification", "payload", payload)
			return
		}
		h.wake(runID, seq)
	})
	if err != nil && h.ctx.Err() == nil {
		h.log.ErrorContext(h.ctx, "event listener ended", "error", err)
	}
}

// poller reads, every poll interval and when the listener (re)connects
// (pollNow), the head of every run that has a feed here, in one query for
// all of them. It wakes the feeds whose run has
// events they have not read, so that a lost notification only delays a
// feed until then, and it keeps the run for the feed's heartbeats. Idle
// streams then cost one query per interval for the instance, not reads per
// run. A run missing from the answer was deleted (on another instance, or
// by retention): its streams end.
func (h *Hub) poller() {
	defer h.wg.Done()
	t := time.NewTicker(h.poll)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		case <-h.pwake:
		}
		h.mu.Lock()
		ids := make([]string, 0, len(h.feeds))
		for id := range h.feeds {
			ids = append(ids, id)
		}
		h.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(h.ctx, dbTimeout)
		heads, err := h.store.RunHeads(ctx, ids)
		cancel()
		if err != nil {
			// The store logs an outage of the database once, not once
			// per poll.
			if h.ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
				h.log.WarnContext(h.ctx, "stream poll: read runs", "runs", len(ids), "error", err)
			}
			continue
		}
		h.mu.Lock()
		feeds := make([]*feed, len(heads))
		for i, head := range heads {
			feeds[i] = h.feeds[head.RunID] // nil: its streams left meanwhile
		}
		h.mu.Unlock()
		for i, f := range feeds {
			if f != nil {
				f.beat.set(heads[i])
				f.notify(heads[i].LastEventSeq)
			}
		}
		if len(heads) < len(ids) {
			h.Forget(missing(ids, heads)...)
		}
	}
}

// missing returns the ids that have no head in heads.
func missing(ids []string, heads []agentd.RunHead) []string {
	found := make(map[string]struct{}, len(heads))
	for _, head := range heads {
		found[head.RunID] = struct{}{}
	}
	var out []string
	for _, id := range ids {
		if _, ok := found[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// notifier sends the queued notifications, at most one per run per window,
// in one statement, until the Hub stops; then it sends what is left.
func (h *Hub) notifier() {
	defer h.wg.Done()
	timer := time.NewTimer(h.delay)
	timer.Stop()
	for {
		select {
		case <-h.ctx.Done():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), time.Second)
			h.flushNotify(ctx)
			cancel()
			return
		case <-h.nwake:
		}
		timer.Reset(h.delay)
		select {
		case <-h.ctx.Done():
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), dbTimeout)
		h.flushNotify(ctx)
		cancel()
	}
}

func (h *Hub) flushNotify(ctx context.Context) {
	h.nmu.Lock()
	pending := h.pending
	if len(pending) == 0 {
		h.nmu.Unlock()
		return
	}
	h.pending = map[string]int64{}
	h.nmu.Unlock()
	payloads := make([]string, 0, len(pending))
	for runID, seq := range pending {
		payloads = append(payloads, runID+":"+strconv.FormatInt(seq, 10))
	}
	// A lost notification only delays the other instances until their poll.
	if err := h.store.NotifyMany(ctx, persist.ChannelEvents, payloads); err != nil && !errors.Is(err, agentd.ErrUnavailable) {
		h.log.WarnContext(ctx, "notify events", "error", err, "runs", len(payloads))
	}
}
