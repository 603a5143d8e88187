package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"agentd/api"
	"agentd/internal/event"
	"agentd/internal/persist"
	"agentd/internal/persist/persisttest"
	"agentd/internal/run"
	"agentd/internal/stream"
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
	if err := hub.Start(store); err != nil {
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
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					ch <- id
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
		evs := []event.In{event.Of(1, event.MessageDeltaData{Text: fmt.Sprint(seq)})}
		if _, err := store.Exec(context.Background(), fence, evs); err != nil {
			t.Fatal(err)
		}
		for name := range ids {
			next(name, fmt.Sprint(seq))
		}
	}
}
