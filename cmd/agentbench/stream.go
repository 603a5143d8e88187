package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client/sse"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/tools"
)

// stack is agentd assembled in this process, as cmd/server assembles it, on
// a loopback port.
type stack struct {
	commits *commitLog
	store   *persist.Store
	hub     *stream.Hub
	eng     *run.Engine
	url     string // the database's
	base    string // the server's
	close   func()
}

// newStack assembles agentd on a database of its own, with the server's
// default worker count. Group commit is on, as in cmd/server.
func newStack(ctx context.Context, o options, fake, name string) (_ *stack, err error) {
	workers := run.DefaultWorkers
	url, drop, err := newDatabase(ctx, o.admin, name)
	if err != nil {
		return nil, err
	}
	s := &stack{commits: &commitLog{runs: map[string][]commitMark{}}, url: url}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	// close stops what was started, on failure half way too.
	s.close = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if s.eng != nil {
			s.eng.Stop(sctx)
		}
		if s.hub != nil {
			s.hub.Stop(sctx) // it ends the streams, which Shutdown would wait for
		}
		srv.Shutdown(sctx)
		if s.store != nil {
			s.store.StopGroupCommit()
			s.store.Close()
		}
		drop()
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	hub := stream.New(stream.Config{})
	store, err := persist.Open(ctx, persist.Config{URL: url, MaxConns: int32(workers + 32),
		Publisher: loggingPublisher{log: s.commits, hub: hub}})
	if err != nil {
		return nil, err
	}
	store.StartGroupCommit(1, 64) // the server's default
	s.store = store
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		return nil, err
	}
	hub.Bind(store)
	if err := hub.Start(ctx); err != nil {
		return nil, err
	}
	s.hub = hub
	eng := run.New(run.Config{Store: store, Tools: reg, Workers: workers,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake, APIKey: "bench"})})
	if err := eng.Start(ctx); err != nil {
		return nil, err
	}
	s.eng = eng
	srv.Handler = api.New(api.Config{Store: store, Runs: eng.Service(), Events: hub, Tools: reg,
		Registerer: prometheus.NewRegistry(), Defaults: api.RunDefaults{Model: "fake"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go srv.Serve(ln)
	s.base = "http://" + ln.Addr().String()
	return s, nil
}

// loggingPublisher notes each commit in a commitLog, then hands it to the hub.
type loggingPublisher struct {
	log *commitLog
	hub *stream.Hub
}

func (p loggingPublisher) Published(runID string, lastSeq int64) {
	p.log.add(runID, lastSeq)
	p.hub.Published(runID, lastSeq)
}

func (p loggingPublisher) PublishedEvents(runID string, evs []agentd.Event) {
	p.log.add(runID, evs[len(evs)-1].Seq)
	p.hub.PublishedEvents(runID, evs)
}

// commitLog remembers when each run's events were committed (the time the
// store reported the commit), so that delivery is measured from the commit.
type commitLog struct {
	mu   sync.Mutex
	runs map[string][]commitMark
}

type commitMark struct {
	upTo int64
	at   time.Time
}

func (l *commitLog) add(runID string, upTo int64) {
	now := time.Now()
	l.mu.Lock()
	l.runs[runID] = append(l.runs[runID], commitMark{upTo, now})
	l.mu.Unlock()
}

// at returns when the event seq of runID was committed.
func (l *commitLog) at(runID string, seq int64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.runs[runID] {
		if m.upTo >= seq {
			return m.at, true
		}
	}
	return time.Time{}, false
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}

// sseEvent is an event as a client reads it off the wire.
type sseEvent struct{ ID, Event, Data string }

// follow reads an SSE body (of net/http's client) to its terminal event and
// counts the events, heartbeats aside. keep, when set, is given each of
// them.
func follow(body io.Reader, keep func(sseEvent)) (events int, err error) {
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return events, io.ErrUnexpectedEOF // the stream ended before the run
		}
		if err != nil {
			return events, err
		}
		if ev.Type == "heartbeat" {
			continue
		}
		events++
		if keep != nil {
			keep(sseEvent{ID: ev.ID, Event: ev.Type, Data: ev.Data})
		}
		if agentd.EventType(ev.Type).Terminal() {
			return events, nil
		}
	}
}

func postRun(base, input string, streamIt bool) (*http.Response, error) {
	return postRunWith(base, input, streamIt, nil)
}

// postRunWith is postRun with fields beside the input in its body.
func postRunWith(base, input string, streamIt bool, fields map[string]any) (*http.Response, error) {
	req := map[string]any{"input": input, "stream": streamIt}
	maps.Copy(req, fields)
	body, _ := json.Marshal(req)
	return client.Post(base+"/runs", "application/json", strings.NewReader(string(body)))
}

// transcriptsPerLevel is how many runs of each concurrency the http phase
// records the SSE transcript of, to compare with the stored events.
const transcriptsPerLevel = 5

// benchHTTP measures whole runs over HTTP (POST /runs with stream: true,
// followed to the terminal event) at 1, 16 and 64 concurrent clients, and
// the start latency: an uncontended POST /runs to its first SSE event.
func benchHTTP(ctx context.Context, o options, fake string) ([]metric, error) {
	var s *stack
	cpuTime := cpuTime
	if t := o.remote; t != nil {
		store, err := persist.Open(ctx, persist.Config{URL: t.database, MaxConns: 4})
		if err != nil {
			return nil, fmt.Errorf("the server's database: %w", err)
		}
		defer store.Close()
		s = &stack{store: store, url: t.database, base: t.base}
		cpuTime = func() time.Duration { return processCPU(t.pid) }
	} else {
		var err error
		if s, err = newStack(ctx, o, fake, "http"); err != nil {
			return nil, err
		}
		defer s.close()
	}
	defer client.CloseIdleConnections()
	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"http", name, unit, v, t}) }
	before, err := readCounters(ctx, s.url)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuTime()
	transcripts := map[string][]sseEvent{}
	var runs, failed int
	var perLevel []string
	var at16 float64
	for _, clients := range []int{1, 16, 64} {
		start := time.Now()
		lat, nfailed := wholeRuns(ctx, s.base, clients, o.duration, transcripts)
		rps := float64(len(lat)) / time.Since(start).Seconds()
		runs, failed = runs+len(lat), failed+nfailed
		p50, p99 := percentiles(lat)
		level := ", " + plural(clients, "client")
		add("runs/s"+level, "runs/s", rps, nil)
		add("run latency p50"+level, "ms", msOf(p50), nil)
		add("run latency p99"+level, "ms", msOf(p99), nil)
		perLevel = append(perLevel, fmt.Sprintf("%.0f", rps))
		switch clients {
		case 16:
			at16 = rps
		case 64:
			add("runs/s at 64 clients to 16", "x", rps/max(at16, 1e-9), atLeast(0.8))
		}
	}
	cpu := cpuTime() - cpu0
	_, cost, err := costSince(ctx, o.out, "http", s.url, before)
	if err != nil {
		return nil, err
	}
	add("failed runs", "runs", float64(failed), nil)
	ms = append(ms, perUnit("http", "run", float64(runs), cost, cpu, costTargets{})...)
	n := 300
	if o.quick {
		n = 50
	}
	lat, err := startLatency(s.base, n)
	if err != nil {
		return nil, fmt.Errorf("start latency: %w", err)
	}
	p50, p99 := percentiles(lat)
	add("start latency p50", "ms", msOf(p50), atMost(5))
	add("start latency p99", "ms", msOf(p99), nil)
	fmt.Fprintf(o.out, "  http: 1 / 16 / 64 clients: %s runs/s, %d failed; start latency p50 %.2f ms (%d runs)\n",
		strings.Join(perLevel, " / "), failed, msOf(p50), n)
	violations, err := checkRuns(ctx, o.out, "http", s.store, s.url, transcripts)
	if err != nil {
		return nil, fmt.Errorf("check runs: %w", err)
	}
	return append(ms, violations), nil
}

// wholeRuns has clients concurrent clients post runs and follow each to its
// terminal event, for d. It returns the latencies of the runs that ended and
// how many failed, and adds the SSE transcripts of the first few runs to
// transcripts.
func wholeRuns(ctx context.Context, base string, clients int, d time.Duration, transcripts map[string][]sseEvent) (lat []time.Duration, failed int) {
	input := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."
	var mu sync.Mutex
	var started atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				var seen []sseEvent
				var keep func(sseEvent)
				if started.Add(1) <= transcriptsPerLevel {
					keep = func(ev sseEvent) { seen = append(seen, ev) }
				}
				t0 := time.Now()
				resp, err := postRun(base, input, true)
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					return
				}
				_, err = follow(resp.Body, keep)
				resp.Body.Close()
				took := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, took)
					if keep != nil {
						transcripts[path.Base(resp.Header.Get("Location"))] = seen
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, failed
}

// startLatency posts n runs one at a time and times each to its first SSE
// event on the client.
func startLatency(base string, n int) ([]time.Duration, error) {
	var lat []time.Duration
	for range n {
		t0 := time.Now()
		resp, err := postRun(base, "/say hi", true)
		if err != nil {
			return nil, err
		}
		r := sse.NewReader(resp.Body)
		for {
			ev, err := r.Next()
			if err != nil {
				resp.Body.Close()
				return nil, err
			}
			if ev.HasID { // a stored event, not a heartbeat
				lat = append(lat, time.Since(t0))
				break
			}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return lat, nil
}

// benchStream measures the event stream: appends and deliveries with
// o.streamRuns streaming runs and each of o.subscribers subscribers per run,
// the replay of a 10,000-event run, and the memory of 1,000 open
// connections.
func benchStream(ctx context.Context, o options, fake string) ([]metric, error) {
	s, err := newStack(ctx, o, fake, "stream")
	if err != nil {
		return nil, err
	}
	defer s.close()
	defer client.CloseIdleConnections()
	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"stream", name, unit, v, t}) }
	// Each level's counters start where the previous level's end: one wait
	// for the statistics to settle per level, not two.
	before, err := readCounters(ctx, s.url)
	if err != nil {
		return nil, err
	}
	// Each level's clients start their first runs spread over a run's
	// length, as independent clients would; the largest level runs once
	// more with all of them starting together (see streamRuns).
	type level struct {
		subs     int
		together bool
	}
	var levels []level
	for _, subs := range o.subscribers {
		levels = append(levels, level{subs, false})
	}
	if n := len(o.subscribers); n > 0 {
		levels = append(levels, level{o.subscribers[n-1], true})
	}
	for _, l := range levels {
		gc0, cpu0, start := s.store.GroupCommitStats(), cpuTime(), time.Now()
		lat, events, runs := streamRuns(ctx, s, o.streamRuns, l.subs, o.duration, l.together)
		elapsed, cpu, gc1 := time.Since(start), cpuTime()-cpu0, s.store.GroupCommitStats()
		after, cost, err := costSince(ctx, o.out, "stream", s.url, before)
		if err != nil {
			return nil, err
		}
		before = after
		p50, p99 := percentiles(lat)
		name, p99Target := ", "+plural(l.subs, "subscriber"), atMost(25)
		how := "started apart"
		if l.together {
			name, p99Target, how = name+", runs started together", nil, "started together"
		}
		add("events appended/s"+name, "events/s", float64(events)/elapsed.Seconds(), nil)
		add("delivery p50"+name, "ms", msOf(p50), nil)
		add("delivery p99"+name, "ms", msOf(p99), p99Target)
		ms = append(ms, perUnit("stream", "event"+name, float64(events), cost, cpu, costTargets{})...)
		add("executor write transactions per event"+name, "tx", float64(gc1.Transactions-gc0.Transactions)/float64(max(1, events)), nil)
		fmt.Fprintf(o.out, "  stream: %d runs streaming %d chunks %d ms apart (%s), %s each: %d runs, %.0f events/s, delivery (commit to client) p50 %.2f ms p99 %.2f ms\n",
			o.streamRuns, streamChunks, streamGap.Milliseconds(), how, plural(l.subs, "subscriber"), runs, float64(events)/elapsed.Seconds(), msOf(p50), msOf(p99))
	}
	replay, err := benchReplay(ctx, s)
	if err != nil {
		return nil, err
	}
	add("replay of a 10,000-event run", "events/s", replay, atLeast(100_000))
	perConn, err := benchConnections(ctx, s, false)
	if err != nil {
		return nil, err
	}
	add("memory per open SSE connection (1,000 open)", "KiB", perConn, below(64))
	perRun, err := benchConnections(ctx, s, true)
	if err != nil {
		return nil, err
	}
	add("memory per open SSE connection (1,000 runs, 1 each)", "KiB", perRun, below(64))
	fmt.Fprintf(o.out, "  stream: replay %.0f events/s; 1,000 open SSE connections %.1f KiB each (one run), %.1f KiB each (one per run)\n",
		replay, perConn, perRun)
	return ms, nil
}

// A run of the stream benchmark streams streamChunks chunks streamGap apart,
// for streamRunLength.
const (
	streamChunks    = 200
	streamGap       = 5 * time.Millisecond
	streamRunLength = streamChunks * streamGap
)

// streamPrompt asks the fake model for such a run.
var streamPrompt = fmt.Sprintf("/stream %d %d", streamChunks, streamGap.Milliseconds())

// streamRuns has concurrent clients post streaming runs for d, each followed
// by subs subscribers. It returns the delivery latencies (from the commit to
// the client) sampled on up to 10 subscribers per run, the events appended
// and the runs.
//
// Unless together, client i starts its first run i/concurrent of a run's
// length after the first client, as independent clients would start. Runs
// started together stay in step (every run takes as long), so their text
// deltas fall into the same commits, run after run, and each such commit is
// delivered to every stream of every run at once: the worst case of a
// burst, measured separately.
func streamRuns(ctx context.Context, s *stack, concurrent, subs int, d time.Duration, together bool) (lat []time.Duration, events, runs int64) {
	var mu sync.Mutex
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range concurrent {
		wg.Go(func() {
			if !together {
				select {
				case <-time.After(time.Duration(i) * streamRunLength / time.Duration(concurrent)):
				case <-ctx.Done():
					return
				}
			}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				resp, err := postRun(s.base, streamPrompt, false)
				if err != nil {
					return
				}
				var created struct {
					ID string `json:"id"`
				}
				json.NewDecoder(resp.Body).Decode(&created)
				resp.Body.Close()
				var rw sync.WaitGroup
				for k := range subs {
					rw.Go(func() {
						var seen func(string, int64, time.Time)
						var local []time.Duration
						if k < 10 {
							// Delivery is measured on live events: those
							// committed once the stream was open. What was
							// committed before is replayed, and its wait
							// says when the client came, not how fast
							// events are delivered.
							seen = func(typ string, seq int64, opened time.Time) {
								if typ != "message.delta" {
									return
								}
								if at, ok := s.commits.at(created.ID, seq); ok && at.After(opened) {
									local = append(local, time.Since(at))
								}
							}
						}
						n := rawFollow(s.base, created.ID, seen)
						mu.Lock()
						defer mu.Unlock()
						lat = append(lat, local...)
						if k == 0 {
							events += int64(n)
							runs++
						}
					})
				}
				rw.Wait()
			}
		})
	}
	wg.Wait()
	return lat, events, runs
}

// rawFollow reads a run's event stream over a raw connection, as cheaply as
// a client can (the readers share the machine with the server), until its
// terminal event. When seen is set it is called with each event's type and
// id, and when the stream was open (its headers arrived: the server
// subscribes before it sends them); the HTTP framing (headers, chunk sizes)
// matches no SSE field and is skipped.
func rawFollow(base, runID string, seen func(typ string, seq int64, opened time.Time)) (events int) {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return 0
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /runs/"+runID+"/events HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		return 0
	}
	// The readers share the process with agentd, and so its garbage
	// collector: a stream reads into a pooled buffer, in place.
	bp := followBuffers.Get().(*[]byte)
	defer followBuffers.Put(bp)
	buf := (*bp)[:0]
	var seq int64
	var opened time.Time
	for {
		if len(buf) == cap(buf) { // a line longer than the buffer
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
			*bp = buf
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		if opened.IsZero() {
			opened = time.Now()
		}
		buf = buf[:len(buf)+n]
		data := buf
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimSuffix(data[:i], []byte("\r"))
			data = data[i+1:]
			switch {
			case bytes.HasPrefix(line, []byte("id: ")):
				seq, _ = strconv.ParseInt(string(line[4:]), 10, 64)
			case bytes.HasPrefix(line, []byte("event: ")):
				typ := line[7:]
				if string(typ) == "heartbeat" {
					continue
				}
				events++
				if seen != nil {
					seen(string(typ), seq, opened)
				}
				if agentd.EventType(typ).Terminal() {
					return events
				}
			}
		}
		buf = buf[:copy(buf, data)]
		if err != nil {
			return events
		}
	}
}

// followBuffers are rawFollow's read buffers.
var followBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

// benchReplay appends a 10,000-event run and times a client reading it all.
func benchReplay(ctx context.Context, s *stack) (eventsPerSec float64, err error) {
	const total = 10000
	// The engine stops here, so that the run stays ours to write.
	s.eng.Stop(ctx)
	r, _, err := s.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake",
		Params: agentd.RunParams{MaxSteps: 1, IfBusy: "reject"}, Input: []agentd.InputMessage{{Role: "user", Content: "/say replay"}}})
	if err != nil {
		return 0, err
	}
	c, err := s.store.RunClaim(ctx, "bench", time.Hour)
	if err != nil || c.ID != r.ID {
		return 0, fmt.Errorf("claim the replay run: %v", err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "bench"}
	text := strings.Repeat("token ", 10)
	for n := 1; n < total-1; {
		k := min(500, total-1-n)
		evs := make([]agentd.EventIn, k)
		for i := range evs {
			evs[i] = agentd.EventOf(1, agentd.MessageDeltaData{Text: text})
		}
		if _, err := s.store.Exec(ctx, f, evs); err != nil {
			return 0, err
		}
		n += k
	}
	if _, err := s.store.Exec(ctx, f, []agentd.EventIn{agentd.RunEndEvent(1, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: r.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		return 0, err
	}
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		resp, err := client.Get(s.base + "/runs/" + r.ID + "/events")
		if err != nil {
			return 0, err
		}
		n, err := follow(resp.Body, nil)
		resp.Body.Close()
		if err != nil || n != total {
			return 0, fmt.Errorf("replay read %d of %d events: %v", n, total, err)
		}
		best = min(best, time.Since(start))
	}
	return total / best.Seconds(), nil
}

// benchConnections opens 1,000 SSE connections to runs that stay queued
// (the engine is stopped), all to one run or each to a run of its own
// (then each has a feed of its own too), and returns the memory each costs
// this process, in KiB (heap and stacks, client sockets included).
func benchConnections(ctx context.Context, s *stack, runEach bool) (float64, error) {
	const conns = 1000
	runs := 1
	if runEach {
		runs = conns
	}
	ids := make([]string, runs)
	for i := range ids {
		r, _, err := s.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake",
			Params: agentd.RunParams{MaxSteps: 1, IfBusy: "reject"}, Input: []agentd.InputMessage{{Role: "user", Content: "/say idle"}}})
		if err != nil {
			return 0, err
		}
		ids[i] = r.ID
	}
	// The streams of an earlier measurement end as their connections close.
	for deadline := time.Now().Add(10 * time.Second); s.hub.Stats().Streams > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d streams still open", s.hub.Stats().Streams)
		}
	}
	addr := strings.TrimPrefix(s.base, "http://")
	mem := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	before := mem()
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	buf := make([]byte, 4096)
	for i := range conns {
		req := "GET /runs/" + ids[i%runs] + "/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		open = append(open, c)
		if _, err := io.WriteString(c, req); err != nil {
			return 0, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(buf); err != nil { // the response headers: the stream is open
			return 0, err
		}
	}
	for deadline := time.Now().Add(10 * time.Second); s.hub.Stats().Streams < conns; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d streams open", s.hub.Stats().Streams, conns)
		}
	}
	after := mem()
	return float64(int64(after)-int64(before)) / conns / 1024, nil
}

// plural is "1 client", "16 clients".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
