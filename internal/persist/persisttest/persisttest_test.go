package persisttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// envHelper names, in a test process started by these tests, the file a
// helper test writes its database's name to, and envMode says what the
// helper does then.
const (
	envHelper = "AGENTD_PERSISTTEST_HELPER_FILE"
	envMode   = "AGENTD_PERSISTTEST_HELPER_MODE"
)

// TestHelperProcess is not a test: it is the test process that the tests
// below start. Each of its subtests takes a database (and a store on it),
// adds the database's name to a file, then fails or panics.
func TestHelperProcess(t *testing.T) {
	file := os.Getenv(envHelper)
	if file == "" {
		t.Skip("only run by the tests of persisttest")
	}
	for _, sub := range []string{"first", "second"} {
		t.Run(sub, func(t *testing.T) {
			_, u := New(t)
			cfg, err := pgx.ParseConfig(u)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteString(cfg.Database + "\n")
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
			if os.Getenv(envMode) == "panic" {
				panic("the test panics holding a database")
			}
			t.Fatal("the test fails holding a database")
		})
	}
}

// TestNoDatabaseLeftByAFailedTest: tests that fail, or panic, with a
// database (and a store open on it) leave no database behind.
func TestNoDatabaseLeftByAFailedTest(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string]int{"fail": 2, "panic": 1} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "names")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envHelper+"="+file, envMode+"="+mode)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "holding a database") {
				t.Fatalf("the helper test did not fail as it should (%v):\n%s", err, out)
			}
			data, err := os.ReadFile(file)
			names := strings.Fields(string(data))
			if err != nil || len(names) != want {
				t.Fatalf("the helper tests wrote %q, want %d database names (%v):\n%s", names, want, err, out)
			}
			for _, name := range names {
				if exists(t, name) {
					t.Errorf("database %s is left after its test failed (%s):\n%s", name, mode, out)
				}
			}
		})
	}
}

// TestNotReadyIsToldOnce: a server with fewer connections for tests than
// the tests need (AGENTD_TEST_PG_CONNECTIONS here) fails the first test
// that asks for a database with what it has and what is needed, and skips
// the others with it.
func TestNotReadyIsToldOnce(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envHelper+"="+filepath.Join(t.TempDir(), "name"), envNeed+"=1000000")
	out, _ := cmd.CombinedOutput()
	s := string(out)
	if strings.Count(s, "the tests need 1000000: raise max_connections (docs/development.md)") != 2 ||
		!strings.Contains(s, "--- FAIL: TestHelperProcess/first") || !strings.Contains(s, "--- SKIP: TestHelperProcess/second") ||
		strings.Contains(s, "holding a database") {
		t.Fatalf("want the first helper test failed and the second skipped, for want of connections:\n%s", s)
	}
}

// TestCheckConnections: the check passes when the server has what is
// needed, and fails with ErrShortOfConnections, saying max_connections and
// the need, when it has not.
func TestCheckConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := adminConnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := checkConnections(ctx, conn, 1); err != nil {
		t.Fatalf("a need of 1: %v", err)
	}
	var maxConns string
	if err := conn.QueryRow(ctx, `SHOW max_connections`).Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	err = checkConnections(ctx, conn, 1_000_000)
	if !errors.Is(err, ErrShortOfConnections) || !strings.Contains(err.Error(), "max_connections "+maxConns+",") ||
		!strings.Contains(err.Error(), "the tests need 1000000: raise max_connections (docs/development.md)") {
		t.Errorf("a need of 1000000: %v", err)
	}
}

// TestSweepDropsStaleDatabases: the sweep drops the test databases older
// than its cutoff and keeps the others.
func TestSweepDropsStaleDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := adminConnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stale := fmt.Sprintf("%s%d_%d_sweep", dbPrefix, time.Now().Add(-2*time.Hour).Unix(), os.Getpid())
	fresh := fmt.Sprintf("%s%d_%d_sweep", dbPrefix, time.Now().Unix(), os.Getpid())
	for _, name := range []string{stale, fresh} {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { drop(t, name) })
	}
	notes := sweep(ctx, conn, time.Now().Add(-staleAfter))
	if exists(t, stale) {
		t.Errorf("the stale database %s is left (%q)", stale, notes)
	}
	if !exists(t, fresh) {
		t.Errorf("the sweep dropped the fresh database %s (%q)", fresh, notes)
	}
	for _, name := range []string{"agentd_test_x_1_2", "agentd_t_1_2_3", "agentd_tmpl_0123"} {
		if _, ok := createdAt(name); ok {
			t.Errorf("createdAt(%s) is a time: not a name NewDatabase makes", name)
		}
	}
}

// exists reports whether the database name exists.
func exists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := adminConnect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestNeedIsThePackages: a package's tests need DefaultConnections unless
// the package said more, and AGENTD_TEST_PG_CONNECTIONS says for either.
func TestNeedIsThePackages(t *testing.T) {
	t.Setenv(envNeed, "") // not t.Parallel: the process's other tests read the need
	t.Cleanup(func() { NeedConnections(0) })
	for _, c := range []struct {
		said int
		env  string
		want int
	}{{0, "", DefaultConnections}, {60, "", 60}, {60, "7", 7}, {0, "0", 0}} {
		NeedConnections(c.said)
		t.Setenv(envNeed, c.env)
		if n, err := need(); err != nil || n != c.want {
			t.Errorf("package said %d, %s=%q: need %d (%v), want %d", c.said, envNeed, c.env, n, err, c.want)
		}
	}
}
