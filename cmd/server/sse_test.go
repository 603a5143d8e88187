package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/client/sse"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// sseEvent is one event as a client sees it.
type sseEvent struct {
	ID    string `json:"id"`
	Event string `json:"event"`
	Data  string `json:"data"`
}

// readEvents reads events from an SSE body until stop says so or the body
// ends; heartbeats are left out.
func readEvents(t *testing.T, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	readEventsInto(body, func(e sseEvent) bool {
		out = append(out, e)
		return stop != nil && stop(e)
	})
	return out
}

// readEventsInto calls add for each event read from an SSE body (heartbeats
// left out) until add returns true or the body ends.
func readEventsInto(body io.Reader, add func(sseEvent) bool) {
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if err != nil {
			return
		}
		if ev.Type != "heartbeat" && add(sseEvent{ID: ev.ID, Event: ev.Type, Data: ev.Data}) {
			return
		}
	}
}

func postStream(t *testing.T, base, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(base+"/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /runs stream: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp, strings.TrimPrefix(resp.Header.Get("Location"), "/runs/")
}

func getEvents(t *testing.T, base, id, lastID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/runs/"+id+"/events", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// checkTranscript compares what a client received with a full replay of the
// ended run: the same (id, event, data), byte for byte, ids 1, 2, 3..., each
// event as openapi.yaml describes it.
func checkTranscript(t *testing.T, base, id string, got []sseEvent) {
	t.Helper()
	// A stream closes after each terminal event; read on until the server
	// says there is nothing more (204).
	var full []sseEvent
	for {
		last := ""
		if len(full) > 0 {
			last = full[len(full)-1].ID
		}
		resp := getEvents(t, base, id, last)
		evs := readEvents(t, resp.Body, nil)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			break
		}
		if len(evs) == 0 {
			t.Fatalf("replay after %q: status %d and no events", last, resp.StatusCode)
		}
		full = append(full, evs...)
	}
	if len(got) != len(full) {
		t.Fatalf("client received %d events, the replay has %d", len(got), len(full))
	}
	for i := range full {
		if full[i].ID != strconv.Itoa(i+1) {
			t.Fatalf("replay event %d has id %s", i, full[i].ID)
		}
		if got[i] != full[i] {
			t.Fatalf("event %d differs:\n got %+v\nwant %+v", i, got[i], full[i])
		}
		spectest.CheckEvent(t, full[i].Event, []byte(full[i].Data))
	}
}

// TestStreamFromPostThenResumeWithLastEventID: a run streamed from its
// POST and taken up again with Last-Event-ID, read raw: the test is about
// the SSE wire (headers, ids, bytes, the 204 after the end).
func TestStreamFromPostThenResumeWithLastEventID(t *testing.T) {
	t.Parallel()
	base := setup(t).URL
	resp, id := postStream(t, base, `{"stream": true, "input": "/call calculator {\"expression\":\"2+2\"}\n/stream 30 10"}`)
	if resp.Header.Get("Cache-Control") != "no-cache" || resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("stream headers %v", resp.Header)
	}
	first := readEvents(t, resp.Body, func(e sseEvent) bool { return e.Event == "message.delta" })
	resp.Body.Close() // the client drops; the run goes on (on_disconnect: continue)
	if len(first) == 0 || first[0].ID != "1" || first[0].Event != "run.created" {
		t.Fatalf("stream did not start with event 1: %+v", first)
	}
	resp = getEvents(t, base, id, first[len(first)-1].ID)
	rest := readEvents(t, resp.Body, nil) // the server closes after the terminal event
	resp.Body.Close()
	if len(rest) == 0 || rest[len(rest)-1].Event != "run.completed" {
		t.Fatalf("resumed stream did not end with run.completed: %+v", rest)
	}
	checkTranscript(t, base, id, append(first, rest...))
	// Nothing after the terminal event: 204, so that EventSource stops.
	resp = getEvents(t, base, id, rest[len(rest)-1].ID)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reconnect after the end: %d", resp.StatusCode)
	}
}

func TestStreamDisconnectInterruptsAndResumeContinues(t *testing.T) {
	t.Parallel()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/charge": webhooktest.Respond(http.StatusOK, `{"charged":true}`)})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[{"name":"charge","description":"charge a card",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":5000}]}`, sink.URL+"/charge")))
	base := s.URL

	// The streams raw, as an SSE client reads them: the transcripts are
	// compared byte for byte; the rest goes through the SDK.
	resp, id := postStream(t, base, `{"stream": true, "on_disconnect": "interrupt", "input": "/call charge {}\n/next\n/stream 100 20"}`)
	first := readEvents(t, resp.Body, func(e sseEvent) bool { return e.Event == "message.delta" })
	resp.Body.Close()
	waitStatus(t, s.Client, id, agentd.StatusInterrupted)
	if _, err := s.Client.ResumeRun(testCtx(t), id); err != nil || s.Wire.last(t, http.MethodPost, "/runs/"+id+"/resume").Status != http.StatusOK {
		t.Fatalf("resume: %v", err)
	}
	// The client reconnects with the last id it saw (its stream closed at
	// run.interrupted, then the last event), until the run completes.
	var rest []sseEvent
	for len(rest) == 0 || rest[len(rest)-1].Event != "run.completed" {
		last := first[len(first)-1].ID
		if len(rest) > 0 {
			last = rest[len(rest)-1].ID
		}
		resp = getEvents(t, base, id, last)
		got := readEvents(t, resp.Body, nil)
		resp.Body.Close()
		if len(got) == 0 {
			t.Fatalf("no events after %s (status %d)", last, resp.StatusCode)
		}
		rest = append(rest, got...)
	}
	want, _ := strconv.Atoi(first[len(first)-1].ID)
	if len(rest) == 0 || rest[0].ID != strconv.Itoa(want+1) {
		t.Fatalf("the resumed stream does not continue the seq after %d: %+v", want, rest)
	}
	types := map[string]int{}
	for _, e := range append(first, rest...) {
		types[e.Event]++
	}
	if types["run.interrupted"] != 1 || types["run.resumed"] != 1 || types["run.completed"] != 1 {
		t.Fatalf("event types %v", types)
	}
	checkTranscript(t, base, id, append(first, rest...))
	// A replay from the start goes through the old run.interrupted and the
	// resume, to the run's real end, in one stream.
	resp = getEvents(t, base, id, "")
	all := readEvents(t, resp.Body, nil)
	resp.Body.Close()
	if len(all) != len(first)+len(rest) || all[len(all)-1].Event != "run.completed" {
		t.Fatalf("a replay from the start got %d events ending with %s, want %d ending with run.completed",
			len(all), all[len(all)-1].Event, len(first)+len(rest))
	}
	seen := sink.Keys("/charge")
	if len(seen) != 1 {
		t.Fatalf("side effect keys %v", seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("side effect %s ran %d times", k, n)
		}
	}
}

// cuttingProxy forwards TCP connections to target, cutting each one after
// it has passed budget bytes to the client, so that an SSE client must
// reconnect with Last-Event-ID mid-run.
func cuttingProxy(t *testing.T, target string, budget int64) (addr string, cuts func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				copied, _ := io.CopyN(c, s, budget)
				if copied == budget {
					mu.Lock()
					n++
					mu.Unlock()
				}
				c.Close()
				s.Close()
			}()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestEventSourceClientResumes reads a run with the eventsource package
// under Node.js (a WHATWG EventSource with its own reconnect) through a
// proxy that cuts the connection mid-run, again and again.
func TestEventSourceClientResumes(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "eventsource", "eventsource")
	s := setup(t, withEnv("AGENTD_SSE_RETRY", "50ms"))
	base := s.URL
	run, err := s.Client.CreateRun(testCtx(t), client.CreateRun{Input: "/call calculator {\"expression\":\"2+2\"}\n/stream 60 15"})
	if err != nil {
		t.Fatal(err)
	}
	proxy, cuts := cuttingProxy(t, strings.TrimPrefix(base, "http://"), 2500)
	cmd := exec.Command("node", "client.mjs", "http://"+proxy+"/runs/"+run.ID+"/events")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got []sseEvent
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e sseEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("client output %q: %v", line, err)
		}
		got = append(got, e)
	}
	if cuts() < 2 {
		t.Fatalf("the proxy cut %d connections; the test needs at least 2", cuts())
	}
	t.Logf("EventSource read %d events over %d cut connections (%s)", len(got), cuts(), strings.TrimSpace(stderr.String()))
	checkTranscript(t, base, run.ID, got)
}
