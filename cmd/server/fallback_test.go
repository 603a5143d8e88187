package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestFallbackSurvivesTakeover: a run on the chain primary, secondary
// whose primary answers 503 falls back; its server is SIGKILLed while the
// secondary streams the answer, and the instance that takes the run over
// asks the secondary again, never the primary: the step's row keeps the
// choice.
func TestFallbackSurvivesTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	t.Parallel()
	var mu sync.Mutex
	counts := map[string]int{}
	fake := fakellm.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		counts[req.Model]++
		mu.Unlock()
		if req.Model == "primary" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"primary is unavailable","type":"server_error"}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	count := func(m string) int {
		mu.Lock()
		defer mu.Unlock()
		return counts[m]
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=sk-test",
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms"}
	a := startChild(t, env)
	body := `{"models": ["primary", "secondary"], "input": "/stream 40 50\n/say a slow answer from the fallback"}`
	resp, err := http.Post("http://"+a.addr+"/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		ID     string
		Model  string
		Models []string
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if created.Model != "primary" || len(created.Models) != 2 {
		t.Fatalf("POST /runs: %d %+v", resp.StatusCode, created)
	}
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitEvent(t, store, created.ID, func(e agentd.Event) bool { return e.Type == agentd.EventMessageDelta })
	a.kill(t)
	primary := count("primary")
	startChild(t, env)
	r := persisttest.WaitRun(t, store, created.ID, func(r agentd.Run) bool { return r.Status.Terminal() }, 60*time.Second)
	var out []agentd.Part
	_ = json.Unmarshal(r.Output, &out)
	if r.Status != agentd.StatusCompleted || r.Epoch < 2 || agentd.TextOf(out) != "a slow answer from the fallback" {
		t.Fatalf("the run ended %s at epoch %d with %s", r.Status, r.Epoch, r.Output)
	}
	if n := count("primary") - primary; n != 0 || count("secondary") != 2 {
		t.Errorf("after the takeover the primary was asked %d more times, the secondary %d in all; want 0 and 2", n, count("secondary"))
	}
	steps, err := store.StepsList(context.Background(), created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Model != "secondary" || primary < 2 {
		t.Errorf("steps %+v after %d calls of the primary, want one on secondary", steps, primary)
	}
}
