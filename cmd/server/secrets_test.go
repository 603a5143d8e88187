package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// lockedBuffer collects a process's output from two goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebhookSecretsNeverShow: a webhook tool's configured header values
// (planted secrets) reach the webhook, and appear nowhere agentd writes:
// not in its debug logs, not in any stored row, not in any API answer or
// event stream, even though the webhook echoes its request's headers in a
// result, in a 500 error page and in a 400, and another attempt times out.
func TestWebhookSecretsNeverShow(t *testing.T) {
	const secret, apiKey = "PLANTED-secret-4f9a0c", "PLANTED-key-77c1e2"
	var received sync.Map
	echo := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			received.Store(r.Header.Get("X-Api-Key"), true)
			w.WriteHeader(status)
			// The whole request as the webhook saw it, headers first.
			fmt.Fprintf(w, `{"echo": %q}`, fmt.Sprint(r.Header))
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", echo(http.StatusOK))
	mux.HandleFunc("/fail", echo(http.StatusInternalServerError))
	mux.HandleFunc("/bad", echo(http.StatusBadRequest))
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		received.Store(r.Header.Get("X-Api-Key"), true)
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client go
		<-r.Context().Done()
	})
	hook := httptest.NewServer(mux)
	t.Cleanup(hook.Close)

	tool := func(name, path string, timeoutMS int) map[string]any {
		return map[string]any{"name": name, "description": name, "url": hook.URL + path, "effect": "read_only",
			"timeout_ms": timeoutMS, "max_attempts": 2,
			"headers": map[string]string{"Authorization": "Bearer " + secret, "X-Api-Key": apiKey}}
	}
	file := filepath.Join(t.TempDir(), "tools.json")
	data, _ := json.Marshal(map[string]any{"tools": []any{tool("leak_ok", "/ok", 2000), tool("leak_fail", "/fail", 2000),
		tool("leak_bad", "/bad", 2000), tool("leak_slow", "/slow", 200)}})
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := persisttest.NewDatabase(t)
	logs := &lockedBuffer{}
	c := startChildLogged(t, []string{"DATABASE_URL=" + dbURL, "AGENTD_TOOLS_FILE=" + file, "AGENTD_LOG_LEVEL=debug"}, logs)
	base := "http://" + c.addr

	var answers bytes.Buffer
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answers.Write(b)
		return b
	}
	input := "/call leak_ok {}\n/call leak_fail {}\n/call leak_bad {}\n/call leak_slow {}\n/say done"
	body, _ := json.Marshal(map[string]any{"input": input})
	resp, err := http.Post(base+"/runs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		ID             string `json:"id"`
		ConversationID string `json:"conversation_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var r struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(get("/runs/"+created.ID), &r)
		if r.Status == "completed" || r.Status == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run still %s", r.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	get("/runs/" + created.ID + "/steps")
	get("/runs/" + created.ID + "/events?after=0")
	get("/conversations/" + created.ConversationID + "/messages")
	get("/tools")
	get("/metrics")
	if _, ok := received.Load(apiKey); !ok {
		t.Fatal("the webhook never received the planted header: the test proves nothing")
	}

	var rows strings.Builder
	for _, table := range []string{"runs", "steps", "tool_calls", "tool_attempts", "messages", "run_events", "conversations", "idempotency_keys", "api_keys"} {
		for _, s := range persisttest.TableText(t, dbURL, table) {
			rows.WriteString(s + "\n")
		}
	}
	c.kill(t)
	for what, text := range map[string]string{"logs": logs.String(), "rows": rows.String(), "answers": answers.String()} {
		for _, s := range []string{secret, apiKey} {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s show the planted secret %q: …%s…", what, s, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	if !strings.Contains(answers.String(), "[redacted]") {
		t.Errorf("the echoed headers never reached a result or an error: the test proves nothing\n%s", answers.String())
	}
	if !strings.Contains(logs.String(), `"route":"/runs/{id}/steps"`) || !strings.Contains(logs.String(), created.ID) {
		t.Errorf("the logs read lack the run's requests: the test may not read them\n%s", logs.String())
	}
}
