package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist"
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
	// xid is the next transaction id to assign. Only transactions that write
	// get one, so the difference of two readings counts write transactions:
	// the whole cluster's, like the WAL position (the benchmark's own
	// database has the server to itself, as long as nothing else runs).
	xid     int64
	commits int64 // this database's commits, read-only ones included
	wal     string
	// others are the commits of the other databases: were there any during
	// a measurement, the cluster-wide figures include work not agentd's.
	others int64
	// dbs names the databases there are (their count and newest oid), and
	// checkpoints counts the server's: a database made or dropped between
	// two readings takes its commits with it, and a checkpoint makes the
	// WAL after it heavier (full-page images), so either says the server
	// was not the benchmark's alone.
	dbs         string
	checkpoints int64
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
	err = conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()::text,
			sum(xact_commit) FILTER (WHERE datname = current_database()),
			coalesce(sum(xact_commit) FILTER (WHERE datname IS DISTINCT FROM current_database()), 0),
			(SELECT count(*) || ':' || max(oid::text::bigint) FROM pg_database),
			(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)
		FROM pg_stat_database`).Scan(&c.xid, &c.wal, &c.commits, &c.others, &c.dbs, &c.checkpoints)
	return c, err
}

// dbCost is what the server did between two readings.
type dbCost struct {
	writeTx, commits, wal, otherCommits int64
	shared                              bool // databases were made or dropped, or a checkpoint ran
}

// warnShared says when the server was not the benchmark's alone.
func (c dbCost) warnShared(out io.Writer, phase string) {
	if c.otherCommits > 0 || c.shared {
		fmt.Fprintf(out, "  %s: WARNING: other databases committed %d transactions meanwhile (or databases were made or dropped, "+
			"or a checkpoint ran); write transactions and WAL include their work\n", phase, c.otherCommits)
	}
}

// costSince reads the counters again and returns them with what the server
// did since before, warning when the server was not the benchmark's alone.
func costSince(ctx context.Context, out io.Writer, phase, url string, before dbCounters) (dbCounters, dbCost, error) {
	after, err := readCounters(ctx, url)
	if err != nil {
		return after, dbCost{}, err
	}
	cost, err := after.since(before)
	if err != nil {
		return after, dbCost{}, err
	}
	cost.warnShared(out, phase)
	return after, cost, nil
}

func (c dbCounters) since(before dbCounters) (dbCost, error) {
	to, err := parseLSN(c.wal)
	if err != nil {
		return dbCost{}, err
	}
	from, err := parseLSN(before.wal)
	if err != nil {
		return dbCost{}, err
	}
	cost := dbCost{writeTx: c.xid - before.xid, commits: c.commits - before.commits, wal: int64(to - from),
		otherCommits: c.others - before.others}
	if c.dbs != before.dbs || c.checkpoints != before.checkpoints {
		cost.otherCommits, cost.shared = max(cost.otherCommits, 0), true
	}
	return cost, nil
}

// parseLSN reads a WAL position as PostgreSQL prints it: two hex numbers,
// the high and low 32 bits.
func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// costTargets are the targets of the per-unit figures, where there are.
type costTargets struct{ writeTx, wal, cpu *target }

// perUnit gives what each of n units of work cost: on the server (c), and
// in this process's CPU (agentd and the load driver).
func perUnit(phase, unit string, n float64, c dbCost, cpu time.Duration, t costTargets) []metric {
	n = max(n, 1)
	return []metric{
		{phase, "write transactions per " + unit, "tx", float64(c.writeTx) / n, t.writeTx},
		{phase, "commits per " + unit, "commits", float64(c.commits) / n, nil},
		{phase, "WAL per " + unit, "B", float64(c.wal) / n, t.wal},
		{phase, "agentd CPU per " + unit, "ms", msOf(cpu) / n, t.cpu},
	}
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the user+system CPU time of process pid (Linux), or 0 when
// pid is 0 or unreadable: the CPU figures are then 0.
func processCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	f, _ := procStat(pid)
	return f.utime + f.stime
}

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99)
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// walBreakdown prints what the WAL between two positions is made of, by
// record type (pg_walinspect, where the server has it).
func walBreakdown(ctx context.Context, out io.Writer, url, from, to string, units float64, unit string) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		fmt.Fprintf(out, "    (no WAL breakdown: %v)\n", err)
		return
	}
	// pg_walinspect reads no further than the WAL flushed to disk, which may
	// lag behind the position written.
	rows, err := conn.Query(ctx, `SELECT "resource_manager/record_type", count, combined_size
		FROM pg_get_wal_stats($1::pg_lsn, least($2::pg_lsn, pg_current_wal_flush_lsn()), true)
		WHERE count > 0 ORDER BY combined_size DESC LIMIT 8`, from, to)
	if err != nil {
		fmt.Fprintf(out, "    (no WAL breakdown: %v)\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(out, "    WAL by record type, per %s:", unit)
	for rows.Next() {
		var typ string
		var count, size int64
		if rows.Scan(&typ, &count, &size) == nil {
			fmt.Fprintf(out, " %s %.0f B (%.1f records);", typ, float64(size)/units, float64(count)/units)
		}
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(out, " (%v)", err)
	}
	fmt.Fprintln(out)
}
