package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"

	"github.com/jackc/pgx/v5"
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
