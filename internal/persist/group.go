package persist

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit: executor writes (Exec) from many runs in flight share
// transactions. Committer goroutines each take whatever requests are queued
// (up to a cap) and commit them together: one fenced lock of the runs
// involved, their ops in order, one insert of all their events, one commit
// (and so one WAL flush). A lone request is committed at once, as before; a
// batch grows only while commits are busy, so waiting never adds latency.
// A request whose fence fails gets ErrLeaseLost and contributes nothing; if
// anything else fails, the batch is retried one request per transaction, so
// one request's error never becomes another's.

type execReq struct {
	ctx  context.Context
	f    Fence
	evs  []agentd.EventIn
	ops  []Op
	last int64
	err  error
	done chan struct{}
}

type committer struct {
	reqs chan *execReq
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	// Deferred writes (ExecDeferred) wait here for the next tick, which
	// hands them to the committers as batches.
	tick    time.Duration
	batches chan []*execReq
	mu      sync.Mutex
	held    []*execReq
	timer   *time.Timer
	ticks   sync.WaitGroup // flushes under way
}

// maxDeferredBatch caps the deferred writes of one transaction; a tick
// with more commits them in several, side by side.
const maxDeferredBatch = 256

// GroupOption configures group commit.
type GroupOption func(*committer)

// DeferTick makes ExecDeferred's writes wait for a tick of d, shared by
// every run of the store: the deferred writes of a tick (a streamed
// answer's text deltas, however many runs stream) share transactions, at
// most maxDeferredBatch each. 0, the default, defers nothing.
func DeferTick(d time.Duration) GroupOption { return func(c *committer) { c.tick = max(d, 0) } }

// GroupCommitStats counts what group commit did.
type GroupCommitStats struct {
	Transactions int64 // transactions committed for executor writes
	Requests     int64 // executor writes they carried
}

// StartGroupCommit makes Exec share transactions between concurrent callers,
// with workers committers (a transaction each at a time) and at most
// maxBatch requests per transaction. Call it before the engine starts; call
// StopGroupCommit after the engine stopped.
func (s *Store) StartGroupCommit(workers, maxBatch int, opts ...GroupOption) {
	if workers <= 0 {
		workers = 1
	}
	if maxBatch <= 0 {
		maxBatch = 64
	}
	c := &committer{reqs: make(chan *execReq, 1024), stop: make(chan struct{}), batches: make(chan []*execReq)}
	for _, o := range opts {
		o(c)
	}
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			s.commitLoop(c, maxBatch)
		}()
	}
	s.group.Store(c)
}

// StopGroupCommit stops the committers once the queued requests are
// committed; later Execs commit one transaction each. Safe to call twice.
func (s *Store) StopGroupCommit() {
	c := s.group.Swap(nil)
	if c == nil {
		return
	}
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
	// What waits for a tick is committed now.
	c.mu.Lock()
	if c.timer != nil && c.timer.Stop() {
		c.ticks.Done()
	}
	c.timer = nil
	held := c.held
	c.held = nil
	c.mu.Unlock()
	c.ticks.Wait()
	for len(held) > 0 {
		n := min(len(held), maxDeferredBatch)
		s.commitBatch(held[:n], true)
		held = held[n:]
	}
}

// GroupCommit is group commit as a service: Start is StartGroupCommit,
// Stop is StopGroupCommit within a context.
type GroupCommit struct {
	s        *Store
	workers  int
	maxBatch int
	opts     []GroupOption

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed once StopGroupCommit returned
}

// GroupCommit returns the service of group commit on s, with StartGroupCommit's
// arguments. Start it before the engine starts; stop it after the engine
// stopped.
func (s *Store) GroupCommit(workers, maxBatch int, opts ...GroupOption) *GroupCommit {
	return &GroupCommit{s: s, workers: workers, maxBatch: maxBatch, opts: opts}
}

// Start starts the committers. Starting twice, or after Stop, does nothing.
func (g *GroupCommit) Start(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.stopped {
		return nil
	}
	g.started = true
	g.s.StartGroupCommit(g.workers, g.maxBatch, g.opts...)
	return nil
}

// Stop stops the committers once the queued writes are committed, waiting
// for them within ctx; past it, they go on committing, and Stop says so.
// Stopping twice, or before Start, is safe.
func (g *GroupCommit) Stop(ctx context.Context) error {
	g.mu.Lock()
	g.stopped = true
	if !g.started {
		g.mu.Unlock()
		return nil
	}
	if g.done == nil {
		g.done = make(chan struct{})
		go func() {
			defer close(g.done)
			g.s.StopGroupCommit()
		}()
	}
	done := g.done
	g.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("queued writes still committing: %w", ctx.Err())
	}
}

// DeferTicks reports the tick of deferred writes: 0 when ExecDeferred
// commits at once, as Exec does.
func (s *Store) DeferTicks() time.Duration {
	if c := s.group.Load(); c != nil {
		return c.tick
	}
	return 0
}

// ExecDeferred is Exec for a write that may wait for the next tick of
// deferred writes (DeferTick), to share its transaction with those of the
// other runs: what a streamed answer's text deltas are written with. It
// commits at once when there is no tick.
func (s *Store) ExecDeferred(ctx context.Context, f Fence, evs []agentd.EventIn, ops ...Op) (int64, error) {
	c := s.group.Load()
	if c == nil || c.tick <= 0 {
		return s.Exec(ctx, f, evs, ops...)
	}
	r := &execReq{ctx: ctx, f: f, evs: evs, ops: ops, done: make(chan struct{})}
	c.mu.Lock()
	select {
	case <-c.stop:
		c.mu.Unlock()
		return s.Exec(ctx, f, evs, ops...) // stopping: nothing ticks any more
	default:
	}
	c.held = append(c.held, r)
	if c.timer == nil {
		c.ticks.Add(1)
		c.timer = time.AfterFunc(c.tick, func() { s.flushHeld(c) })
	}
	c.mu.Unlock()
	<-r.done // a held request is always answered, even after its ctx ends
	return r.last, r.err
}

// FlushDeferred commits the writes held for the next tick now, as the
// tick would: for a run that waits on its own held write (a streamed step
// that ended, whose output follows its last delta).
func (s *Store) FlushDeferred() {
	c := s.group.Load()
	if c == nil || c.tick <= 0 {
		return
	}
	c.mu.Lock()
	if c.timer == nil || !c.timer.Stop() {
		c.mu.Unlock()
		return // nothing held, or the tick is under way
	}
	c.mu.Unlock()
	s.flushHeld(c) // the tick's, whose timer will not fire
}

// flushHeld hands the writes held for this tick to the committers, in
// batches of at most maxDeferredBatch; once they stop, it commits them
// itself.
func (s *Store) flushHeld(c *committer) {
	defer c.ticks.Done()
	c.mu.Lock()
	held := c.held
	c.held, c.timer = nil, nil
	c.mu.Unlock()
	for len(held) > 0 {
		n := min(len(held), maxDeferredBatch)
		select {
		case c.batches <- held[:n]:
		case <-c.stop:
			s.commitBatch(held[:n], true)
		}
		held = held[n:]
	}
}

// GroupCommitStats reports the executor transactions and requests so far.
func (s *Store) GroupCommitStats() GroupCommitStats {
	return GroupCommitStats{Transactions: s.execTx.Load(), Requests: s.execReqs.Load()}
}

func (s *Store) commitLoop(c *committer, maxBatch int) {
	batch := make([]*execReq, 0, maxBatch)
	for {
		batch = batch[:0]
		limit, tick := maxBatch, false
		select {
		case r := <-c.reqs:
			batch = append(batch, r)
		case held := <-c.batches:
			// A tick's deferred writes, with whatever else is queued.
			batch = append(batch, held...)
			limit += len(held)
			tick = true
		case <-c.stop:
			// Drain what is queued, then stop.
			for {
				select {
				case r := <-c.reqs:
					s.commitBatch([]*execReq{r}, false)
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < limit {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.commitBatch(batch, tick)
	}
}

// execGrouped hands a request to the committers and waits for its outcome.
func (s *Store) execGrouped(ctx context.Context, c *committer, f Fence, evs []agentd.EventIn, ops []Op) (int64, error) {
	r := &execReq{ctx: ctx, f: f, evs: evs, ops: ops, done: make(chan struct{})}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	<-r.done // a queued request is always answered, even after its ctx ends
	return r.last, r.err
}

// commitBatch commits batch, together when it can; tick says that it holds
// a tick's deferred writes, whose transaction then notifies their runs
// itself (NotifiedPublisher).
func (s *Store) commitBatch(batch []*execReq, tick bool) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		r := live[0]
		r.err = s.commitAlone(r.ctx, r, tick)
		close(r.done)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.commitPipelined(ctx, live, tick); err != nil {
		var pgErr *pgconn.PgError
		if !errors.Is(err, ErrLeaseLost) && !errors.As(err, &pgErr) {
			// Not an answer of the server (a lost connection): whether the
			// transaction committed is unknown, so committing again could
			// apply the requests twice. Each fails; its run goes on from what
			// the database holds, under its lease.
			for _, r := range live {
				r.err = err
				close(r.done)
			}
			return
		}
		// The server refused the transaction (a stale fence, a constraint):
		// nothing of it applied. Isolate the failure, one transaction per
		// request, so that one request's error never becomes another's.
		for _, r := range live {
			r.err = s.commitAlone(r.ctx, r, tick)
			close(r.done)
		}
		return
	}
	for _, r := range live {
		close(r.done)
	}
}

// commitAlone commits r in a transaction of its own. If the server refused
// it and it carried a ClaimNext, it is committed again without the claim:
// a claim that cannot be made never fails the write it goes with. notify is
// commitPipelined's.
func (s *Store) commitAlone(ctx context.Context, r *execReq, notify bool) error {
	err := s.commitPipelined(ctx, []*execReq{r}, notify)
	if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, agentd.ErrUnavailable) || ctx.Err() != nil {
		return err
	}
	ops := r.ops[:0:0]
	for _, op := range r.ops {
		if _, claim := op.(*ClaimNext); !claim {
			ops = append(ops, op)
		}
	}
	if len(ops) == len(r.ops) {
		return err
	}
	r.ops = ops
	return s.commitPipelined(ctx, []*execReq{r}, notify)
}

// commitPipelined commits reqs in one transaction, sent as one pipelined
// batch (one round trip; the statements between its start and its Sync are
// one implicit transaction): agentd_fence, which fences every run involved,
// moves their counters and appends all the events, then every request's ops
// in order. The fence fails as a whole when any run's epoch moved on (it
// raises), so nothing queued after it is applied; the caller then isolates
// the requests. On success it sets each request's last event seq and tells
// the publisher. With notify, and a NotifiedPublisher, the fence also
// notifies ChannelEvents of each run's last seq, in the same transaction.
func (s *Store) commitPipelined(ctx context.Context, reqs []*execReq, notify bool) error {
	f, err := newFence(reqs, eventTime(), s.pub != nil)
	if err != nil {
		return err
	}
	np, _ := s.pub.(NotifiedPublisher)
	f.notify = notify && np != nil
	var b batch
	f.queue(&b)
	for _, r := range reqs {
		for _, op := range r.ops {
			if err := op.queue(&b); err != nil {
				return err
			}
		}
	}
	if err := b.send(ctx, s.pool); err != nil {
		return translate(err)
	}
	s.execTx.Add(1)
	s.execReqs.Add(int64(len(reqs)))
	f.settle(reqs)
	for _, r := range reqs {
		for _, op := range r.ops {
			if c, ok := op.(*ClaimNext); ok {
				c.settle()
			}
		}
	}
	switch {
	case f.notify:
		f.publishNotified(np)
	case s.pub != nil:
		f.publish(s.pub)
	}
	return nil
}

// batch is the statements of one transaction, queued to be sent in one
// round trip; each has its own way of reading its result.
type batch struct {
	b     pgx.Batch
	reads []func(pgx.BatchResults) error
}

// exec queues a statement whose result is only its success; label names it
// in an error.
func (b *batch) exec(label, sql string, args ...any) {
	b.b.Queue(sql, args...)
	b.reads = append(b.reads, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		return nil
	})
}

// query queues a statement whose rows scan reads.
func (b *batch) query(label, sql string, args []any, scan func(pgx.Rows) error) {
	b.b.Queue(sql, args...)
	b.reads = append(b.reads, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		return nil
	})
}

// send sends the batch on q (a pool: the batch is one implicit transaction;
// a transaction: it is part of it) and reads every result in order.
func (b *batch) send(ctx context.Context, q interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}) error {
	if b.b.Len() == 0 {
		return nil
	}
	br := q.SendBatch(ctx, &b.b)
	for _, read := range b.reads {
		if err := read(br); err != nil {
			br.Close()
			return err
		}
	}
	return br.Close()
}
