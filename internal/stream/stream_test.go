package stream_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client/sse"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/stream"
)

func TestMain(m *testing.M) {
	persisttest.NeedConnections(30) // 25 at once at the most seen on 2 CPUs: several instances, each a store and a listener, a test
	goleak.VerifyTestMain(m,
		// pgx pools close their health checker asynchronously.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// instance is one agentd "instance": a Hub and an HTTP server mounting it.
type instance struct {
	hub *stream.Hub
	srv *httptest.Server
}

// newInstance starts hub on store behind GET /runs/{id}/events (the route as
// the API serves it, reduced to what the Hub needs). Both stop when t ends,
// the Hub first so that its streams end.
func newInstance(t testing.TB, hub *stream.Hub, store stream.Store, wrap func(net.Listener) net.Listener) *instance {
	t.Helper()
	r := chi.NewRouter()
	r.Get("/runs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseInt(cmp.Or(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after"), "0"), 10, 64)
		_, err := hub.StreamRun(w, r, chi.URLParam(r, "id"), after)
		switch {
		case errors.Is(err, stream.ErrEnded):
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, agentd.ErrRunNotFound):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewUnstartedServer(r)
	if wrap != nil {
		srv.Listener = wrap(srv.Listener)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hub.Stop(ctx); err != nil {
			t.Errorf("stop hub: %v", err)
		}
	})
	return &instance{hub: hub, srv: srv}
}

// publishing returns a store on the database at url that publishes its
// commits to pub.
func publishing(t testing.TB, url string, pub persist.Publisher) *persist.Store {
	t.Helper()
	return persisttest.Open(t, persist.Config{URL: url, Publisher: pub})
}

// seqsOnly publishes commits to a Hub by their last seq alone, never with
// their events in hand: the Hub reads them back.
type seqsOnly struct{ hub *stream.Hub }

func (p seqsOnly) Published(runID string, lastSeq int64) { p.hub.Published(runID, lastSeq) }

func (p seqsOnly) PublishedEvents(runID string, evs []agentd.Event) {
	p.hub.Published(runID, evs[len(evs)-1].Seq)
}

// newRun creates a run and claims it, so that events can be appended under
// the returned fence.
func newRun(t testing.TB, store *persist.Store) persist.Fence {
	t.Helper()
	ctx := context.Background()
	r, _, err := store.RunCreate(ctx, persist.RunCreateParams{
		TenantID: "t1", Model: "m", Input: []agentd.InputMessage{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.RunClaim(ctx, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != r.ID {
		t.Fatalf("claimed %s, want %s", c.ID, r.ID)
	}
	return persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w"}
}

// appendEvents appends n message.delta events with text of size bytes, in
// commits of at most per events.
func appendEvents(t testing.TB, store *persist.Store, f persist.Fence, n, per, size int) {
	t.Helper()
	text := strings.Repeat("x", size)
	for n > 0 {
		k := min(n, per)
		evs := make([]agentd.EventIn, k)
		for i := range evs {
			evs[i] = agentd.EventOf(1, agentd.MessageDeltaData{Text: text})
		}
		if _, err := store.Exec(context.Background(), f, evs); err != nil {
			t.Error(err)
			return
		}
		n -= k
	}
}

func complete(t testing.TB, store *persist.Store, f persist.Fence) {
	t.Helper()
	_, err := store.Exec(context.Background(), f, []agentd.EventIn{agentd.RunEndEvent(1, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: f.RunID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})
	if err != nil {
		t.Error(err)
	}
}

// transcript is the full replay of a run read from the database, as the
// (id, event, data) lines a client sees.
func transcript(t *testing.T, store *persist.Store, runID string) string {
	t.Helper()
	evs, err := store.EventsAfter(context.Background(), runID, 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(sseEvent{ID: strconv.FormatInt(ev.Seq, 10), HasID: true, Type: string(ev.Type), Data: string(ev.Data)}.line())
	}
	return b.String()
}

// event is one SSE event as a client parses it.
type sseEvent struct {
	ID    string
	HasID bool
	Type  string
	Data  string
}

func (e sseEvent) line() string { return e.ID + "\n" + e.Type + "\n" + e.Data + "\n" }

// sseReader reads an SSE body with the SDK's reader; blocks without data
// (the retry hint) are no events.
type sseReader struct{ r *sse.Reader }

func (s *sseReader) next() (sseEvent, error) {
	ev, err := s.r.Next()
	if err != nil {
		return sseEvent{}, err
	}
	return sseEvent{ID: ev.ID, HasID: ev.HasID, Type: ev.Type, Data: ev.Data}, nil
}

// client is a plain HTTP client without keep-alives, closed when t ends.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get sends a GET; on failure it reports the error and returns nil (it may
// run on any goroutine).
func get(t testing.TB, c *http.Client, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return nil
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	return resp
}

// readAll reads a stream to its end and returns its events; it reports
// errors with t.Error (it may run on any goroutine).
func readAll(t testing.TB, resp *http.Response) []sseEvent {
	t.Helper()
	if resp == nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
		return nil
	}
	r := &sseReader{sse.NewReader(resp.Body)}
	var out []sseEvent
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Error(err)
			return out
		}
		out = append(out, ev)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTranscriptIdentity: clients that leave and rejoin at random points,
// on either of two instances, each end with exactly the stored transcript.
func TestTranscriptIdentity(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	// A's streams get A's commits handed over; B reads them back.
	hubA, hubB := stream.New(stream.Config{}), stream.New(stream.Config{Poll: time.Hour})
	storeA, storeB := publishing(t, url, hubA), publishing(t, url, seqsOnly{hubB})
	a := newInstance(t, hubA, storeA, nil)
	// B polls too rarely to matter: it learns of A's commits by NOTIFY.
	b := newInstance(t, hubB, storeB, nil)
	f := newRun(t, storeA)
	hc := client(t)
	var connects, viaB atomic.Int64

	const clients = 8
	got := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var tr strings.Builder
			last := 0
			for {
				inst := a
				if rng.IntN(2) == 0 {
					inst = b
					viaB.Add(1)
				}
				connects.Add(1)
				u := inst.srv.URL + "/runs/" + f.RunID + "/events"
				header := map[string]string{}
				if last > 0 {
					if rng.IntN(2) == 0 {
						header["Last-Event-ID"] = strconv.Itoa(last)
					} else {
						u += "?after=" + strconv.Itoa(last)
					}
				}
				resp := get(t, hc, u, header)
				if resp == nil {
					return
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("client %d: status %d", i, resp.StatusCode)
					resp.Body.Close()
					return
				}
				r := &sseReader{sse.NewReader(resp.Body)}
				done := false
				for k := rng.IntN(40); k > 0 && !done; k-- {
					ev, err := r.next()
					if err != nil {
						t.Errorf("client %d after %d: %v", i, last, err)
						resp.Body.Close()
						return
					}
					if !ev.HasID {
						continue // heartbeat
					}
					if ev.ID != strconv.Itoa(last+1) {
						t.Errorf("client %d: id %s after %d", i, ev.ID, last)
						resp.Body.Close()
						return
					}
					last++
					tr.WriteString(ev.line())
					done = agentd.EventType(ev.Type).Terminal()
				}
				resp.Body.Close() // a disconnect at a random point
				if done {
					got[i] = tr.String()
					return
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for range 150 {
		appendEvents(t, storeA, f, 1+rng.IntN(4), 8, 1+rng.IntN(200))
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
	complete(t, storeA, f)
	wg.Wait()

	t.Logf("%d connections, %d through B", connects.Load(), viaB.Load())
	want := transcript(t, storeA, f.RunID)
	for i, g := range got {
		if g != want {
			t.Errorf("client %d: transcript differs from the replay (%d bytes, want %d)", i, len(g), len(want))
		}
	}
}

// TestEndedRun: a run that already ended replays in full and closes, from
// the start, after ?after=N or after Last-Event-ID.
func TestEndedRun(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	inst := newInstance(t, stream.New(stream.Config{}), store, nil)
	f := newRun(t, store)
	appendEvents(t, store, f, 5, 2, 10)
	complete(t, store, f) // events 1 (run.created) to 7 (run.completed)
	hc := client(t)
	base := inst.srv.URL + "/runs/" + f.RunID + "/events"

	resp := get(t, hc, base, nil)
	if resp == nil {
		t.FailNow()
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	all := readAll(t, resp)
	var b strings.Builder
	for _, ev := range all {
		b.WriteString(ev.line())
	}
	if want := transcript(t, store, f.RunID); b.String() != want {
		t.Errorf("full replay:\n%s\nwant:\n%s", b.String(), want)
	}
	if len(all) != 7 || all[6].Type != "run.completed" {
		t.Fatalf("got %d events, last %+v", len(all), all[len(all)-1])
	}

	for _, tc := range []struct {
		name   string
		url    string
		header map[string]string
		first  string
	}{
		{"after", base + "?after=3", nil, "4"},
		{"last-event-id", base, map[string]string{"Last-Event-ID": "5"}, "6"},
		{"header wins", base + "?after=1", map[string]string{"Last-Event-ID": "2"}, "3"},
		{"after=0", base + "?after=0", nil, "1"},
	} {
		evs := readAll(t, get(t, hc, tc.url, tc.header))
		if len(evs) == 0 || evs[0].ID != tc.first || evs[len(evs)-1].ID != "7" {
			t.Errorf("%s: got %+v, want %s..7", tc.name, evs, tc.first)
		}
	}

	// Nothing after the terminal event: 204 tells EventSource to stop.
	resp = get(t, hc, base, map[string]string{"Last-Event-ID": "7"})
	if resp == nil {
		t.FailNow()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("after the terminal event: status %d, want 204", resp.StatusCode)
	}
}

// TestHeartbeat: a live run's stream carries heartbeats with the run's
// status and no id.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	inst := newInstance(t, stream.New(stream.Config{Heartbeat: 50 * time.Millisecond}), store, nil)
	f := newRun(t, store)
	resp := get(t, client(t), inst.srv.URL+"/runs/"+f.RunID+"/events", nil)
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	r := &sseReader{sse.NewReader(resp.Body)}
	for {
		ev, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != "heartbeat" {
			continue
		}
		if ev.HasID {
			t.Errorf("heartbeat has an id: %+v", ev)
		}
		var hb struct {
			Status    agentd.RunStatus `json:"status"`
			Step      *int             `json:"step"`
			UpdatedAt time.Time        `json:"updated_at"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &hb); err != nil {
			t.Fatal(err)
		}
		if hb.Status != agentd.StatusRunning || hb.Step == nil || hb.UpdatedAt.IsZero() {
			t.Errorf("heartbeat %s", ev.Data)
		}
		return
	}
}

// TestCrossInstance: a client of instance B sees the events committed
// through a store that tells only instance A, by LISTEN/NOTIFY alone (B's
// poll is too slow to matter).
func TestCrossInstance(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	hubA := stream.New(stream.Config{})
	storeA := publishing(t, url, seqsOnly{hubA})
	storeB := persisttest.Open(t, persist.Config{URL: url, MaxConns: 5}) // tells nobody
	a := newInstance(t, hubA, storeA, nil)
	b := newInstance(t, stream.New(stream.Config{Poll: time.Hour}), storeB, nil)
	f := newRun(t, storeA)

	resp := get(t, client(t), b.srv.URL+"/runs/"+f.RunID+"/events", nil)
	done := make(chan []sseEvent)
	go func() { done <- readAll(t, resp) }()
	if !waitFor(5*time.Second, func() bool { return b.hub.SubscriberCount() == 1 }) {
		t.Fatal("no subscriber on B")
	}
	for range 5 {
		appendEvents(t, storeA, f, 3, 3, 20)
		time.Sleep(20 * time.Millisecond)
	}
	complete(t, storeA, f)
	select {
	case evs := <-done:
		if len(evs) != 17 || evs[16].Type != "run.completed" {
			t.Errorf("got %d events", len(evs))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B's client did not get the run's events")
	}
	if s := a.hub.Stats(); s.Subscribers != 0 {
		t.Errorf("A has subscribers: %+v", s)
	}
}

// readCounter counts the database reads of events, and those from a run's
// start.
type readCounter struct {
	*persist.Store
	reads, fromStart atomic.Int64

	mu    sync.Mutex
	after []string // each read's kind and position, for a failure to show
}

func (c *readCounter) count(kind string, after int64) {
	c.reads.Add(1)
	if after == 0 {
		c.fromStart.Add(1)
	}
	c.mu.Lock()
	c.after = append(c.after, fmt.Sprintf("%s@%d", kind, after))
	c.mu.Unlock()
}

func (c *readCounter) history() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.after, " ")
}

func (c *readCounter) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	c.count("feed", after)
	return c.Store.EventsAfter(ctx, runID, after, limit)
}

// EventsReplay counts as EventsAfter does: a stream's catch-up reads
// through it.
func (c *readCounter) EventsReplay(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	c.count("replay", after)
	return c.Store.EventsReplay(ctx, runID, after, limit)
}

// openStreams opens n streams of a run from its start and waits until all
// are subscribed; each channel gets its stream's events when it ends.
func openStreams(t *testing.T, inst *instance, runID string, n int) []chan []sseEvent {
	t.Helper()
	c := client(t)
	got := make([]chan []sseEvent, n)
	for i := range got {
		got[i] = make(chan []sseEvent, 1)
		resp := get(t, c, inst.srv.URL+"/runs/"+runID+"/events", nil)
		go func() { got[i] <- readAll(t, resp) }()
	}
	if !waitFor(10*time.Second, func() bool { return inst.hub.SubscriberCount() == n }) {
		t.Fatalf("subscribers: %+v", inst.hub.Stats())
	}
	return got
}

// wantTranscripts checks that every stream got the run's stored events.
func wantTranscripts(t *testing.T, store *persist.Store, runID string, got []chan []sseEvent) {
	t.Helper()
	want := transcript(t, store, runID)
	for i, ch := range got {
		var b strings.Builder
		for _, ev := range <-ch {
			b.WriteString(ev.line())
		}
		if b.String() != want {
			t.Fatalf("stream %d differs from the stored run:\n%s\nwant:\n%s", i, b.String(), want)
		}
	}
}

// TestJoiningStreamsShareTheReplay: streams that join a run together replay
// its stored events from memory, not one database read each, and every one
// of them still gets the run's exact transcript.
func TestJoiningStreamsShareTheReplay(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{})
	store := publishing(t, persisttest.NewDatabase(t), seqsOnly{hub})
	counter := &readCounter{Store: store}
	inst := newInstance(t, hub, counter, nil)
	f := newRun(t, store)
	appendEvents(t, store, f, 30, 5, 40)

	const streams = 40
	got := openStreams(t, inst, f.RunID, streams)
	appendEvents(t, store, f, 10, 5, 40)
	complete(t, store, f)
	wantTranscripts(t, store, f.RunID, got)
	// The first stream, alone on the feed, keeps nothing; the first one to
	// join it reads again, and the feed keeps what it read for the others.
	if n := counter.fromStart.Load(); n > 2 {
		t.Fatalf("%d streams replaying from the start read the database %d times, want at most 2", streams, n)
	}
}

// TestJoiningALongRun: streams that join a run of several pages of events
// at once, from its start or from anywhere in it, while it goes on, each get
// exactly the stored events after the id they gave, though the feed keeps
// only the latest of them and the streams share their reads.
func TestJoiningALongRun(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{})
	store := publishing(t, persisttest.NewDatabase(t), seqsOnly{hub})
	inst := newInstance(t, hub, store, nil)
	f := newRun(t, store)
	appendEvents(t, store, f, 2500, 250, 100) // 3 pages, far more than a feed keeps

	const streams = 40
	c := client(t)
	afters := make([]int, streams)
	got := make([]chan []sseEvent, streams)
	var opened sync.WaitGroup
	for i := range got {
		if i >= streams/2 {
			afters[i] = rand.IntN(2500)
		}
		got[i] = make(chan []sseEvent, 1)
		opened.Go(func() {
			resp := get(t, c, inst.srv.URL+"/runs/"+f.RunID+"/events", map[string]string{"Last-Event-ID": strconv.Itoa(afters[i])})
			go func() { got[i] <- readAll(t, resp) }()
		})
	}
	opened.Wait()
	appendEvents(t, store, f, 20, 5, 100)
	complete(t, store, f)
	full := strings.SplitAfter(transcript(t, store, f.RunID), "\n")
	for i, ch := range got {
		var b strings.Builder
		for _, ev := range <-ch {
			b.WriteString(ev.line())
		}
		// Each event is 3 lines: id, type, data.
		if want := strings.Join(full[3*afters[i]:], ""); b.String() != want {
			t.Fatalf("stream %d (after %d) differs from the stored run: got %d bytes, want %d", i, afters[i], b.Len(), len(want))
		}
	}
}

// TestCommittedEventsAreNotReadBack: events committed by this instance's
// executor writes reach its streams as handed over by the store, without a
// database read per commit, and the streams still get the stored bytes.
func TestCommittedEventsAreNotReadBack(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Poll: time.Hour})
	store := publishing(t, persisttest.NewDatabase(t), hub)
	counter := &readCounter{Store: store}
	inst := newInstance(t, hub, counter, nil)
	f := newRun(t, store)
	got := openStreams(t, inst, f.RunID, 3)
	// The streams' replays read from the start; a feed reads after it.
	later := func() int64 { return counter.reads.Load() - counter.fromStart.Load() }
	before := later()
	for range 20 {
		appendEvents(t, store, f, 2, 2, 30)
		time.Sleep(5 * time.Millisecond)
	}
	complete(t, store, f)
	wantTranscripts(t, store, f.RunID, got)
	// One read is allowed: a commit that lands while the new feed learns
	// the run's last seq is read back by the streams behind it.
	if n := later() - before; n > 1 {
		t.Fatalf("21 commits made while streaming were read back %d times, want at most 1 (reads: %s; dropped: %d)",
			n, counter.history(), inst.hub.Stats().Dropped)
	}
}

// runReadCounter counts the reads of runs.
type runReadCounter struct {
	*persist.Store
	runReads atomic.Int64
}

func (c *runReadCounter) RunHead(ctx context.Context, id string) (agentd.RunHead, error) {
	c.runReads.Add(1)
	return c.Store.RunHead(ctx, id)
}

// TestHeartbeatsShareTheRunRead: the heartbeats of a run's streams that
// fall close together read the run once, not once per stream.
func TestHeartbeatsShareTheRunRead(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	counter := &runReadCounter{Store: store}
	const beat, streams = 400 * time.Millisecond, 20
	inst := newInstance(t, stream.New(stream.Config{Heartbeat: beat}), counter, nil)
	f := newRun(t, store)
	c := client(t)
	beats := make(chan struct{}, 10*streams)
	var opened, readers sync.WaitGroup
	for range streams { // opened at once
		opened.Go(func() {
			resp := get(t, c, inst.srv.URL+"/runs/"+f.RunID+"/events", nil)
			if resp == nil {
				return
			}
			t.Cleanup(func() { resp.Body.Close() })
			readers.Go(func() {
				r := &sseReader{sse.NewReader(resp.Body)}
				for {
					ev, err := r.next()
					if err != nil {
						return
					}
					if ev.Type == "heartbeat" {
						beats <- struct{}{}
					}
				}
			})
		})
	}
	opened.Wait()
	before := counter.runReads.Load()
	for range 3 * streams { // three beats of every stream
		select {
		case <-beats:
		case <-time.After(10 * time.Second):
			t.Fatal("heartbeats stopped")
		}
	}
	// The streams opened at once, well within half a beat of each other,
	// so each round of beats reads the run about once; one read per beat
	// would be 60.
	if n := counter.runReads.Load() - before; n > 3*4 {
		t.Fatalf("60 heartbeats of %d streams read the run %d times, want a few per round", streams, n)
	}
}

// smallBuffers makes accepted connections' send buffers small, so that a
// slow reader blocks the server's writes after little data.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// TestSlowReader: a client that reads one byte a second does not delay
// another client of the same run, and is dropped within twice the write
// deadline.
func TestSlowReader(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	hub := stream.New(stream.Config{WriteTimeout: writeTimeout, Heartbeat: time.Hour, Registerer: reg})
	store := publishing(t, persisttest.NewDatabase(t), seqsOnly{hub})
	inst := newInstance(t, hub, store, func(l net.Listener) net.Listener { return smallBuffers{l} })
	f := newRun(t, store)
	path := "/runs/" + f.RunID + "/events"

	// The slow reader: raw TCP with a small receive buffer.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	conn, err := d.Dial("tcp", inst.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		buf := make([]byte, 1)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	defer func() { conn.Close(); <-slowDone }()
	if !waitFor(5*time.Second, func() bool { return inst.hub.SubscriberCount() == 1 }) {
		t.Fatal("slow reader did not subscribe")
	}

	// The fast reader.
	resp := get(t, client(t), inst.srv.URL+path, nil)
	if resp == nil {
		t.FailNow()
	}
	caughtUp, fastDone := make(chan time.Time, 1), make(chan time.Time, 1)
	go func() {
		defer resp.Body.Close()
		defer close(fastDone)
		r := &sseReader{sse.NewReader(resp.Body)}
		for {
			ev, err := r.next()
			if err != nil {
				t.Errorf("fast reader: %v", err)
				return
			}
			switch {
			case ev.ID == "201":
				caughtUp <- time.Now()
			case ev.Type == "run.completed":
				fastDone <- time.Now()
				return
			}
		}
	}()
	if !waitFor(5*time.Second, func() bool { return inst.hub.SubscriberCount() == 2 }) {
		t.Fatal("fast reader did not subscribe")
	}

	// 200 KB in one commit, far more than the socket buffers: the slow
	// reader's stream blocks at once.
	appendEvents(t, store, f, 200, 200, 1000)
	t1 := time.Now()
	select {
	case at := <-caughtUp:
		t.Logf("fast reader had the commit %v after it", at.Sub(t1))
		if at.Sub(t1) > writeTimeout {
			t.Errorf("fast reader waited %v, as long as the slow reader's write deadline", at.Sub(t1))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast reader did not get the commit")
	}
	const slack = 400 * time.Millisecond
	if !waitFor(2*writeTimeout+slack-time.Since(t1), func() bool {
		s := inst.hub.Stats()
		return s.Dropped == 1 && s.Subscribers == 1 && s.Streams == 1
	}) {
		t.Fatalf("slow reader not dropped within 2×%v: %+v", writeTimeout, inst.hub.Stats())
	}
	t.Logf("slow reader dropped by %v after the commit", time.Since(t1))

	// The run goes on for the fast reader alone.
	appendEvents(t, store, f, 1000, 100, 1000)
	complete(t, store, f)
	select {
	case _, ok := <-fastDone:
		if !ok {
			t.Fatal("fast reader failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast reader did not get the terminal event")
	}
	if !waitFor(5*time.Second, func() bool { return inst.hub.Stats() == stream.Stats{Dropped: 1} }) {
		t.Fatalf("after the run: %+v", inst.hub.Stats())
	}
	if n := counter(t, reg, "agentd_sse_clients_dropped_total"); n != 1 {
		t.Errorf("agentd_sse_clients_dropped_total = %v", n)
	}
	if n := counter(t, reg, "agentd_sse_clients"); n != 0 {
		t.Errorf("agentd_sse_clients = %v", n)
	}
}

// counter sums a metric's samples in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestConnectDisconnectCycles: goroutines and subscriptions come back to
// where they started after 1,000 clients came and went. Not parallel: it
// counts the process's goroutines.
func TestConnectDisconnectCycles(t *testing.T) {
	store, _ := persisttest.New(t)
	inst := newInstance(t, stream.New(stream.Config{}), store, nil)
	f := newRun(t, store)
	hc := client(t)
	u := inst.srv.URL + "/runs/" + f.RunID + "/events"
	cycle := func(i int) {
		resp := get(t, hc, u, nil)
		if resp == nil {
			return
		}
		if i%2 == 0 { // else leave right after the headers
			if ev, err := (&sseReader{sse.NewReader(resp.Body)}).next(); err != nil || ev.ID != "1" {
				t.Errorf("cycle %d: %+v %v", i, ev, err)
			}
		}
		resp.Body.Close()
	}
	settled := func(base int) bool {
		s := inst.hub.Stats()
		return runtime.NumGoroutine() <= base && s.Feeds == 0 && s.Subscribers == 0 && s.Streams == 0
	}
	cycle(0)
	if !waitFor(5*time.Second, func() bool { return settled(1 << 30) }) {
		t.Fatalf("warm-up did not settle: %+v", inst.hub.Stats())
	}
	base := runtime.NumGoroutine()

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 250 {
				cycle(w*250 + i)
			}
		})
	}
	wg.Wait()
	if !waitFor(10*time.Second, func() bool { return settled(base) }) {
		t.Fatalf("after 1,000 cycles: %d goroutines (started with %d), %+v", runtime.NumGoroutine(), base, inst.hub.Stats())
	}
}

// TestStop: Stop closes open streams and is safe twice.
func TestStop(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	inst := newInstance(t, stream.New(stream.Config{}), store, nil)
	f := newRun(t, store)
	resp := get(t, client(t), inst.srv.URL+"/runs/"+f.RunID+"/events", nil)
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	r := &sseReader{sse.NewReader(resp.Body)}
	if ev, err := r.next(); err != nil || ev.ID != "1" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		if err := inst.hub.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ev, err := r.next(); !errors.Is(err, io.EOF) {
		t.Errorf("after Stop: %+v, %v", ev, err)
	}
	if s := inst.hub.Stats(); s != (stream.Stats{}) {
		t.Errorf("after Stop: %+v", s)
	}
}

// TestANewRunsFirstStreamReadsNothingBack: the first stream of a run
// created on this instance a moment ago (POST /runs, then its events)
// replays the run's first events from what its creation handed the Hub, not
// from the database, and still gets the run's exact transcript; a run whose
// first stream comes after the Hub let them go replays from the database.
func TestANewRunsFirstStreamReadsNothingBack(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{})
	store := publishing(t, persisttest.NewDatabase(t), hub)
	counter := &readCounter{Store: store}
	inst := newInstance(t, hub, counter, nil)
	f := newRun(t, store)
	got := openStreams(t, inst, f.RunID, 1)
	appendEvents(t, store, f, 6, 2, 30)
	complete(t, store, f)
	wantTranscripts(t, store, f.RunID, got)
	if n := counter.fromStart.Load(); n != 0 {
		t.Fatalf("the new run's first stream read its events from the start %d times, want 0", n)
	}
	// The Hub keeps the first events of a bounded number of runs only.
	old := newRun(t, store)
	for range 1100 {
		if _, _, err := store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "t1", Model: "m",
			Input: []agentd.InputMessage{{Role: "user", Content: "later"}}}); err != nil {
			t.Fatal(err)
		}
	}
	got = openStreams(t, inst, old.RunID, 1)
	complete(t, store, old)
	wantTranscripts(t, store, old.RunID, got)
	if n := counter.fromStart.Load(); n != 1 {
		t.Fatalf("a stream of a run the Hub let go read from the start %d times, want 1", n)
	}
}
