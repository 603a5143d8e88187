package persist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentd/agentd"
)

// This file is how the store lives through a database that is down,
// restarting, refusing connections or failing over: which driver errors
// mean "unavailable now" (translate turns them into agentd.ErrUnavailable),
// the state it logs once per change, and the pool's hooks that drop a
// connection to a server that no longer takes writes.

// connectTimeout caps each host's connection attempt when the URL sets no
// connect_timeout, so that a host that does not answer (a primary that
// died with its machine) passes the attempt on to the next host of the URL
// instead of holding it.
const connectTimeout = 5 * time.Second

// settle is how long the store must see no failure after an outage before
// a success says the database is available again: a database that refuses
// some connections while others still work is logged as unavailable once,
// not once per call.
const settle = time.Second

// errReadOnly: the server answers but takes no writes (a standby, or a
// primary being demoted).
var errReadOnly = errors.New("the database server is read-only (a standby, or a primary being demoted)")

// unavailable reports whether err says that the database cannot serve a
// call now, rather than that the call was wrong: a connection refused or
// broken, a server that is shutting down, starting, in recovery or
// read-only, too many connections, or no answer in time (a pool with no
// free connection, a server that hangs). A cancelled call is not one.
func unavailable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errReadOnly):
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableCode(pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) // the statement was not sent: the connection was closed
}

// unavailableCode reports whether a SQLSTATE says that the server cannot
// serve the call now.
func unavailableCode(code string) bool {
	switch code {
	case "53300", // too_many_connections
		"57P01", // admin_shutdown: a fast shutdown, a terminated backend
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up, shutting down, in recovery
		"25006": // read_only_sql_transaction: a standby, a demoted primary
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception
}

// sqlState is the SQLSTATE of err's server error, if it has one.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// health is whether the database serves the store now, as the outcomes of
// its calls tell; it logs each change, once.
type health struct {
	log  *slog.Logger
	down atomic.Bool // read on every statement; changed under mu

	mu    sync.Mutex
	since time.Time // when it went down
	last  time.Time // the latest failure
}

// failed notes the failure of a call; it changes the state when err says
// the database is unavailable. A call that ran out of time without a
// connection error says nothing of the database: it may be a slow
// statement, or a pool whose connections are all in use.
func (h *health) failed(err error) {
	if !unavailable(err) {
		return
	}
	var connectErr *pgconn.ConnectError
	if errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &connectErr) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.last = now
	if h.down.Load() {
		return
	}
	h.since = now
	h.down.Store(true)
	h.log.Warn("database unavailable", slog.String("error", err.Error()))
}

// succeeded notes a statement that a connection able to write served.
func (h *health) succeeded() {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !h.down.Load() || now.Sub(h.last) < settle {
		return
	}
	h.down.Store(false)
	h.log.Info("database available again", slog.Duration("unavailable_for", now.Sub(h.since)))
}

// readOnlySession reports whether the server said, when conn connected or
// since, that its sessions are read-only or that it is a standby
// (PostgreSQL 14 and later report both).
func readOnlySession(conn *pgx.Conn) bool {
	p := conn.PgConn()
	return p.ParameterStatus("default_transaction_read_only") == "on" || p.ParameterStatus("in_hot_standby") == "on"
}

// watch is the pool's tracer: it sees the outcome of every statement and
// every acquisition, for health, and marks the connections on which a
// write found the server read-only, so that the pool drops them (keep)
// and connects again, to the writable host of a multi-host URL. A broken
// connection pgx closes itself.
type watch struct {
	h     *health
	stale sync.Map // *pgx.Conn: connections to drop
}

var (
	_ pgx.QueryTracer       = (*watch)(nil)
	_ pgx.BatchTracer       = (*watch)(nil)
	_ pgxpool.AcquireTracer = (*watch)(nil)
)

// saw notes the outcome err of a statement on conn.
func (w *watch) saw(conn *pgx.Conn, err error) {
	if err == nil {
		if w.h.down.Load() && !readOnlySession(conn) {
			w.h.succeeded()
		}
		return
	}
	if sqlState(err) == "25006" {
		w.stale.Store(conn, struct{}{})
	}
	w.h.failed(err)
}

// TraceQueryStart is part of pgx.QueryTracer.
func (w *watch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (w *watch) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	w.saw(conn, d.Err)
}

// TraceBatchStart is part of pgx.BatchTracer.
func (w *watch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery is part of pgx.BatchTracer.
func (w *watch) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.saw(conn, d.Err)
}

// TraceBatchEnd is part of pgx.BatchTracer.
func (w *watch) TraceBatchEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	w.saw(conn, d.Err)
}

// TraceAcquireStart is part of pgxpool.AcquireTracer.
func (w *watch) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

// TraceAcquireEnd is part of pgxpool.AcquireTracer: a connection that
// could not be made (refused, too many connections, no writable host)
// fails here.
func (w *watch) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err != nil {
		w.h.failed(d.Err)
	}
}

// keep is the pool's PrepareConn: a connection marked stale is dropped
// rather than handed out.
func (w *watch) keep(_ context.Context, conn *pgx.Conn) (bool, error) {
	_, stale := w.stale.LoadAndDelete(conn)
	return !stale, nil
}

// forget is the pool's BeforeClose.
func (w *watch) forget(conn *pgx.Conn) { w.stale.Delete(conn) }

// writableHost makes a connection of cfg go to a writable server when the
// URL names several hosts (a primary and its standbys, in any order) and
// asks for no particular target_session_attrs: the hosts are tried in turn
// as target_session_attrs=read-write does. It also caps each host's
// attempt (connectTimeout) when the URL does not.
func writableHost(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	hosts := map[string]bool{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))): true}
	for _, f := range cfg.Fallbacks {
		hosts[net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))] = true
	}
	if len(hosts) > 1 && cfg.ValidateConnect == nil {
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
}

// Ping checks that the database answers and takes writes: a connection to
// a standby or to a read-only database is not enough (ErrUnavailable), and
// it is closed, so that the pool connects again, to the writable host of a
// multi-host URL once there is one.
func (s *Store) Ping(ctx context.Context) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return translate(err)
	}
	defer c.Release()
	var readOnly bool
	err = c.QueryRow(ctx, `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool`).Scan(&readOnly)
	if err != nil {
		return translate(err)
	}
	if !readOnly {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = c.Conn().Close(cctx) // released closed, the pool drops it
	err = fmt.Errorf("%w: %w", agentd.ErrUnavailable, errReadOnly)
	s.health.failed(err)
	return err
}
