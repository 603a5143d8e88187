package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestShutdownOrder stops a server process with SIGTERM while one run
// streams its answer to a client and a second run of the same conversation
// waits queued behind it, with its own stream open, and checks the order of
// shutdown step by step:
//
//  1. GET /readyz answers 503 shutting_down while the first run still
//     streams (HTTP and streams are up; load balancers stop sending).
//  2. The first run drains to its end: its remaining events, committed
//     after SIGTERM, still reach its client, and are notified to other
//     instances (a LISTEN of the test's own sees them).
//  3. Only then do the streams close: the queued run's stream ends without
//     a terminal event, after the first run's end was delivered.
//  4. The process exits cleanly, and a new instance finishes the queued
//     run; its client reconnects there with Last-Event-ID and has the whole
//     transcript, with no gap and no duplicate.
func TestShutdownOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_SHUTDOWN_GRACE=30s", "AGENTD_HEARTBEAT=1h"}
	a := startChild(t, env)
	base := "http://" + a.addr

	// The test listens to the channel on which instances tell each other
	// of new events.
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	lctx, stopListen := context.WithCancel(context.Background())
	var notifiedMu sync.Mutex
	notified := map[string]int64{} // run id -> highest seq notified
	listening := make(chan struct{})
	var once sync.Once
	var listenDone sync.WaitGroup
	listenDone.Go(func() {
		_ = store.Listen(lctx, []string{persist.ChannelEvents}, func() { once.Do(func() { close(listening) }) },
			func(_, payload string) {
				id, seqText, _ := strings.Cut(payload, ":")
				seq, _ := strconv.ParseInt(seqText, 10, 64)
				notifiedMu.Lock()
				notified[id] = max(notified[id], seq)
				notifiedMu.Unlock()
			})
	})
	t.Cleanup(func() { stopListen(); listenDone.Wait() })
	<-listening

	// Run 1 answers in 60 chunks 100 ms apart; run 2 waits behind it.
	resp1, id1 := postStream(t, base, `{"stream": true, "input": "/stream 60 100"}`)
	defer resp1.Body.Close()
	var run1 struct {
		ConversationID string `json:"conversation_id"`
	}
	getJSON(t, base+"/runs/"+id1, &run1)
	created, err := http.Post(base+"/runs", "application/json", strings.NewReader(
		`{"conversation_id": "`+run1.ConversationID+`", "if_busy": "enqueue", "input": "/say second"}`))
	if err != nil {
		t.Fatal(err)
	}
	var run2 struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	err = json.NewDecoder(created.Body).Decode(&run2)
	created.Body.Close()
	if err != nil || created.StatusCode != http.StatusAccepted || run2.Status != "queued" {
		t.Fatalf("second run: %d %+v %v", created.StatusCode, run2, err)
	}
	resp2 := getEvents(t, base, run2.ID, "")
	defer resp2.Body.Close()

	// What each stream receives, and when it ends, in the order seen.
	type mark struct {
		stream int
		ev     sseEvent // empty: the stream ended
	}
	marks := make(chan mark, 1000)
	for i, body := range []io.Reader{resp1.Body, resp2.Body} {
		go func() {
			readEventsInto(body, func(e sseEvent) bool { marks <- mark{i + 1, e}; return false })
			marks <- mark{stream: i + 1}
		}()
	}
	var got [3][]sseEvent // by stream
	ended := [3]bool{}
	take := func(until func(mark) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m := <-marks:
				if m.ev.ID == "" {
					ended[m.stream] = true
				} else {
					got[m.stream] = append(got[m.stream], m.ev)
				}
				if until(m) {
					return
				}
			case <-timeout:
				t.Fatalf("shutdown stalled: stream 1 has %d events (ended %v), stream 2 has %d (ended %v)",
					len(got[1]), ended[1], len(got[2]), ended[2])
			}
		}
	}
	isDelta := func(m mark) bool { return m.stream == 1 && m.ev.Event == "message.delta" }
	// Stream 1 is under way; stream 2 has its run.created.
	deltas := 0
	take(func(m mark) bool {
		if isDelta(m) {
			deltas++
		}
		return deltas >= 3 && len(got[2]) >= 1
	})
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// 1. /readyz turns 503 shutting_down while run 1 still streams.
	for {
		r, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("readyz after SIGTERM: %v", err)
		}
		var p struct {
			Code string `json:"code"`
		}
		_ = json.NewDecoder(r.Body).Decode(&p)
		r.Body.Close()
		if r.StatusCode == http.StatusServiceUnavailable {
			if p.Code != "shutting_down" {
				t.Fatalf("readyz while draining: 503 %q, want shutting_down", p.Code)
			}
			break
		}
		if r.StatusCode != http.StatusOK {
			t.Fatalf("readyz after SIGTERM: %d", r.StatusCode)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ended[1] || ended[2] {
		t.Fatalf("a stream ended before /readyz said the instance is shutting down (1: %v, 2: %v)", ended[1], ended[2])
	}
	seenAt503 := len(got[1])

	// 2. Run 1 drains: its later events, up to its end, reach its stream.
	take(func(m mark) bool {
		if m.stream == 2 && m.ev.ID == "" {
			t.Fatal("the queued run's stream closed before the draining run ended")
		}
		return m.stream == 1 && (m.ev.Event == "run.completed" || m.ev.ID == "")
	})
	last := got[1][len(got[1])-1]
	if last.Event != "run.completed" || len(got[1]) <= seenAt503 {
		t.Fatalf("stream 1 ended with %+v after %d events (%d at the 503), want its run.completed after more events",
			last, len(got[1]), seenAt503)
	}
	lastSeq, _ := strconv.ParseInt(last.ID, 10, 64)

	// 3. Then the streams close: run 2's ends without a terminal event.
	take(func(m mark) bool { return m.stream == 2 && m.ev.ID == "" })
	for _, e := range got[2] {
		if strings.HasPrefix(e.Event, "run.") && e.Event != "run.created" {
			t.Fatalf("the queued run's stream got %s from the stopping instance", e.Event)
		}
	}

	// 4. The process exits cleanly.
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The drain's commits were notified to other instances (the notifier
	// sends the highest seq of a run, coalesced).
	deadline := time.Now().Add(5 * time.Second)
	for {
		notifiedMu.Lock()
		n := notified[id1]
		notifiedMu.Unlock()
		if n >= lastSeq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run 1's events up to %d committed while draining; notified up to %d only", lastSeq, n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A new instance finishes run 2. Run 1's client had every event; run
	// 2's reconnects with the last id it saw and reads on to the end.
	b := startChild(t, env)
	baseB := "http://" + b.addr
	checkTranscript(t, baseB, id1, got[1])
	resp := getEvents(t, baseB, run2.ID, got[2][len(got[2])-1].ID)
	rest := readEvents(t, resp.Body, func(e sseEvent) bool { return e.Event == "run.completed" })
	resp.Body.Close()
	checkTranscript(t, baseB, run2.ID, append(got[2], rest...))
}

// getJSON decodes the JSON body of GET url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, r.StatusCode)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownOrderDocumented: the order in which the instance's parts
// stop, as docs/design.md ("Graceful shutdown") and the comment on run
// list it, is the code's: the reverse of instance.parts, every optional
// part configured.
func TestShutdownOrderDocumented(t *testing.T) {
	in := &instance{}
	in.cfg.Retention, in.cfg.ReplicaURL = time.Hour, "postgres://replica"
	code := in.parts().Names()
	slices.Reverse(code)
	names := regexp.MustCompile("[a-z_]+")
	for file, list := range map[string]*regexp.Regexp{
		"../../docs/design.md": regexp.MustCompile(`(?s)\n *Stop order: (.*?)\.\n`),
		"run.go":               regexp.MustCompile(`(?s)\n// Stop order: (.*?)\.\n`),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := list.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s has no line %q", file, "Stop order: ...")
			continue
		}
		// The docs' names are in backquotes, each maybe with a condition
		// in parentheses; the comment's are bare.
		text := regexp.MustCompile(`\([^)]*\)|//`).ReplaceAllString(string(m[1]), "")
		var doc []string
		for _, item := range strings.Split(text, ",") {
			if n := names.FindString(item); n != "" {
				doc = append(doc, n)
			}
		}
		if !slices.Equal(doc, code) {
			t.Errorf("%s lists the stop order %v; the code's is %v", file, doc, code)
		}
	}
}
