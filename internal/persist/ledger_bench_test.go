package persist_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// BenchmarkSpend compares two reads of a tenant's month spend, the read
// made before every model call, for a tenant with 300,000 calls this
// month: the sum of the month's rows over model_calls_tenant, and Spend's
// watermark (the month's sum up to it, and the few rows after it):
//
//	go test -run '^$' -bench Spend -benchtime 200x ./internal/persist
func BenchmarkSpend(b *testing.B) {
	const calls = 300000
	s, url := persisttest.New(b)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// The calls spread over the month so far, the last one a second ago.
	if _, err := db.Exec(ctx, `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
			input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost, created_at)
		SELECT 'big', gen_random_uuid(), 1, 1, 'step', 'm', 'openai', 1000, 0, 0, 100, 0, 0.001,
			date_trunc('month', now(), 'UTC') + (now() - interval '1 second' - date_trunc('month', now(), 'UTC')) * i / $1
		FROM generate_series(1, $1) i`, calls); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE model_calls`); err != nil {
		b.Fatal(err)
	}
	b.Run("sum", func(b *testing.B) {
		for b.Loop() {
			var v float64
			if err := db.QueryRow(ctx, `SELECT coalesce(sum(cost), 0)::float8 FROM model_calls
				WHERE tenant_id = 'big' AND created_at >= date_trunc('month', now(), 'UTC')`).Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
	if _, _, err := s.Spend(ctx, "big", ""); err != nil { // moves the watermark
		b.Fatal(err)
	}
	b.Run("watermark", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.Spend(ctx, "big", agentd.NewID()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLedgerInsert compares one tenant's concurrent writes of model
// calls: the ledger's row alone, as agentd writes it, and the ledger's
// row with an upsert of a per-day rollup row, which every write of the
// tenant then waits for in turn (each write holds it 2 ms, as the rest of
// a step's write would):
//
//	go test -run '^$' -bench LedgerInsert -cpu 16 ./internal/persist
func BenchmarkLedgerInsert(b *testing.B) {
	_, url := persisttest.New(b)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE bench_rollup (tenant_id text, day date, cost numeric, PRIMARY KEY (tenant_id, day))`); err != nil {
		b.Fatal(err)
	}
	const insert = `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
		input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost)
		VALUES ('busy', gen_random_uuid(), 1, 1, 'step', 'm', 'openai', 1000, 0, 0, 100, 0, 0.001)`
	for _, c := range []struct {
		name string
		sql  []string
	}{
		{"ledger", []string{insert}},
		{"ledger+rollup", []string{insert, `INSERT INTO bench_rollup VALUES ('busy', current_date, 0.001)
			ON CONFLICT (tenant_id, day) DO UPDATE SET cost = bench_rollup.cost + excluded.cost`}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tx, err := db.Begin(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					for _, q := range c.sql {
						if _, err := tx.Exec(ctx, q); err != nil {
							b.Error(err)
						}
					}
					// The rest of a step's write, which the lock is held across.
					if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.002)`); err != nil {
						b.Error(err)
					}
					if err := tx.Commit(ctx); err != nil {
						b.Error(err)
					}
				}
			})
		})
	}
}
