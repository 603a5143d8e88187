package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client/sse"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
)

// TestUppercaseRunIDStreamsLive: a stream opened with the run's id in
// upper case is the same stream as with the canonical id: each event
// committed by this instance reaches both at once, through the Hub's
// hand-over, while the feed's poll (an hour here) would deliver nothing in
// the test's time.
func TestUppercaseRunIDStreamsLive(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Poll: time.Hour, Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	checkEventsAtEnd(t, store)
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(),
		Events: hub, Registerer: prometheus.NewRegistry(), Defaults: api.RunDefaults{Model: "m"}}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx) // before the server closes: it ends the streams
	})
	b := &bundle{t: t, store: store, srv: srv}
	id := b.createRun(`{"input": "hi"}`).ID
	claim, err := store.RunClaim(context.Background(), "w", time.Minute)
	if err != nil || claim.ID != id {
		t.Fatalf("claim: %v %s", err, claim.ID)
	}
	fence := persist.Fence{RunID: id, Epoch: claim.Epoch, Worker: "w"}

	ids := map[string]string{"canonical": id, "upper case": strings.ToUpper(id)}
	lines := map[string]chan string{}
	for name, pathID := range ids {
		resp, err := srv.Client().Get(srv.URL + "/runs/" + pathID + "/events")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		ch := make(chan string, 100)
		lines[name] = ch
		go func() {
			defer close(ch)
			r := sse.NewReader(resp.Body)
			for {
				ev, err := r.Next()
				if err != nil {
					return
				}
				if ev.HasID {
					ch <- ev.ID
				}
			}
		}()
	}
	next := func(name, want string) {
		t.Helper()
		select {
		case got, ok := <-lines[name]:
			if !ok || got != want {
				t.Fatalf("%s stream: event %q (open %v), want %q", name, got, ok, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s stream: event %s did not arrive", name, want)
		}
	}
	for name := range ids {
		next(name, "1") // run.created, replayed
	}
	for seq := 2; seq <= 6; seq++ {
		evs := []agentd.EventIn{agentd.EventOf(1, agentd.MessageDeltaData{Text: fmt.Sprint(seq)})}
		if _, err := store.Exec(context.Background(), fence, evs); err != nil {
			t.Fatal(err)
		}
		for name := range ids {
			next(name, fmt.Sprint(seq))
		}
	}
}

// errorCounter is a slog handler that counts records at error level.
type errorCounter struct{ n atomic.Int64 }

func (c *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		c.n.Add(1)
	}
	return nil
}
func (c *errorCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *errorCounter) WithGroup(string) slog.Handler      { return c }

// TestRunIDFormsAreCanonicalised: the other spellings of a run's UUID that
// uuid.Parse accepts (urn:uuid:, braces, upper case, no hyphens) name the
// run like its canonical form, over the stream too, and nothing reaches the
// error log; what is no UUID is 404.
func TestRunIDFormsAreCanonicalised(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &errorCounter{}
	srv := httptest.NewServer(api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(),
		Events: hub, Logger: slog.New(logs), Registerer: prometheus.NewRegistry(), Defaults: api.RunDefaults{Model: "m"}}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})
	b := &bundle{t: t, store: store, srv: srv}
	id := b.createRun(`{"input": "hi"}`).ID
	claim, err := store.RunClaim(context.Background(), "w", time.Minute)
	if err != nil || claim.ID != id {
		t.Fatalf("claim: %v %s", err, claim.ID)
	}
	if _, err := store.Exec(context.Background(), persist.Fence{RunID: id, Epoch: claim.Epoch, Worker: "w"},
		[]agentd.EventIn{agentd.RunEndEvent(0, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: id, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{"urn:uuid:" + id, "{" + id + "}", strings.ToUpper(id), strings.ReplaceAll(id, "-", "")} {
		if got := want[runBody](t, b.do("GET", "/runs/"+form, ""), http.StatusOK); got.ID != id {
			t.Fatalf("GET /runs/%s: run %s", form, got.ID)
		}
		r := b.do("GET", "/runs/"+form+"/events", "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "id: 2\nevent: run.completed\n") {
			t.Fatalf("GET /runs/%s/events: %d %q", form, r.status, r.body)
		}
	}
	for _, junk := range []string{"urn:uuid:nope", id + "x", "%00"} {
		wantProblem(t, b.do("GET", "/runs/"+junk+"/events", ""), http.StatusNotFound, "run_not_found")
	}
	if n := logs.n.Load(); n != 0 {
		t.Fatalf("%d error log records", n)
	}
}
