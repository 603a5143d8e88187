package persist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// This file is the optional read replica (Config.ReplicaURL): a streaming
// standby of the primary that serves the reads that tolerate lag (the
// lists that say so, and the replay of a run's stored events), so that
// clients that read much history load the primary less.
//
// Whether the replica may serve is decided by its lag, measured in WAL
// rather than in time: each sample (every replicaSample) reads the
// primary's current WAL position and the replica's replay position, and
// the replica is fresh while it has replayed everything the primary had
// written MaxLag ago. A replica that is down, not a standby (promoted), or
// further behind than that serves nothing until it catches up; its reads
// go to the primary, and one log line says each change. A read that fails
// on the replica is done again on the primary.

// DefaultReplicaMaxLag is Config.ReplicaMaxLag's default.
const DefaultReplicaMaxLag = 5 * time.Second

// replicaSample is how often the replica's lag is measured.
const replicaSample = 500 * time.Millisecond

// replica is the read replica and what is known of its lag. Its sampler
// goroutine is a service of its own (Store.ReplicaSampler): until it
// starts, and once it stopped, the replica is not fresh and serves nothing.
type replica struct {
	pool    *pgxpool.Pool
	primary *pgxpool.Pool
	maxLag  time.Duration
	log     *slog.Logger

	fresh atomic.Bool
	reads atomic.Int64 // reads the replica served

	// samples are the primary's WAL positions, oldest first: the newest
	// taken at least maxLag ago, and every later one. Only the sampler
	// touches them.
	samples []walSample
	state   string // what was last logged: "", "fresh", or why not

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc // stops the sampler
	done    chan struct{}      // closed when the sampler has stopped
}

// walSample is the primary's WAL position at a moment.
type walSample struct {
	at  time.Time
	lsn int64
}

func openReplica(ctx context.Context, cfg Config, primary *pgxpool.Pool, log *slog.Logger) (*replica, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.ReplicaURL)
	if err != nil {
		return nil, fmt.Errorf("parse replica url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open replica pool: %w", err)
	}
	r := &replica{pool: pool, primary: primary, maxLag: cfg.ReplicaMaxLag, log: log, done: make(chan struct{})}
	if r.maxLag <= 0 {
		r.maxLag = DefaultReplicaMaxLag
	}
	return r, nil
}

// ReplicaSampler returns the service that measures the read replica's lag
// (every replicaSample), without which the replica serves nothing: start
// it once the store is open, stop it before Close. Without a replica it
// does nothing.
func (s *Store) ReplicaSampler() *ReplicaSampler { return &ReplicaSampler{r: s.replica} }

// ReplicaSampler measures the read replica's lag between Start and Stop.
type ReplicaSampler struct{ r *replica }

// Start takes a first sample, within ctx, and starts sampling. A replica
// that is down is not an error: reads go to the primary until it is up.
// Starting twice, or after Stop, does nothing.
func (rs *ReplicaSampler) Start(ctx context.Context) error {
	r := rs.r
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return nil
	}
	r.started = true
	r.sample(ctx)
	sctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(sctx)
	return nil
}

// Stop stops sampling and waits for a sample under way, within ctx; from
// then on the replica serves nothing. Stopping twice, or before Start, is
// safe.
func (rs *ReplicaSampler) Stop(ctx context.Context) error {
	if rs.r == nil {
		return nil
	}
	return rs.r.stop(ctx)
}

func (r *replica) stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
		r.fresh.Store(false)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("replica sampler: %w", ctx.Err())
	}
}

// run samples the replica's lag until ctx ends.
func (r *replica) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(replicaSample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sample(ctx)
		}
	}
}

// close stops the sampler, if it still runs, and closes the replica's
// pool.
func (r *replica) close() {
	_ = r.stop(context.Background())
	r.pool.Close()
}

// sample measures the lag once and sets fresh.
func (r *replica) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	now := time.Now()
	var primary int64
	if err := r.primary.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&primary); err != nil {
		// The primary's own outage is the store's to tell; without a
		// position the replica cannot be judged, and serves nothing.
		r.set(false, "the primary's WAL position is unknown")
		return
	}
	r.samples = append(r.samples, walSample{at: now, lsn: primary})
	// Keep the newest sample at least maxLag old, and the later ones.
	keep := 0
	for i, s := range r.samples {
		if now.Sub(s.at) >= r.maxLag {
			keep = i
		}
	}
	r.samples = r.samples[keep:]
	// Until a sample is maxLag old, the oldest one is the bar: the lag
	// it allows is shorter.
	target := r.samples[0].lsn

	var standby bool
	var replayed *int64
	err := r.pool.QueryRow(ctx, `SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&standby, &replayed)
	switch {
	case err != nil:
		r.set(false, "the replica does not answer: "+err.Error())
	case !standby:
		r.set(false, "the replica is not a standby (promoted, or not a replica)")
	case replayed == nil || *replayed < target:
		r.set(false, fmt.Sprintf("the replica is more than %v behind the primary", r.maxLag))
	default:
		r.set(true, "fresh")
	}
}

// set records whether the replica is fresh, and logs a change.
func (r *replica) set(fresh bool, state string) {
	r.fresh.Store(fresh)
	if state == r.state {
		return
	}
	was := r.state
	r.state = state
	switch {
	case fresh:
		r.log.Info("the read replica serves reads that tolerate lag", "max_lag", r.maxLag.String())
	case was == "" || was == "fresh" || !sameKind(was, state):
		r.log.Warn("the read replica serves nothing: reads go to the primary", "reason", state)
	}
}

// sameKind says whether two reasons differ only in their details (one
// connection error and the next), which need no new line.
func sameKind(a, b string) bool {
	const n = len("the replica does not answer")
	return len(a) >= n && len(b) >= n && a[:n] == b[:n]
}

// failed takes the replica out of service after a read failed on it, until
// the next sample finds it fresh. A cancelled read says nothing of it.
func (r *replica) failed(ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	r.fresh.Store(false)
}

// ReplicaReads returns how many reads the read replica has served (0
// without one).
func (s *Store) ReplicaReads() int64 {
	if s.replica == nil {
		return 0
	}
	return s.replica.reads.Load()
}

// ReplicaFresh reports whether the read replica serves reads now.
func (s *Store) ReplicaFresh() bool {
	return s.replica != nil && s.replica.fresh.Load()
}

// lagging runs read on the replica when it is fresh and mayLag, else (and
// when the replica's read fails) on the primary.
func lagging[T any](ctx context.Context, s *Store, mayLag bool, read func(q querier) (T, error)) (T, error) {
	if r := s.replica; mayLag && r != nil && r.fresh.Load() {
		v, err := read(r.pool)
		if err == nil {
			r.reads.Add(1)
			return v, nil
		}
		r.failed(ctx, err)
		if ctx.Err() != nil {
			return v, translate(err)
		}
	}
	return read(s.pool)
}
