package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestShutdownOrder stops a server process with SIGTERM while one run
// streams its answer to a client and a second run of the same conversation
// waits queued behind it, with its own stream open, and checks the order of
// shutdown step by step:
//
//  1. GET /readyz answers 503 shutting_down while the first run still
//     streams (HTTP and streams are up; load balancers stop sending).
//  2. The first run drains to its end: its remaining events, committed
//     after SIGTERM, still reach its client, and are notified to other
//     instances (a LISTEN of the test's own sees them).
//  3. Only then do the streams close: the queued run's stream ends without
//     a terminal event, after the first run's end was delivered.
//  4. The process exits cleanly, and a new instance finishes the queued
//     run; its client reconnects there with Last-Event-ID and has the whole
//     transcript, with no gap and no duplicate.
func TestShutdownOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_SHUTDOWN_GRACE=30s", "AGENTD_HEARTBEAT=1h"}
	a := startChild(t, env)
	base := "http://" + a.addr

	// The test listens to the channel on which instances tell each other
	// of new events.
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	lctx, stopListen := context.WithCancel(context.Background())
	var notifiedMu sync.Mutex
	notified := map[string]int64{} // run id -> highest seq notified
	listening := make(chan struct{})
	var once sync.Once
	var listenDone sync.WaitGroup
	listenDone.Go(func() {
		_ = store.Listen(lctx, []string{persist.ChannelEvents}, func() { once.Do(func() { close(listening) }) },
			func(_, payload string) {
				id, seqText, _ := strings.Cut(payload, ":")
				seq, _ := strconv.ParseInt(seqText, 10, 64)
				notifiedMu.Lock()
				notified[id] = max(notified[id], seq)
				notifiedMu.Unlock()
			})
	})
	t.Cleanup(func() { stopListen(); listenDone.Wait() })
	<-listening

	// Run 1 answers in 60 chunks 100 ms apart; run 2 waits behind it.
	resp1, id1 := postStream(t, base, `{"stream": true, "input": "/stream 60 100"}`)
	defer resp1.Body.Close()
	var run1 struct {
		ConversationID string `json:"conversation_id"`
	}
	getJSON(t, base+"/runs/"+id1, &run1)
	created, err := http.Post(base+"/runs", "application/json", strings.NewReader(
		`{"conversation_id": "`+run1.ConversationID+`", "if_busy": "enqueue", "input": "/say second"}`))
	if err != nil {
		t.Fatal(err)
	}
	var run2 struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	err = json.NewDecoder(created.Body).Decode(&run2)
	created.Body.Close()
	if err != nil || created.StatusCode != http.StatusAccepted || run2.Status != "queued" {
		t.Fatalf("second run: %d %+v %v", created.StatusCode, run2, err)
	}
	resp2 := getEvents(t, base, run2.ID, "")
	defer resp2.Body.Close()

	// What each stream receives, and when it ends, in the order seen.
	type mark struct {
		stream int
		ev     sseEvent // empty: the stream ended
	}
	marks := make(chan mark, 1000)
	for i, body := range []io.Reader{resp1.Body, resp2.Body} {
		go func() {
			readEventsInto(body, func(e sseEvent) bool { marks <- mark{i + 1, e}; return false })
			marks <- mark{stream: i + 1}
		}()
	}
	var got [3][]sseEvent // by stream
	ended := [3]bool{}
	take := func(until func(mark) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m := <-marks:
				if m.ev.ID == "" {
					ended[m.stream] = true
				} else {
					got[m.stream] = append(got[m.stream], m.ev)
				}
				if until(m) {
					return
				}
			case <-timeout:
				t.Fatalf("shutdown stalled: stream 1 has %d events (ended %v), stream 2 has %d (ended %v)",
					len(got[1]), ended[1], len(got[2]), ended[2])
			}
		}
	}
	isDelta := func(m mark) bool { return m.stream == 1 && m.ev.Event == "message.delta" }
	// Stream 1 is under way; stream 2 has its run.created.
	deltas := 0
	take(func(m mark) bool {
		if isDelta(m) {
			deltas++
		}
		return deltas >= 3 && len(got[2]) >= 1
	})
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// 1. /readyz turns 503 shutting_down while run 1 still streams.
	for {
		r, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("readyz after SIGTERM: %v", err)
		}
		var p struct {
			Code string `json:"code"`
		}
		_ = json.NewDecoder(r.Body).Decode(&p)
		r.Body.Close()
		if r.StatusCode == http.StatusServiceUnavailable {
			if p.Code != "shutting_down" {
				t.Fatalf("readyz while draining: 503 %q, want shutting_down", p.Code)
			}
			break
		}
		if r.StatusCode != http.StatusOK {
			t.Fatalf("readyz after SIGTERM: %d", r.StatusCode)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ended[1] || ended[2] {
		t.Fatalf("a stream ended before /readyz said the instance is shutting down (1: %v, 2: %v)", ended[1], ended[2])
	}
	seenAt503 := len(got[1])

	// 2. Run 1 drains: its later events, up to its end, reach its stream.
	// The two streams are read by two goroutines, so stream 2's end may be
	// read before run 1's last event that was written ahead of it; what
	// must hold is that run 1 had ended when the streams closed.
	take(func(m mark) bool {
		if m.stream == 2 && m.ev.ID == "" {
			if status := dbValue[string](t, dbURL, "SELECT status FROM runs WHERE id = $1", id1); status != "completed" {
				t.Fatalf("the queued run's stream closed while the draining run was %s", status)
			}
		}
		return m.stream == 1 && (m.ev.Event == "run.completed" || m.ev.ID == "")
	})
	last := got[1][len(got[1])-1]
	if last.Event != "run.completed" || len(got[1]) <= seenAt503 {
		t.Fatalf("stream 1 ended with %+v after %d events (%d at the 503), want its run.completed after more events",
			last, len(got[1]), seenAt503)
	}
	lastSeq, _ := strconv.ParseInt(last.ID, 10, 64)

	// 3. Then the streams close: run 2's ends without a terminal event.
	if !ended[2] {
		take(func(m mark) bool { return m.stream == 2 && m.ev.ID == "" })
	}
	for _, e := range got[2] {
		if strings.HasPrefix(e.Event, "run.") && e.Event != "run.created" {
			t.Fatalf("the queued run's stream got %s from the stopping instance", e.Event)
		}
	}

	// 4. The process exits cleanly.
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The drain's commits were notified to other instances (the notifier
	// sends the highest seq of a run, coalesced).
	deadline := time.Now().Add(5 * time.Second)
	for {
		notifiedMu.Lock()
		n := notified[id1]
		notifiedMu.Unlock()
		if n >= lastSeq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run 1's events up to %d committed while draining; notified up to %d only", lastSeq, n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A new instance finishes run 2. Run 1's client had every event; run
	// 2's reconnects with the last id it saw and reads on to the end.
	b := startChild(t, env)
	baseB := "http://" + b.addr
	checkTranscript(t, baseB, id1, got[1])
	resp := getEvents(t, baseB, run2.ID, got[2][len(got[2])-1].ID)
	rest := readEvents(t, resp.Body, func(e sseEvent) bool { return e.Event == "run.completed" })
	resp.Body.Close()
	checkTranscript(t, baseB, run2.ID, append(got[2], rest...))
}

// getJSON decodes the JSON body of GET url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, r.StatusCode)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownOrderDocumented: the order in which the instance's parts
// stop, as docs/design.md ("Graceful shutdown") and the comment on run
// list it, is the code's: the reverse of instance.parts, every optional
// part configured.
func TestShutdownOrderDocumented(t *testing.T) {
	in := &instance{}
	in.cfg.Retention, in.cfg.ReplicaURL = time.Hour, "postgres://replica"
	code := in.parts().Names()
	slices.Reverse(code)
	names := regexp.MustCompile("[a-z_]+")
	for file, list := range map[string]*regexp.Regexp{
		"../../docs/design.md": regexp.MustCompile(`(?s)\n *Stop order: (.*?)\.\n`),
		"run.go":               regexp.MustCompile(`(?s)\n// Stop order: (.*?)\.\n`),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := list.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s has no line %q", file, "Stop order: ...")
			continue
		}
		// The docs' names are in backquotes, each maybe with a condition
		// in parentheses; the comment's are bare.
		text := regexp.MustCompile(`\([^)]*\)|//`).ReplaceAllString(string(m[1]), "")
		var doc []string
		for _, item := range strings.Split(text, ",") {
			if n := names.FindString(item); n != "" {
				doc = append(doc, n)
			}
		}
		if !slices.Equal(doc, code) {
			t.Errorf("%s lists the stop order %v; the code's is %v", file, doc, code)
		}
	}
}

// slowHooks is a webhook endpoint that answers each request after delay,
// counting, by webhook-id, the requests that arrived, those it answered,
// and those whose sender hung up first (cut).
type slowHooks struct {
	delay time.Duration
	mu    sync.Mutex
	seen  map[string]int // arrived
	done  map[string]int // answered 200
	cut   map[string]int // the sender went away first
}

func (h *slowHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("webhook-id")
	h.count(h.seen, id)
	select {
	case <-time.After(h.delay):
		w.WriteHeader(http.StatusOK)
		h.count(h.done, id)
	case <-r.Context().Done():
		h.count(h.cut, id)
	}
}

func (h *slowHooks) count(m map[string]int, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m[id]++
}

// stats returns how many webhook-ids arrived, were answered, and are under
// way (arrived, neither answered nor cut).
func (h *slowHooks) stats() (seen, done, underWay int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, n := range h.seen {
		if n > h.done[id]+h.cut[id] {
			underWay++
		}
	}
	return len(h.seen), len(h.done), underWay
}

// check reports each webhook-id received more than once, or cut.
func (h *slowHooks) check(t *testing.T, when string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, n := range h.seen {
		if n != 1 || h.done[id] != 1 || h.cut[id] != 0 {
			t.Errorf("%s: webhook-id %s arrived %d times, answered %d, cut %d; want each once, answered", when, id, n, h.done[id], h.cut[id])
		}
	}
}

// TestShutdownLeavesNothingRunning stops an instance (run, its context
// cancelled) in the middle of everything it does in the background: event
// streams of runs that are answering, a schedule that fires every second,
// webhook deliveries to an endpoint that takes a second to answer, and
// retention passes every 100 ms. Then every goroutine the instance started
// is gone; every delivery that had reached the endpoint was answered and
// recorded (the deliverer drained it rather than cutting it); and after a
// second instance on the same database took over the handed-back runs and
// the schedule, and stopped in its turn, no webhook-id reached the
// endpoint twice.
func TestShutdownLeavesNothingRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two instances in turn")
	}
	hooks := &slowHooks{delay: time.Second, seen: map[string]int{}, done: map[string]int{}, cut: map[string]int{}}
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()
	hookURL, _ := url.Parse(hookSrv.URL)
	dbURL := persisttest.NewDatabase(t)
	env := map[string]string{"DATABASE_URL": dbURL, "AGENTD_LOG_LEVEL": "warn",
		"AGENTD_SECRET_KEY": newSecretKey(t), "AGENTD_WEBHOOK_ALLOW_HOSTS": hookURL.Host,
		"AGENTD_RETENTION": "1m", "AGENTD_RETENTION_INTERVAL": "100ms", "AGENTD_SCHEDULE_TICK": "100ms",
		"AGENTD_SHUTDOWN_GRACE": "5s", "AGENTD_LEASE_TTL": "2s", "AGENTD_POLL_INTERVAL": "200ms"}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	before := goleak.IgnoreCurrent() // what the test itself runs: the endpoint, the database's helpers
	logs := &logBuffer{}
	base, stopped := serveInProcess(t, env, logs)
	call := func(method, path, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	call("POST", "/webhooks", `{"url": "`+hookSrv.URL+`", "events": ["run.completed", "run.failed"]}`)
	call("POST", "/schedules", `{"name": "tick", "cron": "@every 1s", "overlap": "allow", "catch_up": "one",
		"run": {"input": "/say tick"}}`)

	// Three runs that answer for 20 s, each with its stream open.
	var readers sync.WaitGroup
	var evMu sync.Mutex
	events := 0
	for range 3 {
		resp, err := client.Post(base+"/runs", "application/json", strings.NewReader(`{"stream": true, "input": "/stream 200 100"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		readers.Go(func() {
			readEventsInto(resp.Body, func(sseEvent) bool {
				evMu.Lock()
				events++
				evMu.Unlock()
				return false
			})
		})
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				seen, done, under := hooks.stats()
				t.Fatalf("timed out waiting for %s (webhooks: %d arrived, %d answered, %d under way)\n%s", what, seen, done, under, logs.String())
			}
		}
	}
	// In the middle of it all: deliveries answered and one under way, the
	// streams flowing.
	waitUntil("deliveries, one under way, and the streams flowing", func() bool {
		_, done, under := hooks.stats()
		evMu.Lock()
		defer evMu.Unlock()
		return done >= 2 && under >= 1 && events >= 30
	})
	_, _, underWay := hooks.stats()
	if err := stopped(); err != nil {
		t.Fatal(err)
	}
	stopDone := make(chan struct{})
	go func() { readers.Wait(); close(stopDone) }()
	select {
	case <-stopDone:
	case <-time.After(10 * time.Second):
		t.Fatal("event streams still open after the instance stopped")
	}
	client.CloseIdleConnections()
	goleak.VerifyNone(t, before)

	// The deliveries under way at the stop were drained: answered once,
	// none cut, and recorded as delivered (so that nobody sends them
	// again).
	if underWay == 0 {
		t.Fatal("no delivery was under way at the stop")
	}
	if _, _, under := hooks.stats(); under != 0 {
		t.Fatalf("%d deliveries still under way at the endpoint after the instance stopped", under)
	}
	hooks.check(t, "after the first instance stopped")
	if strings.Contains(logs.String(), `"part":"webhooks"`) {
		t.Errorf("the webhook deliverer did not stop cleanly:\n%s", logs.String())
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	hooks.mu.Lock()
	arrived := make([]string, 0, len(hooks.seen))
	for id := range hooks.seen {
		arrived = append(arrived, id)
	}
	hooks.mu.Unlock()
	var recorded int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE id = ANY($1::uuid[]) AND status = 'delivered'`,
		arrived).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != len(arrived) {
		t.Fatalf("%d of the %d deliveries that reached the endpoint are recorded delivered", recorded, len(arrived))
	}

	// A second instance takes over the handed-back runs and the schedule.
	var openAtStop int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'failed')`).Scan(&openAtStop); err != nil {
		t.Fatal(err)
	}
	seenAt, _, _ := hooks.stats()
	_, stopped2 := serveInProcess(t, env, logs)
	defer stopped2()
	waitUntil("the second instance to end the runs it took over and deliver more", func() bool {
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'failed') AND schedule_id IS NULL`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		seen, _, under := hooks.stats()
		return open == 0 && seen >= seenAt+3 && under >= 1
	})
	if err := stopped2(); err != nil {
		t.Fatal(err)
	}
	hooks.check(t, "after the second instance stopped")
	seen, done, _ := hooks.stats()
	t.Logf("%d runs open at the first stop; %d deliveries, %d answered, each once", openAtStop, seen, done)
}
