package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const testServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func TestRun(t *testing.T) { testRun(t, false) }

// TestRunOverHTTP: the clients call the workflow through the program's
// own HTTP server.
func TestRunOverHTTP(t *testing.T) { testRun(t, true) }

func testRun(t *testing.T, overHTTP bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	serverURL := testServerURL
	if u := os.Getenv("AGENTBENCH_DATABASE_URL"); u != "" {
		serverURL = u
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Skipf("PostgreSQL not reachable at %s: %v", redact(serverURL), err)
	}
	defer conn.Close(context.Background())

	name := fmt.Sprintf("agentbench_dbos_test_%d_%d", os.Getpid(), time.Now().UnixNano())
	res, err := run(ctx, config{
		DatabaseURL: serverURL,
		DBName:      name,
		Clients:     2,
		Duration:    time.Second,
		Warmup:      200 * time.Millisecond,
		HTTP:        overHTTP,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("result: %+v", res)
	if res.Workflows <= 0 {
		t.Errorf("workflows = %d, want > 0", res.Workflows)
	}
	if res.Failed != 0 {
		t.Errorf("failed = %d, want 0", res.Failed)
	}
	if res.Clients != 2 {
		t.Errorf("clients = %d, want 2", res.Clients)
	}
	if res.Seconds < 0.9 || res.WorkflowsPerS <= 0 {
		t.Errorf("seconds = %v, workflows_per_s = %v", res.Seconds, res.WorkflowsPerS)
	}
	if res.HTTP != overHTTP {
		t.Errorf("http = %v, want %v", res.HTTP, overHTTP)
	}
	if res.DBOSVersion == "" {
		t.Error("dbos_version is empty")
	}

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS(SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("check database: %v", err)
	}
	if exists {
		t.Errorf("database %s still exists after run", name)
	}
}
