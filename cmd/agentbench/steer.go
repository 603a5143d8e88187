package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The steer phase's runs. Both make the same model and tool work: a first
// model call that asks for the calculator (its four chunks 100 ms apart),
// the tool call, and a second model call that answers in one piece (its
// end 100 ms later). The fake model reads the last user message only, and
// counts its steps from it, so the lines are split differently between the
// two messages, with the same bytes in all:
//
//   - steered: the run starts with the call; when its first step starts, the
//     client sends the answer's message with POST /runs/{id}/input, which the
//     run applies at the boundary after the tool call, before the second
//     model call, in the write that starts that step;
//   - at the start: the run starts with both messages, the call and the
//     answer in the last.
const (
	steerGap  = "/stream 1 100"
	steerCall = "/call calculator {\"expression\":\"6*7\"}"
	steerSay  = "/say The answer is 42."
)

var (
	steeredStart = []string{steerCall + "\n" + steerGap}
	steeredInput = steerGap + "\n" + steerSay
	upfrontStart = []string{steerGap, steerCall + "\n" + steerGap + "\n" + steerSay}
)

// steerClients is how many clients make runs at once in the steer phase.
const steerClients = 16

// steerVariant is one of the two ways the steer phase makes its runs.
type steerVariant struct {
	name    string // in the figures' names
	steered bool
}

var (
	variantSteered = steerVariant{"steered", true}
	variantUpfront = steerVariant{"input at the start", false}
)

// steerTally is what a variant's runs did and cost, summed over its
// slices.
type steerTally struct {
	runs, failed, late                    int
	steps, toolCalls, events              int
	lat                                   []time.Duration
	elapsed                               time.Duration
	agentd, driver, postgres, fake, total time.Duration
	backends                              time.Duration // of its database's backends
	cost                                  dbCost        // the cluster's
	// owned is its database's, read back from the WAL; own when every
	// slice's could be.
	owned ownCost
	own   bool
}

// benchSteer measures what steering costs: the run whose second user
// message comes while it works (POST /runs/{id}/input, applied at the
// step boundary after its tool call) against the same run with both
// messages given at the start, in one run of the same build, alternated
// (steered, at the start, at the start, steered; with -quick once each).
// agentd runs as a process of its own (cmd/server) on a database of its
// own, calling the fake model in its child process; each run is made with
// POST /runs and "stream": true and followed to its end. Per run of each
// variant: agentd's, PostgreSQL's (all of it, and its database's
// backends'), the load driver's and the machine's CPU; the cluster's write
// transactions, commits and WAL, and its database's own (steercost.go);
// the model calls, tool calls and events its stream showed. Then the
// ratios of the steered run to the other, whose target is 1.1: a steered
// run costs at most 10% more.
func benchSteer(ctx context.Context, o options, fake string) ([]metric, error) {
	srv, url, stop, err := phaseAgentd(ctx, o, "steer", fake, 64)
	if err != nil {
		return nil, err
	}
	defer stop()

	// The WAL of its own database is read back with pg_walinspect, and
	// kept until then.
	if conn, err := pgx.Connect(ctx, url); err == nil {
		_, _ = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
		conn.Close(ctx)
	}
	keeper := keepWAL(ctx, url)
	defer keeper.close()
	order := []steerVariant{variantSteered, variantUpfront, variantUpfront, variantSteered}
	slice := o.duration / 2
	if o.quick {
		order, slice = order[:2], o.duration
	}
	// Warm up both: the first runs of a new server and database cost more.
	warm := max(slice/4, 500*time.Millisecond)
	for _, v := range []steerVariant{variantSteered, variantUpfront} {
		if r := steerRuns(ctx, srv.base, steerClients, warm, v); r.failed > 0 {
			return nil, fmt.Errorf("%s: %d runs failed while warming up: %v", v.name, r.failed, r.err)
		}
	}
	tallies := map[steerVariant]*steerTally{variantSteered: {own: true}, variantUpfront: {own: true}}
	shown := map[steerVariant]bool{}
	before, err := readCounters(ctx, url)
	if err != nil {
		return nil, err
	}
	for _, v := range order {
		backends0 := backendsCPU(ctx, url)
		agentd0, self0, machine0 := processCPU(srv.pid), cpuTime(), o.cpu.read()
		start := time.Now()
		r := steerRuns(ctx, srv.base, steerClients, slice, v)
		elapsed := time.Since(start)
		agentd, self, machine := processCPU(srv.pid)-agentd0, cpuTime()-self0, o.cpu.read()
		backends := backendsSince(backends0, backendsCPU(ctx, url))
		after, cost, err := costSince(ctx, o.out, "steer", url, before)
		if err != nil {
			return nil, err
		}
		owned, own := ownWAL(ctx, url, before.wal, after.wal)
		if r.err != nil {
			fmt.Fprintf(o.out, "  steer: %s: %d runs failed, the first: %v\n", v.name, r.failed, r.err)
		}
		t := tallies[v]
		t.runs += r.runs
		t.failed += r.failed
		t.late += r.late
		t.steps += r.steps
		t.toolCalls += r.toolCalls
		t.events += r.events
		t.lat = append(t.lat, r.lat...)
		t.elapsed += elapsed
		t.agentd += agentd
		t.driver += self
		t.postgres += machine.postgres - machine0.postgres
		t.fake += machine.fake - machine0.fake
		t.total += machine.machine - machine0.machine
		t.cost.writeTx += cost.writeTx
		t.cost.commits += cost.commits
		t.cost.wal += cost.wal
		t.cost.otherCommits += cost.otherCommits
		t.cost.shared = t.cost.shared || cost.shared
		t.backends += backends
		t.owned.writeTx += owned.writeTx
		t.owned.wal += owned.wal
		t.owned.fpi += owned.fpi
		t.own = t.own && own
		if !shown[v] {
			shown[v] = true
			ownBreakdown(ctx, o.out, url, before.wal, after.wal, float64(max(r.runs, 1)), "run, "+v.name)
		}
		keeper.release(ctx, after.wal)
		before = after
	}

	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"steer", name, unit, v, t}) }
	const level = ", 16 clients"
	type perRun struct{ agentd, backends, server, lessModel, writeTx, wal, walLessFPI float64 }
	got := map[steerVariant]perRun{}
	own := tallies[variantSteered].own && tallies[variantUpfront].own
	for _, v := range []steerVariant{variantSteered, variantUpfront} {
		t := tallies[v]
		n := float64(max(t.runs, 1))
		tag := ", " + v.name + level
		p50, p99 := percentiles(t.lat)
		pr := perRun{agentd: msOf(t.agentd) / n, writeTx: float64(t.cost.writeTx) / n, wal: float64(t.cost.wal) / n}
		if own {
			pr.writeTx, pr.wal = float64(t.owned.writeTx)/n, float64(t.owned.wal)/n
			pr.walLessFPI = float64(t.owned.wal-t.owned.fpi) / n
		}
		add("runs/s"+tag, "runs/s", float64(t.runs)/max(t.elapsed.Seconds(), 1e-9), nil)
		add("failed runs"+tag, "runs", float64(t.failed), noneEver())
		add("run latency p50"+tag, "ms", msOf(p50), nil)
		add("run latency p99"+tag, "ms", msOf(p99), nil)
		add("model calls per run"+tag, "calls", float64(t.steps)/n, nil)
		add("tool calls per run"+tag, "calls", float64(t.toolCalls)/n, nil)
		add("events per run"+tag, "events", float64(t.events)/n, nil)
		if v.steered {
			// A steer applied later than the boundary after the tool call
			// makes its run ask the model a third time: the comparison no
			// longer holds for it.
			add("steered runs whose input missed the boundary after the tool call"+level, "runs", float64(t.late), noneEver())
		}
		add("agentd CPU per run"+tag, "ms", pr.agentd, nil)
		if o.cpu.postmaster > 0 {
			pr.backends = msOf(t.backends) / n
			pr.server = pr.agentd + pr.backends
			add("PostgreSQL CPU per run"+tag, "ms", msOf(t.postgres)/n, nil)
			add("PostgreSQL CPU per run, its database's backends"+tag, "ms", pr.backends, nil)
			add("agentd and its database's backends' CPU per run"+tag, "ms", pr.server, nil)
		}
		add("load driver CPU per run"+tag, "ms", msOf(t.driver)/n, nil)
		if t.total > 0 {
			add("machine CPU per run"+tag, "ms", msOf(t.total)/n, nil)
			if o.cpu.fakePID > 0 && fake != "" {
				add("fake model CPU per run"+tag, "ms", msOf(t.fake)/n, nil)
				pr.lessModel = msOf(t.total-t.fake) / n
				add("machine CPU per run less the model's"+tag, "ms", pr.lessModel, nil)
			}
		}
		add("write transactions per run"+tag, "tx", float64(t.cost.writeTx)/n, nil)
		add("commits per run"+tag, "commits", float64(t.cost.commits)/n, nil)
		add("WAL per run"+tag, "B", float64(t.cost.wal)/n, nil)
		if own {
			add("write transactions per run, its database's"+tag, "tx", pr.writeTx, nil)
			add("WAL per run, its database's"+tag, "B", pr.wal, nil)
			add("WAL per run, its database's, full-page images aside"+tag, "B", pr.walLessFPI, nil)
		}
		got[v] = pr
		fmt.Fprintf(o.out, "  steer: %s: %d runs in %.1fs (%d failed, %d late), p50 %v; %.2f model calls, %.2f tool calls, %.1f events, "+
			"%.2f tx, %.0f B WAL (%.0f B less full-page images), agentd %.2f ms, backends %.2f ms per run\n",
			v.name, t.runs, t.elapsed.Seconds(), t.failed, t.late, p50.Round(time.Millisecond), float64(t.steps)/n,
			float64(t.toolCalls)/n, float64(t.events)/n, pr.writeTx, pr.wal, pr.walLessFPI, pr.agentd, pr.backends)
	}
	if !own {
		fmt.Fprintln(o.out, "  steer: its database's WAL could not be read back (pg_walinspect): the ratios of write transactions and WAL are the cluster's")
	}
	// The target: a steered run costs at most 10% more than the same run
	// with its input at the start.
	steered, upfront := got[variantSteered], got[variantUpfront]
	ratio := func(name string, a, b float64, t *target) {
		if a > 0 && b > 0 {
			add(name+" per run, steered to input at the start"+level, "x", a/b, t)
		}
	}
	ratio("agentd and its database's backends' CPU", steered.server, upfront.server, atMost(1.1))
	ratio("agentd CPU", steered.agentd, upfront.agentd, nil)
	ratio("its database's backends' CPU", steered.backends, upfront.backends, nil)
	ratio("machine CPU less the model's", steered.lessModel, upfront.lessModel, nil)
	ratio("write transactions", steered.writeTx, upfront.writeTx, atMost(1.1))
	if own {
		ratio("WAL", steered.wal, upfront.wal, nil)
		ratio("WAL, full-page images aside,", steered.walLessFPI, upfront.walLessFPI, atMost(1.1))
	} else {
		ratio("WAL", steered.wal, upfront.wal, atMost(1.1))
	}
	return ms, nil
}

// steerResult is what the runs of one slice did.
type steerResult struct {
	runs, failed, late       int
	steps, toolCalls, events int
	lat                      []time.Duration
	err                      error // the first failure
}

// steerRuns makes runs of variant v from clients goroutines for d.
func steerRuns(ctx context.Context, base string, clients int, d time.Duration, v steerVariant) steerResult {
	var mu sync.Mutex
	var res steerResult
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				r, err := steerRun(base, v.steered)
				took := time.Since(t0)
				mu.Lock()
				if err != nil {
					res.failed++
					if res.err == nil {
						res.err = err
					}
				} else {
					res.runs++
					res.lat = append(res.lat, took)
					res.steps += r.steps
					res.toolCalls += r.toolCalls
					res.events += r.events
					if v.steered && r.appliedAt != 2 {
						res.late++
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return res
}

// oneSteerRun is what one run's stream showed.
type oneSteerRun struct {
	steps, toolCalls, events int
	// appliedAt is the step the steer was applied before; 0 when it was
	// not (it came after the run ended).
	appliedAt int
}

// steerRun makes one run, POST /runs with "stream": true, and follows it
// to its end; steered, it sends the run's second message when the run's
// first step starts.
func steerRun(base string, steered bool) (oneSteerRun, error) {
	var r oneSteerRun
	start := upfrontStart
	if steered {
		start = steeredStart
	}
	body, _ := json.Marshal(map[string]any{"input": userMessages(start...), "stream": true})
	resp, err := client.Post(base+"/runs", "application/json", bytes.NewReader(body))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return r, fmt.Errorf("POST /runs: %d: %s", resp.StatusCode, b)
	}
	var sent bool
	var last string
	var steerErr, decodeErr error
	n, err := follow(resp.Body, func(ev sseEvent) {
		last = ev.Event
		var env struct {
			RunID string `json:"run_id"`
			Step  int    `json:"step"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &env); err != nil {
			decodeErr = fmt.Errorf("event %s: %w", ev.ID, err)
			return
		}
		switch ev.Event {
		case "step.started":
			r.steps++
			if steered && !sent && env.Step == 1 {
				sent = true
				steerErr = sendSteer(base, env.RunID)
			}
		case "tool_call.completed":
			r.toolCalls++
		case "input.applied":
			r.appliedAt = env.Step
		}
	})
	r.events = n
	switch {
	case err != nil:
		return r, err
	case decodeErr != nil:
		return r, decodeErr
	case steerErr != nil && !errors.Is(steerErr, errSteerLate):
		return r, steerErr
	case steered && !sent:
		return r, fmt.Errorf("the run ended before its first step started")
	case last != "run.completed":
		return r, fmt.Errorf("the run ended with %s", last)
	}
	return r, nil
}

// sendSteer sends the steered run's second message.
func sendSteer(base, runID string) error {
	body, _ := json.Marshal(map[string]any{"input": userMessages(steeredInput), "when": "next"})
	resp, err := client.Post(base+"/runs/"+runID+"/input", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusAccepted:
		return nil
	case http.StatusConflict: // run_ended: the steer came too late
		return errSteerLate
	}
	return fmt.Errorf("POST /runs/%s/input: %d: %s", runID, resp.StatusCode, b)
}

// errSteerLate is a steer that came after its run ended: the run answered
// its first message alone.
var errSteerLate = errors.New("the run ended before its input came")

// userMessages is texts as user messages, the input of a request.
func userMessages(texts ...string) []map[string]string {
	out := make([]map[string]string, len(texts))
	for i, t := range texts {
		out[i] = map[string]string{"role": "user", "content": t}
	}
	return out
}
