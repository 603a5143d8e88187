package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
)

// The chaos test runs the server as real child processes: this test binary,
// re-executed with AGENTD_CHAOS_CHILD=1, is the server.
func init() {
	if os.Getenv("AGENTD_CHAOS_CHILD") != "1" {
		return
	}
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, nil, os.Getenv, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type child struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

func startChild(t *testing.T, env []string) *child {
	t.Helper()
	return startChildLogged(t, env, nil)
}

// startChildLogged is startChild that also copies the process's log lines
// and its standard error to logs, when not nil.
func startChildLogged(t *testing.T, env []string, logs io.Writer) *child {
	t.Helper()
	skipShort(t, "starts server processes")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "AGENTD_CHAOS_CHILD=1", "AGENTD_ADDR=127.0.0.1:0")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if logs != nil {
		cmd.Stderr = io.MultiWriter(os.Stderr, logs)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if logs != nil {
				_, _ = logs.Write(append(sc.Bytes(), '\n'))
			}
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "agentd serving" {
				addr <- line.Addr
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	select {
	case c.addr = <-addr:
	case <-c.done:
		t.Fatal("server process exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("server process did not start")
	}
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

// TestChaosKill is the chaos harness (`make chaos` runs a long one): three
// server processes on one database, a webhook sink counting executions per
// idempotency key, runs flowing (tool calls, streamed answers, SSE readers
// that reconnect with Last-Event-ID to whichever instance is up), while a
// random instance is killed with SIGKILL (sometimes stopped with SIGTERM)
// and restarted, and optionally PostgreSQL is restarted. Then every run must
// end (completed, or waiting for a decision on a side effect, which the
// harness then gives as a client would), no side effect may have run twice,
// no completed run may have skipped one, and every SSE transcript must equal
// the stored log. A quarter of the runs carry poison: a tool call whose
// arguments hold a \u0000 escape, and a tool whose result holds one, a lone
// surrogate and a number past float64; they are stored cleaned and must end
// like the others. Every stored event is checked against openapi.yaml. It
// logs one summary line of figures.
//
// AGENTD_CHAOS_KILLS (default 12), AGENTD_CHAOS_PG_RESTARTS (default 0: a
// restart disturbs every other test using the same server) and
// AGENTD_CHAOS_PROCS (default 3) set its size.
func TestChaosKill(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test starts server processes")
	}
	kills := envInt("AGENTD_CHAOS_KILLS", 12)
	pgRestarts := envInt("AGENTD_CHAOS_PG_RESTARTS", 0)
	procs := envInt("AGENTD_CHAOS_PROCS", 3)

	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/charge": webhooktest.OK(),
		"/lookup": webhooktest.Delay(50*time.Millisecond, 250*time.Millisecond),
		// Poison: what PostgreSQL cannot store, answered by a tool.
		"/poison": webhooktest.Respond(http.StatusOK, `{"nul":"a\u0000b","surrogate":"\ud800","huge":1e999999}`),
	})
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[
		{"name":"charge","description":"a side effect","parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":10000},
		{"name":"lookup","description":"an idempotent call","parameters":{"type":"object"},"url":%q,"effect":"idempotent","timeout_ms":10000},
		{"name":"poison","description":"answers what cannot be stored","parameters":{"type":"object"},"url":%q,"effect":"idempotent","timeout_ms":10000}]}`,
		sink.URL+"/charge", sink.URL+"/lookup", sink.URL+"/poison")), 0o600)

	// The instances share one fake model, in this process, so that it
	// outlives their kills and can hold compactions long enough for a kill
	// to land in one.
	fake := fakellm.New()
	model := newCompactionStaller(fake, 400*time.Millisecond)
	msrv := httptest.NewServer(model)
	defer msrv.Close()

	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_TOOLS_FILE=" + toolsFile, "AGENTD_LEASE_TTL=1s",
		"OPENAI_API_KEY=chaos", "OPENAI_BASE_URL=" + msrv.URL + "/v1", "AGENTD_MODEL=fake",
		"AGENTD_POLL_INTERVAL=200ms", "AGENTD_LOG_LEVEL=info", "AGENTD_WORKERS=8", "AGENTD_SHUTDOWN_GRACE=300ms",
		"AGENTD_SSE_RETRY=50ms", "AGENTD_HEARTBEAT=1s"}
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	var pmu sync.Mutex
	live := make([]*child, procs)
	for i := range live {
		live[i] = startChild(t, env)
	}
	anyAddr := func() string {
		pmu.Lock()
		defer pmu.Unlock()
		return live[rand.IntN(len(live))].addr
	}

	// Runs flow until the kills are done, each created through a random
	// instance; every third one has an SSE reader.
	ctx, stopFlow := context.WithCancel(context.Background())
	var flow sync.WaitGroup
	var rmu sync.Mutex
	var ids []string
	convs := map[int]string{} // compaction-heavy conversations, by number
	transcripts := map[string]*[]sseEvent{}
	var readers sync.WaitGroup
	readCtx, stopReaders := context.WithCancel(context.Background())
	defer stopReaders()
	flow.Add(1)
	go func() {
		defer flow.Done()
		for n := 0; ctx.Err() == nil; n++ {
			body := `{"input":"/call lookup {}\n/next\n/call charge {}\n/call lookup {\"n\":2}\n/next\n/stream 20 10"}`
			if n%4 == 1 {
				// Poison in the model's output (arguments with a \u0000)
				// and in a tool's result: stored cleaned, the run goes on.
				body = `{"input":"/call poison {\"q\":\"\\u0000\"}\n/next\n/call charge {}\n/next\n/stream 20 10"}`
			}
			conv := -1
			if n%4 == 3 {
				// A long conversation on a small window: each turn adds
				// about 700 tokens to fake-4k's 4,096, so that about every
				// second turn compacts.
				conv = (n / 4) % 3
				rmu.Lock()
				req := map[string]any{"model": "fake-4k", "if_busy": "enqueue",
					"input": fmt.Sprintf("[conv%d] turn %d: %s\n/say noted", conv, n, strings.Repeat("lorem ipsum ", 230))}
				if id := convs[conv]; id != "" {
					req["conversation_id"] = id
				}
				rmu.Unlock()
				b, _ := json.Marshal(req)
				body = string(b)
			}
			resp, err := http.Post("http://"+anyAddr()+"/runs", "application/json", strings.NewReader(body))
			if err != nil { // the instance was just killed: another one takes the next
				continue
			}
			var r struct {
				ID             string `json:"id"`
				ConversationID string `json:"conversation_id"`
			}
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				continue
			}
			rmu.Lock()
			if conv >= 0 && convs[conv] == "" {
				convs[conv] = r.ConversationID
			}
			ids = append(ids, r.ID)
			if n%3 == 0 {
				tr := &[]sseEvent{}
				transcripts[r.ID] = tr
				readers.Add(1)
				go func() {
					defer readers.Done()
					chaosRead(readCtx, anyAddr, r.ID, tr)
				}()
			}
			rmu.Unlock()
			time.Sleep(80 * time.Millisecond) // about 12 runs/s: within what three instances of 8 workers sustain here
		}
	}()

	// Kills, terms and PostgreSQL restarts, at random moments.
	var takeovers, handovers []time.Duration
	var tmu sync.Mutex
	var watchers sync.WaitGroup
	terms := 0
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
		if pgRestarts > 0 && k%max(1, kills/pgRestarts) == 0 {
			out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", pgCluster(), "main", "restart", "-m", "fast").CombinedOutput()
			if err != nil {
				t.Fatalf("restart PostgreSQL: %v %s", err, out)
			}
			pgRestarts--
		}
		// The kills spare the instances executing a run that was taken
		// over chaosStallKills times without a new step: a run that is
		// killed every time it resumes fails no_progress by design (an
		// execution that keeps dying is bounded), and the harness, not
		// the run, would be its cause. (live changes only here.)
		spared := stalledOwners(store, live)
		for end := time.Now().Add(10 * time.Second); len(spared) == len(live) && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			spared = stalledOwners(store, live)
		}
		pmu.Lock()
		i := pickVictim(live, spared)
		// Every third kill is aimed at a compaction, and so is every kill
		// after the first aimed one until one has cut a summary (a kill
		// can miss: the held request may end as the kill lands).
		aimed := k%3 == 2 || (k > 2 && model.cut.Load() == 0)
		var release func()
		if aimed {
			// The fake holds the summary requests that come now until the
			// kill, and the kill goes to the instance whose run sent one.
			// Until one kill has cut a summary, it waits as long as a
			// compaction takes to come.
			conversation := func(tag string) string {
				rmu.Lock()
				defer rmu.Unlock()
				n, _ := strconv.Atoi(strings.Trim(tag, "[conv]"))
				return convs[n]
			}
			wait := 3 * time.Second
			if model.cut.Load() == 0 {
				wait = 60 * time.Second
			}
			release = model.aim()
			if j, ok := model.owner(store, live, conversation, spared, wait); ok {
				i = j
			} else {
				release()
				aimed, release = false, nil
			}
		}
		victim := live[i]
		pmu.Unlock()
		owned := runsOwnedBy(store, victim.cmd.Process.Pid)
		term := !aimed && rand.IntN(5) == 0
		start := time.Now()
		cut := model.cut.Load()
		if term {
			terms++
			victim.cmd.Process.Signal(syscall.SIGTERM)
			<-victim.done
		} else {
			victim.kill(t)
		}
		if release != nil {
			// The held request sees its connection close; then the others
			// go on.
			for end := time.Now().Add(5 * time.Second); model.cut.Load() == cut && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
			release()
		}
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for _, d := range watchTakeover(store, owned, start) {
				tmu.Lock()
				if term {
					handovers = append(handovers, d)
				} else {
					takeovers = append(takeovers, d)
				}
				tmu.Unlock()
			}
		}()
		restarted := startChild(t, env)
		pmu.Lock()
		live[i] = restarted
		pmu.Unlock()
	}
	stopFlow()
	flow.Wait()
	watchers.Wait()

	// Every run ends; a side effect left unknown is resolved as a client
	// would: it happened if the sink saw its key, else it is retried. The
	// condition given to WaitRun sends that decision when it finds the run
	// waiting for one.
	deadline := time.Now().Add(90 * time.Second)
	var completed, resolved int
	for _, id := range ids {
		persisttest.WaitRun(t, store, id, func(r agentd.Run) bool {
			switch r.Status {
			case agentd.StatusCompleted:
				completed++
				return true
			case agentd.StatusRequiresAction:
				var action agentd.RequiredAction
				json.Unmarshal(r.RequiredAction, &action)
				decision := `"decision":"retry"`
				if sink.Keys("/charge")[action.IdempotencyKey] > 0 {
					decision = `"decision":"result","result":{"ok":true}`
				}
				resp, err := http.Post("http://"+anyAddr()+"/runs/"+id+"/actions", "application/json",
					strings.NewReader(fmt.Sprintf(`{"tool_call_id":%q,%s}`, action.ToolCallID, decision)))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						resolved++
					}
				}
			case agentd.StatusQueued, agentd.StatusRunning:
			default:
				t.Fatalf("run %s ended %s/%s: %s", id, r.Status, r.TerminalReason, r.Error)
			}
			return false
		}, time.Until(deadline))
	}
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()
	select {
	case <-readersDone:
	case <-time.After(30 * time.Second):
		t.Fatal("SSE readers did not reach their runs' ends")
	}

	// Checks.
	duplicates, skipped := checkSideEffects(t, store, sink, "/charge", "charge", ids)
	lostEvents := checkTranscripts(t, store, transcripts)
	// Compactions: each is one row with its event, however often the
	// instance writing it died; the conversations never overflowed (their
	// runs completed, above).
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var compactions, dupCompactions, compactedEvents int
	for _, q := range []struct {
		sql string
		n   *int
	}{
		{`SELECT count(*) FROM compactions`, &compactions},
		{`SELECT count(*) FROM (SELECT step_id FROM compactions GROUP BY step_id HAVING count(*) > 1) d`, &dupCompactions},
		{`SELECT count(*) FROM run_events WHERE type = 'context.compacted'`, &compactedEvents},
	} {
		if err := db.QueryRow(context.Background(), q.sql).Scan(q.n); err != nil {
			t.Fatal(err)
		}
	}
	if dupCompactions > 0 || compactedEvents != compactions {
		t.Errorf("%d compactions, %d steps with more than one, %d context.compacted events", compactions, dupCompactions, compactedEvents)
	}
	if compactions == 0 {
		t.Error("no conversation was compacted: the compaction workload did not run")
	}
	ledger, inDoubt := checkLedger(t, db, fake, kills)
	if kills >= 3 && model.cut.Load() == 0 {
		t.Error("no kill landed in a compaction: no summary request came while a kill was aimed at one")
	}
	if sink.Count("/poison") == 0 {
		t.Error("no run called the poison tool: the harness injected no value that cannot be stored")
	}
	t.Logf("chaos: %d runs (%d completed, %d resolved by a client action), %d SIGKILLs, %d SIGTERMs, %d PostgreSQL restarts, "+
		"%d SSE transcripts; %d compactions, %d of %d summary requests cut by a kill; %d duplicate executions, %d skipped side effects, %d lost or differing events; "+
		"%d ledger rows, %d calls the fake completed whose output no commit carried; "+
		"SIGKILL to takeover %s (%d runs); SIGTERM to hand-over %s (%d runs)",
		len(ids), completed, resolved, kills-terms, terms, envInt("AGENTD_CHAOS_PG_RESTARTS", 0), len(transcripts),
		compactions, model.cut.Load(), model.summaries.Load(),
		duplicates, skipped, lostEvents, ledger, inDoubt, p50(takeovers), len(takeovers), p50(handovers), len(handovers))
	if len(takeovers)+len(handovers) == 0 {
		t.Fatal("no kill caught a run in flight: the test proved nothing")
	}
}

// checkLedger checks the cost ledger against the fake model: one row per
// call the fake completed, never more (a call asked again after a kill
// is a call of its own, and a commit made again inserts nothing), and its
// tokens those the fake reported. A call the fake completed in the
// instant between its last byte and the commit of its output, when a kill
// landed there, has no row: its output was never kept, and the step asked
// again; there are at most as many as kills. It returns the ledger's rows
// and those calls.
func checkLedger(t *testing.T, db *pgx.Conn, fake *fakellm.Server, kills int) (rows, inDoubt int64) {
	t.Helper()
	var in, out int64
	if err := db.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(input_tokens), 0)::int8,
		coalesce(sum(output_tokens), 0)::int8 FROM model_calls`).Scan(&rows, &in, &out); err != nil {
		t.Fatal(err)
	}
	var calls, fin, fout int64
	for _, q := range fake.Requests() {
		if q.Completed && q.Status == http.StatusOK {
			calls, fin, fout = calls+1, fin+q.Usage.PromptTokens, fout+q.Usage.CompletionTokens
		}
	}
	inDoubt = calls - rows
	if rows == 0 || inDoubt < 0 || inDoubt > int64(kills) || (inDoubt == 0 && (in != fin || out != fout)) || in > fin || out > fout {
		t.Errorf("ledger: %d rows of %d input and %d output tokens; the fake completed %d calls of %d and %d (at most %d kills between a call and its commit)",
			rows, in, out, calls, fin, fout, kills)
	}
	return rows, inDoubt
}

// chaosRead follows a run's events like an EventSource: it reconnects with
// Last-Event-ID to any instance whenever the connection breaks, until the
// run's terminal event (the harness's runs end completed).
func chaosRead(ctx context.Context, addr func() string, id string, tr *[]sseEvent) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr()+"/runs/"+id+"/events", nil)
		if n := len(*tr); n > 0 {
			req.Header.Set("Last-Event-ID", (*tr)[n-1].ID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return
		}
		done := false
		readEventsInto(resp.Body, func(e sseEvent) bool {
			*tr = append(*tr, e)
			done = e.Event == "run.completed"
			return done
		})
		resp.Body.Close()
		if done {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// compactionStaller is the model of the chaos test: a fake that holds each
// compaction's summary request for a while before answering it (while a
// kill is aimed, until the aim is released), and knows which
// conversations' compactions are being held at this moment.
type compactionStaller struct {
	next           http.Handler
	hold           time.Duration
	mu             sync.Mutex
	held           map[string]int // conversation tag ("[convN]") -> summary requests being held
	aimed          chan struct{}  // while a kill is aimed: closed when it is released
	summaries, cut atomic.Int64
}

// aim holds the summary requests that come from now on until the returned
// release is called (or their instance dies), so that a kill aimed at one
// lands while it is held.
func (m *compactionStaller) aim() (release func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.aimed = ch
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.aimed == ch {
			m.aimed = nil
		}
		m.mu.Unlock()
		close(ch)
	}
}

func newCompactionStaller(next http.Handler, hold time.Duration) *compactionStaller {
	return &compactionStaller{next: next, hold: hold, held: map[string]int{}}
}

var convTag = regexp.MustCompile(`\[conv\d+\]`)

func (m *compactionStaller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte("You compact a conversation")) {
		m.summaries.Add(1)
		tag := string(convTag.Find(body))
		m.mu.Lock()
		m.held[tag]++
		aimed := m.aimed
		m.mu.Unlock()
		hold := time.After(m.hold)
		if aimed != nil {
			hold = time.After(time.Minute) // until the aimed kill is released
		}
		cut := false
		select {
		case <-hold:
		case <-aimed: // nil (never) unless aimed
		case <-r.Context().Done(): // the instance that asked died
			cut = true
		}
		m.mu.Lock()
		if m.held[tag]--; m.held[tag] == 0 {
			delete(m.held, tag)
		}
		m.mu.Unlock()
		if cut {
			m.cut.Add(1)
			return
		}
	}
	m.next.ServeHTTP(w, r)
}

// holding returns the tags of the conversations whose summary requests are
// being held now.
func (m *compactionStaller) holding() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	tags := make([]string, 0, len(m.held))
	for tag := range m.held {
		tags = append(tags, tag)
	}
	return tags
}

// owner waits up to wait for a summary request being held and returns the
// index in live of the instance that runs its conversation's run, unless
// spared says to spare it; conversation maps the request's tag to the
// conversation's id. Only a request held at this moment counts: one
// already answered would point at a run that is past its compaction.
func (m *compactionStaller) owner(store *persist.Store, live []*child, conversation func(tag string) string,
	spared map[int]bool, wait time.Duration) (int, bool) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for _, tag := range m.holding() {
			id := conversation(tag)
			if id == "" {
				continue
			}
			runs, err := store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", ConversationID: id,
				Status: agentd.StatusRunning, Limit: 10})
			if err != nil {
				return 0, false
			}
			for _, r := range runs {
				for i, c := range live {
					if !spared[i] && strings.Contains(r.LeaseOwner, fmt.Sprintf(":%d:", c.cmd.Process.Pid)) {
						return i, true
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, false
}

// chaosStallKills is how many takeovers without a new step a run may have
// had before the harness spares the instance executing it: below the
// engine's limit (run.DefaultMaxStallClaims, 5), with room for takeovers
// no kill caused (a lease that a loaded machine let lapse).
const chaosStallKills = 3

// stalledOwners returns the indexes in live of the instances executing a
// run that was taken over chaosStallKills times or more since its last new
// step.
func stalledOwners(store *persist.Store, live []*child) map[int]bool {
	runs, err := store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", Status: agentd.StatusRunning, Limit: 500})
	if err != nil {
		return nil
	}
	spared := map[int]bool{}
	for _, r := range runs {
		if r.StallClaims < chaosStallKills {
			continue
		}
		for i, c := range live {
			if strings.Contains(r.LeaseOwner, fmt.Sprintf(":%d:", c.cmd.Process.Pid)) {
				spared[i] = true
			}
		}
	}
	return spared
}

// pickVictim returns a random index of live that spared does not spare;
// when it spares all of them, any.
func pickVictim(live []*child, spared map[int]bool) int {
	var can []int
	for i := range live {
		if !spared[i] {
			can = append(can, i)
		}
	}
	if len(can) == 0 {
		return rand.IntN(len(live))
	}
	return can[rand.IntN(len(can))]
}

// runsOwnedBy returns the epochs of the running runs whose lease the process
// pid holds.
func runsOwnedBy(store *persist.Store, pid int) map[string]int64 {
	runs, err := store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", Status: agentd.StatusRunning, Limit: 100})
	if err != nil {
		return nil
	}
	owned := map[string]int64{}
	for _, r := range runs {
		if strings.Contains(r.LeaseOwner, fmt.Sprintf(":%d:", pid)) {
			owned[r.ID] = r.Epoch
		}
	}
	return owned
}

// watchTakeover reports, for each run, how long after start another worker
// claimed it (its epoch moved on).
func watchTakeover(store *persist.Store, owned map[string]int64, start time.Time) []time.Duration {
	var out []time.Duration
	deadline := time.Now().Add(15 * time.Second)
	for len(owned) > 0 && time.Now().Before(deadline) {
		for id, epoch := range owned {
			r, err := store.RunByID(context.Background(), id)
			if err != nil {
				continue
			}
			if r.Epoch > epoch || r.Status.Terminal() {
				if r.Epoch > epoch {
					out = append(out, time.Since(start))
				}
				delete(owned, id)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out
}

func pgCluster() string {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		return "15"
	}
	return entries[len(entries)-1].Name()
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}
