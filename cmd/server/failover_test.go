package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestFailover runs agentd on a PostgreSQL that fails over, with the real
// failover tool: a pg_auto_failover formation (a monitor and two nodes with
// synchronous replication, on loopback ports, started by the test) behind
// the multi-host URL that agentd's documentation gives. Under load (runs
// with tool calls, a side effect, an approval, streamed answers, SSE
// readers that are dropped at each failover and come back with
// Last-Event-ID to any instance), it kills the primary node's whole process
// tree (its pg_autoctl keeper and its PostgreSQL with every backend), waits
// for the standby's promotion, brings the old node back as a standby, and
// does it again; agentd processes are SIGKILLed too, one in every round and
// one during every second outage, and the others take over.
//
// What must hold: every acknowledged run ends, completed, with one
// terminal event; no side effect reaches its webhook twice, and none of a
// completed run is missing; every SSE transcript is its run's stored log,
// gapless and byte for byte; and what a client had been shown when the
// primary died (its acknowledged runs, the events its stream had read) is
// in the promoted primary's tables, since a commit waited for the standby.
// agentd must take writes again once the standby is promoted.
//
// What it reports, in a summary line: the failovers, the runs acknowledged
// and completed, the agentd kills, the write outage of each failover (from
// the kill to the first acknowledged POST /runs), the promotion (from the
// kill to the monitor's event that assigns the standby wait_primary),
// agentd's share of the outage (from that event, and from the first commit
// of a plain client that asks for a writable server, to the first
// acknowledged run), and how agentd answered during outages: POST /runs
// 500s and 503s (with or without Retry-After), and /readyz while nothing
// took writes. AGENTD_FAILOVER_STRICT=1 fails the test on any 5xx but 503.
//
// The test is skipped when pg_autoctl is not installed (Debian's
// postgresql-15-auto-failover), and fails instead under
// AGENTD_REQUIRE_FAILOVER=1. AGENTD_FAILOVER_ROUNDS (default 2) sets the
// failovers, AGENTD_FAILOVER_PROCS (default 2) the agentd processes, and
// AGENTD_FAILOVER_DEFAULTS=1 keeps pg_auto_failover's default detection
// times (about 50 s per failover) instead of the shortened ones, and
// AGENTD_FAILOVER_LOGS names a file for agentd's log lines.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover test starts a PostgreSQL formation and server processes")
	}
	tool := pgAutoctl(t)
	rounds := envInt("AGENTD_FAILOVER_ROUNDS", 2)
	procs := max(2, envInt("AGENTD_FAILOVER_PROCS", 2))
	began := time.Now()
	pg := startFormation(t, tool, os.Getenv("AGENTD_FAILOVER_DEFAULTS") != "1")
	t.Logf("formation up in %v: monitor :%d, %s :%d and %s :%d; agentd on %s", time.Since(began).Round(time.Millisecond),
		pg.monitor.port, pg.nodes[0].name, pg.nodes[0].port, pg.nodes[1].name, pg.nodes[1].port, pg.url())

	sink, toolsFile := failoverTools(t)
	msrv := httptest.NewServer(fakellm.New())
	defer msrv.Close()
	env := []string{"DATABASE_URL=" + pg.url(), "AGENTD_TOOLS_FILE=" + toolsFile, "AGENTD_LEASE_TTL=1s",
		"OPENAI_API_KEY=failover", "OPENAI_BASE_URL=" + msrv.URL + "/v1", "AGENTD_MODEL=fake",
		"AGENTD_POLL_INTERVAL=200ms", "AGENTD_LOG_LEVEL=info", "AGENTD_WORKERS=8", "AGENTD_SHUTDOWN_GRACE=300ms",
		"AGENTD_SSE_RETRY=50ms", "AGENTD_HEARTBEAT=1s"}
	fleet := startFleet(t, procs, env)
	store, err := persist.Open(context.Background(), persist.Config{URL: pg.url(), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	load := startLoad(fleet, sink, store)
	defer load.close()

	var done []failoverRound
	for r := range rounds {
		fo := failoverOnce(t, pg, fleet, load, r)
		done = append(done, fo)
		t.Logf("failover %d: %s; the monitor's events:\n%s", r+1, load.describe(fo), fo.events)
	}
	load.stopFlow()
	ids := load.drain(t, pg.url(), 2*time.Minute)
	c := checkFailoverRuns(t, store, sink, load, ids)
	for _, fo := range done {
		c.shownMissing += fo.missing
	}
	load.summarize(t, done, c, fleet.killed())
	if c.acked == 0 {
		t.Fatal("no run was acknowledged: the test proved nothing")
	}
}

// failoverInterval is the pause of the load between two POST /runs: about
// 8 runs a second, within what two instances of 8 workers sustain here
// under the race detector.
const failoverInterval = 120 * time.Millisecond

// failoverRound is what one failover took.
type failoverRound struct {
	old, promoted string    // the node killed, the node promoted
	killAt        time.Time // the SIGKILL of the primary's process tree
	monitor       promotion // what the monitor's events tell
	writable      time.Time // a transaction of the test's own first committed on the promoted node
	firstAck      time.Time // the first POST /runs acknowledged that was sent after the kill
	events        string    // the monitor's events from the kill on
	agentdKilled  bool      // an agentd process was SIGKILLed during the outage too
	missing       int       // runs of which the promoted primary lacked something a client was shown
}

// failoverOnce is one round: steady load and an agentd SIGKILL, the
// primary's death, the promotion, agentd taking writes again, the check of
// what clients were shown against the promoted primary, and the old
// primary's return as a standby.
func failoverOnce(t *testing.T, pg *formation, fleet *failoverFleet, load *failoverLoad, round int) failoverRound {
	t.Helper()
	pg.waitHealthy(2 * time.Minute)
	time.Sleep(1500 * time.Millisecond)
	fleet.restart(fleet.kill())
	time.Sleep(time.Duration(800+rand.IntN(1200)) * time.Millisecond)

	old := pg.waitHealthy(30 * time.Second)
	fo := failoverRound{old: old.name, killAt: pg.kill(old)}
	fleet.mark("SIGKILL PostgreSQL %s (the primary)", old.name)
	writable, stopWatch := pg.watchWritable()
	defer stopWatch()
	acked, shown := load.snapshot()
	load.dropStreams()
	dead := -1
	if round%2 == 1 {
		dead = fleet.kill() // an instance dies while the database is away
		fo.agentdKilled = true
	}
	promoted, monitor := pg.waitPromotion(old, fo.killAt, 3*time.Minute)
	fo.promoted, fo.monitor = promoted.name, monitor
	fleet.mark("the monitor says %s is the primary; it assigned wait_primary at %s", promoted.name, monitor.assigned.Format(time.RFC3339Nano))
	fo.firstAck = load.waitAck(t, fo.killAt, 90*time.Second)
	select {
	case fo.writable = <-writable:
	case <-time.After(30 * time.Second):
		t.Fatalf("agentd took writes again, but no transaction of the test's own commits on %s", promoted.name)
	}
	fo.events = pg.events(fo.killAt)
	if dead >= 0 {
		fleet.restart(dead)
	}
	fo.missing = checkShownSurvived(t, promoted.url(), acked, shown)
	pg.start(old) // pg_autoctl rewinds it and follows the new primary
	return fo
}

// failoverTools starts the webhook sink of the test's tools and writes
// their file: charge (a side effect), transfer (a side effect that needs a
// client's approval) and lookup (idempotent, slow enough to be caught by a
// kill).
func failoverTools(t *testing.T) (*webhooktest.Sink, string) {
	t.Helper()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/charge":   webhooktest.OK(),
		"/transfer": webhooktest.OK(),
		"/lookup":   webhooktest.Delay(50*time.Millisecond, 250*time.Millisecond),
	})
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[
		{"name":"charge","description":"a side effect","parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":10000},
		{"name":"transfer","description":"a side effect a client approves","parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true,"timeout_ms":10000},
		{"name":"lookup","description":"an idempotent call","parameters":{"type":"object"},"url":%q,"effect":"idempotent","timeout_ms":10000}]}`,
		sink.URL+"/charge", sink.URL+"/transfer", sink.URL+"/lookup")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return sink, toolsFile
}

// failoverBody is the n-th run of the load: its POST /runs body, whether it
// asks for its event stream in the answer, and whether a reader follows it.
// Every fourth run streams from its POST, every fourth waits for an
// approval, and three runs in four have a reader.
func failoverBody(n int) (body string, stream, read bool) {
	switch n % 4 {
	case 0:
		return `{"input":"/call lookup {}\n/next\n/call charge {}\n/call lookup {\"n\":2}\n/next\n/stream 20 10"}`, false, true
	case 1:
		return `{"input":"/call transfer {\"amount\":5}\n/next\n/stream 10 10"}`, false, true
	case 2:
		return `{"stream":true,"input":"/call charge {}\n/next\n/stream 40 25"}`, true, true
	default:
		return `{"input":"/call lookup {}\n/next\n/stream 10 10"}`, false, false
	}
}

// failoverChecks is what the final checks found.
type failoverChecks struct {
	acked, stored, completed int // runs acknowledged, runs in the database, runs completed
	duplicates, skipped      int // side effects run twice, side effects of a completed run missing
	lostEvents               int // transcripts that differ from their stored log
	shownMissing             int // runs of which a promoted primary lacked what a client was shown
	badEnds                  int // runs that did not end completed with one terminal event
}

// checkFailoverRuns checks every run stored (the acknowledged ones and any
// whose acknowledgement was lost): it completed, with exactly one terminal
// event, its last; then the side effects and the transcripts.
func checkFailoverRuns(t *testing.T, store *persist.Store, sink *webhooktest.Sink, load *failoverLoad, ids []string) failoverChecks {
	t.Helper()
	c := failoverChecks{acked: load.ackedCount(), stored: len(ids)}
	for _, id := range ids {
		r, err := store.RunByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := store.EventsAfter(context.Background(), id, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		terminal := 0
		for _, e := range evs {
			if e.Type.Terminal() {
				terminal++
			}
		}
		switch {
		case r.Status != agentd.StatusCompleted:
			c.badEnds++
			t.Errorf("run %s ended %s/%s: %s", id, r.Status, r.TerminalReason, r.Error)
		case terminal != 1 || !evs[len(evs)-1].Type.Terminal():
			c.badEnds++
			t.Errorf("run %s completed with %d terminal events in its log of %d", id, terminal, len(evs))
		default:
			c.completed++
		}
	}
	for _, tool := range []string{"charge", "transfer"} {
		d, s := checkSideEffects(t, store, sink, "/"+tool, tool, ids)
		c.duplicates += d
		c.skipped += s
	}
	c.lostEvents = checkTranscripts(t, store, load.transcripts())
	return c
}

// checkShownSurvived reads the promoted primary itself (at url, not through
// the multi-host URL): each run acknowledged before the old primary died is
// there, and so is each event a reader had been shown, byte for byte. It
// returns how many runs lack something.
func checkShownSurvived(t *testing.T, url string, acked []string, shown map[string][]sseEvent) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := persist.Open(ctx, persist.Config{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatalf("open the promoted primary: %v", err)
	}
	defer store.Close()
	missing := 0
	for _, id := range acked {
		if _, err := store.RunByID(ctx, id); err != nil {
			missing++
			t.Errorf("run %s was acknowledged before the failover; the promoted primary has not got it: %v", id, err)
		}
	}
	for id, seen := range shown {
		evs, err := store.EventsAfter(ctx, id, 0, len(seen))
		if err != nil {
			t.Fatalf("read run %s on the promoted primary: %v", id, err)
		}
		for i, e := range seen {
			if i >= len(evs) || e.ID != fmt.Sprint(evs[i].Seq) || e.Event != string(evs[i].Type) || e.Data != string(evs[i].Data) {
				missing++
				t.Errorf("run %s: event %s (%s) was shown to a client before the failover; the promoted primary has %d events and not this one",
					id, e.ID, e.Event, len(evs))
				break
			}
		}
	}
	return missing
}

// storedRuns lists the ids of every run in the database of url.
func storedRuns(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	rows, err := db.Query(ctx, `SELECT id::text FROM runs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitEnded waits until each run of ids is terminal, while the load's
// client goes on answering what runs wait for.
func waitEnded(t *testing.T, store *persist.Store, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, id := range ids {
		persisttest.WaitRun(t, store, id, func(r agentd.Run) bool { return r.Status.Terminal() }, time.Until(deadline))
	}
}

// failoverAnswers counts the answers of one route in a window.
type failoverAnswers struct {
	ok, s500, s503, retryAfter, other, noAnswer int
	slowest                                     time.Duration // the longest wait for an answer (or for none)
}

// String says the counts in words.
func (a failoverAnswers) String() string {
	return fmt.Sprintf("%d ok, %d 500, %d 503 (%d with Retry-After), %d other, %d without an answer; the slowest took %v",
		a.ok, a.s500, a.s503, a.retryAfter, a.other, a.noAnswer, a.slowest.Round(time.Millisecond))
}

// jsonAction is the body of POST /runs/{id}/actions for a decision.
func jsonAction(toolCallID, decision string) string {
	b, _ := json.Marshal(toolCallID)
	return fmt.Sprintf(`{"tool_call_id":%s,%s}`, b, decision)
}

// describe says what one failover took, in one line.
func (l *failoverLoad) describe(fo failoverRound) string {
	posts, _ := l.during(fo.killAt, fo.firstAck)
	_, readyz := l.during(fo.killAt, fo.writable)
	also := ""
	if fo.agentdKilled {
		also = "; an agentd process was SIGKILLed during the outage"
	}
	after := func(at time.Time) time.Duration { return at.Sub(fo.killAt).Round(time.Millisecond) }
	return fmt.Sprintf("killed %s; the monitor marked it unhealthy after %v and assigned %s wait_primary after %v (reported after %v); "+
		"a plain client first committed after %v; agentd acknowledged a run after %v (%v after the promotion, %v after the first commit); "+
		"during the outage POST /runs: %v; /readyz while nothing took writes: %v%s",
		fo.old, after(fo.monitor.unhealthy), fo.promoted, after(fo.monitor.assigned), after(fo.monitor.reported),
		after(fo.writable), after(fo.firstAck), fo.firstAck.Sub(fo.monitor.assigned).Round(time.Millisecond),
		fo.firstAck.Sub(fo.writable).Round(time.Millisecond), posts, readyz, also)
}

// summarize logs the test's figures in one line and, under
// AGENTD_FAILOVER_STRICT=1, fails on any 5xx answer but 503.
func (l *failoverLoad) summarize(t *testing.T, done []failoverRound, c failoverChecks, kills int) {
	t.Helper()
	var outages, promotions, shares, ownShares []time.Duration
	var posts, readyz failoverAnswers
	for _, fo := range done {
		outages = append(outages, fo.firstAck.Sub(fo.killAt))
		promotions = append(promotions, fo.monitor.assigned.Sub(fo.killAt))
		shares = append(shares, fo.firstAck.Sub(fo.monitor.assigned))
		ownShares = append(ownShares, fo.firstAck.Sub(fo.writable))
		p, _ := l.during(fo.killAt, fo.firstAck)
		_, q := l.during(fo.killAt, fo.writable)
		posts = posts.add(p)
		readyz = readyz.add(q)
	}
	l.mu.Lock()
	approvals, resolutions, drops, readers := l.approvals, l.resolutions, l.drops, len(l.readers)
	other5xx := l.other5xx()
	l.mu.Unlock()
	t.Logf("failover summary: %d failovers, %d runs acknowledged (%d runs stored, %d completed), %d approvals and %d unknown outcomes answered, "+
		"%d agentd SIGKILLs, %d SSE transcripts (%d dropped streams); write outage (kill to first acknowledged POST /runs) %s; "+
		"promotion (kill to the monitor's wait_primary) %s; agentd's share: from the promotion %s, from the first commit of a plain client %s; "+
		"during outages POST /runs: %v; /readyz while nothing took writes: %v; 5xx other than 503 over the whole test: %v; "+
		"%d duplicate executions, %d skipped side effects, %d lost or differing events, %d runs missing what a client was shown, %d runs not ended once",
		len(done), c.acked, c.stored, c.completed, approvals, resolutions, kills, readers, drops,
		p50(outages), p50(promotions), p50(shares), p50(ownShares), posts, readyz, other5xx,
		c.duplicates, c.skipped, c.lostEvents, c.shownMissing, c.badEnds)
	if os.Getenv("AGENTD_FAILOVER_STRICT") == "1" && len(other5xx) > 0 {
		t.Errorf("AGENTD_FAILOVER_STRICT=1: agentd answered 5xx other than 503: %v", other5xx)
	}
}

// add sums two counts.
func (a failoverAnswers) add(b failoverAnswers) failoverAnswers {
	return failoverAnswers{a.ok + b.ok, a.s500 + b.s500, a.s503 + b.s503, a.retryAfter + b.retryAfter, a.other + b.other, a.noAnswer + b.noAnswer,
		max(a.slowest, b.slowest)}
}

// shownSnapshot copies what the readers have been shown so far.
func shownSnapshot(readers map[string]*failoverReader) map[string][]sseEvent {
	shown := map[string][]sseEvent{}
	for id, r := range readers {
		r.mu.Lock()
		if len(r.events) > 0 {
			shown[id] = append([]sseEvent(nil), r.events...)
		}
		r.mu.Unlock()
	}
	return shown
}

// answerBody reads a decision on what run r waits for, as a client would:
// approve what asks for approval; of a side effect whose outcome is
// unknown, say it happened when the sink saw its key, else that it may be
// retried. It returns the action's tool call, the decision, and whether it
// is an approval; an empty decision: nothing to answer.
func answerBody(sink *webhooktest.Sink, r agentd.Run) (callID, decision string, approval bool) {
	var a agentd.RequiredAction
	if json.Unmarshal(r.RequiredAction, &a) != nil {
		return "", "", false
	}
	switch a.Type {
	case agentd.ActionToolApproval:
		return a.ToolCallID, `"decision":"approve"`, true
	case agentd.ActionToolOutcomeUnknown:
		if sink.Keys("/" + a.Name)[a.IdempotencyKey] > 0 {
			return a.ToolCallID, `"decision":"result","result":{"ok":true}`, false
		}
		return a.ToolCallID, `"decision":"retry"`, false
	}
	return "", "", false
}

// isStream reports whether resp is an event stream.
func isStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// pgAutoctl returns the path of pg_autoctl, pg_auto_failover's tool.
func pgAutoctl(t *testing.T) string {
	t.Helper()
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

// failoverFleet is the agentd processes of the test. A SIGKILLed one
// leaves its slot empty until it is restarted. Under AGENTD_FAILOVER_LOGS
// their log lines, and the test's marks of its kills, go to that file.
type failoverFleet struct {
	t    *testing.T
	env  []string
	logs *lockedWriter // nil: not kept

	mu    sync.Mutex
	live  []*child // nil: killed, not yet restarted
	kills int
}

// startFleet starts n agentd processes with env.
func startFleet(t *testing.T, n int, env []string) *failoverFleet {
	t.Helper()
	f := &failoverFleet{t: t, env: env}
	if path := os.Getenv("AGENTD_FAILOVER_LOGS"); path != "" {
		file, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { file.Close() })
		f.logs = &lockedWriter{w: file}
	}
	for range n {
		f.live = append(f.live, f.start())
	}
	return f
}

// start starts one agentd process.
func (f *failoverFleet) start() *child {
	if f.logs == nil {
		return startChild(f.t, f.env)
	}
	return startChildLogged(f.t, f.env, f.logs)
}

// mark writes a line of the test's own into the agentd log file, if kept.
func (f *failoverFleet) mark(format string, args ...any) {
	if f.logs != nil {
		fmt.Fprintf(f.logs, "%s TEST %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
}

// lockedWriter is a writer for several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p whole before another goroutine writes.
func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// addr is the address of a random live instance ("" when none is).
func (f *failoverFleet) addr() string {
	addrs := f.addrs()
	if len(addrs) == 0 {
		return ""
	}
	return addrs[rand.IntN(len(addrs))]
}

// addrs are the addresses of the live instances.
func (f *failoverFleet) addrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.live {
		if c != nil {
			out = append(out, c.addr)
		}
	}
	return out
}

// kill SIGKILLs a random live instance and returns its slot.
func (f *failoverFleet) kill() int {
	f.mu.Lock()
	var alive []int
	for i, c := range f.live {
		if c != nil {
			alive = append(alive, i)
		}
	}
	i := alive[rand.IntN(len(alive))]
	victim := f.live[i]
	f.live[i] = nil
	f.kills++
	f.mu.Unlock()
	f.mark("SIGKILL agentd pid %d", victim.cmd.Process.Pid)
	victim.kill(f.t)
	return i
}

// restart starts a fresh instance in slot i.
func (f *failoverFleet) restart(i int) {
	c := f.start()
	f.mu.Lock()
	f.live[i] = c
	f.mu.Unlock()
}

// killed counts the SIGKILLs so far.
func (f *failoverFleet) killed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills
}

// failoverLoad is the clients of the test: runs created through any
// instance, each retried with its Idempotency-Key until acknowledged; a
// reader on most of them; a client that answers what runs wait for
// (approvals, side effects of unknown outcome); and a poll of every
// instance's /readyz. It records every answer with its time.
type failoverLoad struct {
	fleet  *failoverFleet
	sink   *webhooktest.Sink
	store  *persist.Store
	client *http.Client

	ctx      context.Context // the readers', the answering client's and the poller's
	cancel   context.CancelFunc
	flowCtx  context.Context // the creation of runs
	stopRuns context.CancelFunc
	flow     sync.WaitGroup // the creation of runs
	reading  sync.WaitGroup // the readers
	others   sync.WaitGroup // the answering client and the poller of /readyz

	mu          sync.Mutex
	acked       []string
	posts       []failoverAnswer // POST /runs
	readyz      []failoverAnswer // GET /readyz
	statuses    map[string]map[int]int
	readers     map[string]*failoverReader
	answered    map[string]bool
	approvals   int
	resolutions int
	drops       int
}

// failoverAnswer is one answer of agentd (status 0: none came).
type failoverAnswer struct {
	start, end time.Time
	status     int
	retryAfter bool
	acked      bool // a POST /runs whose run was acknowledged
}

// The routes whose answers are counted.
const (
	routeCreate  = "POST /runs"
	routeEvents  = "GET /runs/{id}/events"
	routeActions = "POST /runs/{id}/actions"
	routeReady   = "GET /readyz"
)

// startLoad starts the clients of the load against fleet.
func startLoad(fleet *failoverFleet, sink *webhooktest.Sink, store *persist.Store) *failoverLoad {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 15 * time.Second
	l := &failoverLoad{fleet: fleet, sink: sink, store: store, client: &http.Client{Transport: tr},
		statuses: map[string]map[int]int{}, readers: map[string]*failoverReader{}, answered: map[string]bool{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.flowCtx, l.stopRuns = context.WithCancel(l.ctx)
	l.flow.Add(1)
	go l.createRuns()
	l.others.Add(2)
	go l.answerActions()
	go l.pollReady()
	return l
}

// stopFlow stops creating runs; the rest goes on.
func (l *failoverLoad) stopFlow() {
	l.stopRuns()
	l.flow.Wait()
}

// close stops every client of the load and waits for them.
func (l *failoverLoad) close() {
	l.cancel()
	l.flow.Wait()
	l.reading.Wait()
	l.others.Wait()
	l.client.CloseIdleConnections()
}

// createRuns creates runs until stopFlow, each retried with its key until
// it is acknowledged (or 300 tries, about 40 s, went unanswered).
func (l *failoverLoad) createRuns() {
	defer l.flow.Done()
	for n := 0; l.flowCtx.Err() == nil; n++ {
		body, stream, read := failoverBody(n)
		key := fmt.Sprintf("failover-%d", n)
		for try := 0; try < 300 && l.flowCtx.Err() == nil; try++ {
			ok := l.create(body, key, stream, read)
			time.Sleep(failoverInterval)
			if ok {
				break
			}
		}
	}
}

// create sends one POST /runs through any instance and records the answer;
// an acknowledged run gets its reader, on the answer's own stream when it
// is one.
func (l *failoverLoad) create(body, key string, stream, read bool) bool {
	ctx, cancel := context.WithCancel(l.ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.fleet.addr()+"/runs", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	a := failoverAnswer{start: time.Now()}
	resp, err := l.client.Do(req)
	a.end = time.Now()
	if err != nil {
		cancel()
		l.recordPost(a, "")
		return false
	}
	a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/runs/")
	a.acked = id != "" && (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && isStream(resp) == stream
	l.recordPost(a, id)
	if a.acked && isStream(resp) {
		l.follow(id, resp, cancel)
		return true
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if a.acked && read {
		l.follow(id, nil, nil)
	}
	return a.acked
}

// recordPost records a POST /runs answer, and its run when acknowledged.
func (l *failoverLoad) recordPost(a failoverAnswer, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts = append(l.posts, a)
	l.count(routeCreate, a.status)
	if a.acked {
		l.acked = append(l.acked, id)
	}
}

// count counts an answer of route; l.mu is held.
func (l *failoverLoad) count(route string, status int) {
	if l.statuses[route] == nil {
		l.statuses[route] = map[int]int{}
	}
	l.statuses[route][status]++
}

// record counts an answer of route.
func (l *failoverLoad) record(route string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(route, status)
}

// other5xx is, by route, the 5xx answers other than 503; l.mu is held.
func (l *failoverLoad) other5xx() map[string]map[int]int {
	out := map[string]map[int]int{}
	for route, byStatus := range l.statuses {
		for status, n := range byStatus {
			if status >= 500 && status != http.StatusServiceUnavailable {
				if out[route] == nil {
					out[route] = map[int]int{}
				}
				out[route][status] = n
			}
		}
	}
	return out
}

// follow starts the reader of run id, from first when its POST answered
// with the stream (cancel ends that request).
func (l *failoverLoad) follow(id string, first *http.Response, cancel context.CancelFunc) {
	r := &failoverReader{id: id, cancel: cancel}
	l.mu.Lock()
	l.readers[id] = r
	l.mu.Unlock()
	l.reading.Add(1)
	go func() {
		defer l.reading.Done()
		r.follow(l, first)
	}()
}

// dropStreams closes every reader's connection, as clients whose network
// failed: each reconnects to any instance with Last-Event-ID.
func (l *failoverLoad) dropStreams() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.readers {
		if r.drop() {
			l.drops++
		}
	}
}

// snapshot is what clients have been shown so far: the runs acknowledged
// and, by run, the events read.
func (l *failoverLoad) snapshot() ([]string, map[string][]sseEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked), shownSnapshot(l.readers)
}

// ackedCount counts the runs acknowledged.
func (l *failoverLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// transcripts are the readers' transcripts, by run; the readers are done.
func (l *failoverLoad) transcripts() map[string]*[]sseEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]*[]sseEvent{}
	for id, r := range l.readers {
		r.mu.Lock()
		evs := slices.Clone(r.events)
		r.mu.Unlock()
		out[id] = &evs
	}
	return out
}

// waitAck waits for the first POST /runs sent after since to be
// acknowledged, and returns when its answer came; the test fails when none
// is within timeout: agentd did not take writes again.
func (l *failoverLoad) waitAck(t *testing.T, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		for _, a := range l.posts {
			if a.acked && !a.start.Before(since) {
				l.mu.Unlock()
				return a.end
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			posts, readyz := l.during(since, time.Now())
			t.Fatalf("agentd acknowledged no run in %v after the primary's death (and the standby's promotion): POST /runs %v; /readyz %v",
				timeout, posts, readyz)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// during counts the answers of POST /runs and of /readyz that came
// between from and to.
func (l *failoverLoad) during(from, to time.Time) (posts, readyz failoverAnswers) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tally := func(as []failoverAnswer) failoverAnswers {
		var c failoverAnswers
		for _, a := range as {
			if a.end.Before(from) || a.end.After(to) {
				continue
			}
			c.slowest = max(c.slowest, a.end.Sub(a.start))
			switch {
			case a.status == 0:
				c.noAnswer++
			case a.status < 300:
				c.ok++
			case a.status == http.StatusInternalServerError:
				c.s500++
			case a.status == http.StatusServiceUnavailable:
				c.s503++
				if a.retryAfter {
					c.retryAfter++
				}
			default:
				c.other++
			}
		}
		return c
	}
	return tally(l.posts), tally(l.readyz)
}

// answerActions answers, as a client, what runs wait for, until the load
// closes (answerBody says how).
func (l *failoverLoad) answerActions() {
	defer l.others.Done()
	for l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		runs, err := l.store.RunList(ctx, agentd.RunListParams{TenantID: "default", Status: agentd.StatusRequiresAction, Limit: 100})
		cancel()
		if err == nil {
			for _, r := range runs {
				l.answer(r)
			}
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// answer posts the decision on what run r waits for, once per action.
func (l *failoverLoad) answer(r agentd.Run) {
	callID, decision, approval := answerBody(l.sink, r)
	mark := fmt.Sprintf("%s/%s/%s/%d", r.ID, callID, decision, r.Epoch)
	l.mu.Lock()
	seen := l.answered[mark]
	l.mu.Unlock()
	if decision == "" || seen {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.fleet.addr()+"/runs/"+r.ID+"/actions",
		strings.NewReader(jsonAction(callID, decision)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(routeActions, status)
	if status == http.StatusOK {
		l.answered[mark] = true
		if approval {
			l.approvals++
		} else {
			l.resolutions++
		}
	}
}

// pollReady asks every live instance's /readyz four times a second.
func (l *failoverLoad) pollReady() {
	defer l.others.Done()
	for l.ctx.Err() == nil {
		for _, addr := range l.fleet.addrs() {
			ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			a := failoverAnswer{start: time.Now()}
			resp, err := l.client.Do(req)
			a.end = time.Now()
			if err == nil {
				a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
			l.mu.Lock()
			l.readyz = append(l.readyz, a)
			l.count(routeReady, a.status)
			l.mu.Unlock()
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// drain waits until every run stored has ended and every reader has read
// its run's end, and returns the ids of the runs stored.
func (l *failoverLoad) drain(t *testing.T, url string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ids := storedRuns(t, url)
	waitEnded(t, l.store, ids, timeout)
	done := make(chan struct{})
	go func() { l.reading.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(30*time.Second, time.Until(deadline))):
		l.cancel()
		<-done
		t.Fatal("SSE readers did not reach their runs' ends")
	}
	return ids
}

// failoverReader follows one run's events as a client would: it
// reconnects with Last-Event-ID to any instance whenever its connection
// breaks or is dropped, until it reads the run's end; after an error it
// waits as Retry-After says, else twice as long as the last time (50 ms
// to 2 s).
type failoverReader struct {
	id string

	mu     sync.Mutex
	events []sseEvent
	cancel context.CancelFunc // ends the current connection
}

// follow reads the run's stream, from first when not nil, to its end.
func (r *failoverReader) follow(l *failoverLoad, first *http.Response) {
	resp := first
	wait := 50 * time.Millisecond
	for {
		switch {
		case resp == nil:
			wait = min(2*wait, 2*time.Second)
		case resp.StatusCode == http.StatusOK && isStream(resp):
			if r.session(resp) {
				return
			}
			wait = 50 * time.Millisecond
		case resp.StatusCode == http.StatusNoContent: // nothing after the last event: the run ended
			resp.Body.Close()
			r.drop()
			return
		default:
			wait = min(2*wait, 2*time.Second)
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
				wait = time.Duration(secs) * time.Second
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.drop()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(wait):
		}
		resp = r.open(l)
	}
}

// open connects to any instance, from the last event read; nil when no
// answer came.
func (r *failoverReader) open(l *failoverLoad) *http.Response {
	ctx, cancel := context.WithCancel(l.ctx)
	r.mu.Lock()
	r.cancel = cancel
	last := ""
	if n := len(r.events); n > 0 {
		last = r.events[n-1].ID
	}
	r.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.fleet.addr()+"/runs/"+r.id+"/events", nil)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		l.record(routeEvents, 0)
		r.drop()
		return nil
	}
	l.record(routeEvents, resp.StatusCode)
	return resp
}

// session reads the events of one connection's stream; it reports whether
// the run's end was read.
func (r *failoverReader) session(resp *http.Response) bool {
	defer func() {
		resp.Body.Close()
		r.drop()
	}()
	ended := false
	readEventsInto(resp.Body, func(e sseEvent) bool {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		ended = agentd.EventType(e.Event).Terminal()
		return ended
	})
	return ended
}

// drop ends the current connection, if any; it reports whether there was
// one.
func (r *failoverReader) drop() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel == nil {
		return false
	}
	r.cancel()
	r.cancel = nil
	return true
}
