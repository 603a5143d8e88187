package persist_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// BenchmarkEventRemoval compares the two ways to remove old events that
// retention could take: deleting the events of ended runs, 50 runs'
// worth per statement as RetentionPass does, from run_events as it is;
// and dropping a partition of a copy of run_events partitioned by day. Each
// fills the table with the events of 20,000 three-step runs (13 events each,
// with data of the size the path's runs write), and reports the time and
// WAL of removing them per 100,000 runs:
//
//	go test -run '^$' -bench EventRemoval -benchtime 1x ./internal/persist
func BenchmarkEventRemoval(b *testing.B) {
	const runs, perRun, batch = 20000, 13, 50
	_, url := persisttest.New(b)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	exec := func(sql string, args ...any) {
		b.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
	}
	wal := func() (lsn int64) {
		b.Helper()
		if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	// fill inserts the events of the runs into table, dated two days ago.
	fill := func(table string) []string {
		b.Helper()
		exec(`CREATE TEMP TABLE IF NOT EXISTS bench_runs (id uuid PRIMARY KEY)`)
		exec(`TRUNCATE bench_runs`)
		exec(`INSERT INTO bench_runs SELECT gen_random_uuid() FROM generate_series(1, $1)`, runs)
		exec(`INSERT INTO `+table+` (run_id, seq, type, step, data, created_at)
			SELECT r.id, s, 'tool_call.completed', 1,
				'{"call_id":"call_0_0","name":"calculator","result":{"result":42},"status":"succeeded","tool_call_id":"01a23284-563b-7ded-b6fb-a0ed28414700"}',
				now() - interval '2 days'
			FROM bench_runs r, generate_series(1, $1) s`, perRun)
		exec(`ANALYZE ` + table)
		var ids []string
		rows, err := db.Query(ctx, `SELECT id::text FROM bench_runs ORDER BY id`)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	report := func(b *testing.B, took time.Duration, walBytes int64, n int) {
		b.ReportMetric(took.Seconds()/float64(n)*100000, "s/100k-runs")
		b.ReportMetric(float64(walBytes)/float64(n)*100000/(1<<20), "WAL-MB/100k-runs")
	}
	b.Run("delete", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ids := fill("run_events")
			b.StartTimer()
			w, start := wal(), time.Now()
			for i := 0; i < len(ids); i += batch {
				exec(`DELETE FROM run_events WHERE run_id = ANY($1::uuid[])`, ids[i:min(i+batch, len(ids))])
			}
			report(b, time.Since(start), wal()-w, runs)
		}
	})
	b.Run("drop-partition", func(b *testing.B) {
		exec(`CREATE TABLE run_events_by_day (LIKE run_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
			PRIMARY KEY (run_id, seq, created_at)) PARTITION BY RANGE (created_at)`)
		exec(`CREATE TABLE run_events_today PARTITION OF run_events_by_day
			FOR VALUES FROM (current_date - 1) TO (current_date + 2)`)
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			old := fmt.Sprintf("run_events_old_%d", i)
			exec(`CREATE TABLE ` + old + ` PARTITION OF run_events_by_day
				FOR VALUES FROM (current_date - 4) TO (current_date - 1)`)
			fill("run_events_by_day")
			b.StartTimer()
			w, start := wal(), time.Now()
			exec(`ALTER TABLE run_events_by_day DETACH PARTITION ` + old)
			exec(`DROP TABLE ` + old)
			report(b, time.Since(start), wal()-w, runs)
		}
	})
}
