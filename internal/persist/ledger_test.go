package persist_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// ledgerDB is a store and a connection to its database, for the rows a
// test writes or reads as they are.
type ledgerDB struct {
	t  *testing.T
	s  *persist.Store
	db *pgx.Conn
}

func newLedgerDB(t *testing.T) *ledgerDB {
	t.Helper()
	s, url := persisttest.New(t)
	db, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return &ledgerDB{t: t, s: s, db: db}
}

func (l *ledgerDB) exec(sql string, args ...any) {
	l.t.Helper()
	if _, err := l.db.Exec(context.Background(), sql, args...); err != nil {
		l.t.Fatalf("%s: %v", sql, err)
	}
}

func (l *ledgerDB) count(sql string, args ...any) int {
	l.t.Helper()
	var n int
	if err := l.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		l.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// call inserts a ledger row as it stands, at created_at at.
func (l *ledgerDB) call(tenant, run string, seq int, model, agent string, cost float64, at string) {
	l.t.Helper()
	l.exec(`INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider, agent, input_tokens,
			cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost, created_at)
		VALUES ($1, $2, $3, 1, 'step', $4, 'openai', nullif($5, ''), 100, 10, 5, 20, 2, $6, `+at+`)`,
		tenant, run, seq, model, agent, cost)
}

// TestLedgerInsertOnce: a model call's row is written with the executor's
// write, once: the same write again (a retry, a takeover) adds nothing, a
// call of another number or kind is a row of its own, a write whose fence
// fails writes none, and a cost that is not a number is stored as 0.
func TestLedgerInsertOnce(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	r := createRun(t, l.s, "")
	c, err := l.s.RunClaim(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w1"}
	call := persist.LedgerInsert{TenantID: r.TenantID, RunID: r.ID, StepID: agentd.NewID(), StepSeq: 1, N: 1,
		Kind: agentd.ModelCallStep, Model: "m", Provider: "openai", UpstreamModel: "m-2025\x00", Agent: "helper",
		InputTokens: 1000, CachedInputTokens: 400, CacheWriteTokens: 100, OutputTokens: 50, ReasoningTokens: 10,
		PriceVersion: "abc", Cost: 0.0125, FallbackFrom: "primary", FallbackReason: "server_error"}
	for range 2 {
		if _, err := l.s.Exec(ctx, f, nil, call); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.count(`SELECT count(*) FROM model_calls WHERE run_id = $1`, r.ID); n != 1 {
		t.Fatalf("the same call written twice: %d rows", n)
	}
	next, compaction := call, call
	next.N, next.Cost = 2, math.NaN()
	compaction.Kind, compaction.Cost = agentd.ModelCallCompaction, 0.001
	if _, err := l.s.Exec(ctx, f, nil, next, compaction); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.Exec(ctx, persist.Fence{RunID: r.ID, Epoch: c.Epoch - 1, Worker: "old"}, nil,
		persist.LedgerInsert{TenantID: r.TenantID, RunID: r.ID, StepSeq: 2, N: 1, Kind: agentd.ModelCallStep, Model: "m",
			Provider: "openai", Cost: 9}); !errors.Is(err, persist.ErrLeaseLost) {
		t.Fatalf("a write under a stale epoch: %v", err)
	}
	bad := call
	bad.Kind = "other"
	if _, err := l.s.Exec(ctx, f, nil, bad); err == nil {
		t.Fatal("a call of an unknown kind was written")
	}
	if n := l.count(`SELECT count(*) FROM model_calls WHERE run_id = $1`, r.ID); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	var upstream, fallback string
	if err := l.db.QueryRow(ctx, `SELECT upstream_model, fallback_from FROM model_calls WHERE run_id = $1 AND n = 1
		AND kind = 'step'`, r.ID).Scan(&upstream, &fallback); err != nil || upstream != "m-2025\uFFFD" || fallback != "primary" {
		t.Fatalf("stored %q %q: %v", upstream, fallback, err)
	}
	cost, err := l.s.RunCost(ctx, r.ID)
	if err != nil || math.Abs(cost.Cost-0.0135) > 1e-12 || cost.CacheWriteTokens != 300 {
		t.Fatalf("the run's cost %+v: %v", cost, err)
	}
	month, run, err := l.s.Spend(ctx, r.TenantID, r.ID)
	if err != nil || math.Abs(month-0.0135) > 1e-12 || math.Abs(run-0.0135) > 1e-12 {
		t.Fatalf("spend %v %v: %v", month, run, err)
	}
}

// TestUsageGroups: GET /usage's query sums the rows of a tenant (or of all
// of them) in its time range, by any keys, a null agent a group of its
// own, ordered by the keys as asked.
func TestUsageGroups(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	r1, r2, r3 := agentd.NewID(), agentd.NewID(), agentd.NewID()
	l.call("a", r1, 1, "big", "helper", 0.5, `'2025-03-01T10:00:00Z'`)
	l.call("a", r1, 2, "big", "helper", 0.25, `'2025-03-02T10:00:00Z'`)
	l.call("a", r2, 1, "small", "", 0.125, `'2025-03-02T23:59:59Z'`)
	l.call("a", r2, 2, "small", "", 1, `'2025-04-01T00:00:00Z'`) // past the range
	l.call("b", r3, 1, "big", "other", 2, `'2025-03-05T00:00:00Z'`)
	from, to := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)
	usage := func(tenant string, by ...agentd.UsageKey) []agentd.UsageRow {
		t.Helper()
		rows, err := l.s.Usage(ctx, agentd.UsageQuery{Tenant: tenant, From: from, To: to, GroupBy: by})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	all := usage("a")
	if len(all) != 1 || all[0].Calls != 3 || all[0].Cost != 0.875 || all[0].InputTokens != 300 || all[0].CachedInputTokens != 30 ||
		all[0].CacheWriteTokens != 15 || all[0].OutputTokens != 60 || all[0].ReasoningTokens != 6 || len(all[0].Group) != 0 {
		t.Fatalf("tenant a's total: %+v", all)
	}
	byAgent := usage("a", agentd.UsageByAgent, agentd.UsageByDay)
	var got []string
	for _, r := range byAgent {
		got = append(got, r.Key(agentd.UsageByAgent)+"/"+r.Key(agentd.UsageByDay)+"/"+fmtCost(r.Cost))
	}
	if want := []string{"/2025-03-02/0.125", "helper/2025-03-01/0.5", "helper/2025-03-02/0.25"}; !slices.Equal(got, want) {
		t.Fatalf("by agent and day: %v, want %v", got, want)
	}
	if byAgent[0].Group[agentd.UsageByAgent] != nil {
		t.Fatalf("the runs without an agent: %+v", byAgent[0].Group)
	}
	everyone := usage("", agentd.UsageByTenant, agentd.UsageByModel)
	got = nil
	for _, r := range everyone {
		got = append(got, r.Key(agentd.UsageByTenant)+"/"+r.Key(agentd.UsageByModel)+"/"+fmtCost(r.Cost))
	}
	if want := []string{"a/big/0.75", "a/small/0.125", "b/big/2"}; !slices.Equal(got, want) {
		t.Fatalf("every tenant by model: %v, want %v", got, want)
	}
	if rows := usage("b", agentd.UsageByRun, agentd.UsageByProvider); len(rows) != 1 || rows[0].Key(agentd.UsageByRun) != r3 ||
		rows[0].Key(agentd.UsageByProvider) != "openai" {
		t.Fatalf("tenant b by run: %+v", rows)
	}
	if rows := usage("c"); len(rows) != 0 {
		t.Fatalf("a tenant without calls: %+v", rows)
	}
	if rows, err := l.s.Usage(ctx, agentd.UsageQuery{Tenant: "a", From: from, To: to, GroupBy: []agentd.UsageKey{agentd.UsageByRun},
		Limit: 1}); err != nil || len(rows) != 1 {
		t.Fatalf("a limit of 1: %+v %v", rows, err)
	}
	if _, err := l.s.Usage(ctx, agentd.UsageQuery{Tenant: "a", From: from, To: to, GroupBy: []agentd.UsageKey{"colour"}}); err == nil {
		t.Fatal("an unknown key was taken")
	}
}

func fmtCost(v float64) string { return agentd.FormatCost(v) }

// TestSpendMonthBoundary: a tenant's spend is that of the current month
// (UTC), not the last one's, and stays so as its watermark moves over the
// month's older rows; a run's spend is its own calls', whenever made.
func TestSpendMonthBoundary(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	run, other := agentd.NewID(), agentd.NewID()
	const start = `date_trunc('month', now(), 'UTC')`
	l.call("t", run, 1, "m", "", 100, start+` - interval '1 microsecond'`) // last month
	l.call("t", run, 2, "m", "", 1.5, start)
	l.call("t", other, 1, "m", "", 0.25, start+` + interval '1 second'`)
	l.call("t", other, 2, "m", "", 0.125, `now()`)
	l.call("u", agentd.NewID(), 1, "m", "", 7, `now()`)
	check := func(wantMonth, wantRun float64) {
		t.Helper()
		month, spent, err := l.s.Spend(ctx, "t", run)
		if err != nil || month != wantMonth || spent != wantRun {
			t.Fatalf("spend: month %v run %v (%v), want %v and %v", month, spent, err, wantMonth, wantRun)
		}
	}
	check(1.875, 101.5)
	var elapsed time.Duration
	if err := l.db.QueryRow(ctx, `SELECT extract(epoch FROM now() - `+start+`)::float8 * interval '1 second'`).Scan(&elapsed); err != nil {
		t.Fatal(err)
	}
	if elapsed > 16*time.Minute {
		// The month's first rows are older than the watermark's lag: the
		// first read moved it past them.
		if n := l.count(`SELECT count(*) FROM tenant_spend WHERE tenant_id = 't' AND month = ` + start + `
			AND through > ` + start + ` AND cost = 1.75`); n != 1 {
			t.Fatal("the watermark did not move over the month's older rows")
		}
	}
	check(1.875, 101.5)
	l.call("t", other, 3, "m", "", 1, `now()`)
	check(2.875, 101.5)
	if month, spent, err := l.s.Spend(ctx, "nobody", ""); err != nil || month != 0 || spent != 0 {
		t.Fatalf("a tenant without calls: %v %v %v", month, spent, err)
	}
}

// TestBudgetSetGet: a tenant's own budget is read back, replaced, and
// removed (the default applies again); one tenant's is not another's.
func TestBudgetSetGet(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	get := func(tenant string) *float64 {
		t.Helper()
		b, err := s.BudgetGet(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := get("a"); b != nil {
		t.Fatalf("a budget before any: %v", *b)
	}
	for _, v := range []float64{12.5, 0, 99.99} {
		if err := s.BudgetSet(ctx, "a", &v, "key:x"); err != nil {
			t.Fatal(err)
		}
		if b := get("a"); b == nil || *b != v {
			t.Fatalf("budget %v read back as %v", v, b)
		}
	}
	if b := get("b"); b != nil {
		t.Fatalf("tenant b has a's budget: %v", *b)
	}
	neg := -1.0
	if err := s.BudgetSet(ctx, "a", &neg, ""); !errors.Is(err, persist.ErrInvalidValue) {
		t.Fatalf("a negative budget: %v", err)
	}
	if err := s.BudgetSet(ctx, "a", nil, ""); err != nil {
		t.Fatal(err)
	}
	if b := get("a"); b != nil {
		t.Fatalf("a removed budget reads %v", *b)
	}
}

// TestLedgerOutlivesRuns: the ledger's rows stay when their runs go, by a
// conversation's deletion, the purge of runs not to be stored, or the
// retention's pass; a run's cost counts its sub-agents' runs.
func TestLedgerOutlivesRuns(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	mk := func(unstored bool) agentd.Run {
		t.Helper()
		r, _, err := l.s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m",
			Params: agentd.RunParams{MaxSteps: 3, Unstored: unstored}, Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.s.RunCancel(ctx, "t", r.ID, "local"); err != nil {
			t.Fatal(err)
		}
		l.call("t", r.ID, 1, "m", "", 1, `now()`)
		return r
	}
	parent, child, grandchild := mk(false), mk(false), mk(false)
	l.exec(`UPDATE runs SET parent_run_id = $1 WHERE id = $2`, parent.ID, child.ID)
	l.exec(`UPDATE runs SET parent_run_id = $1 WHERE id = $2`, child.ID, grandchild.ID)
	costs, err := l.s.RunCosts(ctx, []string{parent.ID, child.ID, agentd.NewID()})
	if err != nil || len(costs) != 2 || costs[parent.ID].Cost != 3 || costs[child.ID].Cost != 2 || costs[parent.ID].CacheWriteTokens != 15 {
		t.Fatalf("costs with sub-agents: %+v %v", costs, err)
	}
	deleted, unstored, old := mk(false), mk(true), mk(false)
	if _, err := l.s.ConversationDelete(ctx, "t", deleted.ConversationID); err != nil {
		t.Fatal(err)
	}
	l.exec(`UPDATE runs SET finished_at = now() - interval '1 hour' WHERE id = $1`, unstored.ID)
	if ids, err := l.s.UnstoredPurge(ctx, time.Minute, 10); err != nil || !slices.Equal(ids, []string{unstored.ID}) {
		t.Fatalf("purge: %v %v", ids, err)
	}
	l.exec(`UPDATE runs SET created_at = now() - interval '3 hours', finished_at = now() - interval '3 hours' WHERE id = $1`, old.ID)
	l.exec(`UPDATE conversations SET created_at = now() - interval '3 hours', updated_at = now() - interval '3 hours' WHERE id = $1`,
		old.ConversationID)
	if st, err := l.s.RetentionPass(ctx, time.Now().Add(-time.Hour)); err != nil || st.Runs != 1 {
		t.Fatalf("retention: %+v %v", st, err)
	}
	for _, r := range []agentd.Run{deleted, unstored, old} {
		if _, err := l.s.RunGet(ctx, "t", r.ID); !errors.Is(err, agentd.ErrRunNotFound) {
			t.Fatalf("run %s is still there: %v", r.ID, err)
		}
	}
	if n := l.count(`SELECT count(*) FROM model_calls`); n != 6 {
		t.Fatalf("%d ledger rows left of 6", n)
	}
	if month, _, err := l.s.Spend(ctx, "t", ""); err != nil || month != 6 {
		t.Fatalf("the month's spend after the runs went: %v %v", month, err)
	}
}

// TestSpendWatermarkRace: checks that move a tenant's watermark at once,
// whether it starts the month's row or moves one, count each row once.
func TestSpendWatermarkRace(t *testing.T) {
	t.Parallel()
	l := newLedgerDB(t)
	ctx := context.Background()
	for i := range 50 {
		l.call("t", agentd.NewID(), i, "m", "", 0.25, `now() - interval '1 hour' * random()`)
	}
	l.call("t", agentd.NewID(), 1, "m", "", 1, `now()`)
	var want float64
	if err := l.db.QueryRow(ctx, `SELECT sum(cost)::float8 FROM model_calls
		WHERE created_at >= date_trunc('month', now(), 'UTC')`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if round == 1 {
			// The row is there: its watermark is set back, to be moved again.
			l.exec(`UPDATE tenant_spend SET through = month, cost = 0`)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				month, _, err := l.s.Spend(ctx, "t", "")
				if err == nil && month != want {
					err = fmt.Errorf("spend %v, want %v", month, want)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if month, _, err := l.s.Spend(ctx, "t", ""); err != nil || month != want {
			t.Fatalf("round %d, after the race: %v %v, want %v", round, month, err, want)
		}
	}
}
