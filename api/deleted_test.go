package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
)

// TestDeletedConversationsStreams: DELETE /conversations/{id} ends the open
// streams of its runs at once (the Hub neither polls nor beats in the
// test's time), freeing the tenant's stream slot, and a stream of one of its
// runs is then 404 run_not_found, from any position, though this instance
// had found the run for the tenant before and kept its first events.
func TestDeletedConversationsStreams(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Poll: time.Hour, Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{Store: store, Runs: run.New(run.Config{Store: store}).Service(),
		Events: hub, Registerer: prometheus.NewRegistry(), Defaults: api.RunDefaults{Model: "m"},
		Quotas: api.Quotas{StreamsPerTenant: 1}}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})
	srv.Client().Timeout = 10 * time.Second // a stream that stays open fails the test, not hangs it
	b := &bundle{t: t, store: store, srv: srv}

	// A run whose stream is open when its conversation goes: it stops
	// without an event, so that the stream stays open until then.
	open := b.createRun(`{"input": "hi"}`)
	resp, err := http.Get(srv.URL + "/runs/" + open.ID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	claim, err := store.RunClaim(context.Background(), "w", time.Minute)
	if err != nil || claim.ID != open.ID {
		t.Fatalf("claim: %v %s", err, claim.ID)
	}
	if _, err := store.Exec(context.Background(), persist.Fence{RunID: open.ID, Epoch: claim.Epoch, Worker: "w"}, nil,
		persist.RunEnd{ID: open.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	// A run nobody streamed yet, cancelled while queued.
	quiet := b.createRun(`{"input": "hi"}`)
	want[runBody](t, b.do("POST", "/runs/"+quiet.ID+"/cancel", ""), http.StatusOK)

	if r := b.do("DELETE", "/conversations/"+open.ConversationID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the open stream of the deleted run did not end")
	}
	if r := b.do("DELETE", "/conversations/"+quiet.ConversationID, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, id := range []string{open.ID, quiet.ID} {
		wantProblem(t, b.do("GET", "/runs/"+id+"/events", ""), http.StatusNotFound, "run_not_found")
		wantProblem(t, b.do("GET", "/runs/"+id+"/events", "", "Last-Event-ID", "1"), http.StatusNotFound, "run_not_found")
	}
	if s := hub.Stats(); s.Streams != 0 || s.Feeds != 0 {
		t.Fatalf("the Hub holds %+v", s)
	}
}
