package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// The steer phase compares two kinds of run on a machine that other work
// may share (tests of other databases on the same PostgreSQL, builds): the
// cluster's transaction ids and WAL, and the CPU of all of PostgreSQL's
// processes, then count that work too. So it also reads what is its
// database's alone: the CPU of the backends connected to it, and the
// write transactions and WAL bytes of the records that touch its
// relations, read back from the WAL (pg_walinspect), which a temporary
// replication slot keeps until it is read: other databases' work (a DROP
// DATABASE checkpoints) would otherwise have it recycled within seconds.
// Each checkpoint makes the next write of every page log it whole, so
// that the WAL of a busy cluster is mostly full-page images, whose count
// depends on when the checkpoints fell: the WAL is also given without
// them.

// walName is the application_name of the benchmark's own connections to
// the database it measures, whose backends' CPU is not the server's work.
const walName = "agentbench"

// walKeeper holds a temporary physical replication slot on the database at
// url, so that the WAL from its position on is kept until it is read.
type walKeeper struct {
	conn *pgx.Conn
	slot string
}

// keepWAL creates the slot, from the current WAL position; nil when it
// cannot (no replication slots free, not allowed).
func keepWAL(ctx context.Context, url string) *walKeeper {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil
	}
	cfg.RuntimeParams["application_name"] = walName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil
	}
	k := &walKeeper{conn: conn, slot: fmt.Sprintf("agentbench_%d", os.Getpid())}
	// Temporary: dropped when the connection ends, whatever ends it.
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true, true)`, k.slot); err != nil {
		conn.Close(ctx)
		return nil
	}
	return k
}

// release lets the server recycle the WAL before lsn, which was read.
func (k *walKeeper) release(ctx context.Context, lsn string) {
	if k != nil {
		_, _ = k.conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, k.slot, lsn)
	}
}

func (k *walKeeper) close() {
	if k != nil {
		k.conn.Close(context.Background())
	}
}

// backendsCPU is the CPU time each backend connected to the database at
// url has used (by process id), this connection's aside; nil when
// PostgreSQL's processes are not readable here.
func backendsCPU(ctx context.Context, url string) map[int]time.Duration {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> $1`, walName)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	cpu := map[int]time.Duration{}
	for _, pid := range pids {
		if f, ok := procStat(int(pid)); ok && f.comm != "" {
			cpu[int(pid)] = f.utime + f.stime
		}
	}
	return cpu
}

// backendsSince is the CPU the backends of after used since before: a
// backend that started meanwhile counts whole. A backend that ended
// meanwhile is not counted (agentd's pool keeps its connections).
func backendsSince(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// ownCost is what the database measured wrote between two WAL positions:
// the transactions that wrote a block of its relations, and the bytes of
// their records (their commits included) and of the records without a
// transaction on its blocks (pruning, full-page images); fpi the bytes of
// the full-page images among them.
type ownCost struct{ writeTx, wal, fpi int64 }

// ownWAL reads the database's cost at url between two WAL positions; ok is
// false when the WAL cannot be read back (no pg_walinspect, or its
// segments recycled).
func ownWAL(ctx context.Context, url, from, to string) (c ownCost, ok bool) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return c, false
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `
		WITH r AS (
			SELECT xid::text::bigint AS x, record_length, fpi_length, block_ref
			FROM pg_get_wal_records_info($1::pg_lsn, least($2::pg_lsn, pg_current_wal_flush_lsn()))),
		db AS (SELECT '%/' || oid || '/%' AS blocks FROM pg_database WHERE datname = current_database()),
		own AS (SELECT DISTINCT x FROM r, db WHERE x <> 0 AND block_ref LIKE db.blocks),
		mine AS (SELECT record_length, fpi_length FROM r WHERE x IN (SELECT x FROM own)
			UNION ALL SELECT record_length, fpi_length FROM r, db WHERE x = 0 AND block_ref LIKE db.blocks)
		SELECT (SELECT count(*) FROM own), coalesce(sum(record_length), 0), coalesce(sum(fpi_length), 0) FROM mine`,
		from, to).Scan(&c.writeTx, &c.wal, &c.fpi)
	return c, err == nil
}

// ownBreakdown prints what the database's WAL between two positions is
// made of, full-page images aside, by record type, per unit.
func ownBreakdown(ctx context.Context, out io.Writer, url, from, to string, units float64, unit string) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		WITH r AS (
			SELECT xid::text::bigint AS x, resource_manager || '/' || record_type AS typ, record_length - fpi_length AS len, block_ref
			FROM pg_get_wal_records_info($1::pg_lsn, least($2::pg_lsn, pg_current_wal_flush_lsn()))),
		db AS (SELECT '%/' || oid || '/%' AS blocks FROM pg_database WHERE datname = current_database()),
		own AS (SELECT DISTINCT x FROM r, db WHERE x <> 0 AND block_ref LIKE db.blocks),
		mine AS (SELECT typ, len FROM r WHERE x IN (SELECT x FROM own)
			UNION ALL SELECT typ, len FROM r, db WHERE x = 0 AND block_ref LIKE db.blocks)
		SELECT typ, count(*), sum(len) FROM mine GROUP BY typ ORDER BY sum(len) DESC LIMIT 10`, from, to)
	if err != nil {
		fmt.Fprintf(out, "    (no WAL breakdown: %v)\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(out, "    its database's WAL by record type, full-page images aside, per %s:", unit)
	for rows.Next() {
		var typ string
		var count, size int64
		if rows.Scan(&typ, &count, &size) == nil {
			fmt.Fprintf(out, " %s %.0f B (%.1f);", typ, float64(size)/units, float64(count)/units)
		}
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(out, " (%v)", err)
	}
	fmt.Fprintln(out)
}
