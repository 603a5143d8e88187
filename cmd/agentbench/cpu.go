package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// machineCPU reads where a machine's CPU time goes while a benchmark runs:
// this process (agentd and the load driver), the fake model's process,
// PostgreSQL's processes, and the whole machine's busy time. It reads
// /proc (Linux); a part it cannot read (PostgreSQL on another machine, no
// /proc) is left out of the figures.
type machineCPU struct {
	fakePID    int
	postmaster int // 0: PostgreSQL's processes are not readable here
}

// cpuReading is the CPU time each part had used up to one moment.
type cpuReading struct {
	self, fake, postgres, machine time.Duration
}

// findPostmaster returns the process id of the PostgreSQL server at url
// when it runs on this machine (the parent of a backend of this
// connection), else 0.
func findPostmaster(ctx context.Context, url string) int {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	var backend int
	if conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend) != nil {
		return 0
	}
	f, ok := procStat(backend)
	if !ok || !strings.HasPrefix(f.comm, "postgres") {
		return 0 // another machine's process ids, or a process of another name
	}
	return f.ppid
}

// backends is databaseBackends for the database of url, 0 when
// PostgreSQL's processes are not readable here.
func (m machineCPU) backends(url string) time.Duration {
	cfg, err := pgx.ParseConfig(url)
	if m.postmaster <= 0 || err != nil {
		return 0
	}
	return databaseBackends(m.postmaster, cfg.Database)
}

func (m machineCPU) read() cpuReading {
	r := cpuReading{self: cpuTime(), machine: machineBusy()}
	if m.fakePID > 0 {
		if f, ok := procStat(m.fakePID); ok {
			r.fake = f.utime + f.stime
		}
	}
	if m.postmaster > 0 {
		r.postgres = processTree(m.postmaster)
	}
	return r
}

// metrics gives what each of n units of work cost the parts of the machine
// between before and after; machine is the target of the machine's whole
// CPU per unit, if any.
func (m machineCPU) metrics(phase, unit string, n float64, before, after cpuReading, machine *target) []metric {
	n = max(n, 1)
	var ms []metric
	if m.fakePID > 0 {
		ms = append(ms, metric{phase, "fake model CPU per " + unit, "ms", msOf(after.fake-before.fake) / n, nil})
	}
	if m.postmaster > 0 {
		ms = append(ms, metric{phase, "PostgreSQL CPU per " + unit, "ms", msOf(after.postgres-before.postgres) / n, nil})
	}
	if after.machine > 0 {
		ms = append(ms, metric{phase, "machine CPU per " + unit, "ms", msOf(after.machine-before.machine) / n, machine})
	}
	return ms
}

// procFields are the fields of /proc/PID/stat the benchmark reads.
type procFields struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime time.Duration
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = time.Second / 100

func procStat(pid int) (procFields, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procFields{}, false
	}
	// The command name is in parentheses and may hold spaces; the fields
	// after it start with the state (field 3 of proc(5)).
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procFields{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return procFields{}, false
	}
	ticks := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * clockTick
	}
	ppid, _ := strconv.Atoi(f[1])
	return procFields{comm: string(b[open+1 : end]), ppid: ppid,
		utime: ticks(11), stime: ticks(12), cutime: ticks(13), cstime: ticks(14)}, true
}

// processTree is the CPU time of process root and of all its children,
// those that ended (which the root has waited for) included: PostgreSQL's
// postmaster and its backends and auxiliary processes.
func processTree(root int) time.Duration {
	f, ok := procStat(root)
	if !ok {
		return 0
	}
	total := f.utime + f.stime + f.cutime + f.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if c, ok := procStat(pid); ok && c.ppid == root {
			total += c.utime + c.stime
		}
	}
	return total
}

// machineBusy is the machine's CPU time spent other than idle or waiting for
// I/O, all CPUs together (the first line of /proc/stat), or 0 when
// unreadable.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick
}

// databaseBackends is the CPU time of the postmaster's children that are
// backends of database db (their title names it), alive now: what the
// clients of that database cost PostgreSQL, without the other databases'
// backends or the processes the cluster shares (WAL writer, checkpointer).
// A backend that ended between two readings drops out of the second.
func databaseBackends(postmaster int, db string) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, ok := procStat(pid)
		if !ok || c.ppid != postmaster {
			continue
		}
		title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(title, []byte(" "+db+" ")) {
			total += c.utime + c.stime
		}
	}
	return total
}
