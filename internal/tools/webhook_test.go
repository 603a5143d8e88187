package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

func webhookTool(t *testing.T, url string, extra string) Tool {
	t.Helper()
	data := `{"tools":[{"name":"send","description":"d","url":"` + url + `","effect":"side_effect",` +
		`"parameters":{"type":"object","properties":{"to":{"type":"string"}}},"headers":{"Authorization":"Bearer x"}` + extra + `}]}`
	tools, err := ParseWebhooks([]byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tools[0]
}

var testCall = Call{RunID: "r1", CallID: "c1", IdempotencyKey: "r1:2:c1", Attempt: 2, Arguments: json.RawMessage(`{"to":"bob"}`)}

func TestWebhookRequest(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/": webhooktest.Respond(http.StatusOK, `{"sent": true}`)})
	tool := webhookTool(t, s.URL, `,"timeout_ms":1500,"max_attempts":2,"needs_approval":true`)
	spec := tool.Spec()
	if spec.Name != "send" || spec.Effect != agentd.EffectSideEffect || spec.Timeout != 1500*time.Millisecond || spec.MaxAttempts != 2 || !spec.NeedsApproval {
		t.Errorf("spec = %+v", spec)
	}
	got, err := tool.Invoke(context.Background(), testCall)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"sent": true}` {
		t.Errorf("result = %s", got)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	h := reqs[0].Header
	if h.Get("Idempotency-Key") != "r1:2:c1" || h.Get("Content-Type") != "application/json" || h.Get("Authorization") != "Bearer x" {
		t.Errorf("headers = %v", h)
	}
	var body map[string]any
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"arguments": map[string]any{"to": "bob"}, "idempotency_key": "r1:2:c1", "run_id": "r1", "call_id": "c1", "attempt": float64(2)}
	for k, v := range want {
		if gotV, _ := json.Marshal(body[k]); string(gotV) != mustJSON(v) {
			t.Errorf("body[%s] = %s, want %s", k, gotV, mustJSON(v))
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestWebhookClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		h        http.HandlerFunc
		want     string    // result, when no error
		kind     ErrorKind // error kind, else ""
		status   int
		contains string
	}{
		{name: "200 json", h: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `[1,2]`) }, want: `[1,2]`},
		{name: "201 text", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `queued "ok"`)
		}, want: `"queued \"ok\""`},
		{name: "200 large", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `"`+strings.Repeat("y", 100<<10)+`"`)
		}, want: `"` + strings.Repeat("y", 100<<10) + `"`},
		{name: "200 over the result cap", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("y", MaxResultBytes+1))
		}, kind: KindFinal, contains: "larger than 4194304 bytes"},
		{name: "204", h: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }, want: `null`},
		{name: "400", h: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "field to: unknown recipient", http.StatusBadRequest)
		}, kind: KindFinal, status: 400, contains: "400 Bad Request: field to: unknown recipient"},
		{name: "404 long body", h: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, strings.Repeat("x", 5000), http.StatusNotFound)
		}, kind: KindFinal, status: 404, contains: "404 Not Found"},
		{name: "302", h: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, kind: KindFinal, status: 302},
		{name: "500", h: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "db down", http.StatusInternalServerError)
		}, kind: KindTransient, status: 500, contains: "db down"},
		{name: "503", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}, kind: KindTransient, status: 503},
		{name: "hijack and close", h: func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, kind: KindConnection},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/": webhooktest.Raw(tt.h)})
			tool := webhookTool(t, s.URL, "")
			got, err := tool.Invoke(context.Background(), testCall)
			if tt.kind == "" {
				if err != nil || string(got) != tt.want {
					t.Fatalf("got %s, %v; want %s", got, err, tt.want)
				}
				return
			}
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("err = %v (result %s), want *Error", err, got)
			}
			if te.Kind != tt.kind || te.Status != tt.status || !strings.Contains(te.Message, tt.contains) {
				t.Errorf("err = %+v, want kind %s status %d containing %q", te, tt.kind, tt.status, tt.contains)
			}
			if len(te.Message) > 500 {
				t.Errorf("message too long: %d bytes", len(te.Message))
			}
			if n := len(s.Requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/": webhooktest.Hang()})
	tool := webhookTool(t, s.URL, "")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tool.Invoke(ctx, testCall)
	if KindOf(err) != KindTimeout {
		t.Errorf("err = %v, want KindTimeout", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v does not wrap context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Invoke took %v after the deadline", d)
	}
	if got := Decide(tool.Spec(), err, 1); got != Unknown {
		t.Errorf("Decide = %s, want unknown", got)
	}
}

func TestWebhookConnectionRefused(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.NotFoundHandler())
	url := s.URL
	s.Close()
	tool := webhookTool(t, url, "")
	_, err := tool.Invoke(context.Background(), testCall)
	if KindOf(err) != KindConnection {
		t.Errorf("err = %v, want KindConnection", err)
	}
}

// TestWebhookNoTransportReplay checks that net/http does not re-send a
// request carrying an Idempotency-Key when a reused connection breaks: the
// engine counts attempts, not the transport.
func TestWebhookNoTransportReplay(t *testing.T) {
	t.Parallel()
	// Both calls carry one key: the first is answered, the second has its
	// connection closed.
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/": webhooktest.First(1, webhooktest.Respond(http.StatusOK, `{}`),
		webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}))})
	tool := webhookTool(t, s.URL, "")
	if _, err := tool.Invoke(context.Background(), testCall); err != nil {
		t.Fatal(err)
	}
	_, err := tool.Invoke(context.Background(), testCall) // on the kept-alive connection
	if KindOf(err) != KindConnection {
		t.Errorf("err = %v, want KindConnection", err)
	}
	if got := len(s.Requests()); got != 2 {
		t.Errorf("server saw %d requests, want 2 (no replay)", got)
	}
}

func TestWebhookReconcile(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/reconcile": webhooktest.Respond(http.StatusOK, `{"status":"succeeded","result":{"id":7}}`),
	})
	tool := webhookTool(t, s.URL+"/call", `,"reconcile_url":"`+s.URL+`/reconcile"`)
	rec, ok := tool.(Reconciler)
	if !ok || !rec.CanReconcile() {
		t.Fatal("webhook with reconcile_url is not a Reconciler")
	}
	got, err := rec.Reconcile(context.Background(), testCall)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != OutcomeSucceeded || string(got.Result) != `{"id":7}` {
		t.Errorf("reconciliation = %+v", got)
	}
	if h := s.Requests()[0].Header.Get("Idempotency-Key"); h != testCall.IdempotencyKey {
		t.Errorf("Idempotency-Key = %q", h)
	}
	if webhookTool(t, s.URL, "").(Reconciler).CanReconcile() {
		t.Error("webhook without reconcile_url can reconcile")
	}
}

func TestParseWebhooksErrors(t *testing.T) {
	t.Parallel()
	entry := func(fields string) string {
		return `{"tools":[{"name":"t","url":"https://example.com/x","effect":"idempotent"` + fields + `}]}`
	}
	tests := []struct {
		name, data string
		want       []string
	}{
		{"not JSON", `{`, []string{"tools file"}},
		{"unknown top field", `{"tools":[],"extra":1}`, []string{`unknown field "extra"`}},
		{"no tools", `{}`, []string{`missing "tools"`}},
		{"trailing data", `{"tools":[]} x`, []string{"after the JSON value"}},
		{"unknown entry field", entry(`,"retries":3`), []string{`tools[0] ("t")`, `unknown field "retries"`}},
		{"missing url", `{"tools":[{"name":"t","effect":"read_only"}]}`, []string{`tools[0] ("t")`, "missing url"}},
		{"missing effect", `{"tools":[{"name":"t","url":"https://example.com"}]}`, []string{"missing effect"}},
		{"bad effect", entry(`,"effect":"risky"`), []string{`invalid effect "risky"`}},
		{"bad scheme", `{"tools":[{"name":"t","url":"ftp://example.com","effect":"read_only"}]}`, []string{`url: scheme "ftp"`}},
		{"no host", `{"tools":[{"name":"t","url":"http://","effect":"read_only"}]}`, []string{"url: missing host"}},
		{"bad reconcile url", entry(`,"reconcile_url":"file:///x"`), []string{"reconcile_url"}},
		{"bad name", `{"tools":[{"name":"a b","url":"https://e.com","effect":"read_only"}]}`, []string{`tools[0] ("a b")`, "invalid or missing name"}},
		{"missing name", `{"tools":[{"url":"https://e.com","effect":"read_only"}]}`, []string{"tools[0]: ", "invalid or missing name"}},
		{"negative timeout", entry(`,"timeout_ms":-1`), []string{"negative timeout_ms"}},
		{"max attempts", entry(`,"max_attempts":99`), []string{"max_attempts 99"}},
		{"bad schema", entry(`,"parameters":{"type":"object","properties":{"x":{"type":7}}}`), []string{"does not compile"}},
		{"reserved header", entry(`,"headers":{"idempotency-key":"x"}`), []string{"set by the server"}},
		{"wrong type", entry(`,"timeout_ms":"1s"`), []string{`tools[0] ("t")`, "timeout_ms"}},
		{"duplicate", `{"tools":[{"name":"t","url":"https://e.com","effect":"read_only"},{"name":"t","url":"https://e.com","effect":"read_only"}]}`, []string{`tools[1] ("t"): duplicate name`}},
		{"second entry", `{"tools":[{"name":"a","url":"https://e.com","effect":"read_only"},{"name":"b","effect":"read_only"}]}`, []string{`tools[1] ("b"): missing url`}},
	}
	for _, tt := range tests {
		_, err := ParseWebhooks([]byte(tt.data), nil)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, w)
			}
		}
	}
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "tools.json")
	os.WriteFile(good, []byte(`{"tools":[
		{"name":"lookup","description":"Find a user.","url":"https://example.com/lookup","effect":"read_only",
		 "parameters":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}},
		{"name":"pay","url":"https://example.com/pay","effect":"side_effect","needs_approval":true}]}`), 0o600)
	tools, err := LoadFile(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(tools...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate("lookup", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), `argument "id": missing property`) {
		t.Errorf("Validate = %v", err)
	}
	if err := r.Validate("pay", json.RawMessage(`{}`)); err != nil {
		t.Errorf("Validate(pay) = %v", err)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"tools":[{"name":"x","url":"https://e.com","effect":"read_only","tiemout_ms":5}]}`), 0o600)
	if _, err := LoadFile(bad, nil); err == nil || !strings.Contains(err.Error(), `unknown field "tiemout_ms"`) || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("LoadFile(bad) = %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json"), nil); err == nil {
		t.Error("LoadFile(missing) succeeded")
	}
}

// Webhooks reuse their connections: 5 rounds of 8 concurrent calls open 8,
// not the 32 of net/http's default transport, which keeps 2 per host.
func TestWebhookReusesConnections(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/": webhooktest.Respond(http.StatusOK, `{"sent": true}`)})
	tool := webhookTool(t, s.URL, "")
	const callers, rounds = 8, 5
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for range callers {
			wg.Go(func() {
				if _, err := tool.Invoke(context.Background(), testCall); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a connection goes back to the pool just after its response
	}
	if n := s.Conns(); n > 2*callers {
		t.Fatalf("%d connections opened for %d rounds of %d concurrent calls", n, rounds, callers)
	}
}
