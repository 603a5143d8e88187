package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/webhook"
)

// schedCall sends a JSON request and returns the status and the body.
func schedCall(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// schedView calls a route that answers a schedule, wanting status.
func schedView(t *testing.T, method, url, body string, status int) agentd.ScheduleView {
	t.Helper()
	got, b := schedCall(t, method, url, body)
	if got != status {
		t.Fatalf("%s %s: %d, want %d: %s", method, url, got, status, b)
	}
	var v agentd.ScheduleView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// scheduleRuns reads every run of a schedule over GET
// /schedules/{id}/runs, page by page (the newest slot first).
func scheduleRuns(t *testing.T, base, id string) []agentd.RunView {
	t.Helper()
	var all []agentd.RunView
	url := base + "/schedules/" + id + "/runs?limit=7"
	for {
		status, b := schedCall(t, "GET", url, "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", url, status, b)
		}
		var p agentd.Page[agentd.RunView]
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Data...)
		if !p.HasMore {
			return all
		}
		url = base + "/schedules/" + id + "/runs?limit=7&cursor=" + *p.NextCursor
	}
}

// TestSchedulesOneRunPerSlot: a schedule of @every 1s runs for several
// seconds on three server processes, which are killed (SIGKILL) and
// restarted one at a time, then all at once: every slot has exactly one
// run, the slots follow each other second by second while an instance
// runs, and the slots missed while none ran start one run (catch_up one),
// for the latest of them, once one is back.
func TestSchedulesOneRunPerSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_LOG_LEVEL=info", "AGENTD_SCHEDULE_TICK=100ms",
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=200ms", "AGENTD_SHUTDOWN_GRACE=300ms"}
	live := []*child{startChild(t, env), startChild(t, env), startChild(t, env)}
	base := func(i int) string { return "http://" + live[i].addr }
	sc := schedView(t, "POST", base(0)+"/schedules", `{"name": "tick", "cron": "@every 1s", "overlap": "allow",
		"catch_up": "one", "run": {"input": "/say tick"}}`, http.StatusCreated)
	if sc.ID == "" || sc.NextAt == nil || sc.Paused || sc.Overlap != agentd.OverlapAllow || sc.CatchUp != agentd.CatchUpOne {
		t.Fatalf("created: %+v", sc)
	}
	for _, i := range []int{1, 0, 2} {
		time.Sleep(1200 * time.Millisecond)
		live[i].kill(t)
		live[i] = startChild(t, env)
	}
	waitScheduleRuns(t, base(0), sc.ID, 3) // a loaded machine starts processes slowly: count slots, not seconds
	downFrom := time.Now()
	for _, c := range live {
		c.kill(t)
	}
	time.Sleep(2500 * time.Millisecond)
	live[0] = startChild(t, env)
	upAt := time.Now()
	live[1] = startChild(t, env)
	waitSlotsAfter(t, base(0), sc.ID, upAt, 2)
	paused := schedView(t, "PATCH", base(1)+"/schedules/"+sc.ID, `{"paused": true}`, http.StatusOK)
	if !paused.Paused || paused.NextAt != nil {
		t.Fatalf("paused: %+v", paused)
	}

	runs := scheduleRuns(t, base(0), sc.ID)
	checkSlots(t, dbURL, sc.ID, runs, downFrom, upAt)
	if again := scheduleRuns(t, base(1), sc.ID); len(again) != len(runs) {
		t.Fatalf("a paused schedule went on: %d runs, then %d", len(runs), len(again))
	}
}

// checkSlots checks the runs of schedule id (newest slot first, as the
// API pages them) against the database: one run per slot, each naming its
// schedule and slot; consecutive slots a second apart but across the
// window [downFrom, upAt] in which no instance ran, where the slots missed
// started no run and the latest of them one, once an instance was up.
func checkSlots(t *testing.T, dbURL, id string, runs []agentd.RunView, downFrom, upAt time.Time) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dup int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT scheduled_for FROM runs
		WHERE schedule_id = $1 GROUP BY scheduled_for HAVING count(*) > 1) d`, id).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("slots with more than one run: %d %v", dup, err)
	}
	var stored int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM runs WHERE schedule_id = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != len(runs) || len(runs) < 6 {
		t.Fatalf("%d runs stored, %d listed (want at least 6)", stored, len(runs))
	}
	gaps := 0
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.ScheduleID == nil || *r.ScheduleID != id || r.ScheduledFor == nil || !r.ScheduledFor.Equal(r.ScheduledFor.Truncate(time.Second)) {
			t.Fatalf("run %s names schedule %v slot %v", r.ID, r.ScheduleID, r.ScheduledFor)
		}
		if i == len(runs)-1 {
			continue
		}
		prev := *runs[i+1].ScheduledFor
		switch d := r.ScheduledFor.Sub(prev); {
		case d <= 0:
			t.Fatalf("slots out of order: %v then %v", prev, r.ScheduledFor)
		case d == time.Second:
		default:
			gaps++
			first, last := prev.Add(time.Second), r.ScheduledFor.Add(-time.Second)
			if first.Before(downFrom.Add(-time.Second)) || last.After(upAt.Add(time.Second)) {
				t.Errorf("slots %v to %v started no run, outside the window %v to %v in which no instance ran",
					first, last, downFrom, upAt)
			}
			if r.ScheduledFor.Before(upAt.Add(-2 * time.Second)) {
				t.Errorf("the catch-up slot %v is not the latest missed one (instance up at %v)", r.ScheduledFor, upAt)
			}
		}
	}
	if gaps > 1 {
		t.Errorf("%d gaps between slots, want at most the one while no instance ran", gaps)
	}
	t.Logf("%d slots, one run each, %d gap (no instance from %s to %s); first %s, last %s", len(runs), gaps,
		downFrom.UTC().Format(time.StampMilli), upAt.UTC().Format(time.StampMilli),
		runs[len(runs)-1].ScheduledFor.Format(time.StampMilli), runs[0].ScheduledFor.Format(time.StampMilli))
}

// TestSchedulesOverHTTP: bad bodies are 422 naming their field (the run
// template's under run.), a name is the tenant's once (409); a schedule
// fires, its runs name it and their slot, and pause and resume work; a
// schedule whose runs fail (they time out) pauses itself after
// AGENTD_SCHEDULE_MAX_FAILURES of them in a row, saying why, and counts
// it; resuming it forgets the failures; a deleted schedule is gone.
func TestSchedulesOverHTTP(t *testing.T) {
	t.Parallel()
	hooks := newHookReceiver(t, 0)
	secret := webhook.NewSecret()
	hooks.setSecret(secret)
	hooksURL, _ := url.Parse(hooks.srv.URL)
	base, _ := startServer(t, map[string]string{"AGENTD_SCHEDULE_TICK": "50ms", "AGENTD_SCHEDULE_MAX_FAILURES": "3",
		"AGENTD_SECRET_KEY": newSecretKey(t), "AGENTD_WEBHOOK_ALLOW_HOSTS": hooksURL.Host})
	if status, b := schedCall(t, "POST", base+"/webhooks", `{"url": "`+hooks.srv.URL+`", "events": ["schedule.paused"], "secret": "`+secret+`"}`); status != http.StatusCreated {
		t.Fatalf("POST /webhooks: %d %s", status, b)
	}
	checkScheduleProblems(t, base)

	ok := schedView(t, "POST", base+"/schedules", `{"name": "ok", "cron": "@every 1s", "timezone": "Europe/Paris",
		"run": {"input": "/say ok", "metadata": {"from": "schedule"}}}`, http.StatusCreated)
	if ok.NextAt == nil || ok.Timezone != "Europe/Paris" || ok.Overlap != agentd.OverlapSkip || ok.CatchUp != agentd.CatchUpSkip {
		t.Fatalf("created: %+v", ok)
	}
	if status, b := schedCall(t, "POST", base+"/schedules", `{"name": "ok", "cron": "@every 1s", "run": {"input": "x"}}`); status != http.StatusConflict ||
		!strings.Contains(string(b), "schedule_exists") {
		t.Fatalf("a second schedule named ok: %d %s", status, b)
	}
	runs := waitScheduleRuns(t, base, ok.ID, 1)
	if r := runs[0]; r.ScheduleID == nil || *r.ScheduleID != ok.ID || r.ScheduledFor == nil || string(r.Metadata) != `{"from":"schedule"}` {
		t.Fatalf("the slot's run: %+v", r)
	}
	p := schedView(t, "PATCH", base+"/schedules/"+ok.ID, `{"paused": true}`, http.StatusOK)
	if !p.Paused || p.NextAt != nil || p.PausedReason != nil {
		t.Fatalf("paused: %+v", p)
	}
	n := len(scheduleRuns(t, base, ok.ID))
	time.Sleep(1500 * time.Millisecond)
	if got := len(scheduleRuns(t, base, ok.ID)); got != n {
		t.Fatalf("a paused schedule fired: %d runs, then %d", n, got)
	}
	resumed := schedView(t, "PATCH", base+"/schedules/"+ok.ID, `{"paused": false, "cron": "@every 2s"}`, http.StatusOK)
	if resumed.Paused || resumed.NextAt == nil || !resumed.NextAt.After(time.Now().Add(-time.Second)) || resumed.Cron != "@every 2s" {
		t.Fatalf("resumed: %+v", resumed)
	}
	waitScheduleRuns(t, base, ok.ID, n+1)
	if status, _ := schedCall(t, "DELETE", base+"/schedules/"+ok.ID, ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	if status, b := schedCall(t, "GET", base+"/schedules/"+ok.ID, ""); status != http.StatusNotFound || !strings.Contains(string(b), "schedule_not_found") {
		t.Fatalf("deleted schedule: %d %s", status, b)
	}
	checkAutoPause(t, base, hooks)
}

// checkScheduleProblems: bad bodies of POST /schedules are 422 naming
// their field.
func checkScheduleProblems(t *testing.T, base string) {
	t.Helper()
	for _, c := range []struct{ body, field string }{
		{`{"name": "x", "cron": "@every 0s", "run": {"input": "hi"}}`, "cron"},
		{`{"name": "x", "cron": "@every 500ms", "run": {"input": "hi"}}`, "cron"},
		{`{"name": "x", "cron": "@every 1500ms", "run": {"input": "hi"}}`, "cron"},
		{`{"name": "x", "cron": "61 * * * *", "run": {"input": "hi"}}`, "cron"},
		{`{"name": "x", "run": {"input": "hi"}}`, "cron"},
		{`{"name": "x", "cron": "* * * * *", "timezone": "Mars/Olympus", "run": {"input": "hi"}}`, "timezone"},
		{`{"name": "x", "cron": "* * * * *"}`, "run"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi", "max_steps": -1}}`, "run.max_steps"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi", "bogus": 1}}`, "run.bogus"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi", "tools": ["no_such_tool"]}}`, "run.tools"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi", "stream": true}}`, "run.stream"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi", "webhook": "https://hooks.example/x"}}`, "run.webhook"},
		{`{"name": "x", "cron": "* * * * *", "run": {}}`, "run.input"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi"}, "overlap": "sometimes"}`, "overlap"},
		{`{"name": "x", "cron": "* * * * *", "run": {"input": "hi"}, "catch_up": "all"}`, "catch_up"},
		{`{"name": "no spaces", "cron": "* * * * *", "run": {"input": "hi"}}`, "name"},
	} {
		status, b := schedCall(t, "POST", base+"/schedules", c.body)
		var prob struct {
			Field string `json:"field"`
		}
		_ = json.Unmarshal(b, &prob)
		if status != http.StatusUnprocessableEntity || prob.Field != c.field {
			t.Errorf("%s: %d %s, want 422 naming %s", c.body, status, b, c.field)
		}
	}
}

// checkAutoPause: a schedule whose runs time out pauses itself after 3.
func checkAutoPause(t *testing.T, base string, hooks *hookReceiver) {
	t.Helper()
	failing := schedView(t, "POST", base+"/schedules", `{"name": "failing", "cron": "@every 1s",
		"run": {"input": "/stream 30 100\n/say too slow", "timeouts": {"total_ms": 150}}}`, http.StatusCreated)
	deadline := time.Now().Add(15 * time.Second)
	var v agentd.ScheduleView
	for {
		v = schedView(t, "GET", base+"/schedules/"+failing.ID, "", http.StatusOK)
		if v.Paused || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !v.Paused || v.PausedReason == nil || !strings.HasPrefix(*v.PausedReason, "3 consecutive runs failed; last: ") ||
		v.ConsecutiveFailures < 3 || len(v.LastRuns) < 3 {
		t.Fatalf("not paused after 3 failures: %+v", v)
	}
	for _, o := range v.LastRuns[:3] {
		if o.Status != agentd.StatusTimedOut {
			t.Fatalf("last runs: %+v", v.LastRuns)
		}
	}
	if !strings.Contains(*v.PausedReason, v.LastRuns[0].RunID+" timed_out_total") {
		t.Errorf("the reason %q does not name the last run %s", *v.PausedReason, v.LastRuns[0].RunID)
	}
	for deadline := time.Now().Add(10 * time.Second); len(hooks.ofType("schedule.paused")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no schedule.paused delivery")
		}
	}
	if got := hooks.ofType("schedule.paused"); len(got) != 1 || got[0].Schedule.ID != failing.ID || !got[0].Schedule.Paused ||
		got[0].Schedule.PausedReason == nil || *got[0].Schedule.PausedReason != *v.PausedReason {
		t.Errorf("schedule.paused deliveries: %+v, want one of schedule %s with its reason", got, failing.ID)
	}
	_, metrics := schedCall(t, "GET", base+"/metrics", "")
	if !strings.Contains(string(metrics), "agentd_schedules_paused_total 1") {
		t.Error("agentd_schedules_paused_total does not count the pause")
	}
	r := schedView(t, "PATCH", base+"/schedules/"+failing.ID, `{"paused": false, "run": {"input": "/say fine"}}`, http.StatusOK)
	if r.Paused || r.PausedReason != nil || r.ConsecutiveFailures != 0 || r.NextAt == nil {
		t.Fatalf("resumed: %+v", r)
	}
	if status, b := schedCall(t, "PATCH", base+"/schedules/"+failing.ID, `{"run": {"input": "hi", "timeouts": {"total_ms": -1}}}`); status != http.StatusUnprocessableEntity ||
		!strings.Contains(string(b), `"field":"run.timeouts.total_ms"`) {
		t.Fatalf("a bad template in a PATCH: %d %s", status, b)
	}
}

// waitScheduleRuns waits until schedule id has at least n runs, and
// returns them.
// waitSlotsAfter waits until schedule id has n runs whose slots are after
// at.
func waitSlotsAfter(t *testing.T, base, id string, at time.Time, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		after := 0
		for _, r := range scheduleRuns(t, base, id) {
			if r.ScheduledFor != nil && r.ScheduledFor.After(at) {
				after++
			}
		}
		if after >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %s has %d runs for slots from %v, want %d", id, after, at, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitScheduleRuns(t *testing.T, base, id string, n int) []agentd.RunView {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs := scheduleRuns(t, base, id)
		if len(runs) >= n {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Sprintf("schedule %s has %d runs, want %d", id, len(runs), n))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestScheduleSlotsBesideASlowCompose: tenant slowco declares a remote MCP
// server (a real one, over streamable HTTP) whose handshake takes 6 s, so
// the first run spec made for slowco on an instance waits out the connect
// wait (5 s) for it; tenant steady has an @every 1s schedule. Instance
// api serves the requests (its scheduler ticks once an hour, so it never
// fires); instance sched fires both schedules. While sched composes
// slowco's slot, every slot of steady's schedule starts its run: the
// slots of the 10 s after slowco's schedule was created all have runs,
// but a slot or two for the machine's own hiccups.
func TestScheduleSlotsBesideASlowCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 10 s of slots")
	}
	t.Parallel()
	const handshake = 6 * time.Second
	endpoint, handshakes := slowMCPServer(t, handshake)
	mcpURL, _ := url.Parse(endpoint)
	dbURL := persisttest.NewDatabase(t)
	keys := map[string]string{}
	for _, tenant := range []string{"slowco", "steady"} {
		out, err := keysCmd(t, dbURL, "create", "--tenant", tenant, "--name", "ci", "--scopes", "runs:read,runs:write,agents:write")
		if err != nil {
			t.Fatal(err)
		}
		keys[tenant] = strings.TrimSpace(out)
	}
	env := map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys", "AGENTD_SECRET_KEY": newSecretKey(t),
		"AGENTD_HTTP_ALLOW_HOSTS": mcpURL.Host, "AGENTD_SCHEDULE_TICK": "1h"}
	api, _ := startServer(t, env)
	env["AGENTD_SCHEDULE_TICK"] = "100ms"
	startServer(t, env)
	call := func(tenant, method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, api+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keys[tenant])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	// Declaring the server connects instance api to it (the answer comes
	// after the connect wait); instance sched connects on its first
	// composing of a slowco run.
	if code, b := call("slowco", "POST", "/mcp-servers", `{"name": "slow", "url": "`+endpoint+`", "connect_timeout_ms": 20000}`); code != http.StatusCreated {
		t.Fatalf("declare: %d %s", code, b)
	}
	code, b := call("steady", "POST", "/schedules", `{"name": "beat", "cron": "@every 1s", "overlap": "allow", "run": {"input": "/say beat"}}`)
	if code != http.StatusCreated {
		t.Fatalf("steady's schedule: %d %s", code, b)
	}
	var beat agentd.ScheduleView
	if err := json.Unmarshal(b, &beat); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	if code, b := call("slowco", "POST", "/schedules", `{"name": "report", "cron": "@every 1s", "run": {"input": "/say report"}}`); code != http.StatusCreated {
		t.Fatalf("slowco's schedule: %d %s", code, b)
	}
	to := from.Add(10 * time.Second)
	time.Sleep(time.Until(to) + 1500*time.Millisecond) // the last slot's run committed
	if n := handshakes.Load(); n < 2 {
		t.Fatalf("%d handshakes reached the MCP server, want one of each instance", n)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var started int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM runs
		WHERE schedule_id = $1 AND scheduled_for > $2 AND scheduled_for <= $3`, beat.ID, from, to).Scan(&started); err != nil {
		t.Fatal(err)
	}
	slots := int(to.Truncate(time.Second).Sub(from.Truncate(time.Second)) / time.Second)
	t.Logf("steady's slots from %s to %s: %d started runs of %d", from.UTC().Format(time.StampMilli),
		to.UTC().Format(time.StampMilli), started, slots)
	if started < slots-2 {
		t.Fatalf("steady's schedule started %d runs for its %d slots while slowco's slot was composed", started, slots)
	}
}

// slowMCPServer runs an MCP server (the Go SDK's, with one tool, echo)
// over streamable HTTP, whose every handshake (initialize) is answered
// after delay; it returns its endpoint and the count of handshakes.
func slowMCPServer(t *testing.T, delay time.Duration) (string, *atomic.Int32) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1.0.0"}, nil)
	type echoIn struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echoes its message."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Message}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var handshakes atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte(`"initialize"`)) {
				handshakes.Add(1)
				select {
				case <-time.After(delay):
				case <-r.Context().Done():
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL + "/mcp", &handshakes
}
