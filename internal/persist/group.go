package persist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
	evs  []EventIn
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
}

// GroupCommitStats counts what group commit did.
type GroupCommitStats struct {
	Transactions int64 // transactions committed for executor writes
	Requests     int64 // executor writes they carried
}

// StartGroupCommit makes Exec share transactions between concurrent callers,
// with workers committers (a transaction each at a time) and at most
// maxBatch requests per transaction. Call it before the engine starts; call
// StopGroupCommit after the engine stopped.
func (s *Store) StartGroupCommit(workers, maxBatch int) {
	if workers <= 0 {
		workers = 2
	}
	if maxBatch <= 0 {
		maxBatch = 64
	}
	c := &committer{reqs: make(chan *execReq, 1024), stop: make(chan struct{})}
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
}

// GroupCommitStats reports the executor transactions and requests so far.
func (s *Store) GroupCommitStats() GroupCommitStats {
	return GroupCommitStats{Transactions: s.execTx.Load(), Requests: s.execReqs.Load()}
}

func (s *Store) commitLoop(c *committer, maxBatch int) {
	batch := make([]*execReq, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-c.reqs:
			batch = append(batch, r)
		case <-c.stop:
			// Drain what is queued, then stop.
			for {
				select {
				case r := <-c.reqs:
					s.commitBatch([]*execReq{r})
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.commitBatch(batch)
	}
}

// execGrouped hands a request to the committers and waits for its outcome.
func (s *Store) execGrouped(ctx context.Context, c *committer, f Fence, evs []EventIn, ops []Op) (int64, error) {
	r := &execReq{ctx: ctx, f: f, evs: evs, ops: ops, done: make(chan struct{})}
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	<-r.done // a queued request is always answered, even after its ctx ends
	return r.last, r.err
}

func (s *Store) commitBatch(batch []*execReq) {
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
		r.last, r.err = s.execOne(r.ctx, r.f, r.evs, r.ops)
		close(r.done)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	lasts, err := s.commitShared(ctx, live)
	if err != nil {
		// Isolate the failure: one transaction per request.
		for _, r := range live {
			r.last, r.err = s.execOne(r.ctx, r.f, r.evs, r.ops)
			close(r.done)
		}
		return
	}
	for _, r := range live {
		close(r.done)
	}
	if s.OnCommit != nil {
		for id, last := range lasts {
			s.OnCommit(id, last)
		}
	}
}

// commitShared commits live in one transaction and sets each request's
// outcome; it returns the last event seq of each run that got events.
func (s *Store) commitShared(ctx context.Context, live []*execReq) (map[string]int64, error) {
	// One fence per run and epoch, with the number of events the batch
	// appends under it; sorted by run, so that committers lock runs in the
	// same order.
	type fence struct {
		id    string
		epoch int64
	}
	count := map[fence]int64{}
	for _, r := range live {
		count[fence{r.f.RunID, r.f.Epoch}] += int64(len(r.evs))
	}
	keys := make([]fence, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b fence) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(keys))
	epochs := make([]int64, len(keys))
	ns := make([]int64, len(keys))
	for i, k := range keys {
		ids[i], epochs[i], ns[i] = k.id, k.epoch, count[k]
	}
	var lasts map[string]int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// The fence of every run at once: a run whose epoch moved on is not
		// updated (and its writes are refused); the others get their event
		// seqs reserved under their row lock.
		rows, err := tx.Query(ctx, `UPDATE runs SET last_event_seq = runs.last_event_seq + v.n, updated_at = now()
			FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS v(id, epoch, n)
			WHERE runs.id = v.id AND runs.epoch = v.epoch
			RETURNING runs.id, runs.epoch, runs.last_event_seq`, ids, epochs, ns)
		if err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		epochOf := map[string]int64{} // the epoch that fenced each run
		next := map[string]int64{}    // the last seq taken so far, per fenced run
		for rows.Next() {
			var id string
			var epoch, last int64
			if err := rows.Scan(&id, &epoch, &last); err != nil {
				rows.Close()
				return err
			}
			epochOf[id] = epoch
			next[id] = last - count[fence{id, epoch}] // the seq before this batch's events
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		now := time.Now()
		var evRows []eventRow
		lasts = map[string]int64{}
		for _, r := range live {
			epoch, ok := epochOf[r.f.RunID]
			if !ok || epoch != r.f.Epoch {
				r.err = ErrLeaseLost
				continue
			}
			last := next[r.f.RunID]
			for _, op := range r.ops {
				if err := op.apply(ctx, tx); err != nil {
					return err
				}
			}
			if evRows, err = buildEvents(evRows, r.f.RunID, last, r.evs, now); err != nil {
				return err
			}
			next[r.f.RunID] = last + int64(len(r.evs))
			r.last, r.err = next[r.f.RunID], nil
			if len(r.evs) > 0 {
				lasts[r.f.RunID] = r.last
			}
		}
		return insertEvents(ctx, tx, evRows)
	})
	if err != nil {
		for _, r := range live {
			r.err, r.last = nil, 0
		}
		return nil, err
	}
	s.execTx.Add(1)
	for _, r := range live {
		if r.err == nil {
			s.execReqs.Add(1)
		}
	}
	return lasts, nil
}
