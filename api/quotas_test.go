package api_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
)

// TestCreateRateIsPerTenant: past its bucket (burst 2, one more each 100
// seconds, so that a slow machine does not refill it between the creates),
// a tenant's POST /runs is 429 rate_limited with Retry-After, and nothing
// is created; another tenant is not held back.
func TestCreateRateIsPerTenant(t *testing.T) {
	b := setup(t, func(c *api.Config) { c.Quotas = api.Quotas{CreatesPerSecond: 0.01, CreateBurst: 2} })
	b.createRun(`{"input": "1"}`)
	b.createRun(`{"input": "2"}`)
	r := b.do("POST", "/runs", `{"input": "3"}`)
	wantProblem(t, r, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if runs, _ := b.counts("default"); runs != 2 {
		t.Fatalf("%d runs after a refused create, want 2", runs)
	}
	b.createRun(`{"input": "other"}`, "X-Tenant-ID", "acme")
}

// TestStreamQuotaIsPerTenant: with one stream per tenant, a second stream
// of the same tenant is 429 rate_limited while the first is open, another
// tenant's stream is not, and once the first closes the tenant may stream
// again.
func TestStreamQuotaIsPerTenant(t *testing.T) {
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	checkEventsAtEnd(t, store)
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := setupWith(t, store, store, func(c *api.Config) {
		c.Events = hub
		c.Registerer = prometheus.NewRegistry()
		c.Runs = run.New(run.Config{Store: store}).Service()
		c.Quotas = api.Quotas{StreamsPerTenant: 1}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})
	id := b.createRun(`{"input": "hi"}`).ID // queued: its stream stays open
	other := b.createRun(`{"input": "hi"}`, "X-Tenant-ID", "acme").ID

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/runs/"+id+"/events", nil)
	resp, err := b.srv.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %v %v", resp, err)
	}
	r := b.do("GET", "/runs/"+id+"/events", "")
	wantProblem(t, r, http.StatusTooManyRequests, "rate_limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// POST /runs with "stream": true counts too, and creates nothing.
	wantProblem(t, b.do("POST", "/runs", `{"input": "x", "stream": true}`), http.StatusTooManyRequests, "rate_limited")
	if runs, _ := b.counts("default"); runs != 1 {
		t.Fatalf("%d runs after a refused streaming create, want 1", runs)
	}

	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	oreq, _ := http.NewRequestWithContext(octx, "GET", b.srv.URL+"/runs/"+other+"/events", nil)
	oreq.Header.Set("X-Tenant-ID", "acme")
	oresp, err := b.srv.Client().Do(oreq)
	if err != nil || oresp.StatusCode != http.StatusOK {
		t.Fatalf("another tenant's stream: %v %v", oresp, err)
	}
	ocancel()
	oresp.Body.Close()

	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sctx, scancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(sctx, "GET", b.srv.URL+"/runs/"+id+"/events", nil)
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			scancel()
			t.Fatal(err)
		}
		status := resp.StatusCode
		scancel()
		resp.Body.Close()
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tenant cannot stream again after its stream closed: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
