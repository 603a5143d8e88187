package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
)

// TestMetricLabelsAreBounded: made-up methods and paths do not create
// series: a method outside the standard ones is "other", a path no route
// matches is "unmatched".
func TestMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, func(c *api.Config) {
		c.Registerer = reg
		c.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	})
	series := func() int {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "agentd_http_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	junk := func(round int) {
		for i := range 20 {
			method := fmt.Sprintf("X%d%s", round*100+i, strings.Repeat("Q", 500))
			b.do(method, "/runs", "")
			b.do("GET", fmt.Sprintf("/nope/%d/%s", round*100+i, strings.Repeat("p", 300)), "")
			b.do(method, fmt.Sprintf("/also/%d", i), "")
		}
	}
	junk(0)
	before := series()
	junk(1)
	junk(2)
	if after := series(); after != before {
		t.Fatalf("junk methods and paths made %d HTTP series from %d", after, before)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if len(l.GetValue()) > 64 {
					t.Fatalf("%s has label %s of %d bytes", f.GetName(), l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
	if r := b.do(http.MethodGet, "/metrics", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `method="other"`) {
		t.Fatalf("metrics: %d, no method=\"other\" series", r.status)
	}
}

// TestWaitHangUpIsAClientClose: a client that hangs up while its request
// waits for a run (?wait, Prefer: wait) is counted and logged as a client
// close (499), never as a server error.
func TestWaitHangUpIsAClientClose(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logs := &errorCounter{}
	srv := httptest.NewServer(api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(),
		Events: hub, Logger: slog.New(logs), Registerer: reg, Defaults: api.RunDefaults{Model: "m"}}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})
	b := &bundle{t: t, store: store, srv: srv}
	id := b.createRun(`{"input": "hi"}`).ID // no engine: it stays queued
	hangUp := func(method, path, body string, headers ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if resp, err := srv.Client().Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("%s %s answered %d before the client hung up", method, path, resp.StatusCode)
		}
	}
	hangUp("GET", "/runs/"+id+"?wait=30", "")
	hangUp("GET", "/runs/"+id, "", "Prefer", "wait=30")
	hangUp("POST", "/runs", `{"input": "hi"}`, "Prefer", "wait=30")
	want := map[string]int{"GET /runs/{id} 499": 2, "POST /runs 499": 1}
	var got map[string]int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = map[string]int{}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "agentd_http_requests_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["route"] != "/runs" || l["method"] != "POST" || l["status"] != "202" {
					got[l["method"]+" "+l["route"]+" "+l["status"]] += int(m.GetCounter().GetValue())
				}
			}
		}
		if reflect.DeepEqual(got, want) {
			break
		}
	}
	if !reflect.DeepEqual(got, want) || logs.n.Load() != 0 {
		t.Fatalf("requests by status %v, want %v; %d errors logged", got, want, logs.n.Load())
	}
}
