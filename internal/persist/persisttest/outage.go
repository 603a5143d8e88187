package persisttest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the outages tests cause on purpose: a database that
// takes no writes, sessions broken as a failover breaks them, and a role
// whose connections PostgreSQL refuses.

// Admin runs sql on the test server's maintenance database, as the
// administrator.
func Admin(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("connect admin: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// DatabaseOf is the database name of a postgres:// URL.
func DatabaseOf(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Terminate ends every session of the database of dbURL, as a restart or
// a failover of the server does.
func Terminate(t testing.TB, dbURL string) {
	t.Helper()
	Admin(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
		DatabaseOf(t, dbURL))
}

// ReadOnly makes the database of dbURL refuse writes as a standby does
// (SQLSTATE 25006) for every session that starts from now on, and breaks
// the sessions it has; undo lifts it for new sessions.
func ReadOnly(t testing.TB, dbURL string) (undo func()) {
	t.Helper()
	db := pgx.Identifier{DatabaseOf(t, dbURL)}.Sanitize()
	Admin(t, "ALTER DATABASE "+db+" SET default_transaction_read_only = on")
	Terminate(t, dbURL)
	return func() { Admin(t, "ALTER DATABASE "+db+" RESET default_transaction_read_only") }
}

// LimitedRole creates a role that may use the database of dbURL (a
// superuser is exempt from connection limits), dropped when t ends, and
// returns the URL that connects as it. RefuseRole and AllowRole set its
// connection limit.
func LimitedRole(t testing.TB, dbURL string) (role, roleURL string) {
	t.Helper()
	role = fmt.Sprintf("agentd_limited_%d", time.Now().UnixNano())
	Admin(t, "CREATE ROLE "+role+" LOGIN")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT ALL ON ALL TABLES IN SCHEMA public TO " + role, "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO " + role} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)
	t.Cleanup(func() {
		AllowRole(t, role)
		Admin(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Logf("drop role: %v", err)
			return
		}
		_, _ = conn.Exec(ctx, "DROP OWNED BY "+role)
		conn.Close(ctx)
		Admin(t, "DROP ROLE IF EXISTS "+role)
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return role, u.String()
}

// RefuseRole makes PostgreSQL refuse every connection of role (SQLSTATE
// 53300, too many connections for role) and breaks those it has.
func RefuseRole(t testing.TB, role string) {
	t.Helper()
	Admin(t, "ALTER ROLE "+role+" CONNECTION LIMIT 0")
	Admin(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
}

// AllowRole lifts RefuseRole.
func AllowRole(t testing.TB, role string) {
	t.Helper()
	Admin(t, "ALTER ROLE "+role+" CONNECTION LIMIT -1")
}

// TerminateListeners ends the sessions of the database of dbURL that
// listen for notifications (their last statement was a LISTEN), as a
// broken network ends a LISTEN connection, and returns how many it ended.
func TerminateListeners(t testing.TB, dbURL string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("connect admin: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`, DatabaseOf(t, dbURL)).Scan(&n); err != nil {
		t.Fatalf("terminate listeners: %v", err)
	}
	return n
}
