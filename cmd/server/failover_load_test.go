package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// This file holds the failover test's clients: the load of runs, their
// readers, the answers to what runs wait for, and the poll of /readyz.

// failoverLoad is the clients of the test: runs created through any
// instance, each retried with its Idempotency-Key until acknowledged; a
// reader on most of them; a client that answers what runs wait for
// (approvals, side effects of unknown outcome); and a poll of every
// instance's /readyz. It records every answer with its time.
type failoverLoad struct {
	fleet  *failoverFleet
	sink   *webhooktest.Sink
	store  *persist.Store
	client *http.Client

	ctx      context.Context // the readers', the answering client's and the poller's
	cancel   context.CancelFunc
	flowCtx  context.Context // the creation of runs
	stopRuns context.CancelFunc
	flow     sync.WaitGroup // the creation of runs
	reading  sync.WaitGroup // the readers
	others   sync.WaitGroup // the answering client and the poller of /readyz

	mu          sync.Mutex
	acked       []string
	posts       []failoverAnswer // POST /runs
	readyz      []failoverAnswer // GET /readyz
	statuses    map[string]map[int]int
	readers     map[string]*failoverReader
	answered    map[string]bool
	approvals   int
	resolutions int
	drops       int
}

// failoverAnswer is one answer of agentd (status 0: none came).
type failoverAnswer struct {
	start, end time.Time
	status     int
	retryAfter bool
	acked      bool // a POST /runs whose run was acknowledged
}

// The routes whose answers are counted.
const (
	routeCreate  = "POST /runs"
	routeEvents  = "GET /runs/{id}/events"
	routeActions = "POST /runs/{id}/actions"
	routeReady   = "GET /readyz"
)

// startLoad starts the clients of the load against fleet.
func startLoad(fleet *failoverFleet, sink *webhooktest.Sink, store *persist.Store) *failoverLoad {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 15 * time.Second
	l := &failoverLoad{fleet: fleet, sink: sink, store: store, client: &http.Client{Transport: tr},
		statuses: map[string]map[int]int{}, readers: map[string]*failoverReader{}, answered: map[string]bool{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.flowCtx, l.stopRuns = context.WithCancel(l.ctx)
	l.flow.Add(1)
	go l.createRuns()
	l.others.Add(2)
	go l.answerActions()
	go l.pollReady()
	return l
}

// stopFlow stops creating runs; the rest goes on.
func (l *failoverLoad) stopFlow() {
	l.stopRuns()
	l.flow.Wait()
}

// close stops every client of the load and waits for them.
func (l *failoverLoad) close() {
	l.cancel()
	l.flow.Wait()
	l.reading.Wait()
	l.others.Wait()
	l.client.CloseIdleConnections()
}

// createRuns creates runs until stopFlow, each retried with its key until
// it is acknowledged (or 300 tries, about 40 s, went unanswered).
func (l *failoverLoad) createRuns() {
	defer l.flow.Done()
	for n := 0; l.flowCtx.Err() == nil; n++ {
		body, stream, read := failoverBody(n)
		key := fmt.Sprintf("failover-%d", n)
		for try := 0; try < 300 && l.flowCtx.Err() == nil; try++ {
			ok := l.create(body, key, stream, read)
			time.Sleep(failoverInterval)
			if ok {
				break
			}
		}
	}
}

// create sends one POST /runs through any instance and records the answer;
// an acknowledged run gets its reader, on the answer's own stream when it
// is one.
func (l *failoverLoad) create(body, key string, stream, read bool) bool {
	ctx, cancel := context.WithCancel(l.ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.fleet.addr()+"/runs", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	a := failoverAnswer{start: time.Now()}
	resp, err := l.client.Do(req)
	a.end = time.Now()
	if err != nil {
		cancel()
		l.recordPost(a, "")
		return false
	}
	a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/runs/")
	a.acked = id != "" && (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && isStream(resp) == stream
	l.recordPost(a, id)
	if a.acked && isStream(resp) {
		l.follow(id, resp, cancel)
		return true
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if a.acked && read {
		l.follow(id, nil, nil)
	}
	return a.acked
}

// recordPost records a POST /runs answer, and its run when acknowledged.
func (l *failoverLoad) recordPost(a failoverAnswer, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts = append(l.posts, a)
	l.count(routeCreate, a.status)
	if a.acked {
		l.acked = append(l.acked, id)
	}
}

// count counts an answer of route; l.mu is held.
func (l *failoverLoad) count(route string, status int) {
	if l.statuses[route] == nil {
		l.statuses[route] = map[int]int{}
	}
	l.statuses[route][status]++
}

// record counts an answer of route.
func (l *failoverLoad) record(route string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(route, status)
}

// other5xx is, by route, the 5xx answers other than 503; l.mu is held.
func (l *failoverLoad) other5xx() map[string]map[int]int {
	out := map[string]map[int]int{}
	for route, byStatus := range l.statuses {
		for status, n := range byStatus {
			if status >= 500 && status != http.StatusServiceUnavailable {
				if out[route] == nil {
					out[route] = map[int]int{}
				}
				out[route][status] = n
			}
		}
	}
	return out
}

// follow starts the reader of run id, from first when its POST answered
// with the stream (cancel ends that request).
func (l *failoverLoad) follow(id string, first *http.Response, cancel context.CancelFunc) {
	r := &failoverReader{id: id, cancel: cancel}
	l.mu.Lock()
	l.readers[id] = r
	l.mu.Unlock()
	l.reading.Add(1)
	go func() {
		defer l.reading.Done()
		r.follow(l, first)
	}()
}

// dropStreams closes every reader's connection, as clients whose network
// failed: each reconnects to any instance with Last-Event-ID.
func (l *failoverLoad) dropStreams() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.readers {
		if r.drop() {
			l.drops++
		}
	}
}

// snapshot is what clients have been shown so far: the runs acknowledged
// and, by run, the events read.
func (l *failoverLoad) snapshot() ([]string, map[string][]sseEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked), shownSnapshot(l.readers)
}

// ackedCount counts the runs acknowledged.
func (l *failoverLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// transcripts are the readers' transcripts, by run; the readers are done.
func (l *failoverLoad) transcripts() map[string]*[]sseEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]*[]sseEvent{}
	for id, r := range l.readers {
		r.mu.Lock()
		evs := slices.Clone(r.events)
		r.mu.Unlock()
		out[id] = &evs
	}
	return out
}

// waitAck waits for the first POST /runs sent after since to be
// acknowledged, and returns when its answer came; the test fails when none
// is within timeout: agentd did not take writes again.
func (l *failoverLoad) waitAck(t *testing.T, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		for _, a := range l.posts {
			if a.acked && !a.start.Before(since) {
				l.mu.Unlock()
				return a.end
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			posts, readyz := l.during(since, time.Now())
			t.Fatalf("agentd acknowledged no run in %v after the primary's death (and the standby's promotion): POST /runs %v; /readyz %v",
				timeout, posts, readyz)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// during counts the answers of POST /runs and of /readyz that came
// between from and to.
func (l *failoverLoad) during(from, to time.Time) (posts, readyz failoverAnswers) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tally := func(as []failoverAnswer) failoverAnswers {
		var c failoverAnswers
		for _, a := range as {
			if a.end.Before(from) || a.end.After(to) {
				continue
			}
			c.slowest = max(c.slowest, a.end.Sub(a.start))
			switch {
			case a.status == 0:
				c.noAnswer++
			case a.status < 300:
				c.ok++
			case a.status == http.StatusInternalServerError:
				c.s500++
			case a.status == http.StatusServiceUnavailable:
				c.s503++
				if a.retryAfter {
					c.retryAfter++
				}
			default:
				c.other++
			}
		}
		return c
	}
	return tally(l.posts), tally(l.readyz)
}

// answerActions answers, as a client, what runs wait for, until the load
// closes (answerBody says how).
func (l *failoverLoad) answerActions() {
	defer l.others.Done()
	for l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		runs, err := l.store.RunList(ctx, agentd.RunListParams{TenantID: "default", Status: agentd.StatusRequiresAction, Limit: 100})
		cancel()
		if err == nil {
			for _, r := range runs {
				l.answer(r)
			}
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// answer posts the decision on what run r waits for, once per action.
func (l *failoverLoad) answer(r agentd.Run) {
	callID, decision, approval := answerBody(l.sink, r)
	mark := fmt.Sprintf("%s/%s/%s/%d", r.ID, callID, decision, r.Epoch)
	l.mu.Lock()
	seen := l.answered[mark]
	l.mu.Unlock()
	if decision == "" || seen {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.fleet.addr()+"/runs/"+r.ID+"/actions",
		strings.NewReader(jsonAction(callID, decision)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(routeActions, status)
	if status == http.StatusOK {
		l.answered[mark] = true
		if approval {
			l.approvals++
		} else {
			l.resolutions++
		}
	}
}

// pollReady asks every live instance's /readyz four times a second.
func (l *failoverLoad) pollReady() {
	defer l.others.Done()
	for l.ctx.Err() == nil {
		for _, addr := range l.fleet.addrs() {
			ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			a := failoverAnswer{start: time.Now()}
			resp, err := l.client.Do(req)
			a.end = time.Now()
			if err == nil {
				a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
			l.mu.Lock()
			l.readyz = append(l.readyz, a)
			l.count(routeReady, a.status)
			l.mu.Unlock()
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// drain waits until every run stored has ended and every reader has read
// its run's end, and returns the ids of the runs stored.
func (l *failoverLoad) drain(t *testing.T, url string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ids := storedRuns(t, url)
	waitEnded(t, l.store, ids, timeout)
	done := make(chan struct{})
	go func() { l.reading.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(30*time.Second, time.Until(deadline))):
		l.cancel()
		<-done
		t.Fatal("SSE readers did not reach their runs' ends")
	}
	return ids
}

// failoverReader follows one run's events as a client would: it
// reconnects with Last-Event-ID to any instance whenever its connection
// breaks or is dropped, until it reads the run's end; after an error it
// waits as Retry-After says, else twice as long as the last time (50 ms
// to 2 s).
type failoverReader struct {
	id string

	mu     sync.Mutex
	events []sseEvent
	cancel context.CancelFunc // ends the current connection
}

// follow reads the run's stream, from first when not nil, to its end.
func (r *failoverReader) follow(l *failoverLoad, first *http.Response) {
	resp := first
	wait := 50 * time.Millisecond
	for {
		switch {
		case resp == nil:
			wait = min(2*wait, 2*time.Second)
		case resp.StatusCode == http.StatusOK && isStream(resp):
			if r.session(resp) {
				return
			}
			wait = 50 * time.Millisecond
		case resp.StatusCode == http.StatusNoContent: // nothing after the last event: the run ended
			resp.Body.Close()
			r.drop()
			return
		default:
			wait = min(2*wait, 2*time.Second)
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
				wait = time.Duration(secs) * time.Second
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.drop()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(wait):
		}
		resp = r.open(l)
	}
}

// open connects to any instance, from the last event read; nil when no
// answer came.
func (r *failoverReader) open(l *failoverLoad) *http.Response {
	ctx, cancel := context.WithCancel(l.ctx)
	r.mu.Lock()
	r.cancel = cancel
	last := ""
	if n := len(r.events); n > 0 {
		last = r.events[n-1].ID
	}
	r.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.fleet.addr()+"/runs/"+r.id+"/events", nil)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		l.record(routeEvents, 0)
		r.drop()
		return nil
	}
	l.record(routeEvents, resp.StatusCode)
	return resp
}

// session reads the events of one connection's stream; it reports whether
// the run's end was read.
func (r *failoverReader) session(resp *http.Response) bool {
	defer func() {
		resp.Body.Close()
		r.drop()
	}()
	ended := false
	readEventsInto(resp.Body, func(e sseEvent) bool {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		ended = agentd.EventType(e.Event).Terminal()
		return ended
	})
	return ended
}

// drop ends the current connection, if any; it reports whether there was
// one.
func (r *failoverReader) drop() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel == nil {
		return false
	}
	r.cancel()
	r.cancel = nil
	return true
}
