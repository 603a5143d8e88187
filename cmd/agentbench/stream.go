package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"agentd/api"
	"agentd/internal/llm"
	"agentd/internal/persist"
	"agentd/internal/run"
	"agentd/internal/stream"
	"agentd/internal/tools"
)

// stack is agentd assembled in this process, as cmd/server assembles it, on
// a loopback port.
type stack struct {
	commits *commitLog
	store   *persist.Store
	hub     *stream.Hub
	eng     *run.Engine
	base    string
	close   func()
}

func newStack(ctx context.Context, o options, fake, name string, workers int) (*stack, error) {
	url, drop, err := newDatabase(ctx, o.admin, name)
	if err != nil {
		return nil, err
	}
	store, err := persist.Open(ctx, url, int32(workers+32))
	if err != nil {
		drop()
		return nil, err
	}
	store.StartGroupCommit(2, 64)
	reg, _ := tools.NewRegistry(tools.Calculator())
	hub := stream.New(stream.Config{Store: store})
	commits := &commitLog{runs: map[string][]commitMark{}}
	store.OnCommit = func(runID string, lastSeq int64) {
		commits.add(runID, lastSeq)
		hub.Published(runID, lastSeq)
	}
	if err := hub.Start(ctx); err != nil {
		return nil, err
	}
	eng := run.New(run.Config{Store: store, Tools: reg, Workers: workers,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake, APIKey: "bench"})})
	if err := eng.Start(ctx); err != nil {
		return nil, err
	}
	handler := api.New(api.Config{Store: store, Tools: reg, Events: hub, Registerer: prometheus.NewRegistry(),
		Defaults: api.RunDefaults{Model: "fake"},
		StreamFunc: func(w http.ResponseWriter, r *http.Request, run persist.Run) {
			hub.StreamRun(w, r, run.ID, 0)
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	s := &stack{store: store, hub: hub, eng: eng, commits: commits, base: "http://" + ln.Addr().String()}
	s.close = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Stop(sctx)
		hub.Stop(sctx)
		srv.Shutdown(sctx)
		store.StopGroupCommit()
		store.Close()
		drop()
	}
	return s, nil
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

// follow reads an SSE body (of net/http's client) to its terminal event and
// counts the events.
func follow(body io.Reader) (events int, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		typ, ok := strings.CutPrefix(sc.Text(), "event: ")
		if !ok || typ == "heartbeat" {
			continue
		}
		events++
		switch typ {
		case "run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted":
			return events, nil
		}
	}
	if err := sc.Err(); err != nil {
		return events, err
	}
	return events, io.ErrUnexpectedEOF
}

func postRun(base, input string, streamIt bool) (*http.Response, error) {
	body, _ := json.Marshal(map[string]any{"input": input, "stream": streamIt})
	return client.Post(base+"/runs", "application/json", strings.NewReader(string(body)))
}

// benchHTTP measures whole runs over HTTP (POST /runs with stream: true,
// followed to the terminal event) at 1, 16 and 64 concurrent clients, and
// the start latency: an uncontended POST /runs to its first SSE event.
func benchHTTP(ctx context.Context, o options, fake string) error {
	s, err := newStack(ctx, o, fake, "http", 64)
	if err != nil {
		return err
	}
	defer s.close()
	input := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."
	fmt.Fprintln(o.out, "http: whole runs (POST /runs with stream: true, read to the terminal event; one tool call, two model calls)")
	var at16 float64
	for _, clients := range []int{1, 16, 64} {
		var lat []time.Duration
		var mu sync.Mutex
		var failed atomic.Int64
		deadline := time.Now().Add(o.duration)
		start := time.Now()
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					t0 := time.Now()
					resp, err := postRun(s.base, input, true)
					if err != nil {
						failed.Add(1)
						return
					}
					_, err = follow(resp.Body)
					resp.Body.Close()
					if err != nil {
						failed.Add(1)
						continue
					}
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		rps := float64(len(lat)) / time.Since(start).Seconds()
		p50, p99 := percentiles(lat)
		extra := ""
		if clients == 16 {
			at16 = rps
		}
		if clients == 64 && at16 > 0 {
			extra = fmt.Sprintf(" (%.2fx the figure at 16)", rps/at16)
		}
		fmt.Fprintf(o.out, "  %2d clients: %.0f runs/s%s, run latency p50 %s p99 %s, %d failed\n", clients, rps, extra, ms(p50), ms(p99), failed.Load())
	}
	// Start latency: one client at a time.
	n := 300
	if o.quick {
		n = 50
	}
	var lat []time.Duration
	for range n {
		t0 := time.Now()
		resp, err := postRun(s.base, "/say hi", true)
		if err != nil {
			return err
		}
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				resp.Body.Close()
				return fmt.Errorf("start latency: %w", err)
			}
			if strings.HasPrefix(line, "id: ") {
				lat = append(lat, time.Since(t0))
				break
			}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	p50, p99 := percentiles(lat)
	fmt.Fprintf(o.out, "  start latency (POST /runs to the first SSE event, uncontended, %d runs): p50 %s p99 %s\n\n", n, ms(p50), ms(p99))
	return nil
}

// benchStream measures the event stream: appends and deliveries with 16
// streaming runs and 1 or 100 subscribers each, the replay of a 10,000-event
// run, and the memory of 1,000 open connections.
func benchStream(ctx context.Context, o options, fake string) error {
	s, err := newStack(ctx, o, fake, "stream", 16)
	if err != nil {
		return err
	}
	defer s.close()
	concurrent := 16
	if n, err := strconv.Atoi(os.Getenv("AGENTBENCH_STREAM_RUNS")); err == nil && n > 0 {
		concurrent = n
	}
	fmt.Fprintf(o.out, "stream: %d concurrent runs, the fake model streaming 200 chunks 5 ms apart\n", concurrent)
	subsList := []int{1, 100}
	if v := os.Getenv("AGENTBENCH_SUBSCRIBERS"); v != "" {
		subsList = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			subsList = append(subsList, n)
		}
	}
	if o.quick {
		subsList = []int{1, 10}
	}
	for _, subs := range subsList {
		var lat []time.Duration
		var mu sync.Mutex
		var events, runs atomic.Int64
		gc0 := s.store.GroupCommitStats()
		deadline := time.Now().Add(o.duration)
		start := time.Now()
		var wg sync.WaitGroup
		for range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					resp, err := postRun(s.base, "/stream 200 5", false)
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
						rw.Add(1)
						go func() {
							defer rw.Done()
							var seen func(string, int64)
							var local []time.Duration
							if k < 10 { // latency is sampled on up to 10 subscribers of each run
								seen = func(typ string, seq int64) {
									if typ != "message.delta" {
										return
									}
									if at, ok := s.commits.at(created.ID, seq); ok {
										local = append(local, time.Since(at))
									}
								}
							}
							n := rawFollow(s.base, created.ID, seen)
							mu.Lock()
							lat = append(lat, local...)
							mu.Unlock()
							if k == 0 {
								events.Add(int64(n))
								runs.Add(1)
							}
						}()
					}
					rw.Wait()
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		gc1 := s.store.GroupCommitStats()
		p50, p99 := percentiles(lat)
		fmt.Fprintf(o.out, "  %3d subscribers per run: %d runs, %.0f events appended/s, %.2f write transactions per event, delivery (commit to client) p50 %s p99 %s\n",
			subs, runs.Load(), float64(events.Load())/elapsed.Seconds(),
			float64(gc1.Transactions-gc0.Transactions)/float64(max(1, events.Load())), ms(p50), ms(p99))
	}
	if err := benchReplay(ctx, o, s); err != nil {
		return err
	}
	return benchConnections(ctx, o, s)
}

// rawFollow reads a run's event stream over a raw connection, as cheaply as
// a client can (the readers share the machine with the server), until its
// terminal event. When seen is set it is called with each event's type and
// id; the HTTP framing (headers, chunk sizes) matches no SSE field and is
// skipped.
func rawFollow(base, runID string, seen func(typ string, seq int64)) (events int) {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return 0
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /runs/"+runID+"/events HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		return 0
	}
	buf := make([]byte, 32<<10)
	var carry []byte
	var seq int64
	for {
		n, err := c.Read(buf)
		data := append(carry, buf[:n]...)
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
				typ := string(line[7:])
				if typ == "heartbeat" {
					continue
				}
				events++
				if seen != nil {
					seen(typ, seq)
				}
				switch typ {
				case "run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted":
					return events
				}
			}
		}
		carry = append(carry[:0], data...)
		if err != nil {
			return events
		}
	}
}

// benchReplay appends a 10,000-event run and times a client reading it all.
func benchReplay(ctx context.Context, o options, s *stack) error {
	const total = 10000
	// The engine stops here, so that the run stays ours to write.
	s.eng.Stop(ctx)
	r, _, err := s.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake",
		Params: persist.RunParams{MaxSteps: 1, IfBusy: "reject"}, Input: []persist.InputMessage{{Role: "user", Content: "/say replay"}}})
	if err != nil {
		return err
	}
	c, err := s.store.RunClaim(ctx, "bench", time.Hour)
	if err != nil || c.ID != r.ID {
		return fmt.Errorf("claim the replay run: %v", err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "bench"}
	text := strings.Repeat("token ", 10)
	for n := 1; n < total-1; {
		k := min(500, total-1-n)
		evs := make([]persist.EventIn, k)
		for i := range evs {
			evs[i] = persist.EventIn{Type: "message.delta", Step: 1, Data: map[string]string{"text": text}}
		}
		if _, err := s.store.Exec(ctx, f, evs); err != nil {
			return err
		}
		n += k
	}
	if _, err := s.store.Exec(ctx, f, []persist.EventIn{{Type: "run.completed", Step: 1, Data: map[string]string{"status": "completed"}}},
		persist.RunEnd{ID: r.ID, Status: persist.StatusCompleted, Reason: persist.ReasonCompleted}); err != nil {
		return err
	}
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		resp, err := client.Get(s.base + "/runs/" + r.ID + "/events")
		if err != nil {
			return err
		}
		n, err := follow(resp.Body)
		resp.Body.Close()
		if err != nil || n != total {
			return fmt.Errorf("replay read %d of %d events: %v", n, total, err)
		}
		best = min(best, time.Since(start))
	}
	fmt.Fprintf(o.out, "  replay of a %d-event run: %.0f events/s (best of 3: %s)\n", total, total/best.Seconds(), ms(best))
	return nil
}

// benchConnections opens 1,000 SSE connections to a run that stays queued
// (the engine is stopped) and reports the memory they cost this process.
func benchConnections(ctx context.Context, o options, s *stack) error {
	const conns = 1000
	r, _, err := s.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake",
		Params: persist.RunParams{MaxSteps: 1, IfBusy: "reject"}, Input: []persist.InputMessage{{Role: "user", Content: "/say idle"}}})
	if err != nil {
		return err
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
	req := "GET /runs/" + r.ID + "/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"
	buf := make([]byte, 4096)
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		open = append(open, c)
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(buf); err != nil { // the response headers: the stream is open
			return err
		}
	}
	for s.hub.Stats().Streams < conns {
		time.Sleep(10 * time.Millisecond)
	}
	after := mem()
	per := float64(after-before) / conns
	fmt.Fprintf(o.out, "  %d open SSE connections: %.1f KiB each (heap and stacks of this process, client sockets included)\n\n", conns, per/1024)
	return nil
}
