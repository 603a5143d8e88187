package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestUsage: agentctl shows the tenant's usage by model over a range of
// dates, as a table and as JSON, refuses a bad date before asking, and
// reads and sets a tenant's budget.
func TestUsage(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url, "AGENTD_TENANT_MONTHLY_BUDGET=40")
	base := "http://" + addr
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, c := range []struct {
		model string
		cost  float64
		at    string
	}{{"big", 0.5, "2025-03-10T12:00:00Z"}, {"big", 0.25, "2025-03-11T23:59:00Z"}, {"small", 2, "2025-03-12T00:00:00Z"}} {
		if _, err := conn.Exec(ctx, `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
				input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost, created_at)
			VALUES ('default', $1, 1, 1, 'step', $2, 'openai', 100, 40, 10, 20, 5, $3, $4)`,
			agentd.NewID(), c.model, c.cost, c.at); err != nil {
			t.Fatal(err)
		}
	}
	// -to is a date counted whole: the 11th's last call is in.
	r := ctl(t, base, "usage", "-from", "2025-03-01", "-to", "2025-03-11", "-by", "model")
	if r.code != exitOK || !strings.Contains(r.stdout, "MODEL") || !strings.Contains(r.stdout, "0.75") ||
		strings.Contains(r.stdout, "small") {
		t.Fatalf("usage by model: %s", r)
	}
	r = ctl(t, base, "-o", "json", "usage", "-from", "2025-03-01", "-to", "2025-03-31")
	var rows []client.UsageRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].Calls != 3 || rows[0].Cost != 2.75 {
		t.Fatalf("usage as JSON: %v %s", err, r)
	}
	if r := ctl(t, base, "usage", "-from", "March"); r.code != exitError || !strings.Contains(r.stderr, "-from") {
		t.Fatalf("a bad date: %s", r)
	}
	if r := ctl(t, base, "usage", "-by", "colour"); r.code != exitError || !strings.Contains(r.stderr, "invalid_field") {
		t.Fatalf("a bad key: %s", r)
	}
	if r := ctl(t, base, "budgets", "get", "default"); r.code != exitOK || !strings.Contains(r.stdout, "effective:  40") {
		t.Fatalf("budgets get: %s", r)
	}
	if r := ctl(t, base, "budgets", "set", "default", "12.5"); r.code != exitOK || !strings.Contains(r.stdout, "effective:  12.5") {
		t.Fatalf("budgets set: %s", r)
	}
	if r := ctl(t, base, "budgets", "set", "default", "default"); r.code != exitOK || !strings.Contains(r.stdout, "effective:  40") {
		t.Fatalf("budgets set default: %s", r)
	}
	if r := ctl(t, base, "budgets", "set", "default", "lots"); r.code != exitError {
		t.Fatalf("a bad amount: %s", r)
	}
}
