package persist

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// LedgerInsert records one model call in the cost ledger (model_calls,
// migration 00038). It is an op of the executor's write that commits what
// the call produced (the step's output, a compaction), so that the call
// counts exactly when its output does. The call is keyed by its place in
// its run, (RunID, StepSeq, Kind, N): the same write made again (after a
// lost acknowledgement, or by the worker that took the run over) inserts
// nothing.
type LedgerInsert struct {
	TenantID, RunID string
	StepID          string // "": none
	StepSeq         int
	// N numbers the calls of one kind within the step, from 1: a cut
	// answer's continuations and a retried call after a recovery are
	// calls of their own.
	N    int
	Kind agentd.ModelCallKind
	// Model is the name the run asked for (the models file's); Provider
	// the provider that answered it, UpstreamModel the provider's id of
	// the model when it said one.
	Model, Provider, UpstreamModel string
	// Agent is the name of the agent the run started from; "": none.
	Agent string
	// InputTokens counts every input token, CachedInputTokens (read from
	// the provider's prompt cache) and CacheWriteTokens (written to it)
	// among them; OutputTokens counts ReasoningTokens.
	InputTokens, CachedInputTokens, CacheWriteTokens, OutputTokens, ReasoningTokens int64
	// PriceVersion names the price table Cost was computed at
	// (compact.Profiles.PriceVersion); "": the model has no prices.
	PriceVersion string
	// Cost is what the call cost, in the currency of the prices; a value
	// that is not a finite number at least 0 is stored as 0.
	Cost float64
	// FallbackFrom is the model the call fell back from, FallbackReason
	// why; "": none.
	FallbackFrom, FallbackReason string
}

func (o LedgerInsert) queue(b *batch) error {
	if !slices.Contains(agentd.ModelCallKinds(), o.Kind) {
		return fmt.Errorf("ledger: model call kind %q", o.Kind)
	}
	cost := o.Cost
	if math.IsNaN(cost) || math.IsInf(cost, 0) || cost < 0 {
		cost = 0
	}
	b.exec("insert model call", `INSERT INTO model_calls (tenant_id, run_id, step_id, step_seq, n, kind, model, provider,
			upstream_model, agent, input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
			price_version, cost, fallback_from, fallback_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
		ON CONFLICT DO NOTHING`,
		o.TenantID, o.RunID, nullIfEmpty(o.StepID), o.StepSeq, o.N, o.Kind, ledgerText(o.Model),
		ledgerText(o.Provider), nullIfEmpty(ledgerText(o.UpstreamModel)), nullIfEmpty(ledgerText(o.Agent)),
		o.InputTokens, o.CachedInputTokens, o.CacheWriteTokens, o.OutputTokens, o.ReasoningTokens,
		nullIfEmpty(ledgerText(o.PriceVersion)), cost, nullIfEmpty(ledgerText(o.FallbackFrom)),
		nullIfEmpty(ledgerText(o.FallbackReason)))
	return nil
}

// ledgerText makes a name storable: some come from a provider's answer
// (the upstream model id, a fallback's reason), and a value PostgreSQL's
// text refuses (NUL, invalid UTF-8) would fail the write of the step's
// output it goes with. It is cut to 500 bytes.
func ledgerText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) > 500 {
		s = strings.ToValidUTF8(s[:500], "")
	}
	return s
}

// Usage sums the ledger's rows of q's tenant (every tenant's when empty)
// made from q.From up to q.To, by the keys of q.GroupBy, ordered by those
// keys in q.GroupBy's order (a call without a key's value first). It reads
// the read replica when there is one and it keeps up: a report may lag.
// At most q.Limit rows are answered (0: all).
func (s *Store) Usage(ctx context.Context, q agentd.UsageQuery) ([]agentd.UsageRow, error) {
	by := map[agentd.UsageKey]bool{}
	for _, k := range q.GroupBy {
		if !slices.Contains(agentd.UsageKeys(), k) {
			return nil, fmt.Errorf("usage: group by %q", k)
		}
		by[k] = true
	}
	limit := any(nil)
	if q.Limit > 0 {
		limit = q.Limit
	}
	args := []any{q.From, q.To, by[agentd.UsageByTenant], by[agentd.UsageByModel], by[agentd.UsageByAgent],
		by[agentd.UsageByDay], by[agentd.UsageByProvider], by[agentd.UsageByRun], limit}
	sql := usageAll
	if q.Tenant != "" {
		sql, args = usageOfTenant, append(args, q.Tenant)
	}
	rows, err := lagging(ctx, s, true, func(db querier) ([]agentd.UsageRow, error) {
		return queryAll(ctx, db, func(row pgx.Row) (agentd.UsageRow, error) { return scanUsage(row, by) }, sql, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	slices.SortStableFunc(rows, func(a, b agentd.UsageRow) int {
		for _, k := range q.GroupBy {
			if c := compareKey(a.Group[k], b.Group[k]); c != 0 {
				return c
			}
		}
		return 0
	})
	return rows, nil
}

// compareKey orders a usage key's values, nil first.
func compareKey(a, b *string) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return strings.Compare(*a, *b)
}

// usageSelect sums model_calls from $1 up to $2, grouped by the keys
// whose flag ($3 to $8) is set: the keys not grouped by are NULL in every
// row, so that one statement serves every group_by. $9 caps the rows.
const usageSelect = `SELECT CASE WHEN $3 THEN tenant_id END, CASE WHEN $4 THEN model END, CASE WHEN $5 THEN agent END,
		CASE WHEN $6 THEN to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') END,
		CASE WHEN $7 THEN provider END, CASE WHEN $8 THEN run_id::text END,
		sum(input_tokens)::bigint, sum(cached_input_tokens)::bigint, sum(cache_write_tokens)::bigint,
		sum(output_tokens)::bigint, sum(reasoning_tokens)::bigint, sum(cost)::float8, count(*)
	FROM model_calls WHERE created_at >= $1 AND created_at < $2`

const usageGroup = ` GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6 LIMIT $9`

// usageAll is every tenant's usage, usageOfTenant one tenant's ($10).
const (
	usageAll      = usageSelect + usageGroup
	usageOfTenant = usageSelect + ` AND tenant_id = $10` + usageGroup
)

// scanUsage reads a row of usageSelect; by says which keys it is grouped
// by.
func scanUsage(row pgx.Row, by map[agentd.UsageKey]bool) (agentd.UsageRow, error) {
	var r agentd.UsageRow
	keys := make([]*string, len(agentd.UsageKeys()))
	dest := make([]any, 0, len(keys)+7)
	for i := range keys {
		dest = append(dest, &keys[i])
	}
	dest = append(dest, &r.InputTokens, &r.CachedInputTokens, &r.CacheWriteTokens, &r.OutputTokens, &r.ReasoningTokens,
		&r.Cost, &r.Calls)
	if err := row.Scan(dest...); err != nil {
		return r, translate(err)
	}
	r.Group = map[agentd.UsageKey]*string{}
	for i, k := range agentd.UsageKeys() {
		if by[k] {
			r.Group[k] = keys[i]
		}
	}
	return r, nil
}

// RunCost is RunCosts of one run.
func (s *Store) RunCost(ctx context.Context, runID string) (agentd.RunCost, error) {
	costs, err := s.RunCosts(ctx, []string{runID})
	return costs[runID], err
}

// RunCosts returns what the model calls of each run of ids cost by the
// ledger, with those of the sub-agents' runs under it (at every depth),
// and the tokens they wrote to the providers' prompt caches; a run
// without a call has no entry. One statement reads them all, for a page
// of runs.
func (s *Store) RunCosts(ctx context.Context, ids []string) (map[string]agentd.RunCost, error) {
	return runCosts(ctx, s.pool, ids)
}

// runCosts is RunCosts, read through q.
func runCosts(ctx context.Context, q querier, ids []string) (map[string]agentd.RunCost, error) {
	out := make(map[string]agentd.RunCost, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `WITH RECURSIVE tree (root, id) AS (
			SELECT r, r FROM unnest($1::uuid[]) AS r
			UNION -- not ALL: a cycle of parents, which no writer makes, still ends
			SELECT t.root, c.id FROM tree t JOIN runs c ON c.parent_run_id = t.id
		)
		SELECT t.root::text, sum(m.cost)::float8, sum(m.cache_write_tokens)::bigint
		FROM tree t JOIN model_calls m ON m.run_id = t.id GROUP BY t.root`, ids)
	if err != nil {
		return nil, fmt.Errorf("run costs: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var c agentd.RunCost
		if err := rows.Scan(&id, &c.Cost, &c.CacheWriteTokens); err != nil {
			return nil, fmt.Errorf("run costs: %w", translate(err))
		}
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run costs: %w", translate(err))
	}
	return out, nil
}

// The watermark of a tenant's month spend (tenant_spend) moves over the
// ledger's rows older than spendGrace, once the rows past it span more
// than spendGrace+spendEvery: a month's spend is then read as the sum up
// to the watermark and at most that long of rows after it. spendGrace is
// far longer than any write transaction lasts (a row's created_at is its
// transaction's start), so that no row commits behind the watermark.
const (
	spendGrace = 5 * time.Minute
	spendEvery = 10 * time.Minute
)

// Spend returns what tenant's model calls cost in the current calendar
// month (UTC), and what run runID's own calls cost (without its
// sub-agents' runs; "" is 0), as an admin's read of the budget shows it
// (the check before a model call is BudgetHold's). It reads the month's
// sum up to its watermark and the tenant's rows after it: one round trip,
// without a lock, whatever the tenant's calls in flight. Now and then it moves the watermark, in a
// statement of its own.
func (s *Store) Spend(ctx context.Context, tenant, runID string) (month, run float64, err error) {
	var start, through, now time.Time
	var kept bool
	err = s.pool.QueryRow(ctx, `WITH m AS (SELECT date_trunc('month', now(), 'UTC') AS start),
		w AS (SELECT s.through, s.cost FROM tenant_spend s, m WHERE s.tenant_id = $1 AND s.month = m.start)
		SELECT m.start, EXISTS (SELECT 1 FROM w), coalesce((SELECT through FROM w), m.start),
			(coalesce((SELECT cost FROM w), 0) + coalesce((SELECT sum(c.cost) FROM model_calls c
				WHERE c.tenant_id = $1 AND c.created_at >= coalesce((SELECT through FROM w), m.start)
				AND c.created_at < m.start + interval '1 month'), 0))::float8,
			coalesce((SELECT sum(cost) FROM model_calls WHERE run_id = $2::uuid), 0)::float8,
			now()
		FROM m`, tenant, nullIfEmpty(runID)).Scan(&start, &kept, &through, &month, &run, &now)
	if err != nil {
		return 0, 0, fmt.Errorf("spend: %w", translate(err))
	}
	if through.Before(now.Add(-spendGrace - spendEvery)) {
		// The answer above stands either way: a watermark that does not
		// move now moves at a later call.
		_ = s.spendAdvance(ctx, tenant, start, now.Add(-spendGrace), kept)
	}
	return month, run, nil
}

// spendAdvance moves tenant's watermark of the month that starts at start
// to through, adding the rows it passes; kept says whether the month has
// a row already. Concurrent advances are safe: the update adds the rows
// from the watermark it finds under the row's lock, and one that finds it
// moved as far leaves it.
func (s *Store) spendAdvance(ctx context.Context, tenant string, start, through time.Time, kept bool) error {
	var err error
	if kept {
		_, err = s.pool.Exec(ctx, `UPDATE tenant_spend s SET cost = s.cost + coalesce((SELECT sum(c.cost) FROM model_calls c
				WHERE c.tenant_id = s.tenant_id AND c.created_at >= s.through AND c.created_at < $3), 0),
			through = $3, updated_at = now()
			WHERE s.tenant_id = $1 AND s.month = $2 AND s.through < $3`, tenant, start, through)
	} else {
		_, err = s.pool.Exec(ctx, `INSERT INTO tenant_spend (tenant_id, month, through, cost)
			SELECT $1, $2, $3, coalesce(sum(cost), 0) FROM model_calls
			WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3
			ON CONFLICT (tenant_id, month) DO NOTHING`, tenant, start, through)
	}
	return translate(err)
}

// BudgetGet returns tenant's own monthly budget, set by an admin; nil:
// none is set (the server's default applies).
func (s *Store) BudgetGet(ctx context.Context, tenant string) (*float64, error) {
	var monthly float64
	err := s.pool.QueryRow(ctx, `SELECT monthly::float8 FROM tenant_budgets WHERE tenant_id = $1`, tenant).Scan(&monthly)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("budget: %w", translate(err))
	}
	return &monthly, nil
}

// BudgetSet sets tenant's own monthly budget (0: none, whatever the
// default), or with nil removes it, so that the server's default applies;
// actor is who set it. Every instance's next check reads it.
func (s *Store) BudgetSet(ctx context.Context, tenant string, monthly *float64, actor string) error {
	var err error
	if monthly == nil {
		_, err = s.pool.Exec(ctx, `DELETE FROM tenant_budgets WHERE tenant_id = $1`, tenant)
	} else {
		if math.IsNaN(*monthly) || math.IsInf(*monthly, 0) || *monthly < 0 {
			return fmt.Errorf("budget %v: %w", *monthly, ErrInvalidValue)
		}
		_, err = s.pool.Exec(ctx, `INSERT INTO tenant_budgets (tenant_id, monthly, updated_by) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id) DO UPDATE SET monthly = excluded.monthly, updated_by = excluded.updated_by, updated_at = now()`,
			tenant, *monthly, nullIfEmpty(actor))
	}
	if err != nil {
		return fmt.Errorf("set budget: %w", translate(err))
	}
	return nil
}
