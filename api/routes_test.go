package api_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/tenanttools"
)

// walkRoutes lists the router's routes as "METHOD pattern".
func walkRoutes(t *testing.T, h http.Handler) []string {
	t.Helper()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("api.New returned %T, not a chi router", h)
	}
	var out []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestEveryRouteHasAScope: each route of the router has its entry in
// RouteScopes (the guard refuses a route without one), and each entry is a
// route.
func TestEveryRouteHasAScope(t *testing.T) {
	store, _ := persisttest.New(t)
	h := api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(), Registerer: prometheus.NewRegistry()})
	routes := walkRoutes(t, h)
	for _, r := range routes {
		s, ok := api.RouteScopes[r]
		if !ok {
			t.Errorf("route %s has no entry in api.RouteScopes", r)
			continue
		}
		if s != api.Public && !slices.Contains(auth.Scopes(), s) {
			t.Errorf("route %s needs %q, which is no scope", r, s)
		}
	}
	for r := range api.RouteScopes {
		if !slices.Contains(routes, r) {
			t.Errorf("api.RouteScopes names %s, which is no route", r)
		}
	}
	for r := range api.RouteParams {
		if !slices.Contains(routes, r) {
			t.Errorf("api.RouteParams names %s, which is no route", r)
		}
	}
	if len(routes) < 14 {
		t.Fatalf("walked %d routes: %v", len(routes), routes)
	}
}

// tenantFixture is a server with key authentication, its keys, and tenant
// A's objects.
type tenantFixture struct {
	t     *testing.T
	store *persist.Store
	srv   *httptest.Server
	h     http.Handler
	logs  *syncBuffer
	keys  map[string]string // by name: a (A, every scope but admin), b (B, the same), a-read, a-write, a-actions, revoked, admin
	// A's objects
	run, ended, conv string
	endedLast        int64
	spare            string // an empty conversation, for the delete
	artifact         string // of the ended run
	chatRun          string // the cancelled run of A's chat "chat-a"
	sched, doomed    string // schedules: a-sched, and a-doomed-sched for the delete
	hook, doomedHook string // webhooks: one with a delivery, and one for the delete
	delivery         string // of hook
	extraction       string // a memory extraction job of the ended run
	eval, doomedEval string // A's evaluations (no driver runs them: they stay running)
	url              string // the database's
}

// syncBuffer is a log sink that handlers may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const tenantA, tenantB = "acme", "globex"

func newTenantFixture(t *testing.T) *tenantFixture {
	t.Helper()
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	dbURL := persisttest.NewDatabase(t)
	store := persisttest.Open(t, persist.Config{URL: dbURL, Publisher: hub})
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &tenantFixture{t: t, store: store, logs: &syncBuffer{}, keys: map[string]string{}, url: dbURL}
	mk := func(name, tenant string, scopes ...auth.Scope) {
		token, row, err := auth.NewKey(tenant, name, scopes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.KeyInsert(context.Background(), row); err != nil {
			t.Fatal(err)
		}
		f.keys[name] = token
	}
	all := []auth.Scope{auth.RunsRead, auth.RunsWrite, auth.ActionsWrite, auth.AgentsWrite, auth.MemoryRead, auth.MemoryWrite}
	mk("a", tenantA, all...)
	mk("b", tenantB, all...)
	mk("a-read", tenantA, auth.RunsRead)
	mk("a-write", tenantA, auth.RunsWrite)
	mk("a-actions", tenantA, auth.ActionsWrite)
	mk("revoked", tenantA, all...)
	mk("admin", "ops", auth.Admin)
	prefix, _, _ := auth.ParseKey(f.keys["revoked"])
	if _, err := store.KeyRevoke(context.Background(), prefix); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	box, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry(t)
	// Its MCP servers are never reached: a declaration does not wait for them.
	catalog := tenanttools.New(tenanttools.Config{Source: store, Base: reg, Box: box, ConnectWait: time.Millisecond})
	t.Cleanup(func() { _ = catalog.Stop(context.Background()) })
	f.h = api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(), Events: hub,
		Tools: reg, TenantTools: catalog, Webhooks: api.Webhooks{Store: store, Box: box}, Auth: auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: -1}),
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), Registerer: prometheus.NewRegistry(),
		Defaults: api.RunDefaults{Model: "m"}, Models: []agentd.ModelView{{ID: "m", Object: agentd.ObjectModel, Provider: "openai", Upstream: "m",
			ContextWindow: 128000, MaxOutputTokens: 4096, Input: []string{"text"}, Default: true}},
		Memory: memory.New(memory.Config{Store: store})})
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})

	// A's objects: a queued run (and its conversation), and a cancelled run.
	r := want[runBody](t, f.do("a", "POST", "/runs", `{"input": "hello"}`), http.StatusAccepted)
	f.run, f.conv = r.ID, r.ConversationID
	e := want[runBody](t, f.do("a", "POST", "/runs", `{"input": "bye"}`), http.StatusAccepted)
	e = want[runBody](t, f.do("a", "POST", "/runs/"+e.ID+"/cancel", ""), http.StatusOK)
	f.ended, f.endedLast = e.ID, e.LastEventSeq
	f.spare = want[conversationBody](t, f.do("a", "POST", "/conversations", `{"title": "spare"}`), http.StatusCreated).ID
	f.artifact = insertArtifact(t, dbURL, f.ended)
	chat, err := store.ConversationForChat(context.Background(), tenantA, "chat-a", true)
	if err != nil {
		t.Fatal(err)
	}
	c := want[runBody](t, f.do("a", "POST", "/runs", `{"input": "hi", "conversation_id": "`+chat.ID+`"}`), http.StatusAccepted)
	f.chatRun = want[runBody](t, f.do("a", "POST", "/runs/"+c.ID+"/cancel", ""), http.StatusOK).ID
	for _, name := range []string{"a-tool", "a-doomed-tool"} {
		if r := f.do("a", "POST", "/tools", `{"name": "`+name+`", "url": "https://tools.example/x", "effect": "read_only",
			"headers": {"X-Key": "A's secret"}}`); r.status != http.StatusCreated {
			t.Fatalf("A's tool %s: %d %s", name, r.status, r.body)
		}
	}
	for _, name := range []string{"a-mcp", "a-doomed-mcp"} {
		if r := f.do("a", "POST", "/mcp-servers", `{"name": "`+name+`", "url": "https://mcp.example/mcp",
			"headers": {"X-Key": "A's secret"}}`); r.status != http.StatusCreated {
			t.Fatalf("A's MCP server %s: %d %s", name, r.status, r.body)
		}
	}
	for _, name := range []string{"a-agent", "a-doomed"} {
		if r := f.do("a", "POST", "/agents", `{"name": "`+name+`", "instructions": "A's own"}`); r.status != http.StatusCreated {
			t.Fatalf("A's agent %s: %d %s", name, r.status, r.body)
		}
	}
	for _, p := range []*string{&f.hook, &f.doomedHook} {
		*p = want[runBody](t, f.do("a", "POST", "/webhooks", `{"url": "https://hooks.example/a", "events": ["run.completed"]}`),
			http.StatusCreated).ID
	}
	f.delivery = insertDelivery(t, dbURL, f.hook, f.ended)
	insertModelCall(t, dbURL, tenantA, f.ended, "a-secret-model", 0.5, "now()")
	f.extraction = insertExtraction(t, dbURL, tenantA, f.ended)
	f.sched = want[runBody](t, f.do("a", "POST", "/schedules", `{"name": "a-sched", "cron": "0 3 * * *", "paused": true,
		"run": {"input": "A's own"}}`), http.StatusCreated).ID
	f.doomed = want[runBody](t, f.do("a", "POST", "/schedules", `{"name": "a-doomed-sched", "cron": "@every 1h", "paused": true,
		"run": {"input": "A's own"}}`), http.StatusCreated).ID
	for _, name := range []string{"a-set", "a-doomed-set"} {
		if r := f.do("a", "POST", "/datasets", `{"name": "`+name+`", "cases": [{"id": "a-case", "input": "A's secret case"},
			{"id": "a-doomed-case", "input": "A's secret, soon removed"}]}`); r.status != http.StatusCreated {
			t.Fatalf("A's dataset %s: %d %s", name, r.status, r.body)
		}
	}
	for _, p := range []*string{&f.eval, &f.doomedEval} {
		*p = want[runBody](t, f.do("a", "POST", "/evals", `{"agent": "a-agent", "versions": [1], "dataset": "a-set"}`),
			http.StatusCreated).ID
	}
	for _, item := range []string{`{"namespace": ["users", "a1"], "key": "a-fact", "value": "A's secret memory of Lisbon"}`,
		`{"namespace": ["users", "a1"], "key": "a-doomed-fact", "value": "A's secret, soon deleted"}`,
		`{"namespace": ["purge-me", "a1"], "key": "a-purged", "value": "A's secret, soon purged"}`} {
		want[map[string]any](t, f.do("a", "PUT", "/memory/items", item), http.StatusOK)
	}
	return f
}

// insertDelivery gives webhook hook a delivery of run's end.
func insertDelivery(t *testing.T, url, hook, run string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := agentd.NewID()
	if _, err := conn.Exec(ctx, `INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, url, sealed_secret, event_type, run_id,
		seq, payload, status) SELECT $1, tenant_id, id, url, sealed_secret, 'run.cancelled', $3, 3, '{}', 'delivered'
		FROM webhooks WHERE id = $2`, id, hook, run); err != nil {
		t.Fatal(err)
	}
	return id
}

// insertModelCall writes a ledger row of tenant's run, as the engine
// would, of model and cost, made at at (SQL).
func insertModelCall(t *testing.T, url, tenant, run, model string, cost float64, at string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
			input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost, created_at)
		VALUES ($1, $2, (SELECT count(*) + 1 FROM model_calls WHERE run_id = $2), 1, 'step', $3, 'openai',
			100, 40, 10, 20, 5, $4, `+at+`)`, tenant, run, model, cost); err != nil {
		t.Fatal(err)
	}
}

// insertExtraction gives run a memory extraction job, done, and returns
// its id.
func insertExtraction(t *testing.T, url, tenant, run string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := agentd.NewID()
	if _, err := conn.Exec(ctx, `INSERT INTO memory_extractions (id, tenant_id, run_id, namespace, model, status, attempts,
			items, finished_at) VALUES ($1, $2, $3, 'users/a-secret-user', 'small', 'done', 1, 2, now())`,
		id, tenant, run); err != nil {
		t.Fatal(err)
	}
	return id
}

// insertArtifact gives run a step with a call whose result is an
// artifact, as the engine would, and returns the artifact's id.
func insertArtifact(t *testing.T, url, run string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	step, call, id := agentd.NewID(), agentd.NewID(), agentd.NewID()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO steps (id, run_id, seq, status) VALUES ($1, $2, 1, 'completed')`, []any{step, run}},
		{`INSERT INTO tool_calls (id, run_id, step_id, position, call_id, name, arguments, idempotency_key, effect, status)
			VALUES ($1, $2, $3, 0, 'call_1', 'big', '{}', $4, 'read_only', 'succeeded')`, []any{call, run, step, run + ":1:call_1"}},
		{`INSERT INTO artifacts (id, tenant_id, conversation_id, run_id, tool_call_id, media_type, size, sha256, content)
			SELECT $1, tenant_id, conversation_id, id, $3, 'text/plain; charset=utf-8', 5, 'x', 'hello' FROM runs WHERE id = $2`,
			[]any{id, run, call}},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// do sends a request with the key named cred ("" for none, or a raw
// "Bearer ..." value); headers come in name, value pairs.
func (f *tenantFixture) do(cred, method, path, body string, headers ...string) response {
	f.t.Helper()
	switch {
	case strings.HasPrefix(cred, "Bearer ") || strings.HasPrefix(cred, "Basic "):
		headers = append([]string{"Authorization", cred}, headers...)
	case cred != "":
		token, ok := f.keys[cred]
		if !ok {
			f.t.Fatalf("no key %q", cred)
		}
		headers = append([]string{"Authorization", "Bearer " + token}, headers...)
	}
	b := bundle{t: f.t, store: f.store, srv: f.srv}
	return b.do(method, path, body, headers...)
}

// routeCase is how the isolation test calls one route: the request, what
// its owner gets, and what another tenant gets.
type routeCase struct {
	method, path, body string
	headers            []string
	owner              int    // status for tenant A
	again              int    // status for an admin acting for A, after A's call, when not owner
	other              int    // status for tenant B
	otherCode          string // problem code for B, when other is an error
	// otherSees, for a route that answers B (a list), must not find A's
	// objects in B's answer.
	otherSees func(t *testing.T, body []byte)
}

func (f *tenantFixture) cases() map[string]routeCase {
	notIn := func(ids ...string) func(t *testing.T, body []byte) {
		return func(t *testing.T, body []byte) {
			t.Helper()
			for _, id := range ids {
				if bytes.Contains(body, []byte(id)) {
					t.Errorf("tenant B's answer names A's object %s: %s", id, body)
				}
			}
		}
	}
	runPath := "/runs/" + f.run
	last := "1"
	resp := func(id string) string { return "/v1/responses/resp_" + strings.ReplaceAll(id, "-", "") }
	conv := func(id string) string { return "/v1/conversations/conv_" + strings.ReplaceAll(id, "-", "") }
	return map[string]routeCase{
		// The Responses API: A's conversation is busy (its run is queued),
		// B does not see it; B finds none of A's responses.
		"POST /v1/responses": {method: "POST", path: "/v1/responses",
			body:  `{"input": "more", "conversation": "conv_` + strings.ReplaceAll(f.conv, "-", "") + `"}`,
			owner: http.StatusConflict, other: http.StatusNotFound, otherCode: "not_found"},
		// The WebSocket mode: past the guard, a GET without the upgrade
		// is 426 for anyone; the sockets' isolation is v1ws_test.go's.
		"GET /v1/responses": {method: "GET", path: "/v1/responses", owner: http.StatusUpgradeRequired, other: http.StatusUpgradeRequired},
		"GET /v1/responses/{id}": {method: "GET", path: resp(f.ended), owner: http.StatusOK, other: http.StatusNotFound,
			otherCode: "not_found"},
		"GET /v1/responses/{id}/input_items": {method: "GET", path: resp(f.ended) + "/input_items", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "not_found"},
		"POST /v1/responses/{id}/cancel": {method: "POST", path: resp(f.ended) + "/cancel", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "not_found"},
		"DELETE /v1/responses/{id}": {method: "DELETE", path: resp(f.run), owner: http.StatusConflict,
			other: http.StatusNotFound, otherCode: "not_found"},
		// A's response is in progress: not compacted until it ended.
		"POST /v1/responses/compact": {method: "POST", path: "/v1/responses/compact",
			body:  `{"model": "m", "previous_response_id": "` + strings.TrimPrefix(resp(f.run), "/v1/responses/") + `"}`,
			owner: http.StatusBadRequest, other: http.StatusNotFound, otherCode: "not_found"},
		// The server's models are every tenant's.
		"GET /v1/models":      {method: "GET", path: "/v1/models", owner: http.StatusOK, other: http.StatusOK},
		"GET /v1/models/{id}": {method: "GET", path: "/v1/models/m", owner: http.StatusOK, other: http.StatusOK},
		"POST /v1/conversations": {method: "POST", path: "/v1/conversations", body: `{"metadata": {"k": "v"}}`,
			owner: http.StatusOK, other: http.StatusOK},
		"GET /v1/conversations/{id}": {method: "GET", path: conv(f.conv), owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "not_found"},
		"POST /v1/conversations/{id}": {method: "POST", path: conv(f.conv), body: `{"metadata": {"k": "v"}}`,
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "not_found"},
		// A's conversation has a run in progress: it is not deleted.
		"DELETE /v1/conversations/{id}": {method: "DELETE", path: conv(f.conv), owner: http.StatusConflict,
			other: http.StatusNotFound, otherCode: "not_found"},
		"GET /v1/conversations/{id}/items": {method: "GET", path: conv(f.conv) + "/items", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "not_found"},
		"GET /v1/conversations/{id}/items/{item_id}": {method: "GET", path: conv(f.conv) + "/items/msg_" + strings.Repeat("0", 32),
			owner: http.StatusNotFound, other: http.StatusNotFound, otherCode: "not_found"},
		// A's conversation has a run in progress: no item is added or deleted.
		"POST /v1/conversations/{id}/items": {method: "POST", path: conv(f.conv) + "/items",
			body: `{"items": [{"role": "user", "content": "more"}]}`, owner: http.StatusConflict,
			other: http.StatusNotFound, otherCode: "not_found"},
		"DELETE /v1/conversations/{id}/items/{item_id}": {method: "DELETE", path: conv(f.conv) + "/items/msg_" + strings.Repeat("0", 32),
			owner: http.StatusConflict, other: http.StatusNotFound, otherCode: "not_found"},
		"POST /runs": {method: "POST", path: "/runs", body: `{"input": "more", "conversation_id": "` + f.conv + `", "if_busy": "enqueue"}`,
			owner: http.StatusAccepted, other: http.StatusNotFound, otherCode: "conversation_not_found"},
		"GET /runs": {method: "GET", path: "/runs", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn(f.run, f.ended, f.conv)},
		"GET /runs/{id}":       {method: "GET", path: runPath, owner: http.StatusOK, other: http.StatusNotFound, otherCode: "run_not_found"},
		"GET /runs/{id}/steps": {method: "GET", path: runPath + "/steps", owner: http.StatusOK, other: http.StatusNotFound, otherCode: "run_not_found"},
		"GET /runs/{id}/audit": {method: "GET", path: runPath + "/audit", owner: http.StatusOK, other: http.StatusNotFound, otherCode: "run_not_found"},
		"GET /runs/{id}/artifacts/{artifact_id}": {method: "GET", path: "/runs/" + f.ended + "/artifacts/" + f.artifact,
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "artifact_not_found"},
		// A replay from Last-Event-ID of an ended run: it ends by itself.
		"GET /runs/{id}/events": {method: "GET", path: "/runs/" + f.ended + "/events", headers: []string{"Last-Event-ID", last},
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "run_not_found"},
		"POST /runs/{id}/cancel": {method: "POST", path: "/runs/" + f.ended + "/cancel", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "run_not_found"},
		"POST /runs/{id}/resume": {method: "POST", path: runPath + "/resume", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "run_not_found"},
		"POST /runs/{id}/actions": {method: "POST", path: runPath + "/actions",
			body:  `{"tool_call_id": "01a23158-24d0-755c-8953-5268112791c4", "decision": "approve"}`,
			owner: http.StatusConflict, other: http.StatusNotFound, otherCode: "run_not_found"},
		// A's cancelled run never took a step: nothing to fork from.
		"POST /runs/{id}/fork": {method: "POST", path: "/runs/" + f.ended + "/fork", body: `{"at_step": 1}`,
			owner: http.StatusUnprocessableEntity, other: http.StatusNotFound, otherCode: "run_not_found"},
		// A's cancelled run takes no more input: its conversation's door does.
		"POST /runs/{id}/input": {method: "POST", path: "/runs/" + f.ended + "/input", body: `{"input": "and then?"}`,
			owner: http.StatusConflict, other: http.StatusNotFound, otherCode: "run_not_found"},
		"GET /runs/{id}/inputs": {method: "GET", path: "/runs/" + f.ended + "/inputs", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "run_not_found"},
		"POST /conversations/{id}/messages": {method: "POST", path: "/conversations/" + f.conv + "/messages", body: `{"input": "hello"}`,
			owner: http.StatusAccepted, other: http.StatusNotFound, otherCode: "conversation_not_found"},
		"GET /conversations/{id}": {method: "GET", path: "/conversations/" + f.conv, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "conversation_not_found"},
		"GET /conversations/{id}/messages": {method: "GET", path: "/conversations/" + f.conv + "/messages", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "conversation_not_found"},
		// The server's models are every tenant's.
		"GET /models": {method: "GET", path: "/models", owner: http.StatusOK, other: http.StatusOK},
		"GET /tools": {method: "GET", path: "/tools", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("a-tool", "a-doomed-tool")},
		// Tool names are the tenant's own, as agents' are.
		"POST /tools": {method: "POST", path: "/tools", body: `{"name": "a-new-tool", "url": "https://tools.example/y", "effect": "read_only"}`,
			owner: http.StatusCreated, again: http.StatusConflict, other: http.StatusCreated},
		"GET /tools/{name}": {method: "GET", path: "/tools/a-tool", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "tool_not_found"},
		"PUT /tools/{name}": {method: "PUT", path: "/tools/a-tool", body: `{"url": "https://tools.example/z", "effect": "idempotent"}`,
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "tool_not_found"},
		"DELETE /tools/{name}": {method: "DELETE", path: "/tools/a-doomed-tool", owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "tool_not_found"},
		"GET /mcp-servers": {method: "GET", path: "/mcp-servers", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("a-mcp", "a-doomed-mcp")},
		"POST /mcp-servers": {method: "POST", path: "/mcp-servers", body: `{"name": "a-new-mcp", "url": "https://mcp.example/y"}`,
			owner: http.StatusCreated, again: http.StatusConflict, other: http.StatusCreated},
		"GET /mcp-servers/{name}": {method: "GET", path: "/mcp-servers/a-mcp", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "tool_not_found"},
		"PUT /mcp-servers/{name}": {method: "PUT", path: "/mcp-servers/a-mcp", body: `{"url": "https://mcp.example/z"}`,
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "tool_not_found"},
		"DELETE /mcp-servers/{name}": {method: "DELETE", path: "/mcp-servers/a-doomed-mcp", owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "tool_not_found"},
		// A's chat waits for nothing; B has no chat of that id. Chat ids
		// are the tenant's own: the resume of a chat B does not have, and
		// its stop, find nothing (204).
		"POST /ai-sdk/chat": {method: "POST", path: "/ai-sdk/chat", body: `{"id": "chat-a", "messages": [{"id": "m", "role": "assistant",
			"parts": [{"type": "dynamic-tool", "toolCallId": "t", "state": "approval-responded", "approval": {"id": "t", "approved": true}}]}]}`,
			owner: http.StatusConflict, other: http.StatusNotFound, otherCode: "conversation_not_found"},
		"GET /ai-sdk/chat/{id}/stream":    {method: "GET", path: "/ai-sdk/chat/chat-a/stream", owner: http.StatusNoContent, other: http.StatusNoContent},
		"DELETE /ai-sdk/chat/{id}/stream": {method: "DELETE", path: "/ai-sdk/chat/chat-a/stream", owner: http.StatusNoContent, other: http.StatusNoContent},
		"GET /conversations": {method: "GET", path: "/conversations", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn(f.conv, f.spare)},
		"POST /conversations": {method: "POST", path: "/conversations", body: `{"title": "t"}`, owner: http.StatusCreated,
			other: http.StatusCreated},
		"PATCH /conversations/{id}": {method: "PATCH", path: "/conversations/" + f.conv, body: `{"title": "renamed"}`,
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "conversation_not_found"},
		// Agent names are the tenant's own: B makes its own a-new, A's
		// admin finds A's taken by A's call.
		"POST /agents": {method: "POST", path: "/agents", body: `{"name": "a-new"}`, owner: http.StatusCreated,
			again: http.StatusConflict, other: http.StatusCreated},
		"GET /agents": {method: "GET", path: "/agents", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("a-agent", "a-doomed", "A's own")},
		"GET /agents/{name}": {method: "GET", path: "/agents/a-agent", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "agent_not_found"},
		"PUT /agents/{name}": {method: "PUT", path: "/agents/a-agent", body: `{"instructions": "changed"}`, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "agent_not_found"},
		"DELETE /agents/{name}": {method: "DELETE", path: "/agents/a-doomed", owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "agent_not_found"},
		"GET /agents/{name}/versions": {method: "GET", path: "/agents/a-agent/versions", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "agent_not_found"},
		"GET /agents/{name}/versions/{version}": {method: "GET", path: "/agents/a-agent/versions/1", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "agent_not_found"},
		// Schedule names are the tenant's own, as agents' are.
		"POST /webhooks": {method: "POST", path: "/webhooks", body: `{"url": "https://hooks.example/new", "events": ["run.failed"]}`,
			owner: http.StatusCreated, other: http.StatusCreated},
		"GET /webhooks": {method: "GET", path: "/webhooks", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn(f.hook, f.doomedHook)},
		"GET /webhooks/{id}": {method: "GET", path: "/webhooks/" + f.hook, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "webhook_not_found"},
		"PATCH /webhooks/{id}": {method: "PATCH", path: "/webhooks/" + f.hook, body: `{"enabled": true}`, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "webhook_not_found"},
		"DELETE /webhooks/{id}": {method: "DELETE", path: "/webhooks/" + f.doomedHook, owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "webhook_not_found"},
		"GET /webhooks/{id}/deliveries": {method: "GET", path: "/webhooks/" + f.hook + "/deliveries", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "webhook_not_found"},
		"POST /webhooks/{id}/deliveries/{delivery_id}/redeliver": {method: "POST",
			path: "/webhooks/" + f.hook + "/deliveries/" + f.delivery + "/redeliver", owner: http.StatusAccepted,
			other: http.StatusNotFound, otherCode: "webhook_not_found"},
		"GET /runs/{id}/deliveries": {method: "GET", path: "/runs/" + f.ended + "/deliveries", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "run_not_found"},
		"POST /schedules": {method: "POST", path: "/schedules", body: `{"name": "a-new-sched", "cron": "@every 1h", "paused": true,
			"run": {"input": "hi"}}`, owner: http.StatusCreated, again: http.StatusConflict, other: http.StatusCreated},
		"GET /schedules": {method: "GET", path: "/schedules", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn(f.sched, f.doomed, "A's own")},
		"GET /schedules/{id}": {method: "GET", path: "/schedules/" + f.sched, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "schedule_not_found"},
		"PATCH /schedules/{id}": {method: "PATCH", path: "/schedules/" + f.sched, body: `{"paused": true}`, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "schedule_not_found"},
		"DELETE /schedules/{id}": {method: "DELETE", path: "/schedules/" + f.doomed, owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "schedule_not_found"},
		"GET /schedules/{id}/runs": {method: "GET", path: "/schedules/" + f.sched + "/runs", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "schedule_not_found"},
		// The ledger: B's report holds none of A's calls. A budget is
		// the admin's alone: A and B lack the scope (403, not 404), an
		// admin sets any tenant's.
		"GET /usage": {method: "GET", path: "/usage?group_by=model,run", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("a-secret-model", f.ended)},
		"GET /admin/tenants/{tenant}/budget": {method: "GET", path: "/admin/tenants/" + tenantA + "/budget",
			owner: http.StatusForbidden, again: http.StatusOK, other: http.StatusForbidden},
		"PUT /admin/tenants/{tenant}/budget": {method: "PUT", path: "/admin/tenants/" + tenantA + "/budget", body: `{"monthly": 5}`,
			owner: http.StatusForbidden, again: http.StatusOK, other: http.StatusForbidden},
		// The managed instructions are the admin's alone too: an admin
		// reads and sets those of the tenant it acts for.
		"GET /instructions": {method: "GET", path: "/instructions", owner: http.StatusForbidden, again: http.StatusOK,
			other: http.StatusForbidden},
		"PUT /instructions": {method: "PUT", path: "/instructions", body: `{"text": "Be careful."}`,
			owner: http.StatusForbidden, again: http.StatusOK, other: http.StatusForbidden},
		"DELETE /instructions": {method: "DELETE", path: "/instructions", owner: http.StatusForbidden, again: http.StatusNoContent,
			other: http.StatusForbidden},
		// Memory: B never reads, lists, finds, deletes nor purges A's
		// items; its writes and purges are its own.
		"PUT /memory/items": {method: "PUT", path: "/memory/items", body: `{"namespace": ["users", "a1"], "key": "new", "value": "v"}`,
			owner: http.StatusOK, other: http.StatusOK, otherSees: notIn("A's secret")},
		"GET /memory/items": {method: "GET", path: "/memory/items?prefix=users", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("A's secret", "a-fact")},
		"GET /memory/item": {method: "GET", path: "/memory/item?namespace=users/a1&key=a-fact", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "memory_item_not_found"},
		"GET /memory/item/versions": {method: "GET", path: "/memory/item/versions?namespace=users/a1&key=a-fact",
			owner: http.StatusOK, other: http.StatusNotFound, otherCode: "memory_item_not_found"},
		"DELETE /memory/item": {method: "DELETE", path: "/memory/item?namespace=users/a1&key=a-doomed-fact",
			owner: http.StatusOK, again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "memory_item_not_found"},
		"POST /memory/search": {method: "POST", path: "/memory/search", body: `{"query": "secret memory Lisbon"}`,
			owner: http.StatusOK, other: http.StatusOK, otherSees: notIn("A's secret", "a-fact")},
		// B's purge of the prefix purges nothing of A's.
		"DELETE /memory/items": {method: "DELETE", path: "/memory/items?prefix=purge-me&purge=true&confirm=purge-me",
			owner: http.StatusOK, other: http.StatusOK, otherSees: func(t *testing.T, body []byte) {
				if !bytes.Contains(body, []byte(`"items":0,`)) {
					t.Errorf("tenant B's purge removed items: %s", body)
				}
			}},
		// Extractions: B lists none of A's, and gets none by id.
		"GET /memory/extractions": {method: "GET", path: "/memory/extractions", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn(f.extraction, f.ended, "a-secret-user")},
		"GET /memory/extractions/{id}": {method: "GET", path: "/memory/extractions/" + f.extraction, owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "memory_extraction_not_found"},
		// Datasets are the tenant's own, as agents are: B makes its own
		// a-new-set, and finds none of A's.
		"POST /datasets": {method: "POST", path: "/datasets", body: `{"name": "a-new-set"}`, owner: http.StatusCreated,
			again: http.StatusConflict, other: http.StatusCreated},
		"GET /datasets": {method: "GET", path: "/datasets", owner: http.StatusOK, other: http.StatusOK,
			otherSees: notIn("a-set", "a-doomed-set")},
		"GET /datasets/{name}": {method: "GET", path: "/datasets/a-set", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "dataset_not_found"},
		"GET /datasets/{name}/versions/{version}": {method: "GET", path: "/datasets/a-set/versions/1", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "dataset_not_found"},
		"GET /datasets/{name}/cases": {method: "GET", path: "/datasets/a-set/cases", owner: http.StatusOK,
			other: http.StatusNotFound, otherCode: "dataset_not_found"},
		"POST /datasets/{name}/cases": {method: "POST", path: "/datasets/a-set/cases", body: `{"input": "more"}`,
			owner: http.StatusCreated, other: http.StatusNotFound, otherCode: "dataset_not_found"},
		"DELETE /datasets/{name}/cases/{case_id}": {method: "DELETE", path: "/datasets/a-set/cases/a-doomed-case",
			owner: http.StatusOK, again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "dataset_not_found"},
		"DELETE /datasets/{name}": {method: "DELETE", path: "/datasets/a-doomed-set", owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "dataset_not_found"},
		// Evaluations are the tenant's own: B has no agent a-agent to
		// evaluate, and finds none of A's evaluations.
		"POST /evals": {method: "POST", path: "/evals", body: `{"agent": "a-agent", "versions": [1], "dataset": "a-set"}`,
			owner: http.StatusCreated, again: http.StatusCreated, other: http.StatusUnprocessableEntity}, // invalid_field: agent
		"GET /evals": {method: "GET", path: "/evals", owner: http.StatusOK, other: http.StatusOK, otherSees: notIn(f.eval, f.doomedEval)},
		"GET /evals/{id}": {method: "GET", path: "/evals/" + f.eval, owner: http.StatusOK, other: http.StatusNotFound,
			otherCode: "evaluation_not_found"},
		"POST /evals/{id}/cancel": {method: "POST", path: "/evals/" + f.doomedEval + "/cancel", owner: http.StatusOK,
			again: http.StatusConflict, other: http.StatusNotFound, otherCode: "evaluation_not_found"},
		// A's first call deletes it: the admin's for A then finds nothing.
		"DELETE /conversations/{id}": {method: "DELETE", path: "/conversations/" + f.spare, owner: http.StatusNoContent,
			again: http.StatusNotFound, other: http.StatusNotFound, otherCode: "conversation_not_found"},
	}
}

// wrongScope is a key of tenant A that lacks scope s.
func wrongScope(s auth.Scope) string {
	if s == auth.RunsRead {
		return "a-actions"
	}
	return "a-read"
}

// TestTenantIsolationOnEveryRoute: for every route of the router, tenant B
// gets 404 for tenant A's objects (never 403), no credential gets 401 with
// WWW-Authenticate, a revoked or malformed credential 401, a key without
// the route's scope 403, X-Tenant-ID without admin 403, and an admin key
// acting for A (audited) what A gets. A route without a case fails.
func TestTenantIsolationOnEveryRoute(t *testing.T) {
	f := newTenantFixture(t)
	cases := f.cases()
	for _, route := range walkRoutes(t, f.h) {
		need := api.RouteScopes[route]
		if need == api.Public {
			continue
		}
		c, ok := cases[route]
		if !ok {
			t.Errorf("route %s has no case in the isolation test", route)
			continue
		}
		t.Run(strings.ReplaceAll(route, "/", "_"), func(t *testing.T) {
			call := func(cred string, extra ...string) response {
				return f.do(cred, c.method, c.path, c.body, append(slices.Clone(c.headers), extra...)...)
			}
			r := call("")
			wantProblem(t, r, http.StatusUnauthorized, "unauthorized")
			if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer ") {
				t.Errorf("401 without a Bearer challenge: %q", h)
			}
			for _, bad := range []string{"revoked", "Bearer agd_000000000000_" + strings.Repeat("x", 43), "Bearer nonsense", "Basic dXNlcjpwYXNz"} {
				r := call(bad)
				wantProblem(t, r, http.StatusUnauthorized, "invalid_credential")
				if h := r.header.Get("WWW-Authenticate"); !strings.Contains(h, `error="invalid_token"`) {
					t.Errorf("%s: challenge %q", bad, h)
				}
			}
			r = call(wrongScope(need))
			wantProblem(t, r, http.StatusForbidden, "insufficient_scope")
			if h := r.header.Get("WWW-Authenticate"); !strings.Contains(h, `scope="`+string(need)+`"`) {
				t.Errorf("403 challenge %q does not name %s", h, need)
			}
			wantProblem(t, call("b", "X-Tenant-ID", tenantA), http.StatusForbidden, "tenant_not_allowed")

			r = call("b")
			if r.status != c.other {
				t.Fatalf("tenant B: status %d, want %d: %s", r.status, c.other, r.body)
			}
			if c.otherCode != "" {
				wantProblem(t, r, c.other, c.otherCode)
			}
			if c.otherSees != nil {
				c.otherSees(t, r.body)
			}

			if r := call("a"); r.status != c.owner {
				t.Fatalf("tenant A: status %d, want %d: %s", r.status, c.owner, r.body)
			}
			again := cmp.Or(c.again, c.owner)
			if r := call("admin", "X-Tenant-ID", tenantA); r.status != again {
				t.Fatalf("admin acting for A: status %d, want %d: %s", r.status, again, r.body)
			}
			if r := call("admin"); c.otherCode != "" && r.status != http.StatusNotFound {
				t.Fatalf("admin for its own tenant: status %d, want 404: %s", r.status, r.body)
			}
		})
	}
	adminPrefix, _, _ := auth.ParseKey(f.keys["admin"])
	if !strings.Contains(f.logs.String(), `"audit":true`) || !strings.Contains(f.logs.String(), `"actor":"key:`+adminPrefix+`"`) {
		t.Errorf("no audit record of the admin acting for a tenant in the logs:\n%s", f.logs.String())
	}
}

// TestIdempotencyKeysAreTenantScoped: the same Idempotency-Key used by two
// tenants gives each its own answer: B never receives A's stored response.
func TestIdempotencyKeysAreTenantScoped(t *testing.T) {
	f := newTenantFixture(t)
	a := want[runBody](t, f.do("a", "POST", "/runs", `{"input": "x"}`, "Idempotency-Key", "same"), http.StatusAccepted)
	b := want[runBody](t, f.do("b", "POST", "/runs", `{"input": "x"}`, "Idempotency-Key", "same"), http.StatusAccepted)
	if a.ID == b.ID || b.TenantID != tenantB {
		t.Fatalf("tenant B got run %s of %s for A's key (A's run %s)", b.ID, b.TenantID, a.ID)
	}
	want[runBody](t, f.do("a", "POST", "/runs/"+f.run+"/cancel", "", "Idempotency-Key", "c1"), http.StatusOK)
	wantProblem(t, f.do("b", "POST", "/runs/"+f.run+"/cancel", "", "Idempotency-Key", "c1"), http.StatusNotFound, "run_not_found")
	if r := f.do("a", "POST", "/runs/"+f.run+"/cancel", "", "Idempotency-Key", "c1"); r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("A's replay: %d %v %s", r.status, r.header, r.body)
	}
}

// TestActorIsRecorded: who created, cancelled and resumed a run is on the
// run and in its events.
func TestActorIsRecorded(t *testing.T) {
	f := newTenantFixture(t)
	prefixA, _, _ := auth.ParseKey(f.keys["a"])
	prefixW, _, _ := auth.ParseKey(f.keys["a-write"])
	actorA, actorW := "key:"+prefixA, "key:"+prefixW
	r := want[runBody](t, f.do("a", "POST", "/runs", `{"input": "who"}`), http.StatusAccepted)
	r = want[runBody](t, f.do("a-write", "POST", "/runs/"+r.ID+"/cancel", ""), http.StatusOK)
	r = want[runBody](t, f.do("admin", "POST", "/runs/"+r.ID+"/resume", "", "X-Tenant-ID", tenantA), http.StatusOK)
	var got struct {
		CreatedBy   *string `json:"created_by"`
		CancelledBy *string `json:"cancelled_by"`
		ResumedBy   *string `json:"resumed_by"`
	}
	if err := json.Unmarshal(f.do("a-read", "GET", "/runs/"+r.ID, "").body, &got); err != nil {
		t.Fatal(err)
	}
	adminPrefix, _, _ := auth.ParseKey(f.keys["admin"])
	if got.CreatedBy == nil || *got.CreatedBy != actorA || got.ResumedBy == nil || *got.ResumedBy != "key:"+adminPrefix {
		t.Fatalf("run's actors: %+v", got)
	}
	evs, err := f.store.EventsAfter(context.Background(), r.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	spectest.CheckEvents(t, evs)
	actors := map[agentd.EventType]string{}
	for _, e := range evs {
		var env struct {
			Data struct {
				Actor string `json:"actor"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Data, &env); err != nil {
			t.Fatal(err)
		}
		actors[e.Type] = env.Data.Actor
	}
	if actors[agentd.EventRunCreated] != actorA || actors[agentd.EventRunCancelled] != actorW {
		t.Fatalf("events' actors: %v", actors)
	}
}

// TestSpecNamesEachRoutesScope: openapi.yaml gives each operation the
// x-scope of RouteScopes, and public operations no security.
func TestSpecNamesEachRoutesScope(t *testing.T) {
	var spec struct {
		Paths map[string]map[string]struct {
			Scope    string            `json:"x-scope"`
			Security *[]map[string]any `json:"security"`
		} `json:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &spec); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for path, ops := range spec.Paths {
		for method, op := range ops {
			route := strings.ToUpper(method) + " " + path
			want, ok := api.RouteScopes[route]
			if !ok {
				t.Errorf("openapi.yaml has %s, which RouteScopes does not", route)
				continue
			}
			seen++
			if op.Scope != string(want) {
				t.Errorf("%s: x-scope %q, RouteScopes %q", route, op.Scope, want)
			}
			public := op.Security != nil && len(*op.Security) == 0
			if public != (want == api.Public) {
				t.Errorf("%s: public in the spec %v, in RouteScopes %v", route, public, want == api.Public)
			}
		}
	}
	if seen != len(api.RouteScopes) {
		t.Errorf("openapi.yaml has %d of the %d routes of RouteScopes", seen, len(api.RouteScopes))
	}
}
