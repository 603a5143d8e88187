package persist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

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
		workers = 1
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
		r.err = s.commitPipelined(r.ctx, live)
		close(r.done)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.commitPipelined(ctx, live); err != nil {
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
			r.err = s.commitPipelined(r.ctx, []*execReq{r})
			close(r.done)
		}
		return
	}
	for _, r := range live {
		close(r.done)
	}
}

// commitPipelined commits reqs in one transaction, sent as one pipelined
// batch (one round trip; the statements between its start and its Sync are
// one implicit transaction): agentd_fence, which fences every run involved,
// moves their counters and appends all the events, then every request's ops
// in order. The fence fails as a whole when any run's epoch moved on (it
// raises), so nothing queued after it is applied; the caller then isolates
// the requests. On success it sets each request's last event seq.
func (s *Store) commitPipelined(ctx context.Context, reqs []*execReq) error {
	// One fence per run and epoch, sorted by run, so that committers lock
	// runs in the same order.
	type fence struct {
		id    string
		epoch int64
	}
	index := map[fence]int{}
	for _, r := range reqs {
		index[fence{r.f.RunID, r.f.Epoch}] = 0
	}
	keys := slices.SortedFunc(maps.Keys(index), func(a, b fence) int {
		return cmp.Or(strings.Compare(a.id, b.id), cmp.Compare(a.epoch, b.epoch))
	})
	n := len(keys)
	ids, epochs := make([]string, n), make([]int64, n)
	ns, steps := make([]int64, n), make([]int32, n)
	in, out, cached, reasoning := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, k := range keys {
		index[k] = i
		ids[i], epochs[i] = k.id, k.epoch
	}
	// Events are numbered in SQL, after the seqs the fence reserved: the
	// k-th of a run's events in this write follows the run's last seq.
	var evRun, evStep []int32
	var evK []int64
	var evType, evData []string
	var evAt []time.Time
	var evOf [][]int // evOf[i]: the indexes of run i's events, when there is a publisher
	if s.pub != nil {
		evOf = make([][]int, n)
	}
	at := eventTime()
	for _, r := range reqs {
		i := index[fence{r.f.RunID, r.f.Epoch}]
		for _, op := range r.ops {
			if c, ok := op.(runCounter); ok {
				step, u := c.counts()
				steps[i] = max(steps[i], int32(step))
				in[i] += u.InputTokens
				out[i] += u.OutputTokens
				cached[i] += u.CachedInputTokens
				reasoning[i] += u.ReasoningTokens
			}
		}
		for _, ev := range r.evs {
			row, err := newEventRow(r.f.RunID, 0, ev, at)
			if err != nil {
				return err
			}
			ns[i]++
			if evOf != nil {
				evOf[i] = append(evOf[i], len(evRun))
			}
			evRun = append(evRun, int32(i+1))
			evK = append(evK, ns[i])
			evType = append(evType, row.typ)
			evStep = append(evStep, int32(row.step))
			evData = append(evData, row.data)
			evAt = append(evAt, row.at)
		}
	}
	var b batch
	last := make(map[string]int64, n) // each run's last event seq after the commit
	// Ids go as text[]: pgx has no binary encoding of a string as a uuid,
	// and building the error that says so before it falls back to text cost
	// 1% of a step's CPU.
	b.query("fence", `SELECT fenced_run, fenced_seq FROM agentd_fence($1::text[]::uuid[], $2::bigint[], $3::bigint[], $4::int[],
			$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::int[], $10::bigint[], $11::text[], $12::int[],
			$13::text[], $14::timestamptz[])`,
		[]any{ids, epochs, ns, steps, in, out, cached, reasoning, evRun, evK, evType, evStep, evData, evAt}, func(rows pgx.Rows) error {
			var id string
			var seq int64
			_, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
				last[id] = seq
				return nil
			})
			return err
		})
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
	// Each request's last seq: the run's seqs were taken in request order.
	next := make(map[string]int64, n)
	for i, key := range keys {
		next[key.id] = last[key.id] - ns[i]
	}
	for _, r := range reqs {
		next[r.f.RunID] += int64(len(r.evs))
		r.last = next[r.f.RunID]
	}
	if evOf != nil {
		// The run's events, as EventsAfter puts them together from their rows.
		atText := formatEventTime(at)
		for i, key := range keys {
			if ns[i] == 0 {
				continue
			}
			evs := make([]Event, len(evOf[i]))
			for k, j := range evOf[i] {
				seq := last[key.id] - ns[i] + int64(k) + 1
				evs[k] = Event{RunID: key.id, Seq: seq, Type: evType[j], CreatedAt: at,
					Data: envelope(seq, evType[j], key.id, int(evStep[j]), atText, []byte(evData[j]))}
			}
			s.pub.PublishedEvents(key.id, evs)
		}
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
