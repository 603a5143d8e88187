package persist_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// count returns the rows of table in the database of dbURL.
func count(t *testing.T, dbURL, table string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func newRunParams(key string) persist.RunCreateParams {
	p := persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: "reject"},
		Input:  []agentd.InputMessage{{Role: "user", Content: "hi"}}}
	if key != "" {
		p.IdempotencyKey, p.RequestHash = key, "h-"+key
	}
	return p
}

// sqlState is the SQLSTATE of err's PostgreSQL error, if it has one.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestTooManyConnectionsIsUnavailable: when PostgreSQL refuses connections
// (53300 too many connections), creating a run fails with ErrUnavailable
// and leaves nothing behind; the same idempotency key creates the run once
// connections are allowed again.
func TestTooManyConnectionsIsUnavailable(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	role, roleURL := persisttest.LimitedRole(t, dbURL)
	s := persisttest.Open(t, persist.Config{URL: roleURL, MaxConns: 4})
	ctx := context.Background()

	persisttest.RefuseRole(t, role)
	var err error
	for i := 0; i < 3; i++ {
		_, _, err = s.RunCreate(ctx, newRunParams("k1"))
		if !errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("create %d while connections are refused: %v, want ErrUnavailable", i, err)
		}
	}
	if got := sqlState(err); got != "53300" {
		t.Fatalf("create while connections are refused: SQLSTATE %q (%v), want 53300", got, err)
	}
	if _, err := s.RunGet(ctx, "default", agentd.NewID()); !errors.Is(err, agentd.ErrUnavailable) {
		t.Fatalf("read while connections are refused: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, agentd.ErrUnavailable) {
		t.Fatalf("ping while connections are refused: %v, want ErrUnavailable", err)
	}
	for _, table := range []string{"runs", "conversations", "messages", "run_events"} {
		if n := count(t, dbURL, table); n != 0 {
			t.Fatalf("%d rows in %s after failed creates", n, table)
		}
	}

	persisttest.AllowRole(t, role)
	r, created, err := s.RunCreate(ctx, newRunParams("k1"))
	if err != nil || !created {
		t.Fatalf("create once connections are allowed: created %v, %v", created, err)
	}
	again, created, err := s.RunCreate(ctx, newRunParams("k1"))
	if err != nil || created || again.ID != r.ID {
		t.Fatalf("repeat of the key: %v created %v id %s, want %s", err, created, again.ID, r.ID)
	}
	if n := count(t, dbURL, "runs"); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// TestReadOnlyDatabaseRefusesWritesOnly: while the database only reads (as
// a standby or a demoted primary, SQLSTATE 25006), every write fails with
// ErrUnavailable and commits nothing, reads are served, and Ping says
// unavailable; once writes are allowed again the store's connections that
// were opened read-only are dropped as they fail, so that writes succeed
// again within as many tries as the pool has connections.
func TestReadOnlyDatabaseRefusesWritesOnly(t *testing.T) {
	t.Parallel()
	const conns = 3
	dbURL := persisttest.NewDatabase(t)
	s := persisttest.Open(t, persist.Config{URL: dbURL, MaxConns: conns})
	ctx := context.Background()
	r := createRun(t, s, "")

	undo := persisttest.ReadOnly(t, dbURL)
	var sawReadOnly bool
	for i := 0; i < 4; i++ {
		_, _, err := s.RunCreate(ctx, newRunParams(""))
		if !errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("create %d on a read-only database: %v, want ErrUnavailable", i, err)
		}
		sawReadOnly = sawReadOnly || sqlState(err) == "25006"
		_, _, err = s.RunCreate(ctx, newRunParams(fmt.Sprint("key-", i)))
		if !errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("create %d with a key on a read-only database: %v, want ErrUnavailable", i, err)
		}
		if _, err := s.RunCancel(ctx, "default", r.ID, ""); !errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("cancel %d on a read-only database: %v, want ErrUnavailable", i, err)
		}
	}
	if !sawReadOnly {
		t.Fatal("no create failed with SQLSTATE 25006")
	}
	if got, err := s.RunGet(ctx, "default", r.ID); err != nil || got.ID != r.ID {
		t.Fatalf("read on a read-only database: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, agentd.ErrUnavailable) {
		t.Fatalf("ping on a read-only database: %v, want ErrUnavailable", err)
	}
	if n := count(t, dbURL, "runs"); n != 1 {
		t.Fatalf("%d runs after failed creates, want 1", n)
	}
	// Fill the pool with read-only sessions, as a demoted primary would
	// leave them.
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() { _, _ = s.RunList(ctx, agentd.RunListParams{TenantID: "default", Limit: 10}) })
	}
	wg.Wait()

	undo()
	var err error
	for i := 0; i <= conns+1; i++ {
		if _, _, err = s.RunCreate(ctx, newRunParams("")); err == nil {
			break
		}
		if !errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("create after writes are allowed again: %v, want ErrUnavailable or success", err)
		}
	}
	if err != nil {
		t.Fatalf("create still fails after %d tries: %v", conns+2, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after writes are allowed again: %v", err)
	}
}

// TestBrokenConnectionsAreUnavailable: a statement on a connection whose
// backend was terminated (a restart, a failover) fails with ErrUnavailable,
// and the next one is served on a new connection.
func TestBrokenConnectionsAreUnavailable(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	s := persisttest.Open(t, persist.Config{URL: dbURL, MaxConns: 1})
	ctx := context.Background()
	r := createRun(t, s, "")
	persisttest.Terminate(t, dbURL)
	time.Sleep(50 * time.Millisecond) // the termination reaches the connection
	_, err := s.RunGet(ctx, "default", r.ID)
	if err != nil && !errors.Is(err, agentd.ErrUnavailable) {
		t.Fatalf("read on a terminated connection: %v, want ErrUnavailable", err)
	}
	if _, err := s.RunGet(ctx, "default", r.ID); err != nil {
		t.Fatalf("read after the connection broke: %v", err)
	}
	persisttest.Terminate(t, dbURL)
	time.Sleep(50 * time.Millisecond)
	if _, err := s.RunCancel(ctx, "default", r.ID, ""); err != nil && !errors.Is(err, agentd.ErrUnavailable) {
		t.Fatalf("cancel on a terminated connection: %v, want ErrUnavailable", err)
	}
}

// syncBuffer is a bytes.Buffer that a logger may write from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestUnavailabilityIsLoggedOncePerChange: many failed calls while the
// database is read-only log one line, and its return one more.
func TestUnavailabilityIsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	var logs syncBuffer
	s := persisttest.Open(t, persist.Config{URL: dbURL, MaxConns: 2,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	createRun(t, s, "")
	undo := persisttest.ReadOnly(t, dbURL)
	for range 20 {
		_, _, _ = s.RunCreate(ctx, newRunParams(""))
	}
	undo()
	persisttest.Terminate(t, dbURL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, err := s.RunCreate(ctx, newRunParams(""))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create still fails: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The store says so after a success that follows a quiet moment.
	for !strings.Contains(logs.String(), "available again") {
		if time.Now().After(deadline) {
			t.Fatalf("the store never said the database is available again:\n%s", logs.String())
		}
		createRun(t, s, "")
		time.Sleep(50 * time.Millisecond)
	}
	out := logs.String()
	if n := strings.Count(out, `"msg":"database unavailable"`); n != 1 {
		t.Fatalf("%d lines say the database is unavailable, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, `"msg":"database available again"`); n != 1 {
		t.Fatalf("%d lines say the database is available again, want 1:\n%s", n, out)
	}
}

// TestListenReconnectsAndCatchesUp: when the LISTEN connection's backend
// is terminated, Listen connects again, calls onConnect (so that the
// caller reads what it may have missed) and receives what is notified
// after.
func TestListenReconnectsAndCatchesUp(t *testing.T) {
	t.Parallel()
	s, dbURL := persisttest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	var connects atomic.Int32
	connected := make(chan struct{}, 8)
	got := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, []string{"agentd_test"}, func() {
			connects.Add(1)
			connected <- struct{}{}
		}, func(_, payload string) { got <- payload })
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor := func(what string, c <-chan struct{}) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	waitFor("first connection", connected)
	persisttest.Terminate(t, dbURL)
	waitFor("reconnection", connected)
	deadline := time.After(30 * time.Second)
	for {
		// The store's pool lost its connections too: its first statement
		// may fail.
		if err := s.NotifyMany(context.Background(), "agentd_test", []string{"after"}); err != nil &&
			!errors.Is(err, agentd.ErrUnavailable) {
			t.Fatalf("notify: %v", err)
		}
		select {
		case p := <-got:
			if p != "after" {
				t.Fatalf("payload %q", p)
			}
			if connects.Load() < 2 {
				t.Fatalf("onConnect called %d times", connects.Load())
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification after the reconnection")
		}
	}
}

// readOnlyHost is a TCP proxy to the test server whose sessions are
// read-only, as those of a standby are: listed first in a multi-host URL,
// it stands for a standby in front of the primary.
func readOnlyHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(persisttest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() {
				proxyReadOnly(c, upstream, func(up net.Conn) { mu.Lock(); open = append(open, up); mu.Unlock() })
			})
		}
	})
	return ln.Addr().String()
}

// proxyReadOnly relays client c to upstream, asking in its startup message
// that the session be read-only.
func proxyReadOnly(c net.Conn, upstream string, track func(net.Conn)) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	var startup *pgproto3.StartupMessage
	for startup == nil {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.StartupMessage:
			startup = m
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
		default:
			return
		}
	}
	startup.Parameters["options"] = "-c default_transaction_read_only=on"
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	track(up)
	defer up.Close()
	b, err := startup.Encode(nil)
	if err != nil {
		return
	}
	if _, err := up.Write(b); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
	}()
	_, _ = io.Copy(c, up)
}

// multiHost is dbURL with host first, before the test server.
func multiHost(t *testing.T, dbURL, host string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host + "," + u.Host
	return u.String()
}

// TestEnsureDatabaseOnTheWritableHost: with a URL whose first host only
// reads (a standby) or refuses connections, the database is created and
// migrated on the writable host.
func TestEnsureDatabaseOnTheWritableHost(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"127.0.0.1:1", readOnlyHost(t)} {
		name := fmt.Sprintf("agentd_t_ensure_%d", time.Now().UnixNano())
		t.Cleanup(func() { persisttest.Admin(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
		single, err := persist.WithDatabase(persisttest.AdminURL(), name)
		if err != nil {
			t.Fatal(err)
		}
		dbURL := multiHost(t, single, first)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := persist.EnsureDatabase(ctx, dbURL); err != nil {
			t.Fatalf("ensure database behind %s: %v", first, err)
		}
		if err := persist.EnsureDatabase(ctx, dbURL); err != nil {
			t.Fatalf("ensure database behind %s, again: %v", first, err)
		}
		if err := persist.Migrate(ctx, dbURL); err != nil {
			t.Fatalf("migrate behind %s: %v", first, err)
		}
		cancel()
		if n := count(t, single, "runs"); n != 0 {
			t.Fatalf("%d runs in a new database", n)
		}
	}
}

// TestStoreWritesToTheWritableHost: a store on a URL whose first host
// only reads writes to the second.
func TestStoreWritesToTheWritableHost(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	s := persisttest.Open(t, persist.Config{URL: multiHost(t, dbURL, readOnlyHost(t)), MaxConns: 2})
	if _, _, err := s.RunCreate(context.Background(), newRunParams("")); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
}
