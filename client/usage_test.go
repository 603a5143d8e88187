package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// insertCalls writes ledger rows as the engine would: of tenant, model
// and cost, made at the times given (SQL).
func insertCalls(t *testing.T, url, tenant, model string, cost float64, at ...time.Time) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, when := range at {
		if _, err := conn.Exec(ctx, `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
				input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost, created_at)
			VALUES ($1, $2, 1, 1, 'step', $3, 'openai', 100, 40, 10, 20, 5, $4, $5)`,
			tenant, agentd.NewID(), model, cost, when); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUsage: against a real server, the SDK reads the tenant's usage by
// day and model over a range, refuses a bad key with the server's 422,
// and reads and sets a tenant's budget over the server's default.
func TestUsage(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url, "AGENTD_TENANT_MONTHLY_BUDGET=40")
	ctx := context.Background()
	c := client.New("http://" + addr)
	day := time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)
	insertCalls(t, url, "default", "big", 0.5, day, day.Add(time.Hour), day.AddDate(0, 0, 1))
	insertCalls(t, url, "default", "small", 0.125, day)
	insertCalls(t, url, "other", "big", 9, day)
	rows, err := c.Usage(ctx, client.UsageQuery{From: day.AddDate(0, 0, -1), To: day.AddDate(0, 0, 5),
		GroupBy: []agentd.UsageKey{agentd.UsageByDay, agentd.UsageByModel}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Key(agentd.UsageByDay)+" "+r.Key(agentd.UsageByModel)+" "+agentd.FormatCost(r.Cost))
	}
	if want := []string{"2025-03-10 big 1", "2025-03-10 small 0.125", "2025-03-11 big 0.5"}; len(got) != 3 ||
		got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || rows[0].Calls != 2 || rows[0].CacheWriteTokens != 20 {
		t.Fatalf("usage by day and model: %v %+v", got, rows)
	}
	if rows, err := c.Usage(ctx, client.UsageQuery{}); err != nil || len(rows) != 0 {
		t.Fatalf("this month's usage: %+v %v", rows, err)
	}
	if rows, err := c.Usage(ctx, client.UsageQuery{From: day.AddDate(0, 0, -1), To: day.AddDate(0, 0, 5), Tenant: client.AllTenants,
		GroupBy: []agentd.UsageKey{agentd.UsageByTenant}}); err != nil || len(rows) != 2 || rows[1].Key(agentd.UsageByTenant) != "other" {
		t.Fatalf("every tenant's: %+v %v", rows, err)
	}
	if _, err := c.Usage(ctx, client.UsageQuery{GroupBy: []agentd.UsageKey{"colour"}}); !client.IsCode(err, "invalid_field") {
		t.Fatalf("a bad key: %v", err)
	}
	b, err := c.GetBudget(ctx, "default")
	if err != nil || b.Monthly != nil || b.Effective == nil || *b.Effective != 40 {
		t.Fatalf("the default budget: %+v %v", b, err)
	}
	five := 5.0
	if b, err := c.SetBudget(ctx, "default", &five); err != nil || b.Effective == nil || *b.Effective != 5 {
		t.Fatalf("set: %+v %v", b, err)
	}
	if b, err := c.SetBudget(ctx, "default", nil); err != nil || b.Monthly != nil || *b.Effective != 40 {
		t.Fatalf("removed: %+v %v", b, err)
	}
}
