package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file holds the failover test's PostgreSQL: a pg_auto_failover
// formation of a monitor and two nodes, and the processes that run it.

// pgAutoctl returns the path of pg_autoctl, pg_auto_failover's tool.
func pgAutoctl(t *testing.T) string {
	t.Helper()
	skipShort(t, "starts a PostgreSQL formation and server processes")
	if p, err := exec.LookPath("pg_autoctl"); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_autoctl"); len(m) > 0 {
		slices.Sort(m)
		return m[len(m)-1]
	}
	failoverUnavailable(t, "pg_autoctl is not installed (Debian: apt-get install postgresql-15-auto-failover)")
	return ""
}

// postgresBin returns the directory of the PostgreSQL binaries that
// pg_auto_failover's extension was built for (Debian's
// /usr/lib/postgresql/N/bin), else that of the pg_ctl on PATH.
func postgresBin(t *testing.T) string {
	t.Helper()
	if libs, _ := filepath.Glob("/usr/lib/postgresql/*/lib/pgautofailover.so"); len(libs) > 0 {
		slices.Sort(libs)
		return filepath.Join(filepath.Dir(filepath.Dir(libs[len(libs)-1])), "bin")
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	failoverUnavailable(t, "pg_auto_failover's extension or pg_ctl is not installed (Debian: apt-get install postgresql-15-auto-failover)")
	return ""
}

// failoverUnavailable skips the test for want of what why says, or fails
// it under AGENTD_REQUIRE_FAILOVER=1.
func failoverUnavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AGENTD_REQUIRE_FAILOVER") == "1" {
		t.Fatal(why + " (AGENTD_REQUIRE_FAILOVER=1)")
	}
	t.Skip(why)
}

// monitorTuning shortens pg_auto_failover's detection of a dead primary
// (by default about 50 s: health checks every 5 s, retried twice 2 s
// apart, 20 s without a report before a node is unhealthy, 30 s for the
// old primary to demote itself) to a few seconds; the keepers'
// network_partition_timeout goes below the demote timeout with it. The
// health check's own timeout stays 5 s: a dead node refuses at once, and a
// shorter one marks live nodes unhealthy on a busy machine, which stops
// any failover.
var monitorTuning = []string{
	"pgautofailover.health_check_period = 1000",
	"pgautofailover.health_check_retry_delay = 500",
	"pgautofailover.node_considered_unhealthy_timeout = 3000",
	"pgautofailover.primary_demote_timeout = 3000",
	"pgautofailover.startup_grace_period = 1000",
}

// formation is the pg_auto_failover formation of one test: a monitor and
// two PostgreSQL nodes on loopback ports, each run by a `pg_autoctl run`
// process of its own, in a temporary directory. Only the test's goroutine
// starts and kills its processes.
type formation struct {
	t     *testing.T
	tool  string // pg_autoctl
	pgctl string // the pg_ctl of pg_auto_failover's PostgreSQL
	dir   string
	env   []string
	cred  *syscall.Credential // the postgres user's when the test runs as root (pg_autoctl refuses root)

	monitor *pgNode
	nodes   []*pgNode
	mon     *pgxpool.Pool // the monitor's database, pg_auto_failover
}

// pgNode is one PostgreSQL of the formation and the pg_autoctl process
// that runs it, while it runs.
type pgNode struct {
	name, pgdata string
	port         int
	cmd          *exec.Cmd
	done         chan struct{} // closed when cmd has exited
}

// url is the node's own database URL.
func (n *pgNode) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/agentd?sslmode=disable", n.port)
}

// nodeState is one node as the monitor sees it.
type nodeState struct {
	id             int64
	name           string
	port           int
	reported, goal string
	health         int
}

// startFormation creates the monitor and the two nodes, starts them, and
// waits until the first node is primary with the second as its synchronous
// standby. With tuned, the detection of a dead primary is shortened
// (monitorTuning).
func startFormation(t *testing.T, tool string, tuned bool) *formation {
	t.Helper()
	f := newFormation(t, tool)
	began := time.Now()
	f.createMonitor(tuned)
	t.Logf("pg_auto_failover: the monitor is up after %v", time.Since(began).Round(time.Millisecond))
	for i, n := range f.nodes {
		f.create(n, "create", "postgres", "--pgdata", n.pgdata, "--pgport", fmt.Sprint(n.port), "--pgctl", f.pgctl,
			"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.name, "--dbname", "agentd",
			"--monitor", fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitor.port),
			"--auth", "trust", "--no-ssl")
		f.appendConf(n, "shared_buffers = '128MB'")
		if tuned {
			f.create(n, "config", "set", "--pgdata", n.pgdata, "timeout.network_partition_timeout", "2")
		}
		f.start(n)
		if i == 0 { // the second node is a base backup of the first
			f.waitStates("the first node to run alone", 2*time.Minute, func(s []nodeState) bool {
				return len(s) == 1 && s[0].reported == "single" && s[0].goal == "single"
			})
		}
		t.Logf("pg_auto_failover: %s is up after %v", n.name, time.Since(began).Round(time.Millisecond))
	}
	f.waitHealthy(2 * time.Minute)
	t.Logf("pg_auto_failover: primary and synchronous standby after %v", time.Since(began).Round(time.Millisecond))
	return f
}

// newFormation makes the formation's directory (removed when the test
// ends, after its processes are killed) and picks its ports.
func newFormation(t *testing.T, tool string) *formation {
	t.Helper()
	bin := postgresBin(t)
	dir, err := os.MkdirTemp("", "agentd-failover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &formation{t: t, tool: tool, pgctl: filepath.Join(bin, "pg_ctl"), dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			failoverUnavailable(t, "pg_autoctl does not run as root, and there is no postgres user to run it as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// pg_autoctl keeps its configuration and state under the XDG
	// directories: the formation's own, not its user's.
	f.env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}
	ports := freePorts(t, 3)
	f.monitor = &pgNode{name: "monitor", pgdata: filepath.Join(dir, "monitor"), port: ports[0]}
	for i := range 2 {
		name := fmt.Sprintf("node%d", i+1)
		f.nodes = append(f.nodes, &pgNode{name: name, pgdata: filepath.Join(dir, name), port: ports[i+1]})
	}
	t.Cleanup(f.stop)
	t.Cleanup(func() {
		if t.Failed() {
			f.logTails(40)
		}
	})
	return f
}

// createMonitor creates the monitor, shortens its detection when tuned,
// starts it and connects to it.
func (f *formation) createMonitor(tuned bool) {
	m := f.monitor
	f.create(m, "create", "monitor", "--pgdata", m.pgdata, "--pgport", fmt.Sprint(m.port), "--pgctl", f.pgctl,
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
	f.appendConf(m, "shared_buffers = '128MB'")
	if tuned {
		f.appendConf(m, monitorTuning...)
	}
	f.start(m)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", m.port)
	deadline := time.Now().Add(time.Minute)
	for {
		pool, err := pgxpool.New(context.Background(), url)
		if err == nil {
			if err = pool.Ping(context.Background()); err == nil {
				f.mon = pool
				f.t.Cleanup(pool.Close)
				return
			}
			pool.Close()
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the monitor does not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// url is the formation's database URL for agentd: both nodes, the
// writable one chosen at each connection.
func (f *formation) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/agentd?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		f.nodes[0].port, f.nodes[1].port)
}

// command is a pg_autoctl command as the formation's user, in a process
// group of its own, told to stop (SIGTERM) should this process die first.
func (f *formation) command(args ...string) *exec.Cmd {
	cmd := exec.Command(f.tool, args...)
	cmd.Env = f.env
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: f.cred, Pdeathsig: syscall.SIGTERM}
	return cmd
}

// create runs a pg_autoctl command of node n to its end; its output goes to
// n's log.
func (f *formation) create(n *pgNode, args ...string) {
	out, err := f.command(args...).CombinedOutput()
	f.appendLog(n, out)
	if err != nil {
		f.t.Fatalf("pg_autoctl %s: %v\n%s", strings.Join(args[:2], " "), err, lastLines(out, 30))
	}
}

// start runs `pg_autoctl run` for n, its output appended to n's log.
func (f *formation) start(n *pgNode) {
	log, err := os.OpenFile(f.logPath(n), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := f.command("run", "--pgdata", n.pgdata)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		f.t.Fatalf("pg_autoctl run %s: %v", n.name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = cmd.Wait()
		log.Close()
	}(n.done)
}

// kill SIGKILLs n's pg_autoctl and every process under it (its keeper's
// services, its PostgreSQL and every backend of it, which run in sessions
// of their own) at once, as if its machine died, and waits until they are
// gone. It returns when the signal was sent.
func (f *formation) kill(n *pgNode) time.Time {
	if n.cmd == nil {
		return time.Now()
	}
	pid := n.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGSTOP) // nothing of the group forks while its tree is read
	tree := processTree(pid)
	at := time.Now()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-n.done
	n.cmd = nil
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range tree {
		for processAlive(p) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return at
}

// stop kills every process of the formation.
func (f *formation) stop() {
	for _, n := range append([]*pgNode{f.monitor}, f.nodes...) {
		f.kill(n)
	}
}

// states is the monitor's view of the nodes.
func (f *formation) states() ([]nodeState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := f.mon.Query(ctx, `SELECT nodeid, nodename, nodeport, reportedstate::text, goalstate::text, health
		FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (nodeState, error) {
		var s nodeState
		err := row.Scan(&s.id, &s.name, &s.port, &s.reported, &s.goal, &s.health)
		return s, err
	})
}

// waitStates polls the monitor until ok holds of its view of the nodes, and
// returns that view; after timeout the test fails with the last one.
func (f *formation) waitStates(what string, timeout time.Duration, ok func([]nodeState) bool) []nodeState {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := f.states()
		if err == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("waited %v for %s; the monitor says %+v (%v)", timeout, what, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHealthy waits until one node is primary and the other its
// secondary, both healthy, with the secondary streaming as a synchronous
// standby (so that every commit is on both), and returns the primary.
func (f *formation) waitHealthy(timeout time.Duration) *pgNode {
	f.t.Helper()
	var primary *pgNode
	f.waitStates("a primary with a synchronous standby", timeout, func(s []nodeState) bool {
		roles := map[string]int{}
		for _, n := range s {
			if n.reported == n.goal && n.health == 1 {
				roles[n.reported]++
			}
			if n.reported == "primary" {
				primary = f.node(n.port)
			}
		}
		return len(s) == 2 && roles["primary"] == 1 && roles["secondary"] == 1 && primary != nil && syncStandbys(primary) == 1
	})
	return primary
}

// promotion is what the monitor's events tell of one failover.
type promotion struct {
	unhealthy time.Time // it marked the old primary unhealthy
	assigned  time.Time // it assigned the standby wait_primary
	reported  time.Time // the standby reported it had become so
}

// waitPromotion waits until the monitor says that a node other than old is
// the writable primary (wait_primary, with no standby yet, or primary),
// and returns it with the times of the monitor's events since the kill at
// killAt.
func (f *formation) waitPromotion(old *pgNode, killAt time.Time, timeout time.Duration) (*pgNode, promotion) {
	f.t.Helper()
	var promoted *pgNode
	f.waitStates("the standby's promotion", timeout, func(s []nodeState) bool {
		for _, n := range s {
			if n.port != old.port && n.reported == n.goal && (n.reported == "wait_primary" || n.reported == "primary") {
				promoted = f.node(n.port)
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var unhealthy, assigned, reported *time.Time
	err := f.mon.QueryRow(ctx, `SELECT
		min(eventtime) FILTER (WHERE nodeport = $2 AND description LIKE '%marked as unhealthy%'),
		min(eventtime) FILTER (WHERE nodeport = $1 AND goalstate::text = 'wait_primary' AND reportedstate::text <> 'wait_primary'),
		min(eventtime) FILTER (WHERE nodeport = $1 AND reportedstate::text IN ('wait_primary', 'primary'))
		FROM pgautofailover.event WHERE eventtime >= $3`, promoted.port, old.port, killAt).Scan(&unhealthy, &assigned, &reported)
	if err != nil || unhealthy == nil || assigned == nil || reported == nil {
		f.t.Fatalf("the monitor's events of %s's promotion: %v (%v, %v, %v)", promoted.name, err, unhealthy, assigned, reported)
	}
	return promoted, promotion{*unhealthy, *assigned, *reported}
}

// events are the monitor's events since from, one line each.
func (f *formation) events(from time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := f.mon.Query(ctx, `SELECT eventtime, nodename, reportedstate::text, goalstate::text, coalesce(description, '')
		FROM pgautofailover.event WHERE eventtime >= $1 ORDER BY eventid`, from)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var at time.Time
		var node, reported, goal, what string
		err := row.Scan(&at, &node, &reported, &goal, &what)
		return fmt.Sprintf("\t+%v %s %s/%s: %s", at.Sub(from).Round(time.Millisecond), node, reported, goal, what), err
	})
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "\n")
}

// watchWritable reports on the channel it returns when a transaction of
// its own first committed through the formation's URL, as a plain client
// of PostgreSQL that asks for a writable server as agentd does: it starts
// one every 100 ms (at most 10 at a time), each given 10 s, so that one
// held by synchronous replication returns when it is released. stop ends
// it and waits for its attempts.
func (f *formation) watchWritable() (at <-chan time.Time, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan time.Time, 1)
	var attempts sync.WaitGroup
	var inFlight atomic.Int32
	attempts.Add(1)
	go func() {
		defer attempts.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if inFlight.Load() < 10 {
				inFlight.Add(1)
				attempts.Add(1)
				go func() {
					defer attempts.Done()
					defer inFlight.Add(-1)
					if commits(ctx, f.url(), 10*time.Second) {
						select {
						case first <- time.Now():
						default:
						}
					}
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if len(first) > 0 {
				return
			}
		}
	}()
	return first, func() { cancel(); attempts.Wait() }
}

// commits reports whether a transaction that takes a transaction id
// commits on the server of url within timeout (with synchronous
// replication on, a commit returns once it is on a synchronous standby).
func commits(ctx context.Context, url string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	defer db.Close(context.Background())
	_, err = db.Exec(ctx, `SELECT txid_current()`)
	return err == nil
}

// node is the data node on port.
func (f *formation) node(port int) *pgNode {
	for _, n := range f.nodes {
		if n.port == port {
			return n
		}
	}
	return nil
}

// syncStandbys counts the standbys that stream to primary synchronously.
func syncStandbys(primary *pgNode) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, primary.url())
	if err != nil {
		return 0
	}
	defer db.Close(context.Background())
	var n int
	if db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')
		AND current_setting('synchronous_commit') NOT IN ('off', 'local')`).Scan(&n) != nil {
		return 0
	}
	return n
}

// appendConf appends settings to n's postgresql.conf, after the include of
// pg_auto_failover's own file, so that they win.
func (f *formation) appendConf(n *pgNode, settings ...string) {
	conf, err := os.OpenFile(filepath.Join(n.pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	defer conf.Close()
	if _, err := conf.WriteString("\n" + strings.Join(settings, "\n") + "\n"); err != nil {
		f.t.Fatal(err)
	}
}

// logPath is the file of n's pg_autoctl output.
func (f *formation) logPath(n *pgNode) string { return filepath.Join(f.dir, n.name+".log") }

// appendLog appends out to n's log.
func (f *formation) appendLog(n *pgNode, out []byte) {
	log, err := os.OpenFile(f.logPath(n), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer log.Close()
	_, _ = log.Write(out)
}

// logTails logs the last lines of each node's pg_autoctl output.
func (f *formation) logTails(lines int) {
	for _, n := range append([]*pgNode{f.monitor}, f.nodes...) {
		out, _ := os.ReadFile(f.logPath(n))
		f.t.Logf("pg_autoctl %s, last lines:\n%s", n.name, lastLines(out, lines))
	}
}

// lastLines is the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// processTree returns root and every process under it, from /proc.
func processTree(root int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	tree := []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z"
}

// procStat reads a process's state and parent from /proc/pid/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	i := strings.LastIndexByte(string(b), ')') // the command may hold spaces and parentheses
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err == nil
}
