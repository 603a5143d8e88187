package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
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
	base, _ := startServer(t, map[string]string{"AGENTD_SECRET_KEY": newSecretKey(t),
		"AGENTD_WEBHOOK_ALLOW_HOSTS": subURL.Host + "," + ownURL.Host, "AGENTD_WEBHOOK_BACKOFF": "50ms"})
	call := func(method, path, body string, header ...string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, resp.Header, v
	}

	for body, field := range map[string]string{
		`{"events": ["run.completed"]}`:                                                 "url",
		`{"url": "ftp://example.com/x", "events": ["run.completed"]}`:                   "url",
		`{"url": "http://10.1.2.3:9/x", "events": ["run.completed"]}`:                   "url",
		`{"url": "` + sub.srv.URL + `"}`:                                                "events",
		`{"url": "` + sub.srv.URL + `", "events": ["run.done"]}`:                        "events[0]",
		`{"url": "` + sub.srv.URL + `", "events": ["run.failed", "run.failed"]}`:        "events[1]",
		`{"url": "` + sub.srv.URL + `", "events": ["run.failed"], "secret": "hunter2"}`: "secret",
	} {
		code, _, v := call("POST", "/webhooks", body)
		if code != http.StatusUnprocessableEntity || v["field"] != field {
			t.Errorf("POST /webhooks %s: %d %v, want 422 naming %s", body, code, v, field)
		}
	}
	if code, _, v := call("POST", "/runs", `{"input": "hi", "webhook": 42}`); code != 422 || v["field"] != "webhook" {
		t.Errorf("POST /runs webhook 42: %d %v", code, v)
	}

	code, hdr, hook := call("POST", "/webhooks", `{"url": "`+sub.srv.URL+`", "events": ["run.completed", "run.failed"]}`)
	secret, _ := hook["secret"].(string)
	if code != http.StatusCreated || !strings.HasPrefix(secret, "whsec_") || hdr.Get("Location") != "/webhooks/"+hook["id"].(string) {
		t.Fatalf("POST /webhooks: %d %v", code, hook)
	}
	sub.setSecret(secret)
	hookID := hook["id"].(string)
	if _, _, got := call("GET", "/webhooks/"+hookID, ""); got["secret"] != nil || got["url"] != sub.srv.URL {
		t.Errorf("GET /webhooks/{id} = %v: want its URL, and no secret", got)
	}

	// A run's end, delivered at the third attempt under one id.
	_, _, run := call("POST", "/runs", `{"input": "/say done"}`, "Prefer", "wait=10")
	runID := run["id"].(string)
	got := sub.waitDelivered(t, runID, 1)[0]
	if got.Type != "run.completed" || got.Run.Status != "completed" || got.Run.OutputText == nil || *got.Run.OutputText != "done" {
		t.Errorf("delivery %+v: want run.completed with the run's view", got)
	}
	if n := sub.attemptsOf(got.ID); n != 3 {
		t.Errorf("%d requests with webhook-id %s, want 3 (two 500s, then 200)", n, got.ID)
	}
	// The receiver's answer is recorded once it reaches the server.
	var d map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, _, list := call("GET", "/webhooks/"+hookID+"/deliveries", "")
		data, _ := list["data"].([]any)
		if len(data) != 1 {
			t.Fatalf("deliveries: %v", list)
		}
		if d = data[0].(map[string]any); d["status"] != "pending" || time.Now().After(deadline) {
			break
		}
	}
	var codes []float64
	for _, a := range d["attempts"].([]any) {
		codes = append(codes, a.(map[string]any)["status_code"].(float64))
	}
	if d["id"] != got.ID || d["status"] != "delivered" || !slices.Equal(codes, []float64{500, 500, 200}) {
		t.Errorf("delivery %v: want %s delivered after attempts 500, 500, 200", d, got.ID)
	}
	if code, _, v := call("POST", "/webhooks/"+hookID+"/deliveries/"+got.ID+"/redeliver", ""); code != http.StatusAccepted || v["id"] != got.ID {
		t.Errorf("redeliver: %d %v", code, v)
	}
	sub.waitDelivered(t, runID, 2)
	if n := sub.attemptsOf(got.ID); n != 4 {
		t.Errorf("%d requests with webhook-id %s after the redelivery, want 4", n, got.ID)
	}

	// A run's own webhook, beside the subscription.
	code, hdr, run = call("POST", "/runs", `{"input": "/say mine", "webhook": "`+own.srv.URL+`"}`, "Prefer", "wait=10")
	if code != http.StatusOK || run["webhook"] != own.srv.URL || !strings.HasPrefix(hdr.Get("Webhook-Secret"), "whsec_") {
		t.Fatalf("POST /runs with a webhook: %d %v, Webhook-Secret %q", code, run, hdr.Get("Webhook-Secret"))
	}
	own.setSecret(hdr.Get("Webhook-Secret"))
	ownID := run["id"].(string)
	if got := own.waitDelivered(t, ownID, 1); got[0].Type != "run.completed" {
		t.Errorf("the run's own delivery: %+v", got)
	}
	sub.waitDelivered(t, ownID, 1)
	_, _, list := call("GET", "/runs/"+ownID+"/deliveries", "")
	if data, _ := list["data"].([]any); len(data) != 2 {
		t.Errorf("GET /runs/{id}/deliveries: %v, want the subscription's and the run's own", list)
	}
	if code, _, _ := call("DELETE", "/webhooks/"+hookID, ""); code != http.StatusNoContent {
		t.Errorf("DELETE: %d", code)
	}
	if code, _, v := call("GET", "/webhooks/"+hookID, ""); code != http.StatusNotFound || v["code"] != "webhook_not_found" {
		t.Errorf("GET a deleted webhook: %d %v", code, v)
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
	post := func(addr, path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %v", path, resp.StatusCode, v)
		}
		return v
	}
	hook := post(a.addr, "/webhooks", `{"url": "`+rc.srv.URL+`", "events": ["run.completed"]}`)
	rc.setSecret(hook["secret"].(string))
	run := post(a.addr, "/runs", `{"input": "/stream 30 100\n/say the answer, streamed slowly"}`)
	id := run["id"].(string)

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
	base, _ := startServer(t, map[string]string{"AGENTD_SECRET_KEY": newSecretKey(t),
		"AGENTD_WEBHOOK_ALLOW_HOSTS": recv, "AGENTD_WEBHOOK_BACKOFF": "50ms"})
	body, _ := json.Marshal(map[string]any{"url": "http://" + recv + "/hook", "events": []string{"run.completed"}, "secret": secret})
	resp, err := http.Post(base+"/webhooks", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /webhooks: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/runs", "application/json", strings.NewReader(`{"input": "/say verified"}`))
	if err != nil {
		t.Fatal(err)
	}
	var run struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
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
