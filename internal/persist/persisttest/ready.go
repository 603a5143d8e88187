package persisttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnections is how many connections to PostgreSQL one package's
// tests need at once unless the package says more (NeedConnections). A
// test process is one package's tests, and it checks for its own need, not
// the whole suite's: what `go test ./internal/run/` needs is what its
// tests hold, so it runs beside a server or another package's tests that
// hold the rest. The figure is a store's pool as Open gives it (20), since
// a package's tests seldom hold more than one full pool between them: its
// pools open connections only as they are used, and `go test` runs as many
// of its parallel tests at once as the machine has CPUs (-parallel). On a
// 2-CPU machine every package but cmd/server, api and internal/stream
// peaked at 15 or fewer (internal/run at 14; docs/development.md); more
// CPUs run more tests at once, and need more (AGENTD_TEST_PG_CONNECTIONS).
const DefaultConnections = 20

// needed is what NeedConnections set; 0: DefaultConnections.
var needed atomic.Int64

// NeedConnections says that this package's tests hold n connections to
// PostgreSQL at once at their peak, more than DefaultConnections: a
// package whose tests each run agentd, or several instances of a part of
// it, each with a pool of its own, says so from its TestMain, before its
// tests run. The first test of the process that asks for a database
// checks that the server has that many for tests.
func NeedConnections(n int) { needed.Store(int64(n)) }

// envNeed, when set, is the number of connections the tests need instead
// of the package's own figure; 0 turns the check off.
const envNeed = "AGENTD_TEST_PG_CONNECTIONS"

// need is how many connections this package's tests need: envNeed, else
// what the package said (NeedConnections), else DefaultConnections.
func need() (int, error) {
	v := os.Getenv(envNeed)
	if v == "" {
		if n := needed.Load(); n > 0 {
			return int(n), nil
		}
		return DefaultConnections, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a number of connections, 0 or more", envNeed, v)
	}
	return n, nil
}

// dbPrefix starts the name of every database NewDatabase creates:
// agentd_test_<unix seconds>_<pid>_<n>, so that a sweep can tell its age.
const dbPrefix = "agentd_test_"

// staleAfter is the age past which a test database was left by a test
// process that was killed before its cleanups ran: no test runs this long.
const staleAfter = time.Hour

// adminApp is the application_name of this package's own connections,
// which come and go; they do not count as other clients.
const adminApp = "agentd-persisttest"

// ErrShortOfConnections says that the test PostgreSQL cannot give the
// tests the connections they need.
var ErrShortOfConnections = errors.New("PostgreSQL is short of connections")

// readiness is the once-per-process check of the test server.
type readiness struct {
	once  sync.Once
	err   error    // the server cannot hold the tests
	notes []string // what the sweep did, for the first test's log
	told  atomic.Bool
}

var ready readiness

// checkReady makes sure, once per test process, that the server has the
// connections the tests need, and drops stale test databases. When the
// server is not ready, the first test to ask fails with the reason and
// every later one is skipped with it, so that the reason is told once per
// process instead of once per test.
func checkReady(t testing.TB) {
	t.Helper()
	ready.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		n, err := need()
		if err != nil {
			ready.err = err
			return
		}
		ready.notes, ready.err = prepare(ctx, n)
		for _, n := range ready.notes {
			t.Log(n)
		}
	})
	if ready.err == nil {
		return
	}
	if ready.told.CompareAndSwap(false, true) {
		t.Fatal(ready.err)
	}
	t.Skipf("skipped: %v (the first test that needed a database failed with it)", ready.err)
}

// prepare checks that the server has need connections for tests and
// sweeps the stale test databases; a failed sweep is a note, not an error.
func prepare(ctx context.Context, need int) ([]string, error) {
	conn, err := adminConnect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if need > 0 {
		if err := checkConnections(ctx, conn, need); err != nil {
			return nil, err
		}
	}
	return sweep(ctx, conn, time.Now().Add(-staleAfter)), nil
}

// adminConnect connects to AdminURL as this package's application. A
// server out of connections is an ErrShortOfConnections.
func adminConnect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		return nil, fmt.Errorf("AGENTD_TEST_DATABASE_URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = adminApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explain(fmt.Errorf("connect admin: %w", err))
	}
	return conn, nil
}

// explain adds to err, when the server refused a connection because it
// has too many (SQLSTATE 53300), what the tests need and how to give it.
func explain(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53300" {
		n, nerr := need()
		if nerr != nil {
			n = DefaultConnections
		}
		return fmt.Errorf("%w: PostgreSQL at %s refused a connection (%v); this package's tests need %d at once, "+
			"besides other packages' tests run beside them: raise max_connections (docs/development.md)",
			ErrShortOfConnections, serverName(), err, n)
	}
	return err
}

// serverName is the host and port of AdminURL, for messages.
func serverName() string {
	cfg, err := pgconn.ParseConfig(AdminURL())
	if err != nil {
		return AdminURL()
	}
	return cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
}

// checkConnections fails with ErrShortOfConnections when the server has
// fewer than need connections for tests: max_connections, less the slots
// reserved for superusers (unless the role is one), less what clients
// other than tests hold (a test's connection is to a test database or a
// benchmark's, agentd_*, or is this package's own).
func checkConnections(ctx context.Context, conn *pgx.Conn, need int) error {
	var maxConns, reserved, others int
	err := conn.QueryRow(ctx, `
SELECT current_setting('max_connections')::int,
       CASE WHEN r.rolsuper THEN 0
            ELSE current_setting('superuser_reserved_connections')::int
                 + coalesce(current_setting('reserved_connections', true)::int, 0) END,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
           AND coalesce(datname, '') NOT LIKE 'agentd\_%' AND coalesce(application_name, '') <> $1)::int
  FROM pg_roles r WHERE r.rolname = current_user`, adminApp).Scan(&maxConns, &reserved, &others)
	if err != nil {
		return fmt.Errorf("read the server's connections: %w", err)
	}
	free := maxConns - reserved - others
	if free >= need {
		return nil
	}
	return fmt.Errorf("%w: PostgreSQL at %s has %d free connections (max_connections %d, %d reserved for superusers, "+
		"%d held by other clients); the tests need %d: raise max_connections (docs/development.md)",
		ErrShortOfConnections, serverName(), free, maxConns, reserved, others, need)
}

// sweep drops the test databases created before cutoff: left by test
// processes that were killed before their cleanups ran. It returns a note
// per database dropped or that could not be.
func sweep(ctx context.Context, conn *pgx.Conn, cutoff time.Time) []string {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'agentd\_test\_%'`)
	if err != nil {
		return []string{fmt.Sprintf("list stale test databases: %v", err)}
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return []string{fmt.Sprintf("list stale test databases: %v", err)}
	}
	var notes []string
	for _, name := range names {
		created, ok := createdAt(name)
		if !ok || !created.Before(cutoff) {
			continue
		}
		if err := dropDatabase(ctx, conn, name); err != nil {
			notes = append(notes, fmt.Sprintf("drop stale test database %s: %v", name, err))
			continue
		}
		notes = append(notes, fmt.Sprintf("dropped stale test database %s (created %s)", name, created.Format(time.RFC3339)))
	}
	return notes
}

// newName is the name of a new test database.
func newName() string {
	return fmt.Sprintf("%s%d_%d_%d", dbPrefix, time.Now().Unix(), os.Getpid(), counter.Add(1))
}

// createdAt is when the test database name was created, from its name.
func createdAt(name string) (time.Time, bool) {
	secs, _, ok := strings.Cut(strings.TrimPrefix(name, dbPrefix), "_")
	n, err := strconv.ParseInt(secs, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(name, dbPrefix) {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// dropDatabase drops the database name, ending its connections.
func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
