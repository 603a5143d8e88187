package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/webhook"
)

// hookReceiver is a webhook endpoint as its users write one: it verifies
// each request with the Standard Webhooks library under the secret it
// was given, and answers 500 to the first failFirst attempts of each
// webhook-id, then 200.
type hookReceiver struct {
	t         *testing.T
	srv       *httptest.Server
	failFirst int
	mu        sync.Mutex
	secret    string
	requests  []hookRequest // verified, in order
}

// hookRequest is one verified request: its webhook-id and body.
type hookRequest struct {
	ID   string
	Type string
	Run  struct {
		ID, Status string
		OutputText *string `json:"output_text"`
	}
	Schedule struct { // of schedule.paused
		ID           string
		Paused       bool
		PausedReason *string `json:"paused_reason"`
	}
	OK bool // answered 200
}

func newHookReceiver(t *testing.T, failFirst int) *hookReceiver {
	rc := &hookReceiver{t: t, failFirst: failFirst}
	rc.srv = httptest.NewServer(rc)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *hookReceiver) setSecret(s string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.secret = s
}

func (rc *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	wh, err := standardwebhooks.NewWebhook(rc.secret)
	if err == nil {
		err = wh.Verify(body, r.Header)
	}
	if err != nil {
		rc.t.Errorf("a delivery that does not verify: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p struct {
		Type string
		Data struct {
			Run, Schedule json.RawMessage
		}
	}
	req := hookRequest{ID: r.Header.Get("webhook-id")}
	if err := json.Unmarshal(body, &p); err != nil {
		rc.t.Errorf("delivery body %s: %v", body, err)
	}
	req.Type = p.Type
	_ = json.Unmarshal(p.Data.Run, &req.Run)
	_ = json.Unmarshal(p.Data.Schedule, &req.Schedule)
	n := 0
	for _, q := range rc.requests {
		if q.ID == req.ID {
			n++
		}
	}
	req.OK = n >= rc.failFirst
	rc.requests = append(rc.requests, req)
	if !req.OK {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// delivered returns the requests answered 200 about run id.
func (rc *hookReceiver) delivered(id string) []hookRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []hookRequest
	for _, q := range rc.requests {
		if q.OK && q.Run.ID == id {
			out = append(out, q)
		}
	}
	return out
}

// ofType returns the requests answered 200 of event type typ.
func (rc *hookReceiver) ofType(typ string) []hookRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []hookRequest
	for _, q := range rc.requests {
		if q.OK && q.Type == typ {
			out = append(out, q)
		}
	}
	return out
}

// attemptsOf returns how many requests came with webhook-id id.
func (rc *hookReceiver) attemptsOf(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, q := range rc.requests {
		if q.ID == id {
			n++
		}
	}
	return n
}

func (rc *hookReceiver) waitDelivered(t *testing.T, id string, n int) []hookRequest {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(rc.delivered(id)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %d deliveries answered 200, want %d", id, len(rc.delivered(id)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rc.delivered(id)
}

func newSecretKey(t *testing.T) string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(key)
}

// TestWebhooks: a tenant's subscription gets each run.completed, signed
// as Standard Webhooks says; a receiver that answers 500 twice gets the
// same webhook-id three times and the deliveries list shows the three
// attempts; a redelivery comes under that id again; a run's own webhook
// gets its end signed under the secret its creation answered with; the
// secret shows only in the answer that created it; bad bodies are 422
// naming the field.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	sub, own := newHookReceiver(t, 2), newHookReceiver(t, 0)
	subURL, _ := url.Parse(sub.srv.URL)
	ownURL, _ := url.Parse(own.srv.URL)
	s := setup(t, withEnv("AGENTD_SECRET_KEY", newSecretKey(t)),
		withEnv("AGENTD_WEBHOOK_ALLOW_HOSTS", subURL.Host+","+ownURL.Host), withEnv("AGENTD_WEBHOOK_BACKOFF", "50ms"))
	c, ctx := s.Client, testCtx(t)
	completed := []agentd.EventType{agentd.EventRunCompleted}
	for _, bad := range []struct {
		hook  client.NewWebhook
		field string
	}{
		{client.NewWebhook{Events: completed}, "url"},
		{client.NewWebhook{URL: "ftp://example.com/x", Events: completed}, "url"},
		{client.NewWebhook{URL: "http://10.1.2.3:9/x", Events: completed}, "url"},
		{client.NewWebhook{URL: sub.srv.URL}, "events"},
		{client.NewWebhook{URL: sub.srv.URL, Events: []agentd.EventType{"run.done"}}, "events[0]"},
		{client.NewWebhook{URL: sub.srv.URL, Events: []agentd.EventType{agentd.EventRunFailed, agentd.EventRunFailed}}, "events[1]"},
		{client.NewWebhook{URL: sub.srv.URL, Events: []agentd.EventType{agentd.EventRunFailed}, Secret: "hunter2"}, "secret"},
	} {
		var e *client.Error
		if _, err := c.CreateWebhook(ctx, bad.hook); !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Field != bad.field {
			t.Errorf("CreateWebhook %+v: %v, want 422 naming %s", bad.hook, err, bad.field)
		}
	}
	// A body the SDK cannot write: raw JSON, for the server's refusal.
	resp, err := http.Post(s.URL+"/runs", "application/json", strings.NewReader(`{"input": "hi", "webhook": 42}`))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != 422 || p["field"] != "webhook" {
		t.Errorf("POST /runs webhook 42: %d %v", resp.StatusCode, p)
	}

	hook, err := c.CreateWebhook(ctx, client.NewWebhook{URL: sub.srv.URL, Events: []agentd.EventType{agentd.EventRunCompleted, agentd.EventRunFailed}})
	if err != nil || hook.Secret == nil || !strings.HasPrefix(*hook.Secret, "whsec_") {
		t.Fatalf("CreateWebhook: %+v %v", hook, err)
	}
	if a := s.Wire.last(t, http.MethodPost, "/webhooks"); a.Status != http.StatusCreated || a.Header.Get("Location") != "/webhooks/"+hook.ID {
		t.Fatalf("POST /webhooks: %d, Location %q", a.Status, a.Header.Get("Location"))
	}
	sub.setSecret(*hook.Secret)
	if got, err := c.GetWebhook(ctx, hook.ID); err != nil || got.Secret != nil || got.URL != sub.srv.URL {
		t.Errorf("GetWebhook = %+v (%v): want its URL, and no secret", got, err)
	}

	// A run's end, delivered at the third attempt under one id.
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/say done", Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := sub.waitDelivered(t, run.ID, 1)[0]
	if got.Type != "run.completed" || got.Run.Status != "completed" || got.Run.OutputText == nil || *got.Run.OutputText != "done" {
		t.Errorf("delivery %+v: want run.completed with the run's view", got)
	}
	if n := sub.attemptsOf(got.ID); n != 3 {
		t.Errorf("%d requests with webhook-id %s, want 3 (two 500s, then 200)", n, got.ID)
	}
	// The receiver's answer is recorded once it reaches the server.
	var d client.Delivery
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := c.WebhookDeliveries(ctx, hook.ID, 0, "")
		if err != nil || len(list.Data) != 1 {
			t.Fatalf("deliveries: %+v %v", list, err)
		}
		if d = list.Data[0]; d.Status != agentd.DeliveryPending || time.Now().After(deadline) {
			break
		}
	}
	var codes []int
	for _, a := range d.Attempts {
		if a.StatusCode != nil {
			codes = append(codes, *a.StatusCode)
		}
	}
	if d.ID != got.ID || d.Status != agentd.DeliveryDelivered || !slices.Equal(codes, []int{500, 500, 200}) {
		t.Errorf("delivery %+v: want %s delivered after attempts 500, 500, 200", d, got.ID)
	}
	if again, err := c.Redeliver(ctx, hook.ID, got.ID); err != nil || again.ID != got.ID ||
		s.Wire.last(t, http.MethodPost, "/webhooks/"+hook.ID+"/deliveries/"+got.ID+"/redeliver").Status != http.StatusAccepted {
		t.Errorf("redeliver: %+v %v", again, err)
	}
	sub.waitDelivered(t, run.ID, 2)
	if n := sub.attemptsOf(got.ID); n != 4 {
		t.Errorf("%d requests with webhook-id %s after the redelivery, want 4", n, got.ID)
	}

	// A run's own webhook, beside the subscription, signed under the
	// secret the server made and showed in its answer.
	mine := &client.RunWebhook{URL: own.srv.URL}
	run, err = c.CreateRun(ctx, client.CreateRun{Input: "/say mine", Webhook: mine, Wait: 10 * time.Second})
	if err != nil || run.Status != agentd.StatusCompleted || run.Webhook == nil || *run.Webhook != own.srv.URL || !strings.HasPrefix(mine.Secret, "whsec_") {
		t.Fatalf("CreateRun with a webhook: %+v %v, secret %q", run, err, mine.Secret)
	}
	own.setSecret(mine.Secret)
	if got := own.waitDelivered(t, run.ID, 1); got[0].Type != "run.completed" {
		t.Errorf("the run's own delivery: %+v", got)
	}
	sub.waitDelivered(t, run.ID, 1)
	if list, err := c.RunDeliveries(ctx, run.ID); err != nil || len(list) != 2 {
		t.Errorf("RunDeliveries: %+v %v, want the subscription's and the run's own", list, err)
	}
	if err := c.DeleteWebhook(ctx, hook.ID); err != nil {
		t.Errorf("DeleteWebhook: %v", err)
	}
	var e *client.Error
	if _, err := c.GetWebhook(ctx, hook.ID); !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != "webhook_not_found" {
		t.Errorf("GetWebhook of a deleted webhook: %v", err)
	}
}

// TestWebhookAfterKill: a run whose instance is SIGKILLed mid-answer ends
// on the instance that takes it over, and its subscription gets its
// run.completed once.
func TestWebhookAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	t.Parallel()
	rc := newHookReceiver(t, 0)
	rcURL, _ := url.Parse(rc.srv.URL)
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_SECRET_KEY=" + newSecretKey(t), "AGENTD_WEBHOOK_ALLOW_HOSTS=" + rcURL.Host,
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms", "AGENTD_LOG_LEVEL=info", "AGENTD_WEBHOOK_BACKOFF=50ms"}
	a := startChild(t, env)
	c, ctx := client.New("http://"+a.addr), testCtx(t)
	hook, err := c.CreateWebhook(ctx, client.NewWebhook{URL: rc.srv.URL, Events: []agentd.EventType{agentd.EventRunCompleted}})
	if err != nil {
		t.Fatal(err)
	}
	rc.setSecret(*hook.Secret)
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 30 100\n/say the answer, streamed slowly"})
	if err != nil {
		t.Fatal(err)
	}
	id := run.ID

	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, err := store.EventsAfter(context.Background(), id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs, func(e agentd.Event) bool { return e.Type == agentd.EventMessageDelta }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run streamed nothing")
		}
	}
	a.kill(t)
	startChild(t, env)
	r := persisttest.WaitRun(t, store, id, func(r agentd.Run) bool { return r.Status.Terminal() }, 60*time.Second)
	if r.Status != agentd.StatusCompleted || r.Epoch < 2 {
		t.Fatalf("the run ended %s at epoch %d; want completed by the instance that took it over", r.Status, r.Epoch)
	}
	got := rc.waitDelivered(t, id, 1)
	time.Sleep(500 * time.Millisecond) // time for a second delivery, were there one
	if got = rc.delivered(id); len(got) != 1 || got[0].Type != "run.completed" || got[0].Run.Status != "completed" {
		t.Fatalf("deliveries of the run: %+v, want one run.completed", got)
	}
}

// TestWebhooksVerifiedByNode: a receiver written with the standardwebhooks
// npm package (test/webhooks) verifies the deliveries of a subscription
// whose secret the client chose; it answers 500 twice, and the third
// attempt, under the same webhook-id, is the one it accepts.
func TestWebhooksVerifiedByNode(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "webhooks", "standardwebhooks")
	secret := webhook.NewSecret()
	cmd := exec.Command("node", "receiver.mjs")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "WEBHOOK_SECRET="+secret, "FAIL_FIRST=2")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan map[string]any, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var v map[string]any
			if json.Unmarshal(sc.Bytes(), &v) == nil {
				lines <- v
			}
		}
	}()
	first := <-lines
	port, ok := first["port"].(float64)
	if !ok {
		t.Fatalf("receiver said %v", first)
	}
	recv := fmt.Sprintf("127.0.0.1:%d", int(port))
	s := setup(t, withEnv("AGENTD_SECRET_KEY", newSecretKey(t)), withEnv("AGENTD_WEBHOOK_ALLOW_HOSTS", recv),
		withEnv("AGENTD_WEBHOOK_BACKOFF", "50ms"))
	ctx := testCtx(t)
	if _, err := s.Client.CreateWebhook(ctx, client.NewWebhook{URL: "http://" + recv + "/hook",
		Events: []agentd.EventType{agentd.EventRunCompleted}, Secret: secret}); err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	run, err := s.Client.CreateRun(ctx, client.CreateRun{Input: "/say verified"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case v, ok := <-lines:
			if !ok {
				t.Fatal("the receiver stopped")
			}
			if v["error"] != nil {
				t.Fatalf("the receiver refused a delivery: %v", v["error"])
			}
			if v["run_id"] != run.ID || v["type"] != "run.completed" || v["status"] != "completed" {
				t.Fatalf("delivery %v: want run %s's run.completed", v, run.ID)
			}
			ids = append(ids, v["id"].(string))
			if v["answered"].(float64) == http.StatusNoContent {
				if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] {
					t.Fatalf("webhook-ids of the attempts: %v, want three of one id", ids)
				}
				return
			}
		case <-timeout:
			t.Fatalf("the receiver accepted no delivery (attempts %v)", ids)
		}
	}
}
