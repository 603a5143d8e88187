package persisttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist"
)

// Pair is a PostgreSQL primary and a streaming standby of it, both of one
// test's own: initdb, a base backup and two servers on loopback ports, in
// a temporary directory, run as the postgres user when the test runs as
// root (PostgreSQL refuses root). Their database agentd is migrated. They
// are stopped and removed when the test ends.
type Pair struct {
	t      testing.TB
	bin    string // the PostgreSQL binaries' directory
	dir    string
	cred   *syscall.Credential
	ports  [2]int // primary, standby
	closed [2]bool
}

// NewPair starts a primary and its standby, and waits until the standby
// has replayed the migrated database. Under -short it skips the test.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers: in the full tier (make test), not under -short")
	}
	p := &Pair{t: t, bin: pgBin(t)}
	dir, err := os.MkdirTemp("", "agentd-replica-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal("PostgreSQL does not run as root, and there is no postgres user to run it as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for i := range p.ports {
		p.ports[i] = freePort(t)
	}
	primary, standby := p.data(0), p.data(1)
	p.run("initdb", "-D", primary, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	p.conf(primary, fmt.Sprintf("port = %d", p.ports[0]), "listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '"+dir+"'", "wal_level = replica", "max_wal_senders = 4", "hot_standby = on",
		"fsync = off", "shared_buffers = '32MB'", "max_connections = 60")
	t.Cleanup(func() { p.stop(0) })
	p.start(0)
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.ports[0]), "-U", "postgres",
		"-D", standby, "-R", "-X", "stream", "-c", "fast")
	p.conf(standby, fmt.Sprintf("port = %d", p.ports[1]))
	t.Cleanup(func() { p.stop(1) })
	p.start(1)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url(0, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE agentd"); err != nil {
		t.Fatal(err)
	}
	if err := persist.Migrate(ctx, p.PrimaryURL()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p.WaitReplayed()
	return p
}

// PrimaryURL is the primary's agentd database.
func (p *Pair) PrimaryURL() string { return p.url(0, "agentd") }

// StandbyURL is the standby's agentd database.
func (p *Pair) StandbyURL() string { return p.url(1, "agentd") }

// WaitReplayed waits until the standby has replayed everything the
// primary has written so far.
func (p *Pair) WaitReplayed() {
	p.t.Helper()
	ctx := context.Background()
	var lsn string
	p.query(0, `SELECT pg_current_wal_lsn()::text`, &lsn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var done bool
		conn, err := pgx.Connect(ctx, p.url(1, "postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, lsn).Scan(&done)
			conn.Close(ctx)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the standby has not replayed %s in 30s (%v)", lsn, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PauseReplay stops the standby's replay of the primary's WAL, so that it
// falls behind; ResumeReplay lets it catch up.
func (p *Pair) PauseReplay() { p.query(1, `SELECT pg_wal_replay_pause()::text`, new(string)) }

// ResumeReplay resumes the standby's replay.
func (p *Pair) ResumeReplay() { p.query(1, `SELECT pg_wal_replay_resume()::text`, new(string)) }

// StopStandby stops the standby at once (as if it crashed).
func (p *Pair) StopStandby() { p.stop(1) }

// StartStandby starts the standby again.
func (p *Pair) StartStandby() { p.start(1) }

func (p *Pair) url(i int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.ports[i], db)
}

func (p *Pair) data(i int) string { return filepath.Join(p.dir, []string{"primary", "standby"}[i]) }

// query runs sql on server i's postgres database and scans its one value.
func (p *Pair) query(i int, sql string, dest any) {
	p.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.url(i, "postgres"))
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}

func (p *Pair) start(i int) {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.data(i), "-l", p.data(i)+".log", "-w", "-t", "60", "start")
	p.closed[i] = false
}

// stop stops server i at once, if it runs.
func (p *Pair) stop(i int) {
	if p.closed[i] {
		return
	}
	p.closed[i] = true
	cmd := p.command("pg_ctl", "-D", p.data(i), "-m", "immediate", "-w", "stop")
	_ = cmd.Run()
}

// conf appends lines to the postgresql.conf of data.
func (p *Pair) conf(data string, lines ...string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		p.t.Fatal(err)
	}
}

// run runs a PostgreSQL program to its end.
func (p *Pair) run(name string, args ...string) {
	p.t.Helper()
	if out, err := p.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(p.data(0) + ".log")
		p.t.Fatalf("%s: %v\n%s\n%s", name, err, out, log)
	}
}

func (p *Pair) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.Env = []string{"PATH=" + p.bin + ":/usr/bin:/bin", "LC_ALL=C", "HOME=" + p.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	return cmd
}

// pgBin returns the directory of initdb, pg_ctl and pg_basebackup: the
// newest /usr/lib/postgresql/N/bin (Debian's), else that of initdb on PATH.
func pgBin(t testing.TB) string {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("initdb is not installed (Debian: postgresql-15); the read replica's tests start servers of their own")
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// PrimaryCPU returns the CPU time the primary's processes have used so far:
// its postmaster's, with that of the backends it has reaped, and that of
// the processes it runs now.
func (p *Pair) PrimaryCPU() time.Duration {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.data(0), "postmaster.pid"))
	if err != nil {
		p.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		p.t.Fatal(err)
	}
	ticks := cpuTicks(pid, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if parentOf(child) == pid {
			ticks += cpuTicks(child, false)
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// procStat returns the fields of /proc/pid/stat after the command's name.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

func parentOf(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// cpuTicks is utime+stime of pid, and with reaped the CPU of its reaped
// children (cutime+cstime).
func cpuTicks(pid int, reaped bool) int64 {
	f := procStat(pid) // fields 3.. of proc(5): utime is the 14th, so f[11]
	if len(f) < 15 {
		return 0
	}
	var n int64
	idx := []int{11, 12}
	if reaped {
		idx = append(idx, 13, 14)
	}
	for _, i := range idx {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return n
}
