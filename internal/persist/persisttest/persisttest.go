package persisttest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/migrations"
)

// AdminURL is the database URL tests connect to in order to create their own.
func AdminURL() string {
	if u := os.Getenv("AGENTD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

var counter atomic.Int64

// NewDatabase creates a fresh migrated database and returns its URL; it is
// dropped when t ends, whether t passed or failed. The first call in a test
// process checks that the server has the connections its package's tests
// need (DefaultConnections, or what NeedConnections said) and drops
// the test databases that killed test processes left (older than an hour).
func NewDatabase(t testing.TB) string {
	t.Helper()
	checkReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tmpl, err := template(ctx)
	if err != nil {
		t.Fatalf("test database template: %v", err)
	}
	name := newName()
	conn, err := adminConnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Registered first, so that the database goes even if its creation
	// failed after PostgreSQL made it (a lost answer).
	t.Cleanup(func() { drop(t, name) })
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize())
		if err == nil || i == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the template is briefly busy while another process clones it
	}
	if err != nil {
		t.Fatalf("create test database: %v", explain(err))
	}
	u, err := persist.WithDatabase(AdminURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// drop drops the test database name, trying again for up to 30 seconds
// when the server refuses (out of connections, restarting); a database it
// could not drop is left to the next process's sweep, and said in t's log.
func drop(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := func() error {
			c, err := adminConnect(ctx)
			if err != nil {
				return err
			}
			defer c.Close(context.WithoutCancel(ctx))
			return dropDatabase(ctx, c, name)
		}()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Logf("drop test database %s: %v", name, err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// New returns a store on a fresh database, closed when t ends.
func New(t testing.TB) (*persist.Store, string) {
	t.Helper()
	u := NewDatabase(t)
	return Open(t, persist.Config{URL: u}), u
}

// Open opens a store as cfg says (a pool of 20 unless cfg.MaxConns is set),
// closed when t ends.
func Open(t testing.TB, cfg persist.Config) *persist.Store {
	t.Helper()
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 20
	}
	s, err := persist.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open store: %v", explain(err))
	}
	t.Cleanup(s.Close)
	return s
}

// WaitRun polls the run until cond holds and returns it; a nil cond waits
// until the run is neither queued nor running. The test fails, saying the
// run's status, if timeout passes first.
func WaitRun(t testing.TB, store *persist.Store, id string, cond func(agentd.Run) bool, timeout time.Duration) agentd.Run {
	t.Helper()
	if cond == nil {
		cond = func(r agentd.Run) bool { return r.Status != agentd.StatusQueued && r.Status != agentd.StatusRunning }
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := store.RunByID(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("wait for run %s: %v", id, err)
		}
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is still %s after %v", id, r.Status, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// template returns the name of a migrated template database for the current
// migrations, creating it once per server under an advisory lock.
func template(ctx context.Context) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	if err != nil {
		return "", err
	}
	name := "agentd_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]
	conn, err := adminConnect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(74117)`); err != nil {
		return "", err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(74117)`) //nolint:errcheck
	var ready bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`, name).Scan(&ready)
	if err != nil || ready {
		return name, err
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	u, err := persist.WithDatabase(AdminURL(), name)
	if err != nil {
		return "", err
	}
	if err := persist.Migrate(ctx, u); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	// Mark it a template only once it is complete; a crash before this leaves it to be rebuilt.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH is_template true"); err != nil {
		return "", err
	}
	return name, nil
}

// TableText returns every row of table in the database of url, each as
// PostgreSQL's text form of the whole row: for tests that search
// everything stored for a string.
func TableText(t testing.TB, url, table string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT t::text FROM `+pgx.Identifier{table}.Sanitize()+` t`)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}
