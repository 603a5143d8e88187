package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/client/sse"
)

// envelope is a stored event's data line as the server writes it.
func envelope(seq int64, typ string) string {
	return fmt.Sprintf(`{"seq":%d,"type":%q,"run_id":"r1","step":1,"at":"2026-01-02T03:04:05Z","data":{}}`, seq, typ)
}

// scripted serves each connection of a run's stream from its script, in
// turn, and records the Last-Event-ID of each request and when it came.
type scripted struct {
	mu      sync.Mutex
	scripts []string
	lastIDs []string
	at      []time.Time
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.lastIDs)
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	if n >= len(s.scripts) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = fmt.Fprint(w, s.scripts[n])
}

// TestEventsOnTheReader: the iterator reads what the SSE reader hands it
// (CRLF line ends, data over several lines, comments, heartbeats without an
// id), keeps the server's retry hint, and after a stream cut inside an event
// reconnects with the last id it yielded, once the hint has passed.
func TestEventsOnTheReader(t *testing.T) {
	t.Parallel()
	second := strings.Replace(envelope(2, "message.delta"), `"run_id"`, "\ndata: \"run_id\"", 1)
	srv := &scripted{scripts: []string{
		"retry: 1500\r\n\r\n: hello\r\nid: 1\r\nevent: run.created\r\ndata: " + envelope(1, "run.created") + "\r\n\r\n" +
			"event: heartbeat\ndata: {\"status\":\"running\"}\n\n" +
			"id: 2\nevent: message.delta\ndata:" + second + "\n\n" +
			"id: 3\nevent: step.completed\ndata: " + envelope(3, "step.completed"), // cut here
		"id:3\nevent:step.completed\ndata:" + envelope(3, "step.completed") + "\n\n" +
			"id: 4\nevent: run.completed\ndata: " + envelope(4, "run.completed") + "\n\n",
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var seqs []int64
	var types []string
	for ev, err := range client.New(hs.URL).Events(context.Background(), "r1", 0) {
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		seqs, types = append(seqs, ev.Seq), append(types, string(ev.Type))
		if ev.RunID != "r1" || !json.Valid(ev.Data) {
			t.Errorf("event %d: %+v", ev.Seq, ev)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3, 4}) || types[3] != "run.completed" {
		t.Fatalf("events %v %v, want 1..4 ending with run.completed", seqs, types)
	}
	if !slices.Equal(srv.lastIDs, []string{"", "2"}) {
		t.Fatalf("Last-Event-ID of each connection %q, want none then 2", srv.lastIDs)
	}
	if gap := srv.at[1].Sub(srv.at[0]); gap < 1500*time.Millisecond {
		t.Fatalf("reconnected after %v, before the server's retry hint of 1.5s", gap)
	}
}

// TestEventsTooLarge: an event over the reader's limit ends the iterator
// with sse.ErrTooLarge; it does not reconnect to read it again.
func TestEventsTooLarge(t *testing.T) {
	t.Parallel()
	big := strings.Replace(envelope(2, "tool_call.completed"), `{}`, `"`+strings.Repeat("x", sse.DefaultMaxSize)+`"`, 1)
	srv := &scripted{scripts: []string{
		"id: 1\nevent: run.created\ndata: " + envelope(1, "run.created") + "\n\nid: 2\nevent: tool_call.completed\ndata: " + big + "\n\n",
		"id: 3\nevent: run.completed\ndata: " + envelope(3, "run.completed") + "\n\n",
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var seqs []int64
	var last error
	for ev, err := range client.New(hs.URL).Events(context.Background(), "r1", 0) {
		if err != nil {
			last = err
			continue
		}
		seqs = append(seqs, ev.Seq)
	}
	if !errors.Is(last, sse.ErrTooLarge) || !slices.Equal(seqs, []int64{1}) || len(srv.lastIDs) != 1 {
		t.Fatalf("events %v, error %v, %d connections; want event 1, ErrTooLarge, 1 connection", seqs, last, len(srv.lastIDs))
	}
}
