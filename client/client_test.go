package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

func collect(t *testing.T, c *client.Client, ctx context.Context, runID string) []client.Event {
	t.Helper()
	var got []client.Event
	for ev, err := range c.Events(ctx, runID, 0) {
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		got = append(got, ev)
	}
	return got
}

// sameAsLog checks that evs are the run's stored events, all of them, in
// order, each once.
func sameAsLog(t *testing.T, store *persist.Store, runID string, evs []client.Event) {
	t.Helper()
	stored, err := store.EventsAfter(context.Background(), runID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != len(stored) {
		t.Fatalf("the iterator gave %d events, the log has %d", len(evs), len(stored))
	}
	for i, s := range stored {
		b, _ := json.Marshal(evs[i].Data)
		var want struct{ Data json.RawMessage }
		json.Unmarshal(s.Data, &want)
		if evs[i].Seq != s.Seq || evs[i].Type != s.Type || !jsonEqual(b, want.Data) {
			t.Fatalf("event %d: got %d %s %s, stored %d %s %s", i, evs[i].Seq, evs[i].Type, b, s.Seq, s.Type, want.Data)
		}
	}
	if !evs[len(evs)-1].Terminal() {
		t.Fatalf("the last event is %s", evs[len(evs)-1].Type)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// TestClientEndToEnd: every call of the client against a real server.
func TestClientEndToEnd(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url)
	store := persisttest.Open(t, persist.Config{URL: url})
	ctx := context.Background()
	c := client.New("http://" + addr)

	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42.",
		Metadata: json.RawMessage(`{"app":"test"}`)})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c, ctx, run.ID)
	sameAsLog(t, store, run.ID, evs)
	run, err = c.GetRun(ctx, run.ID)
	if err != nil || run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != "The answer is 42." || !run.Ended() {
		t.Fatalf("run %+v: %v", run, err)
	}
	steps, err := c.Steps(ctx, run.ID)
	if err != nil || len(steps) != 2 || len(steps[0].ToolCalls) != 1 || string(steps[0].ToolCalls[0].Result) != `{"result":42}` {
		t.Fatalf("steps %+v: %v", steps, err)
	}
	// An ended run's stream, from after its end, is nothing.
	for range c.Events(ctx, run.ID, run.LastEventSeq) {
		t.Fatal("an event after the end")
	}
	page, err := c.ListRuns(ctx, client.ListRuns{ConversationID: run.ConversationID, Limit: 5})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != run.ID || page.HasMore {
		t.Fatalf("list: %+v %v", page, err)
	}
	// A wait: the answer in the create's answer, or WaitRun for the rest.
	waited, err := c.CreateRun(ctx, client.CreateRun{Input: "/say waited", Wait: 10 * time.Second})
	if err != nil || waited.Status != agentd.StatusCompleted || *waited.OutputText != "waited" || !waited.Settled() {
		t.Fatalf("CreateRun with Wait: %+v %v", waited, err)
	}
	slow, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 30 100\n/say " + strings.Repeat("slowly ", 6), Wait: time.Second})
	if err != nil || slow.Settled() {
		t.Fatalf("CreateRun with a wait shorter than the run: %+v %v", slow, err)
	}
	if slow, err = c.WaitRun(ctx, slow.ID, time.Second); err != nil || slow.Status != agentd.StatusCompleted || !strings.HasPrefix(*slow.OutputText, "slowly slowly") {
		t.Fatalf("WaitRun: %+v %v", slow, err)
	}
	// The same key twice is the same run.
	again, err := c.CreateRun(ctx, client.CreateRun{Input: "hello", IdempotencyKey: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	if twice, err := c.CreateRun(ctx, client.CreateRun{Input: "hello", IdempotencyKey: "k-1"}); err != nil || twice.ID != again.ID {
		t.Fatalf("the same key made %v (%v), want %s", twice, err, again.ID)
	}
	// Errors carry the problem's fields.
	_, err = c.GetRun(ctx, "01a23158-24d0-755c-8953-5268112791c4")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "run_not_found" || apiErr.RequestID == "" {
		t.Fatalf("a missing run: %v", err)
	}
	_, err = c.CreateRun(ctx, client.CreateRun{Input: "x", MaxSteps: 100000})
	if !errors.As(err, &apiErr) || apiErr.Code != "invalid_field" || apiErr.Field != "max_steps" {
		t.Fatalf("a bad max_steps: %v", err)
	}
	for ev, err := range c.Events(ctx, "01a23158-24d0-755c-8953-5268112791c4", 0) {
		if !client.IsCode(err, "run_not_found") {
			t.Fatalf("the events of a missing run: %+v %v", ev, err)
		}
	}
	// Conversations and their messages.
	conv, err := c.CreateConversation(ctx, "notes", json.RawMessage(`{"k":"v"}`))
	if err != nil {
		t.Fatal(err)
	}
	title := "renamed"
	if conv, err = c.UpdateConversation(ctx, conv.ID, &title, nil); err != nil || conv.Title != "renamed" {
		t.Fatalf("update: %+v %v", conv, err)
	}
	if list, err := c.ListConversations(ctx, client.ListConversations{Metadata: map[string]string{"k": "v"}}); err != nil || len(list.Data) != 1 {
		t.Fatalf("conversations by metadata: %+v %v", list, err)
	}
	msgs, err := c.Messages(ctx, run.ConversationID, 10, "")
	if err != nil || len(msgs.Data) < 2 || msgs.Data[0].Text() == "" || msgs.Data[len(msgs.Data)-1].Text() != "The answer is 42." {
		t.Fatalf("messages: %+v %v", msgs, err)
	}
	if err := c.DeleteConversation(ctx, conv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetConversation(ctx, conv.ID); !client.IsCode(err, "conversation_not_found") {
		t.Fatalf("a deleted conversation: %v", err)
	}
	tools, err := c.Tools(ctx)
	if err != nil || len(tools) < 2 {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Readiness(ctx); err != nil || r.Status != "ready" || len(r.MCPServers) != 0 {
		t.Fatalf("readiness of a server without MCP servers: %+v %v", r, err)
	}
	// A chain of models.
	chained, err := c.CreateRun(ctx, client.CreateRun{Input: "/say chained", Models: []string{"fake-4k", "fake"}, Wait: 10 * time.Second})
	if err != nil || chained.Model != "fake-4k" || strings.Join(chained.Models, " ") != "fake-4k fake" || chained.Status != agentd.StatusCompleted {
		t.Fatalf("a run with a chain of models: %+v %v", chained, err)
	}
}

// TestWithHeader: a header given with WithHeader goes with every request
// of the client, its event streams' too, beside the client's own.
func TestWithHeader(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	target, _ := url.Parse("http://" + addr)
	var mu sync.Mutex
	seen := map[string][]string{} // traceparent by method and path
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = append(seen[r.Method+" "+r.URL.Path], r.Header.Get("traceparent")+"|"+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := context.Background()
	c := client.New(front.URL, client.WithHeader("traceparent", parent))
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/say hi", IdempotencyKey: "k-header"})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, c, ctx, run.ID)
	if _, err := c.GetRun(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for req, want := range map[string]string{"POST /runs": parent + "|k-header", "GET /runs/" + run.ID + "/events": parent + "|",
		"GET /runs/" + run.ID: parent + "|"} {
		if got := seen[req]; len(got) == 0 || got[0] != want {
			t.Errorf("%s came with %q, want %q", req, got, want)
		}
	}
}

// TestClientRetriesWithTheSameKey: a POST whose answer is lost is sent again
// with the same Idempotency-Key, so that it starts one run, not two.
func TestClientRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url)
	target, _ := neturl("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var posts atomic.Int32
	var keys sync.Map
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			keys.Store(r.Header.Get("Idempotency-Key"), true)
			if posts.Add(1) == 1 {
				// The server gets the request; its answer is lost.
				rec := httptest.NewRecorder()
				proxy.ServeHTTP(rec, r)
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c := client.New(front.URL, client.WithRetries(3, 10*time.Millisecond))
	run, err := c.CreateRun(context.Background(), client.CreateRun{Input: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	keys.Range(func(any, any) bool { n++; return true })
	page, err := c.ListRuns(context.Background(), client.ListRuns{})
	if err != nil || posts.Load() != 2 || n != 1 || len(page.Data) != 1 || page.Data[0].ID != run.ID {
		t.Fatalf("%d POSTs with %d keys made %d runs (%v)", posts.Load(), n, len(page.Data), err)
	}
}

func neturl(s string) (*url.URL, error) { return url.Parse(s) }

// TestEventsAcrossServerRestart: the server is killed mid-stream and
// started again; the iterator reconnects on its own and its events are the
// stored log, each once.
func TestEventsAcrossServerRestart(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	first := servertest.Start(t, addr, url)
	store := persisttest.Open(t, persist.Config{URL: url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New("http://"+addr, client.WithHTTPClient(&http.Client{}))
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/call calculator {\"expression\":\"1+1\"}\n/stream 80 25"})
	if err != nil {
		t.Fatal(err)
	}
	var got []client.Event
	restarted := false
	for ev, err := range c.Events(ctx, run.ID, 0) {
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		got = append(got, ev)
		if !restarted && ev.Type == agentd.EventMessageDelta && len(got) > 8 {
			restarted = true
			first.Kill()
			servertest.Start(t, addr, url)
		}
	}
	if !restarted {
		t.Fatal("the run ended before the kill: the test proved nothing")
	}
	sameAsLog(t, store, run.ID, got)
	final, err := c.GetRun(ctx, run.ID)
	if err != nil || final.Status != agentd.StatusCompleted {
		t.Fatalf("the run after the restart: %+v %v", final, err)
	}
	recovered := false
	for _, ev := range got {
		if ev.Type != agentd.EventRunResumed {
			continue
		}
		p, err := ev.Payload()
		if d, ok := p.(agentd.RunResumedData); err != nil || !ok {
			t.Fatalf("run.resumed decodes as %#v (%v)", p, err)
		} else {
			recovered = recovered || d.Reason == agentd.ResumedRecovery
		}
	}
	if !recovered {
		t.Fatal("no run.resumed (recovered): the second server did not take the run over")
	}
}
