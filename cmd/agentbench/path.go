package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchPath measures the path the product is used by, with each part in a
// process of its own: agentd (this module's cmd/server, with its built-in
// fake model), started by the benchmark on a database of its own; the load
// driver, this process; PostgreSQL. A run is the 3-step calculator run,
// made by POST /runs then GET /runs/{id}/events to its terminal event
// ("subscribe"), or by POST /runs with "stream": true ("stream"), at 16 and
// 64 clients. CPU per run is split by process; write transactions and WAL
// are per run; at 64 clients it reports how far run latency's p99 is from
// its p50, and how many queued runs started before one accepted earlier.
func benchPath(ctx context.Context, o options) ([]metric, error) {
	bin, url, cleanup, err := agentdAndDatabase(ctx, o, "path")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var srvs []*agentdProcess
	defer func() {
		for _, s := range srvs {
			s.stop()
		}
	}()
	for range max(o.pathInstances, 1) {
		srv, err := startAgentd(ctx, bin, url)
		if err != nil {
			return nil, err
		}
		srvs = append(srvs, srv)
	}
	var bases []string
	var pids []int
	for _, s := range srvs {
		bases, pids = append(bases, s.base), append(pids, s.pid)
	}
	agentdCPU := func() time.Duration {
		var d time.Duration
		for _, pid := range pids {
			d += processCPU(pid)
		}
		return d
	}
	defer client.CloseIdleConnections()
	if len(srvs) > 1 {
		fmt.Fprintf(o.out, "  path: %d agentd instances on one database; clients take them in turn\n", len(srvs))
	}

	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"path", name, unit, v, t}) }
	levels := []int{16, 64}
	if o.quick {
		levels = []int{16}
	}
	// machine CPU per run of the modes of one answer without tools (say,
	// responses), at 16 clients: the Responses API's cost against POST /runs.
	perRun := map[string]float64{}
	for _, mode := range pathModes {
		for _, clients := range levels {
			if (mode == "say" || mode == "responses") && clients != 16 {
				continue
			}
			before, err := readCounters(ctx, url)
			if err != nil {
				return nil, err
			}
			self0, agentd0, machine0 := cpuTime(), agentdCPU(), o.cpu.read()
			startedAt := time.Now()
			input := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."
			if mode == "say" || mode == "responses" {
				input = "/say The answer is 42."
			}
			lat, failed := pathRuns(ctx, bases, clients, o.duration, mode, input, nil)
			elapsed := time.Since(startedAt)
			self, agentd, machine := cpuTime()-self0, agentdCPU()-agentd0, o.cpu.read()
			_, cost, err := costSince(ctx, o.out, "path", url, before)
			if err != nil {
				return nil, err
			}
			n := float64(max(len(lat), 1))
			p50, p99 := percentiles(lat)
			level := fmt.Sprintf(", %s, %d clients", mode, clients)
			var cpuT, pgT, agentdT *target
			if clients == 16 && mode == "subscribe" {
				cpuT, pgT, agentdT = atMost(2.5), atMost(1.0), atMost(0.8)
			}
			add("runs/s"+level, "runs/s", float64(len(lat))/elapsed.Seconds(), nil)
			add("run latency p50"+level, "ms", msOf(p50), nil)
			add("run latency p99"+level, "ms", msOf(p99), nil)
			add("failed runs"+level, "runs", float64(failed), atMost(0))
			add("agentd CPU per run"+level, "ms", msOf(agentd)/n, agentdT)
			add("load driver CPU per run"+level, "ms", msOf(self)/n, nil)
			if o.cpu.postmaster > 0 {
				add("PostgreSQL CPU per run"+level, "ms", msOf(machine.postgres-machine0.postgres)/n, pgT)
			}
			if machine.machine > 0 {
				add("machine CPU per run"+level, "ms", msOf(machine.machine-machine0.machine)/n, cpuT)
				perRun[mode] = msOf(machine.machine-machine0.machine) / n
			}
			if mode == "responses" && perRun["say"] > 0 && perRun["responses"] > 0 {
				add("machine CPU per response to per run (POST /v1/responses to POST /runs, streamed, one answer), 16 clients",
					"x", perRun["responses"]/perRun["say"], atMost(1.1))
			}
			add("write transactions per run"+level, "tx", float64(cost.writeTx)/n, nil)
			add("WAL per run"+level, "B", float64(cost.wal)/n, nil)
			fmt.Fprintf(o.out, "  path: %s, %d clients: %d runs in %.1fs (%d failed), p50 %v p99 %v; agentd %.2f ms, driver %.2f ms per run\n",
				mode, clients, len(lat), elapsed.Seconds(), failed, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond),
				msOf(agentd)/n, msOf(self)/n)
			if clients == 64 && mode == "subscribe" {
				add("run latency p99 to p50, subscribe, 64 clients", "x", float64(p99)/float64(max(p50, 1)), atMost(3))
				inv, err := startInversions(ctx, url, startedAt)
				if err != nil {
					return nil, err
				}
				add("runs started after one accepted later, 64 clients", "%", 100*float64(inv.any)/float64(max(inv.total, 1)), nil)
				add("  of them by more than 5 ms, 64 clients", "%", 100*float64(inv.over5ms)/float64(max(inv.total, 1)), nil)
				add("  how long after, p99, 64 clients", "ms", inv.p99ms, nil)
			}
		}
	}
	return ms, nil
}

// pathModes are the ways the path phase makes runs: POST /runs, then the
// run's events to the terminal one, on a connection of their own
// (subscribe); POST /runs with "stream": true (stream); and, for a run of
// one answer without tools, POST /runs streamed (say) and POST
// /v1/responses streamed (responses). pathRuns also takes "relay": a
// request of the answers phase's relay (relayRun), whose base is the
// relay's.
var pathModes = []string{"subscribe", "stream", "say", "responses"}

// pathRuns runs whole runs of input from clients goroutines for d, as mode
// says; fields, when given, go into each POST /runs body beside the input
// (an agent and a user, say).
func pathRuns(ctx context.Context, bases []string, clients int, d time.Duration, mode, input string,
	fields map[string]any) (lat []time.Duration, failed int) {
	var mu sync.Mutex
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range clients {
		base := bases[i%len(bases)] // each client keeps to one instance
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				err := pathRun(base, input, mode, fields)
				took := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, took)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, failed
}

func pathRun(base, input, mode string, fields map[string]any) error {
	switch mode {
	case "responses":
		return pathResponse(base, input)
	case "relay":
		return relayRun(base, input)
	}
	stream := mode != "subscribe"
	resp, err := postRunWith(base, input, stream, fields)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if stream {
		_, err = follow(resp.Body, nil)
		return err
	}
	var run struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil || run.ID == "" {
		return fmt.Errorf("POST /runs: %d: %v", resp.StatusCode, err)
	}
	ev, err := client.Get(base + "/runs/" + run.ID + "/events")
	if err != nil {
		return err
	}
	defer ev.Body.Close()
	if ev.StatusCode == http.StatusNoContent {
		return nil // it had ended already
	}
	_, err = follow(ev.Body, nil)
	return err
}

// pathResponse makes one streamed response (POST /v1/responses) and reads
// its stream to its end: data: [DONE] after response.completed.
func pathResponse(base, input string) error {
	body, _ := json.Marshal(map[string]any{"model": "fake", "input": input, "stream": true})
	resp, err := client.Post(base+"/v1/responses", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /v1/responses: %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte("event: response.completed")) || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		return fmt.Errorf("POST /v1/responses: the stream ended before the response completed")
	}
	return nil
}

// inversions are the runs, of total accepted, that a run accepted after
// them overtook: it started before they did (any); those it overtook by
// more than 5 ms, more than claims made at the same moment by parallel
// workers can be apart; and the p99 of how long after it they started, over
// the runs overtaken.
type inversions struct {
	total, any, over5ms int
	p99ms               float64
}

// startInversions counts the inversions of the runs accepted since since.
func startInversions(ctx context.Context, url string, since time.Time) (inversions, error) {
	var inv inversions
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return inv, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE lead_ms > 0), count(*) FILTER (WHERE lead_ms > 5),
			coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lead_ms) FILTER (WHERE lead_ms > 0), 0)
		FROM (SELECT extract(epoch FROM min(started_at) OVER (ORDER BY created_at DESC, id DESC
				ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) - started_at) * -1000 AS lead_ms
			FROM runs WHERE created_at >= $1 AND started_at IS NOT NULL) r`, since).Scan(&inv.total, &inv.any, &inv.over5ms, &inv.p99ms)
	return inv, err
}

// agentdBinary builds cmd/server into a temporary directory.
func agentdBinary(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "agentbench-agentd")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "agentd")
	var out bytes.Buffer
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/agentd/agentd/cmd/server")
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build agentd: %v\n%s", err, out.String())
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// agentdAndDatabase builds agentd and creates the phase's database (named
// after phase); cleanup drops the database and removes the binary.
func agentdAndDatabase(ctx context.Context, o options, phase string) (bin, url string, cleanup func(), err error) {
	bin, rm, err := agentdBinary(ctx)
	if err != nil {
		return "", "", nil, err
	}
	url, drop, err := newDatabase(ctx, o.admin, phase)
	if err != nil {
		rm()
		return "", "", nil, err
	}
	return bin, url, func() { drop(); rm() }, nil
}

// agentdProcess is the agentd the path phase measures.
type agentdProcess struct {
	cmd  *exec.Cmd
	base string
	pid  int
	logs bytes.Buffer
}

// startAgentd starts bin on a free loopback port with database url and its
// built-in fake model (and env), and waits until it is ready.
// phaseAgentd starts agentd for a phase on a database of its own, with
// workers workers and 64 connections, calling fake when it is given (else
// agentd's built-in fake model); stop stops it and drops the database.
func phaseAgentd(ctx context.Context, o options, phase, fake string, workers int) (srv *agentdProcess, url string,
	stop func(), err error) {
	bin, url, cleanup, err := agentdAndDatabase(ctx, o, phase)
	if err != nil {
		return nil, "", nil, err
	}
	env := []string{fmt.Sprintf("AGENTD_WORKERS=%d", workers), "AGENTD_DB_MAX_CONNS=64"}
	if fake != "" {
		env = append(env, "OPENAI_API_KEY=bench", "OPENAI_BASE_URL="+fake, "AGENTD_MODEL=fake")
	}
	if srv, err = startAgentd(ctx, bin, url, env...); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return srv, url, func() {
		client.CloseIdleConnections()
		srv.stop()
		cleanup()
	}, nil
}

func startAgentd(ctx context.Context, bin, url string, env ...string) (*agentdProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &agentdProcess{cmd: exec.Command(bin), base: "http://" + addr}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "AGENTD_ADDR="+addr, "AGENTD_LOG_LEVEL=warn", "OPENAI_API_KEY=")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = p.cmd.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := client.Get(p.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	p.stop()
	return nil, fmt.Errorf("agentd did not become ready: %s", p.logs.String())
}

func (p *agentdProcess) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
