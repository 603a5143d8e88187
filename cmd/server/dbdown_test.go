package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// logBuffer collects the server's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// count is how many lines have "msg":msg.
func (b *logBuffer) count(msg string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), `"msg":"`+msg+`"`)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startLogged runs the server on dbURL with env, its log in logs, until t
// ends.
func startLogged(t *testing.T, dbURL string, env map[string]string, logs io.Writer) string {
	t.Helper()
	full := map[string]string{"DATABASE_URL": dbURL, "AGENTD_LOG_LEVEL": "info"}
	for k, v := range env {
		full[k] = v
	}
	base, stopped := serveInProcess(t, full, logs)
	t.Cleanup(func() {
		// How it stopped is not checked: the test may have taken its
		// database away.
		if err := stopped(); errors.Is(err, errNotStopped) {
			t.Error(err)
		}
	})
	return base
}

// runsIn counts the rows of runs in the database of dbURL.
func runsIn(t *testing.T, dbURL string) int {
	t.Helper()
	return dbValue[int](t, dbURL, "SELECT count(*) FROM runs")
}

// dbValue reads the one value that query answers, straight from the
// database of dbURL.
func dbValue[T any](t *testing.T, dbURL, query string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var v T
	if err := db.QueryRow(ctx, query, args...).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// answer is what the test reads of a response.
type answer struct {
	status     int
	code       string
	retryAfter string
	id         string
}

// call sends method path with body (none when empty) and an optional
// Idempotency-Key.
func call(t *testing.T, method, u, body, key string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Code string `json:"code"`
		ID   string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return answer{status: resp.StatusCode, code: v.Code, retryAfter: resp.Header.Get("Retry-After"), id: v.ID}
}

// until calls f until ok says its answer is the one awaited, failing the
// test if it never is; each other answer must be a 503.
func until(t *testing.T, what string, f func() answer, ok func(answer) bool) answer {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := f()
		if ok(a) {
			return a
		}
		if a.status != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d %s, want 503 meanwhile", what, a.status, a.code)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d %s", what, a.status, a.code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantUnavailable checks that a is 503 database_unavailable with a
// Retry-After of a few seconds.
func wantUnavailable(t *testing.T, what string, a answer) {
	t.Helper()
	s, err := strconv.Atoi(a.retryAfter)
	if a.status != http.StatusServiceUnavailable || a.code != "database_unavailable" || err != nil || s < 1 || s > 30 {
		t.Fatalf("%s: %d %q, Retry-After %q; want 503 database_unavailable with Retry-After", what, a.status, a.code, a.retryAfter)
	}
}

const dbdownRun = `{"input":"/say hello"}`

// TestDatabaseReadOnly: while the database takes no writes (as while a
// standby is promoted), POST /runs answers 503 database_unavailable with
// Retry-After and creates nothing, reads are served, /readyz answers 503,
// and the state is logged once; once writes are allowed again (and the old
// connections broken, as a failover breaks them), /readyz answers 200 and
// a retry with the same Idempotency-Key creates the run, once.
func TestDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	var logs logBuffer
	base := startLogged(t, dbURL, nil, &logs)
	first := call(t, "POST", base+"/runs", dbdownRun, "")
	if first.status != http.StatusAccepted {
		t.Fatalf("POST /runs: %d %s", first.status, first.code)
	}
	if a := call(t, "GET", base+"/readyz", "", ""); a.status != http.StatusOK {
		t.Fatalf("readyz: %d", a.status)
	}
	undo := persisttest.ReadOnly(t, dbURL)

	for i := range 10 {
		wantUnavailable(t, fmt.Sprint("POST /runs on a read-only database, try ", i), call(t, "POST", base+"/runs", dbdownRun, "dbdown-1"))
	}
	until(t, "GET /runs/{id} on a read-only database", func() answer { return call(t, "GET", base+"/runs/"+first.id, "", "") },
		func(a answer) bool { return a.status == http.StatusOK })
	if a := call(t, "GET", base+"/readyz", "", ""); a.status != http.StatusServiceUnavailable {
		t.Fatalf("readyz on a read-only database: %d", a.status)
	}
	if n := runsIn(t, dbURL); n != 1 {
		t.Fatalf("%d runs after refused creates, want 1", n)
	}
	if n := logs.count("database unavailable"); n != 1 {
		t.Fatalf("%d log lines say the database is unavailable, want 1:\n%s", n, logs.String())
	}
	if n := logs.count("internal error"); n != 0 {
		t.Fatalf("%d internal errors logged:\n%s", n, logs.String())
	}

	undo()
	persisttest.Terminate(t, dbURL)
	until(t, "readyz once writes are allowed", func() answer { return call(t, "GET", base+"/readyz", "", "") },
		func(a answer) bool { return a.status == http.StatusOK })
	created := until(t, "POST /runs once writes are allowed", func() answer { return call(t, "POST", base+"/runs", dbdownRun, "dbdown-1") },
		func(a answer) bool { return a.status == http.StatusAccepted })
	again := call(t, "POST", base+"/runs", dbdownRun, "dbdown-1")
	if again.status != http.StatusOK || again.id != created.id {
		t.Fatalf("repeat of the key: %d id %s, want 200 %s", again.status, again.id, created.id)
	}
	if n := runsIn(t, dbURL); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// TestDatabaseRefusesConnections: while PostgreSQL refuses agentd's
// connections (53300 too many connections), POST /runs answers 503
// database_unavailable with Retry-After and /readyz 503; once it accepts
// them again, both answer as usual.
func TestDatabaseRefusesConnections(t *testing.T) {
	t.Parallel()
	dbURL := persisttest.NewDatabase(t)
	role, roleURL := persisttest.LimitedRole(t, dbURL)
	// Registered after the role's cleanup, the server stops before it.
	base := startLogged(t, roleURL, map[string]string{"AGENTD_MIGRATE": "false"}, io.Discard)

	persisttest.RefuseRole(t, role)
	for i := range 5 {
		wantUnavailable(t, fmt.Sprint("POST /runs while connections are refused, try ", i), call(t, "POST", base+"/runs", dbdownRun, "refused-1"))
	}
	if a := call(t, "GET", base+"/readyz", "", ""); a.status != http.StatusServiceUnavailable {
		t.Fatalf("readyz while connections are refused: %d", a.status)
	}
	if n := runsIn(t, dbURL); n != 0 {
		t.Fatalf("%d runs after refused creates", n)
	}
	persisttest.AllowRole(t, role)
	until(t, "readyz once connections are allowed", func() answer { return call(t, "GET", base+"/readyz", "", "") },
		func(a answer) bool { return a.status == http.StatusOK })
	until(t, "POST /runs once connections are allowed", func() answer { return call(t, "POST", base+"/runs", dbdownRun, "refused-1") },
		func(a answer) bool { return a.status == http.StatusAccepted })
	if n := runsIn(t, dbURL); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}
