package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"agentd/internal/persist"
)

// newDatabase creates a migrated database for one benchmark and returns its
// URL and a func that drops it.
func newDatabase(ctx context.Context, admin, name string) (string, func(), error) {
	name = fmt.Sprintf("agentd_bench_%s_%d", name, os.Getpid())
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	}
	u, err := persist.WithDatabase(admin, name)
	if err != nil {
		drop()
		return "", nil, err
	}
	if err := persist.Migrate(ctx, u); err != nil {
		drop()
		return "", nil, err
	}
	return u, drop, nil
}

// dbCounters are server-side counters read before and after a measurement.
type dbCounters struct {
	commits int64
	wal     string
}

func readCounters(ctx context.Context, url string) (dbCounters, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return dbCounters{}, err
	}
	defer conn.Close(ctx)
	var c dbCounters
	// Statistics are flushed by backends at most once a second.
	time.Sleep(1100 * time.Millisecond)
	err = conn.QueryRow(ctx, `SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&c.commits, &c.wal)
	return c, err
}

func walBytes(ctx context.Context, url, from, to string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, to, from).Scan(&n)
	return n, err
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func numCPU() int { return runtime.NumCPU() }

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// walBreakdown prints what the WAL between two positions is made of, by
// record type (pg_walinspect, where the server has it).
func walBreakdown(ctx context.Context, out io.Writer, url, from, to string, perUnit float64, unit string) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		fmt.Fprintf(out, "  (no WAL breakdown: %v)\n", err)
		return
	}
	rows, err := conn.Query(ctx, `SELECT "resource_manager/record_type", count, combined_size
		FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true) WHERE count > 0 ORDER BY combined_size DESC LIMIT 8`, from, to)
	if err != nil {
		fmt.Fprintf(out, "  (no WAL breakdown: %v)\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(out, "  WAL by record type, per %s:", unit)
	for rows.Next() {
		var typ string
		var count, size int64
		if rows.Scan(&typ, &count, &size) == nil {
			fmt.Fprintf(out, " %s %.0f B (%.1f records);", typ, float64(size)/perUnit, float64(count)/perUnit)
		}
	}
	fmt.Fprintln(out)
}
