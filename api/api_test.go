package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/tools"
)

func TestMain(m *testing.M) {
	persisttest.NeedConnections(30) // 26 at once at the most seen on 2 CPUs: a store and a stream hub a test
	goleak.VerifyTestMain(m)
}

// bundle is what a test needs: a store on its own database and a real HTTP
// server in front of it.
type bundle struct {
	t     *testing.T
	store *persist.Store
	srv   *httptest.Server
}

func registry(t *testing.T) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(tools.Calculator(), tools.Clock())
	if err != nil {
		t.Fatalf("tool registry: %v", err)
	}
	return reg
}

// setup starts the API on a fresh database; opts adjust the config.
func setup(t *testing.T, opts ...func(*api.Config)) *bundle {
	t.Helper()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	return setupWith(t, store, store, opts...)
}

// checkEventsAtEnd checks, when t ends, the stored events of every run of
// the tenants the tests use against openapi.yaml. Called right after the
// store is opened, its cleanup runs after the server's and before the
// store's (last-in first-out).
func checkEventsAtEnd(t *testing.T, store *persist.Store) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		for _, tenant := range []string{"default", "acme"} {
			runs, err := store.RunList(ctx, agentd.RunListParams{TenantID: tenant, Limit: 10000})
			if err != nil {
				t.Errorf("list runs to check their events: %v", err)
				return
			}
			for _, r := range runs {
				evs, err := store.EventsAfter(ctx, r.ID, 0, 10000)
				if err != nil {
					t.Errorf("events of run %s: %v", r.ID, err)
					return
				}
				spectest.CheckEvents(t, evs)
			}
		}
	})
}

// setupWith starts the API on s (which may wrap store, to inject faults).
func setupWith(t *testing.T, store *persist.Store, s api.Store, opts ...func(*api.Config)) *bundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := api.Config{
		Store:      s,
		Runs:       run.New(run.Config{Store: store}).Service(), // not started: runs stay queued
		Tools:      registry(t),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg,
		Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Defaults:   api.RunDefaults{Model: "test-model"},
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	return &bundle{t: t, store: store, srv: srv}
}

// startEngine starts an engine of cfg over store, with 2 workers, a 5s
// lease and a 100ms poll unless cfg says, stopped when the test ends.
func startEngine(t *testing.T, store *persist.Store, cfg run.Config) *run.Engine {
	t.Helper()
	cfg.Store = store
	cfg.Workers = cmp.Or(cfg.Workers, 2)
	cfg.LeaseTTL, cfg.PollInterval = cmp.Or(cfg.LeaseTTL, 5*time.Second), cmp.Or(cfg.PollInterval, 100*time.Millisecond)
	e := run.New(cfg)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; headers come in name, value pairs. A body is sent as
// application/json unless a Content-Type is given.
func (b *bundle) do(method, path, body string, headers ...string) response {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	spectest.CheckResponse(b.t, method, path, resp.StatusCode, resp.Header, data)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// want checks the status and decodes the body into a T.
func want[T any](t *testing.T, r response, status int) T {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// problemBody is the client's view of a problem.
type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
	Field     string `json:"field"`
	Tool      string `json:"tool"`
	Limit     string `json:"limit"`
	BusyRunID string `json:"busy_run_id"`
}

// wantProblem checks that r is a problem+json with status and code.
func wantProblem(t *testing.T, r response, status int, code string) problemBody {
	t.Helper()
	if bytes.HasPrefix(r.body, []byte(`{"error":`)) {
		return wantOpenAIError(t, r, status, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; status %d body %s", ct, r.status, r.body)
	}
	p := want[problemBody](t, r, status)
	if p.Code != code || p.Status != status || p.Title == "" || !strings.HasSuffix(p.Type, "/"+code) || p.RequestID == "" {
		t.Fatalf("problem %+v, want status %d code %s", p, status, code)
	}
	return p
}

// wantOpenAIError checks an error of a /v1 route: OpenAI's shape, with the
// status OpenAI's API answers (400 where agentd's own routes answer 422),
// and the code and request id agentd sets.
func wantOpenAIError(t *testing.T, r response, status int, code string) problemBody {
	t.Helper()
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest
	}
	var e struct {
		Error struct {
			Message, Type string
			Param, Code   *string
		}
	}
	if err := json.Unmarshal(r.body, &e); err != nil || r.status != status || e.Error.Code == nil || *e.Error.Code != code ||
		e.Error.Message == "" || e.Error.Type == "" || r.header.Get(api.HeaderRequestID) == "" {
		t.Fatalf("OpenAI error %s (status %d), want status %d code %s", r.body, r.status, status, code)
	}
	return problemBody{Status: r.status, Code: code, Detail: e.Error.Message}
}

type runBody struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	TenantID       string          `json:"tenant_id"`
	ConversationID string          `json:"conversation_id"`
	Status         string          `json:"status"`
	TerminalReason *string         `json:"terminal_reason"`
	Model          string          `json:"model"`
	Instructions   *string         `json:"instructions"`
	Tools          []string        `json:"tools"`
	MaxSteps       int             `json:"max_steps"`
	Timeouts       agentd.Timeouts `json:"timeouts"`
	OnDisconnect   string          `json:"on_disconnect"`
	IfBusy         string          `json:"if_busy"`
	Metadata       json.RawMessage `json:"metadata"`
	Usage          agentd.Usage    `json:"usage"`
	StepCount      int             `json:"step_count"`
	LastEventSeq   int64           `json:"last_event_seq"`
	RequiredAction json.RawMessage `json:"required_action"`
	Error          json.RawMessage `json:"error"`
	CreatedAt      string          `json:"created_at"`
	StartedAt      *string         `json:"started_at"`
	FinishedAt     *string         `json:"finished_at"`
	UpdatedAt      string          `json:"updated_at"`
	DeadlineAt     *string         `json:"deadline_at"`
}

type runList struct {
	Data       []runBody `json:"data"`
	NextCursor *string   `json:"next_cursor"`
	HasMore    bool      `json:"has_more"`
}

type messageBody struct {
	ID             string        `json:"id"`
	Object         string        `json:"object"`
	ConversationID string        `json:"conversation_id"`
	RunID          *string       `json:"run_id"`
	Seq            int           `json:"seq"`
	Role           string        `json:"role"`
	Content        []agentd.Part `json:"content"`
	Status         string        `json:"status"`
	InContext      bool          `json:"in_context"`
}

type messageList struct {
	Data       []messageBody `json:"data"`
	NextCursor *string       `json:"next_cursor"`
	HasMore    bool          `json:"has_more"`
}

// sameJSON reports whether got and want are the same JSON value.
func sameJSON(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("decode %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

// createRun starts a run and returns it.
func (b *bundle) createRun(body string, headers ...string) runBody {
	b.t.Helper()
	return want[runBody](b.t, b.do("POST", "/runs", body, headers...), http.StatusAccepted)
}

// counts returns how many runs a tenant has and how many messages their
// conversations hold.
func (b *bundle) counts(tenant string) (runs, messages int) {
	b.t.Helper()
	ctx := context.Background()
	rs, err := b.store.RunList(ctx, agentd.RunListParams{TenantID: tenant, Limit: 10000})
	if err != nil {
		b.t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.ConversationID] {
			continue
		}
		seen[r.ConversationID] = true
		ms, err := b.store.MessagesList(ctx, r.ConversationID, 0, 10000)
		if err != nil {
			b.t.Fatal(err)
		}
		messages += len(ms)
	}
	return len(rs), messages
}

func TestCreateRunText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("POST", "/runs", `{"input": "What is 2+2?"}`)
	run := want[runBody](t, r, http.StatusAccepted)
	if loc := r.header.Get("Location"); loc != "/runs/"+run.ID {
		t.Fatalf("Location %q, want /runs/%s", loc, run.ID)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a new run must not say it was replayed")
	}
	if run.Object != "run" || run.Status != "queued" || run.TenantID != "default" || run.Model != "test-model" ||
		run.MaxSteps != 16 || run.OnDisconnect != "continue" || run.IfBusy != "reject" || run.Tools != nil ||
		run.TerminalReason != nil || run.Instructions != nil || string(run.Metadata) != "{}" ||
		run.LastEventSeq != 1 || run.StartedAt != nil || run.FinishedAt != nil || run.DeadlineAt != nil ||
		string(run.Error) != "null" || string(run.RequiredAction) != "null" {
		t.Fatalf("new run: %s", r.body)
	}
	if run.Timeouts != (agentd.Timeouts{TotalMS: 600000, StepMS: 120000, IdleMS: 60000, ToolMS: 60000, ActionMS: api.DefaultActionMS}) {
		t.Fatalf("default timeouts: %+v", run.Timeouts)
	}
	// Every key is present, absent values as null.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "object", "tenant_id", "conversation_id", "status", "terminal_reason", "model",
		"instructions", "tools", "max_steps", "timeouts", "on_disconnect", "metadata", "usage", "step_count",
		"last_event_seq", "required_action", "error", "created_at", "started_at", "finished_at", "updated_at", "deadline_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("run JSON lacks %q", k)
		}
	}

	got := want[runBody](t, b.do("GET", "/runs/"+run.ID, ""), http.StatusOK)
	if got.ID != run.ID || got.ConversationID != run.ConversationID || got.Status != "queued" {
		t.Fatalf("get run: %+v", got)
	}

	conv := want[map[string]any](t, b.do("GET", "/conversations/"+run.ConversationID, ""), http.StatusOK)
	if conv["id"] != run.ConversationID || conv["object"] != "conversation" || conv["tenant_id"] != "default" {
		t.Fatalf("conversation: %v", conv)
	}
	msgs := want[messageList](t, b.do("GET", "/conversations/"+run.ConversationID+"/messages", ""), http.StatusOK)
	if len(msgs.Data) != 1 || msgs.NextCursor != nil || msgs.HasMore {
		t.Fatalf("messages: %+v", msgs)
	}
	m := msgs.Data[0]
	if m.Object != "message" || m.Role != "user" || m.Seq != 1 || m.Status != "completed" || m.RunID == nil || *m.RunID != run.ID ||
		len(m.Content) != 1 || m.Content[0] != (agentd.Part{Type: "text", Text: "What is 2+2?"}) {
		t.Fatalf("stored input message: %+v", m)
	}
}

func TestCreateRunFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.createRun(`{
		"input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
		"model": "other-model", "instructions": "Answer in French.", "tools": ["calculator", "calculator"],
		"max_steps": 5, "timeouts": {"step_ms": 1000, "idle_ms": 0}, "on_disconnect": "interrupt",
		"metadata": {"user": "u1", "n": [1, 2]}, "stream": false}`)
	if run.Model != "other-model" || run.Instructions == nil || *run.Instructions != "Answer in French." ||
		len(run.Tools) != 1 || run.Tools[0] != "calculator" || run.MaxSteps != 5 || run.OnDisconnect != "interrupt" ||
		!sameJSON(t, run.Metadata, `{"user": "u1", "n": [1, 2]}`) {
		t.Fatalf("run: %+v metadata %s", run, run.Metadata)
	}
	if run.Timeouts != (agentd.Timeouts{TotalMS: 600000, StepMS: 1000, IdleMS: api.DefaultMaxIdleMS, ToolMS: 60000, ActionMS: api.DefaultActionMS}) { // 0: the ceiling
		t.Fatalf("timeouts: %+v", run.Timeouts)
	}
	msgs := want[messageList](t, b.do("GET", "/conversations/"+run.ConversationID+"/messages", ""), http.StatusOK)
	if len(msgs.Data) != 2 || msgs.Data[0].Role != "system" || msgs.Data[1].Role != "user" || msgs.Data[1].Seq != 2 {
		t.Fatalf("messages: %+v", msgs)
	}
	// Paging by cursor, as runs page.
	page := want[messageList](t, b.do("GET", "/conversations/"+run.ConversationID+"/messages?limit=1", ""), http.StatusOK)
	if len(page.Data) != 1 || page.Data[0].Seq != 1 || page.NextCursor == nil || !page.HasMore {
		t.Fatalf("first page: %+v", page)
	}
	page = want[messageList](t, b.do("GET", "/conversations/"+run.ConversationID+"/messages?limit=1&cursor="+*page.NextCursor, ""), http.StatusOK)
	if len(page.Data) != 1 || page.Data[0].Seq != 2 || page.NextCursor != nil || page.HasMore {
		t.Fatalf("second page: %+v", page)
	}

	none := b.createRun(`{"input": "x", "tools": []}`)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b.do("GET", "/runs/"+none.ID, "").body, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["tools"]) != "[]" {
		t.Fatalf("tools: [] must stay an empty list (no tools), got %s", raw["tools"])
	}
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a1 := b.createRun(`{"input": "a1"}`)
	a2 := b.createRun(`{"input": "a2", "if_busy": "enqueue", "conversation_id": "` + a1.ConversationID + `"}`)
	c1 := b.createRun(`{"input": "c1"}`)
	c2 := b.createRun(`{"input": "c2"}`)
	c3 := b.createRun(`{"input": "c3"}`)
	b.createRun(`{"input": "other tenant"}`, "X-Tenant-ID", "acme")
	want[runBody](t, b.do("POST", "/runs/"+c2.ID+"/cancel", ""), http.StatusOK)

	all := want[runList](t, b.do("GET", "/runs", ""), http.StatusOK)
	ids := func(rs []runBody) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	newestFirst := []string{c3.ID, c2.ID, c1.ID, a2.ID, a1.ID}
	if strings.Join(ids(all.Data), ",") != strings.Join(newestFirst, ",") || all.NextCursor != nil {
		t.Fatalf("list: %v next %v, want %v", ids(all.Data), all.NextCursor, newestFirst)
	}

	conv := want[runList](t, b.do("GET", "/runs?conversation_id="+a1.ConversationID, ""), http.StatusOK)
	if strings.Join(ids(conv.Data), ",") != a2.ID+","+a1.ID {
		t.Fatalf("by conversation: %v", ids(conv.Data))
	}
	cancelled := want[runList](t, b.do("GET", "/runs?status=cancelled", ""), http.StatusOK)
	if len(cancelled.Data) != 1 || cancelled.Data[0].ID != c2.ID {
		t.Fatalf("by status: %v", ids(cancelled.Data))
	}

	// Pages of two, following next_cursor, give every run once, in order.
	var paged []string
	path := "/runs?limit=2"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		page := want[runList](t, b.do("GET", path, ""), http.StatusOK)
		if len(page.Data) > 2 {
			t.Fatalf("page of %d runs with limit 2", len(page.Data))
		}
		paged = append(paged, ids(page.Data)...)
		if page.HasMore != (page.NextCursor != nil) {
			t.Fatalf("has_more %v with next_cursor %v", page.HasMore, page.NextCursor)
		}
		if page.NextCursor == nil {
			break
		}
		path = "/runs?limit=2&cursor=" + *page.NextCursor
	}
	if strings.Join(paged, ",") != strings.Join(newestFirst, ",") {
		t.Fatalf("paged: %v, want %v", paged, newestFirst)
	}

	for _, q := range []struct{ query, field string }{
		{"status=bogus", "status"},
		{"limit=0", "limit"},
		{"limit=101", "limit"},
		{"limit=x", "limit"},
		{"cursor=!!!", "cursor"},
		{"cursor=bm90LWEtdXVpZA", "cursor"},
		{"conversation_id=nope", "conversation_id"},
	} {
		p := wantProblem(t, b.do("GET", "/runs?"+q.query, ""), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != q.field {
			t.Errorf("GET /runs?%s: field %q, want %q", q.query, p.Field, q.field)
		}
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do("POST", "/runs", `{"input": "hello", "max_steps": 3}`, "Idempotency-Key", "k-1")
	run := want[runBody](t, first, http.StatusAccepted)

	// The same request, re-encoded (key order, spacing), is the same request.
	again := b.do("POST", "/runs", `{ "max_steps":3,"input":"hello" }`, "Idempotency-Key", "k-1")
	replay := want[runBody](t, again, http.StatusOK)
	if replay.ID != run.ID || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Location") != "/runs/"+run.ID {
		t.Fatalf("replay: %s headers %v", again.body, again.header)
	}
	runs, msgs := b.counts("default")
	if runs != 1 || msgs != 1 {
		t.Fatalf("after replay: %d runs, %d messages", runs, msgs)
	}

	// Another body under the same key writes nothing.
	p := wantProblem(t, b.do("POST", "/runs", `{"input": "hello", "max_steps": 4}`, "Idempotency-Key", "k-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	_ = p
	if r2, m2 := b.counts("default"); r2 != runs || m2 != msgs {
		t.Fatalf("mismatch wrote: %d runs, %d messages", r2, m2)
	}

	// Keys are per tenant.
	other := b.createRun(`{"input": "hello", "max_steps": 3}`, "Idempotency-Key", "k-1", "X-Tenant-ID", "acme")
	if other.ID == run.ID || other.TenantID != "acme" {
		t.Fatalf("other tenant's run: %+v", other)
	}
}

func TestIdempotentCreateConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	type result struct {
		status int
		id     string
	}
	results := make(chan result, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("POST", b.srv.URL+"/runs", strings.NewReader(`{"input": "once"}`))
			req.Header.Set("Idempotency-Key", "same")
			req.Header.Set("Content-Type", "application/json")
			resp, err := b.srv.Client().Do(req)
			if err != nil {
				results <- result{}
				return
			}
			defer resp.Body.Close()
			var run runBody
			_ = json.NewDecoder(resp.Body).Decode(&run)
			results <- result{resp.StatusCode, run.ID}
		}()
	}
	created := 0
	var id string
	for range n {
		r := <-results
		switch r.status {
		case http.StatusAccepted:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("status %d", r.status)
		}
		if id == "" {
			id = r.id
		}
		if r.id != id {
			t.Fatalf("two runs for one key: %s and %s", id, r.id)
		}
	}
	if created != 1 {
		t.Fatalf("%d requests answered 202, want 1", created)
	}
	if runs, _ := b.counts("default"); runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
}

func TestStepsEmptyAndNested(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.createRun(`{"input": "hi"}`)
	r := b.do("GET", "/runs/"+run.ID+"/steps", "")
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"data":[]}` {
		t.Fatalf("steps of a new run: %d %s", r.status, r.body)
	}

	// Commit a step with a tool call and two attempts, as the engine would.
	ctx := context.Background()
	claimed, err := b.store.RunClaim(ctx, "w1", 60e9)
	if err != nil {
		t.Fatal(err)
	}
	f := persist.Fence{RunID: run.ID, Epoch: claimed.Epoch, Worker: "w1"}
	stepID, callID, a1, a2 := agentd.NewID(), agentd.NewID(), agentd.NewID(), agentd.NewID()
	_, err = b.store.Exec(ctx, f, nil,
		persist.StepInsert{ID: stepID, RunID: run.ID, Seq: 1},
		persist.ToolCallInsert{ID: callID, RunID: run.ID, StepID: stepID, CallID: "call_0", Name: "calculator",
			Arguments: json.RawMessage(`{"expression":"2+2"}`), IdempotencyKey: run.ID + ":1:call_0", Effect: "read_only"},
		persist.AttemptStart{ID: a1, ToolCallID: callID, N: 1, Worker: "w1", Epoch: f.Epoch},
		persist.AttemptFinish{ID: a1, Status: "failed", Error: &agentd.ErrorDetail{Kind: "transient", Message: "boom"}},
		persist.AttemptStart{ID: a2, ToolCallID: callID, N: 2, Worker: "w1", Epoch: f.Epoch},
		persist.AttemptFinish{ID: a2, Status: "succeeded"},
		persist.ToolCallFinish{ID: callID, Status: "succeeded", Result: json.RawMessage(`{"result":4}`)},
		persist.StepUpdate{ID: stepID, Status: "completed", FinishReason: "tool_calls",
			Usage: agentd.Usage{InputTokens: 10, OutputTokens: 3}, Finished: true},
	)
	if err != nil {
		t.Fatalf("commit step: %v", err)
	}
	steps := want[stepsBody](t, b.do("GET", "/runs/"+run.ID+"/steps", ""), http.StatusOK)
	if len(steps.Data) != 1 {
		t.Fatalf("steps: %+v", steps)
	}
	st := steps.Data[0]
	if st.Seq != 1 || st.Status != "completed" || st.FinishReason == nil || *st.FinishReason != "tool_calls" ||
		st.Transition != nil || st.ModelAttempts != 1 || st.Usage.InputTokens != 10 || string(st.Error) != "null" ||
		st.FinishedAt == nil || len(st.ToolCalls) != 1 {
		t.Fatalf("step: %+v", st)
	}
	c := st.ToolCalls[0]
	if c.ID != callID || c.CallID != "call_0" || c.Name != "calculator" || !sameJSON(t, c.Arguments, `{"expression": "2+2"}`) ||
		c.IdempotencyKey != run.ID+":1:call_0" || c.Effect != "read_only" || c.Status != "succeeded" ||
		!sameJSON(t, c.Result, `{"result": 4}`) || string(c.Error) != "null" || c.Attempts != 2 || len(c.AttemptLog) != 2 {
		t.Fatalf("tool call: %+v", c)
	}
	if l := c.AttemptLog; l[0].N != 1 || l[0].Status != "failed" || string(l[0].Error) == "null" || l[0].Worker != "w1" ||
		l[0].Epoch != f.Epoch || l[0].FinishedAt == nil || l[1].N != 2 || l[1].Status != "succeeded" || string(l[1].Error) != "null" {
		t.Fatalf("attempt log: %+v", l)
	}
}

type stepsBody struct {
	Data []struct {
		Seq           int             `json:"seq"`
		Status        string          `json:"status"`
		FinishReason  *string         `json:"finish_reason"`
		Transition    *string         `json:"transition"`
		ModelAttempts int             `json:"model_attempts"`
		Usage         agentd.Usage    `json:"usage"`
		Error         json.RawMessage `json:"error"`
		FinishedAt    *string         `json:"finished_at"`
		ToolCalls     []struct {
			ID             string          `json:"id"`
			CallID         string          `json:"call_id"`
			Name           string          `json:"name"`
			Arguments      json.RawMessage `json:"arguments"`
			IdempotencyKey string          `json:"idempotency_key"`
			Effect         string          `json:"effect"`
			Status         string          `json:"status"`
			Result         json.RawMessage `json:"result"`
			Error          json.RawMessage `json:"error"`
			Attempts       int             `json:"attempts"`
			AttemptLog     []struct {
				N          int             `json:"n"`
				Status     string          `json:"status"`
				Error      json.RawMessage `json:"error"`
				Worker     string          `json:"worker"`
				Epoch      int64           `json:"epoch"`
				StartedAt  string          `json:"started_at"`
				FinishedAt *string         `json:"finished_at"`
			} `json:"attempt_log"`
		} `json:"tool_calls"`
	} `json:"data"`
}

func TestCancelAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.createRun(`{"input": "hi"}`)

	c := want[runBody](t, b.do("POST", "/runs/"+run.ID+"/cancel", ""), http.StatusOK)
	if c.Status != "cancelled" || c.TerminalReason == nil || *c.TerminalReason != "cancelled" || c.FinishedAt == nil {
		t.Fatalf("cancelled run: %+v", c)
	}
	// Cancelling twice is a no-op.
	if c2 := want[runBody](t, b.do("POST", "/runs/"+run.ID+"/cancel", ""), http.StatusOK); c2.Status != "cancelled" {
		t.Fatalf("second cancel: %+v", c2)
	}
	r := want[runBody](t, b.do("POST", "/runs/"+run.ID+"/resume", ""), http.StatusOK)
	if r.Status != "queued" || r.TerminalReason != nil || r.FinishedAt != nil {
		t.Fatalf("resumed run: %+v", r)
	}
	// Resuming a queued run returns it as it is.
	if r2 := want[runBody](t, b.do("POST", "/runs/"+run.ID+"/resume", ""), http.StatusOK); r2.Status != "queued" {
		t.Fatalf("second resume: %+v", r2)
	}

	// End the run as completed, as the engine would.
	ctx := context.Background()
	claimed, err := b.store.RunClaim(ctx, "w1", 60e9)
	if err != nil || claimed.ID != run.ID {
		t.Fatalf("claim: %v", err)
	}
	f := persist.Fence{RunID: run.ID, Epoch: claimed.Epoch, Worker: "w1"}
	if _, err := b.store.Exec(ctx, f, []agentd.EventIn{agentd.RunEndEvent(0, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: run.ID, Status: "completed", Reason: "completed"}); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, b.do("POST", "/runs/"+run.ID+"/cancel", ""), http.StatusConflict, "run_finished")
	wantProblem(t, b.do("POST", "/runs/"+run.ID+"/resume", ""), http.StatusConflict, "run_completed")
	if got := want[runBody](t, b.do("GET", "/runs/"+run.ID, ""), http.StatusOK); got.Status != "completed" {
		t.Fatalf("after refused cancel and resume: %s", got.Status)
	}
}

func TestBusyConversation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.createRun(`{"input": "one"}`)
	runs, msgs := b.counts("default")
	p := wantProblem(t, b.do("POST", "/runs", `{"input": "two", "conversation_id": "`+first.ConversationID+`"}`),
		http.StatusConflict, "conversation_busy")
	if p.BusyRunID != first.ID {
		t.Fatalf("busy_run_id %q, want %s", p.BusyRunID, first.ID)
	}
	if r2, m2 := b.counts("default"); r2 != runs || m2 != msgs {
		t.Fatalf("busy conversation wrote: %d runs, %d messages", r2, m2)
	}
	queued := b.createRun(`{"input": "two", "if_busy": "enqueue", "conversation_id": "` + first.ConversationID + `"}`)
	if queued.ConversationID != first.ConversationID || queued.Status != "queued" || queued.IfBusy != "enqueue" {
		t.Fatalf("enqueued run: %+v", queued)
	}
}

type toolsBody struct {
	Data []struct {
		Name          string          `json:"name"`
		Description   string          `json:"description"`
		Parameters    json.RawMessage `json:"parameters"`
		Effect        string          `json:"effect"`
		TimeoutMS     *int64          `json:"timeout_ms"`
		NeedsApproval *bool           `json:"needs_approval"`
	} `json:"data"`
}

func TestTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("GET", "/tools", "")
	list := want[toolsBody](t, r, http.StatusOK)
	if len(list.Data) != 2 || list.Data[0].Name != "calculator" || list.Data[1].Name != "clock" {
		t.Fatalf("tools: %s", r.body)
	}
	for _, tl := range list.Data {
		var schema map[string]any
		if tl.Description == "" || tl.Effect != "read_only" || tl.NeedsApproval == nil || *tl.NeedsApproval ||
			json.Unmarshal(tl.Parameters, &schema) != nil || schema["type"] != "object" || !strings.Contains(string(r.body), `"timeout_ms":`) {
			t.Fatalf("tool: %+v", tl)
		}
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := b.do("GET", "/livez", ""); r.status != http.StatusOK {
		t.Fatalf("livez: %d", r.status)
	}
	if r := b.do("GET", "/readyz", ""); r.status != http.StatusOK {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	b.do("GET", "/runs", "")
	m := b.do("GET", "/metrics", "")
	if m.status != http.StatusOK || !strings.Contains(string(m.body), `agentd_http_requests_total{method="GET",route="/runs",status="200"} 1`) {
		t.Fatalf("metrics: %d %s", m.status, m.body)
	}
	r := b.do("GET", "/livez", "", "X-Request-ID", "abc-123")
	if r.header.Get("X-Request-ID") != "abc-123" {
		t.Fatalf("request id not echoed: %v", r.header)
	}
	if r := b.do("GET", "/livez", "", "X-Request-ID", "bad id with spaces"); r.header.Get("X-Request-ID") == "" ||
		r.header.Get("X-Request-ID") == "bad id with spaces" {
		t.Fatalf("insane request id kept: %v", r.header)
	}

	down := setup(t, func(c *api.Config) {
		c.ReadyFunc = func(context.Context) error { return context.DeadlineExceeded }
	})
	wantProblem(t, down.do("GET", "/readyz", ""), http.StatusServiceUnavailable, "not_ready")
	if r := down.do("GET", "/livez", ""); r.status != http.StatusOK {
		t.Fatalf("livez while not ready: %d", r.status)
	}
}

// faultyStore breaks some store calls.
type faultyStore struct {
	*persist.Store
	panicOnGet bool
}

func (f faultyStore) RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error) {
	if f.panicOnGet {
		panic("kaboom")
	}
	return agentd.Run{}, errSecret
}

var errSecret = &secretError{}

type secretError struct{}

func (*secretError) Error() string { return "password=hunter2 connection refused" }

func TestInternalErrorsAndPanics(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	for _, panics := range []bool{false, true} {
		b := setupWith(t, store, faultyStore{Store: store, panicOnGet: panics})
		r := b.do("GET", "/runs/"+uuid.NewString(), "")
		wantProblem(t, r, http.StatusInternalServerError, "internal")
		if strings.Contains(string(r.body), "hunter2") || strings.Contains(string(r.body), "kaboom") {
			t.Fatalf("internal detail leaked: %s", r.body)
		}
		if r := b.do("GET", "/runs", ""); r.status != http.StatusOK {
			t.Fatalf("server after internal error: %d", r.status)
		}
	}
}

// fakeEvents is an api.Events that answers with a comment, or with err
// before writing anything, and records what it was asked.
type fakeEvents struct {
	err   error
	write func(w http.ResponseWriter) // nil: a comment line
	mu    sync.Mutex
	calls []eventsCall
}

type eventsCall struct {
	runID, tenant string
	after         int64
}

func (f *fakeEvents) StreamRun(w http.ResponseWriter, r *http.Request, runID string, after int64) (bool, error) {
	f.mu.Lock()
	f.calls = append(f.calls, eventsCall{runID, api.TenantFromContext(r.Context()), after})
	f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if f.write != nil {
		f.write(w)
		return false, nil
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, ": ok\n\n")
	return false, nil
}

// took returns the calls so far, and forgets them.
func (f *fakeEvents) StreamRunAs(w http.ResponseWriter, r *http.Request, runID string, after int64, _ stream.Encoder) (bool, error) {
	return f.StreamRun(w, r, runID, after)
}

// WaitStop waits for nothing: the tests that wait use the real hub.
func (f *fakeEvents) WaitStop(ctx context.Context, runID string, after int64) (bool, error) {
	return false, f.err
}

func (f *fakeEvents) took() []eventsCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func TestEventsAndStreamHooks(t *testing.T) {
	t.Parallel()
	ev := &fakeEvents{}
	b := setup(t, func(c *api.Config) { c.Events = ev })
	r := b.do("POST", "/runs", `{"input": "hi", "stream": true}`)
	calls := ev.took()
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "text/event-stream" || len(calls) != 1 || calls[0].after != 0 {
		t.Fatalf("stream: %d %v %s, calls %+v", r.status, r.header, r.body, calls)
	}
	id := calls[0].runID
	if got := want[runBody](t, b.do("GET", "/runs/"+id, ""), http.StatusOK); got.Status != "queued" {
		t.Fatalf("streamed run not committed: %+v", got)
	}
	// The id is canonical whatever its case in the path, and the position
	// comes from Last-Event-ID, else ?after=.
	for _, c := range []struct {
		path, lastID string
		after        int64
	}{
		{"/runs/" + id + "/events", "", 0},
		{"/runs/" + strings.ToUpper(id) + "/events", "", 0},
		{"/runs/" + id + "/events?after=3", "", 3},
		{"/runs/" + id + "/events?after=3", "5", 5},
	} {
		var r response
		if c.lastID != "" {
			r = b.do("GET", c.path, "", "Last-Event-ID", c.lastID)
		} else {
			r = b.do("GET", c.path, "")
		}
		calls := ev.took()
		if r.status != http.StatusOK || len(calls) != 1 || calls[0] != (eventsCall{id, "default", c.after}) {
			t.Fatalf("GET %s (Last-Event-ID %q): %d %s, calls %+v", c.path, c.lastID, r.status, r.body, calls)
		}
	}
	wantProblem(t, b.do("GET", "/runs/"+id+"/events", "", "X-Tenant-ID", "acme"), http.StatusNotFound, "run_not_found")
	for _, c := range []struct{ query, lastID, field string }{
		{"", "abc", "Last-Event-ID"},
		{"", "-1", "Last-Event-ID"},
		{"?after=x", "", "after"},
		{"?after=-2", "", "after"},
	} {
		path := "/runs/" + id + "/events" + c.query
		var r response
		if c.lastID != "" {
			r = b.do("GET", path, "", "Last-Event-ID", c.lastID)
		} else {
			r = b.do("GET", path, "")
		}
		if p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid_field"); p.Field != c.field {
			t.Errorf("%s Last-Event-ID %q: field %q, want %q", path, c.lastID, p.Field, c.field)
		}
	}
	if calls := ev.took(); len(calls) != 0 {
		t.Fatalf("events called for a refused request: %+v", calls)
	}
}

// TestStreamErrorsAnswerBeforeTheStream: what the stream says before it
// starts becomes the API's answer: 204 for a run with nothing more to send,
// 503 shutting_down from a stopped hub; without a stream, 501.
func TestStreamErrorsAnswerBeforeTheStream(t *testing.T) {
	t.Parallel()
	ended := setup(t, func(c *api.Config) { c.Events = &fakeEvents{err: stream.ErrEnded} })
	id := ended.createRun(`{"input": "hi"}`).ID
	if r := ended.do("GET", "/runs/"+id+"/events", "", "Last-Event-ID", "7"); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("ended run: %d %q", r.status, r.body)
	}
	stopped := setup(t, func(c *api.Config) { c.Events = &fakeEvents{err: stream.ErrStopped} })
	id = stopped.createRun(`{"input": "hi"}`).ID
	wantProblem(t, stopped.do("GET", "/runs/"+id+"/events", ""), http.StatusServiceUnavailable, "shutting_down")
	none := setup(t)
	id = none.createRun(`{"input": "hi"}`).ID
	wantProblem(t, none.do("GET", "/runs/"+id+"/events", ""), http.StatusNotImplemented, "streaming_unavailable")
	wantProblem(t, none.do("POST", "/runs", `{"input": "hi", "stream": true}`), http.StatusNotImplemented, "streaming_unavailable")
}

// countingStore counts the reads of single runs.
type countingStore struct {
	*persist.Store
	gets atomic.Int64
}

func (c *countingStore) RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error) {
	c.gets.Add(1)
	return c.Store.RunGet(ctx, tenantID, id)
}

// TestEventsCheckARunOnce: the event streams of a run this instance created
// or already found do not read the run again; another tenant's request, or
// an unknown run, is read (and refused) each time.
func TestEventsCheckARunOnce(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	counting := &countingStore{Store: store}
	b := setupWith(t, store, counting, func(c *api.Config) { c.Events = &fakeEvents{} })
	created := b.createRun(`{"input": "hi"}`).ID
	foreign, _, err := store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "acme", Model: "m",
		Params: agentd.RunParams{MaxSteps: 1, IfBusy: "reject"}, Input: []agentd.InputMessage{{Role: "user", Content: "theirs"}}})
	if err != nil {
		t.Fatal(err)
	}
	counting.gets.Store(0)
	for range 3 {
		if r := b.do("GET", "/runs/"+created+"/events", ""); r.status != http.StatusOK {
			t.Fatalf("events of a created run: %d %s", r.status, r.body)
		}
	}
	if n := counting.gets.Load(); n != 0 {
		t.Fatalf("events of a run created here read it %d times, want 0", n)
	}
	for range 3 {
		if r := b.do("GET", "/runs/"+foreign.ID+"/events", "", "X-Tenant-ID", "acme"); r.status != http.StatusOK {
			t.Fatalf("events of a run created elsewhere: %d %s", r.status, r.body)
		}
	}
	if n := counting.gets.Load(); n != 1 {
		t.Fatalf("events of a run created elsewhere read it %d times, want 1", n)
	}
	for range 2 {
		wantProblem(t, b.do("GET", "/runs/"+foreign.ID+"/events", ""), http.StatusNotFound, "run_not_found")
		wantProblem(t, b.do("GET", "/runs/"+uuid.NewString()+"/events", ""), http.StatusNotFound, "run_not_found")
	}
	if n := counting.gets.Load(); n != 5 {
		t.Fatalf("refused requests read the run %d times in all, want 5 (1 + 4)", n)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	existing := b.createRun(`{"input": "hi"}`)
	foreign := b.createRun(`{"input": "theirs"}`, "X-Tenant-ID", "acme")
	big := `{"input": "` + strings.Repeat("x", 1<<20) + `"}`
	bigMeta := `{"input": "x", "metadata": {"k": "` + strings.Repeat("x", 17<<10) + `"}}`

	cases := []struct {
		name         string
		method, path string
		body         string
		headers      []string
		status       int
		code, field  string
	}{
		{"malformed json", "POST", "/runs", `{"input":`, nil, 400, "invalid_json", ""},
		{"syntax error", "POST", "/runs", `{"input" "x"}`, nil, 400, "invalid_json", ""},
		{"two values", "POST", "/runs", `{"input": "x"} {}`, nil, 400, "invalid_json", ""},
		{"not an object", "POST", "/runs", `["x"]`, nil, 400, "invalid_json", ""},
		{"empty body", "POST", "/runs", ``, nil, 400, "invalid_json", ""},
		{"unknown field", "POST", "/runs", `{"input": "x", "temperature": 1}`, nil, 422, "invalid_field", "temperature"},
		{"unknown timeouts field", "POST", "/runs", `{"input": "x", "timeouts": {"foo_ms": 1}}`, nil, 422, "invalid_field", "foo_ms"},
		{"unknown tool", "POST", "/runs", `{"input": "x", "tools": ["calculator", "rm_rf"]}`, nil, 422, "unknown_tool", "tools"},
		{"oversize body", "POST", "/runs", big, nil, 413, "body_too_large", ""},
		{"max_steps 0", "POST", "/runs", `{"input": "x", "max_steps": 0}`, nil, 422, "invalid_field", "max_steps"},
		{"max_steps 101", "POST", "/runs", `{"input": "x", "max_steps": 101}`, nil, 422, "invalid_field", "max_steps"},
		{"max_steps string", "POST", "/runs", `{"input": "x", "max_steps": "x"}`, nil, 422, "invalid_field", "max_steps"},
		{"max_steps fraction", "POST", "/runs", `{"input": "x", "max_steps": 1.5}`, nil, 422, "invalid_field", "max_steps"},
		{"bad role", "POST", "/runs", `{"input": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}`, nil, 422, "invalid_field", "input[1].role"},
		{"message without content", "POST", "/runs", `{"input": [{"role": "user"}]}`, nil, 422, "invalid_field", "input[0].content"},
		{"message extra field", "POST", "/runs", `{"input": [{"role": "user", "content": "a", "name": "x"}]}`, nil, 422, "invalid_field", "input[0].name"},
		{"message not object", "POST", "/runs", `{"input": ["hi"]}`, nil, 422, "invalid_field", "input[0]"},
		{"missing input", "POST", "/runs", `{"model": "m"}`, nil, 422, "invalid_field", "input"},
		{"empty input", "POST", "/runs", `{"input": "  "}`, nil, 422, "invalid_field", "input"},
		{"empty input array", "POST", "/runs", `{"input": []}`, nil, 422, "invalid_field", "input"},
		{"input number", "POST", "/runs", `{"input": 3}`, nil, 422, "invalid_field", "input"},
		{"empty model", "POST", "/runs", `{"input": "x", "model": ""}`, nil, 422, "invalid_field", "model"},
		{"negative timeout", "POST", "/runs", `{"input": "x", "timeouts": {"step_ms": -1}}`, nil, 422, "invalid_field", "timeouts.step_ms"},
		{"timeout over a day", "POST", "/runs", `{"input": "x", "timeouts": {"total_ms": 86400001}}`, nil, 422, "invalid_field", "timeouts.total_ms"},
		{"bad on_disconnect", "POST", "/runs", `{"input": "x", "on_disconnect": "panic"}`, nil, 422, "invalid_field", "on_disconnect"},
		{"bad if_busy", "POST", "/runs", `{"input": "x", "if_busy": "wait"}`, nil, 422, "invalid_field", "if_busy"},
		{"metadata not object", "POST", "/runs", `{"input": "x", "metadata": [1]}`, nil, 422, "invalid_field", "metadata"},
		{"metadata too big", "POST", "/runs", bigMeta, nil, 422, "invalid_field", "metadata"},
		{"stream type", "POST", "/runs", `{"input": "x", "stream": "yes"}`, nil, 422, "invalid_field", "stream"},
		{"conversation not uuid", "POST", "/runs", `{"input": "x", "conversation_id": "c1"}`, nil, 422, "invalid_field", "conversation_id"},
		{"unknown conversation", "POST", "/runs", `{"input": "x", "conversation_id": "` + uuid.NewString() + `"}`, nil, 404, "conversation_not_found", ""},
		{"other tenant's conversation", "POST", "/runs", `{"input": "x", "conversation_id": "` + foreign.ConversationID + `"}`, nil, 404, "conversation_not_found", ""},
		{"text body", "POST", "/runs", `{"input": "x"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", ""},
		{"stream unavailable", "POST", "/runs", `{"input": "x", "stream": true}`, nil, 501, "streaming_unavailable", ""},
		{"bad tenant", "POST", "/runs", `{"input": "x"}`, []string{"X-Tenant-ID", "a b"}, 422, "invalid_field", "X-Tenant-ID"},
		{"long tenant", "GET", "/runs", ``, []string{"X-Tenant-ID", strings.Repeat("t", 65)}, 422, "invalid_field", "X-Tenant-ID"},
		{"bad idempotency key", "POST", "/runs", `{"input": "x"}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 422, "invalid_field", "Idempotency-Key"},
		{"unknown run", "GET", "/runs/" + uuid.NewString(), ``, nil, 404, "run_not_found", ""},
		{"run id not uuid", "GET", "/runs/not-a-uuid", ``, nil, 404, "run_not_found", ""},
		{"other tenant's run", "GET", "/runs/" + existing.ID, ``, []string{"X-Tenant-ID", "acme"}, 404, "run_not_found", ""},
		{"other tenant's steps", "GET", "/runs/" + existing.ID + "/steps", ``, []string{"X-Tenant-ID", "acme"}, 404, "run_not_found", ""},
		{"other tenant's cancel", "POST", "/runs/" + existing.ID + "/cancel", ``, []string{"X-Tenant-ID", "acme"}, 404, "run_not_found", ""},
		{"other tenant's resume", "POST", "/runs/" + existing.ID + "/resume", ``, []string{"X-Tenant-ID", "acme"}, 404, "run_not_found", ""},
		{"cancel unknown run", "POST", "/runs/" + uuid.NewString() + "/cancel", ``, nil, 404, "run_not_found", ""},
		{"resume non-uuid run", "POST", "/runs/x/resume", ``, nil, 404, "run_not_found", ""},
		{"unknown conversation get", "GET", "/conversations/" + uuid.NewString(), ``, nil, 404, "conversation_not_found", ""},
		{"conversation id not uuid", "GET", "/conversations/nope/messages", ``, nil, 404, "conversation_not_found", ""},
		{"other tenant's conversation get", "GET", "/conversations/" + existing.ConversationID, ``, []string{"X-Tenant-ID", "acme"}, 404, "conversation_not_found", ""},
		{"other tenant's messages", "GET", "/conversations/" + existing.ConversationID + "/messages", ``, []string{"X-Tenant-ID", "acme"}, 404, "conversation_not_found", ""},
		{"bad messages limit", "GET", "/conversations/" + existing.ConversationID + "/messages?limit=0", ``, nil, 422, "invalid_field", "limit"},
		{"bad messages cursor", "GET", "/conversations/" + existing.ConversationID + "/messages?cursor=xyz", ``, nil, 422, "invalid_field", "cursor"},
		{"a runs cursor for messages", "GET", "/conversations/" + existing.ConversationID + "/messages?cursor=cnVuczowMWEy", ``, nil, 422, "invalid_field", "cursor"},
		{"after on messages", "GET", "/conversations/" + existing.ConversationID + "/messages?after=1", ``, nil, 400, "unknown_parameter", "after"},
		{"after on runs", "GET", "/runs?limit=2&after=x", ``, nil, 400, "unknown_parameter", "after"},
		{"a parameter of no route", "POST", "/runs/" + existing.ID + "/cancel?force=1", ``, nil, 400, "unknown_parameter", "force"},
		{"no route", "GET", "/nope", ``, nil, 404, "not_found", ""},
		{"events without a stream", "GET", "/runs/" + existing.ID + "/events", ``, nil, 501, "streaming_unavailable", ""},
		{"wrong method", "DELETE", "/runs", ``, nil, 405, "method_not_allowed", ""},
	}
	tenants := []string{"default", "acme"}
	before := map[string][2]int{}
	for _, tn := range tenants {
		r, m := b.counts(tn)
		before[tn] = [2]int{r, m}
	}
	for _, c := range cases {
		r := b.do(c.method, c.path, c.body, c.headers...)
		p := wantProblem(t, r, c.status, c.code)
		if p.Field != c.field {
			t.Errorf("%s: field %q, want %q (detail %q)", c.name, p.Field, c.field, p.Detail)
		}
		if c.code == "invalid_field" && !strings.Contains(p.Detail, c.field) {
			t.Errorf("%s: detail %q does not name %q", c.name, p.Detail, c.field)
		}
		if c.code == "unknown_tool" && (p.Tool != "rm_rf" || !strings.Contains(p.Detail, "rm_rf")) {
			t.Errorf("%s: problem does not name the tool: %+v", c.name, p)
		}
		if c.status == 405 && r.header.Get("Allow") != "GET, POST" {
			t.Errorf("%s: Allow %q", c.name, r.header.Get("Allow"))
		}
		for _, tn := range tenants {
			if rn, m := b.counts(tn); rn != before[tn][0] || m != before[tn][1] {
				t.Fatalf("%s wrote: tenant %s has %d runs, %d messages, had %v", c.name, tn, rn, m, before[tn])
			}
		}
		if got := b.do("GET", "/runs/"+existing.ID, ""); got.status != http.StatusOK {
			t.Fatalf("after %s: GET run answered %d", c.name, got.status)
		}
	}
}

func TestPanicMidStreamAborts(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) {
		c.Events = &fakeEvents{write: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: 1\n")
			_ = http.NewResponseController(w).Flush()
			panic("mid-stream")
		}}
	})
	run := b.createRun(`{"input": "hi"}`)
	resp, err := b.srv.Client().Get(b.srv.URL + "/runs/" + run.ID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a stream broken by a panic ended cleanly")
	}
	if r := b.do("GET", "/runs/"+run.ID, ""); r.status != http.StatusOK {
		t.Fatalf("after a panic: %d", r.status)
	}
}

func TestNewTwiceWithDefaultRegistry(t *testing.T) {
	t.Parallel()
	for range 2 {
		_ = api.New(api.Config{Store: &persist.Store{}, Runs: &run.Service{}}) // must not panic on the second registration
	}
}
