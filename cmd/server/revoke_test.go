package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// openStream sends a request for an event stream with a bearer key and
// returns a channel closed when the stream ends, after it delivered one
// event (or chunk).
func openStream(t *testing.T, method, url, body, key string) (started, ended chan struct{}) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	t.Cleanup(func() { resp.Body.Close() })
	started, ended = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		first := true
		readEventsInto(resp.Body, func(sseEvent) bool {
			if first {
				first = false
				close(started)
			}
			return false
		})
	}()
	return started, ended
}

// TestRevokedKeyEndsItsStreams: with AGENTD_AUTH=keys, the event streams a
// key opened (GET /runs/{id}/events, POST /runs with "stream": true, the AI
// SDK's chat) end within about the key cache's TTL after `agentd keys
// revoke`, while their runs go on (an on_disconnect: interrupt is not
// applied: the client did not leave); the key's next request is 401, and a
// request with two Authorization headers is 401 invalid_credential.
func TestRevokedKeyEndsItsStreams(t *testing.T) {
	dbURL := persisttest.NewDatabase(t)
	key := func(scopes string) string {
		t.Helper()
		out, err := keysCmd(t, dbURL, "create", "--tenant", "acme", "--name", "streams", "--scopes", scopes)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	reader, admin := key("runs:read,runs:write"), key("admin")
	const ttl = time.Second
	base, _ := startServer(t, map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys",
		"AGENTD_KEY_CACHE_TTL": ttl.String()})

	// Runs that stream their answer for a minute, far past the test.
	const long = `/stream 600 100`
	status, body := bearerDo(t, base, "POST", "/runs", `{"input": "`+long+`"}`, reader)
	var run struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &run); err != nil || status != http.StatusAccepted {
		t.Fatalf("POST /runs: %d %s", status, body)
	}
	streams := map[string][2]chan struct{}{}
	for name, req := range map[string][3]string{
		"GET /runs/{id}/events":     {"GET", "/runs/" + run.ID + "/events", ""},
		`POST /runs "stream": true`: {"POST", "/runs", `{"input": "` + long + `", "stream": true, "on_disconnect": "interrupt"}`},
		"POST /ai-sdk/chat": {"POST", "/ai-sdk/chat",
			`{"id": "chat-1", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "` + long + `"}]}]}`},
	} {
		started, ended := openStream(t, req[0], base+req[1], req[2], reader)
		streams[name] = [2]chan struct{}{started, ended}
	}
	for name, s := range streams {
		select {
		case <-s[0]:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no event", name)
		}
	}

	out, err := keysCmd(t, dbURL, "revoke", reader[4:16])
	if err != nil {
		t.Fatalf("keys revoke: %q %v", out, err)
	}
	revoked := time.Now()
	for name, s := range streams {
		select {
		case <-s[1]:
			t.Logf("%s ended %v after the revocation (key cache TTL %v)", name, time.Since(revoked).Round(time.Millisecond), ttl)
		case <-time.After(ttl + 5*time.Second - time.Since(revoked)):
			t.Fatalf("%s: the stream of a revoked key still open %v after the revocation (key cache TTL %v)",
				name, time.Since(revoked).Round(time.Millisecond), ttl)
		}
	}
	status, body = bearerDo(t, base, "GET", "/runs/"+run.ID, "", reader)
	if status != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"invalid_credential"`) {
		t.Fatalf("the revoked key's next request: %d %s", status, body)
	}

	// The runs go on: the streams ended for their credential, not because
	// a client left.
	time.Sleep(2 * time.Second)
	status, body = bearerDo(t, base, "GET", "/runs?status=interrupted", "", admin)
	if status != http.StatusOK || !strings.Contains(string(body), `"data":[]`) {
		t.Fatalf("interrupted runs after the revocation: %d %s", status, body)
	}

	req, _ := http.NewRequest(http.MethodGet, base+"/runs/"+run.ID, nil)
	req.Header.Add("Authorization", "Bearer "+admin)
	req.Header.Add("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(b), `"code":"invalid_credential"`) {
		t.Fatalf("two Authorization headers: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}

	// Stop the runs, so that the server stops at once.
	status, body = bearerDo(t, base, "GET", "/runs?status=running", "", admin)
	var running struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &running); err != nil || status != http.StatusOK {
		t.Fatalf("running runs: %d %s", status, body)
	}
	for _, r := range running.Data {
		bearerDo(t, base, "POST", "/runs/"+r.ID+"/cancel", "", admin)
	}
}
