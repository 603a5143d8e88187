package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// dbosClients is the clients of each side of the dbos phase.
const dbosClients = 16

// benchDBOS sets agentd's 3-step run beside DBOS Transact Go's 3-step
// workflow, on the same PostgreSQL in one run: agentd (cmd/server with its
// built-in fake model, a process of its own) making the path phase's run
// with POST /runs then GET /runs/{id}/events to its end, and bench/dbos (a
// module of its own, built here) starting a workflow and waiting for its
// result, 16 clients each. DBOS runs three times: with steps that do no
// work (as DBOS's own benchmarks); with its first and last step calling
// the fake model (the benchmark's, in its child process) as agentd's run
// does; and so, behind an HTTP server of the peer's own that its clients
// call, as agentd's clients call its API. The targets are ratios: agentd's
// runs/s at least 1.5 times DBOS's workflows/s, and its machine CPU per run
// at most 1/1.5 of DBOS's per workflow. agentd's run also streams its
// events to a client (SSE), where DBOS's client gets one answer.
func benchDBOS(ctx context.Context, o options, fake string) ([]metric, error) {
	peer, cleanupPeer, err := dbosBinary(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanupPeer()
	bin, url, cleanup, err := agentdAndDatabase(ctx, o, "dbos_peer")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	srv, err := startAgentd(ctx, bin, url)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	defer client.CloseIdleConnections()

	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"dbos", name, unit, v, t}) }
	tag := fmt.Sprintf(", %d clients", dbosClients)

	machine0 := o.cpu.read()
	start := time.Now()
	lat, failed := pathRuns(ctx, []string{srv.base}, dbosClients, o.duration, "subscribe",
		"/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42.", nil)
	elapsed := time.Since(start)
	machine1 := o.cpu.read()
	runs := float64(max(len(lat), 1))
	agentdRate := float64(len(lat)) / elapsed.Seconds()
	add("agentd runs/s (POST then GET events)"+tag, "runs/s", agentdRate, nil)
	add("agentd failed runs"+tag, "runs", float64(failed), atMost(0))

	// pgShare is PostgreSQL's share of the machine's CPU between two
	// readings, in percent.
	pgShare := func(a, b cpuReading) float64 {
		return 100 * float64(b.postgres-a.postgres) / float64(b.machine-a.machine)
	}
	perRun := msOf(machine1.machine-machine0.machine) / runs
	if machine1.machine > 0 {
		add("agentd machine CPU per run"+tag, "ms", perRun, nil)
		if o.cpu.postmaster > 0 {
			add("PostgreSQL share of an agentd run's machine CPU"+tag, "%", pgShare(machine0, machine1), nil)
		}
	}
	var said []string
	for _, peerSide := range []struct {
		side, modelURL string // side: the figures' name, after DBOS's
		http           bool
	}{{"", "", false}, {", steps calling the model", fake, false}, {", steps calling the model, behind HTTP", fake, true}} {
		if peerSide.side != "" && peerSide.modelURL == "" {
			continue // no fake model of the benchmark's own (-url)
		}
		res, w0, w1, err := runDBOS(ctx, o, peer, peerSide.modelURL, peerSide.http)
		if err != nil {
			return nil, err
		}
		side := peerSide.side + tag
		workflows := float64(max(res.Workflows, 1))
		add("DBOS workflows/s"+side, "workflows/s", res.WorkflowsPerS, nil)
		add("DBOS failed workflows"+side, "workflows", float64(res.Failed), atMost(0))
		if res.WorkflowsPerS > 0 {
			add("agentd runs/s to DBOS workflows/s"+side, "x", agentdRate/res.WorkflowsPerS, atLeast(1.5))
		}
		if machine1.machine > 0 && w1.machine > 0 {
			perWorkflow := msOf(w1.machine-w0.machine) / workflows
			add("DBOS machine CPU per workflow"+side, "ms", perWorkflow, nil)
			add("agentd machine CPU per run to DBOS's per workflow"+side, "x", perRun/perWorkflow, atMost(0.67))
			if o.cpu.postmaster > 0 {
				add("PostgreSQL share of a DBOS workflow's machine CPU"+side, "%", pgShare(w0, w1), nil)
			}
		}
		said = append(said, fmt.Sprintf("DBOS %s%s: %d workflows in %.1fs (%d failed)", res.DBOSVersion, peerSide.side,
			res.Workflows, res.Seconds, res.Failed))
	}
	fmt.Fprintf(o.out, "  dbos: agentd %d runs in %.1fs (%d failed); %s\n", len(lat), elapsed.Seconds(), failed, strings.Join(said, "; "))
	sayTargets(o.out, ms)
	return ms, nil
}

// dbosResult is bench/dbos's result line.
type dbosResult struct {
	Mark          string  `json:"mark"`
	Workflows     int64   `json:"workflows"`
	Failed        int64   `json:"failed"`
	Seconds       float64 `json:"seconds"`
	WorkflowsPerS float64 `json:"workflows_per_s"`
	DBOSVersion   string  `json:"dbos_version"`
}

// runDBOS runs the peer for o.duration and reads the machine's CPU as its
// measured window starts and ends (its -marks lines).
func runDBOS(ctx context.Context, o options, peer, modelURL string, overHTTP bool) (res dbosResult, start, end cpuReading, err error) {
	warmup := 2 * time.Second
	if o.quick {
		warmup = 500 * time.Millisecond
	}
	cmd := exec.CommandContext(ctx, peer, "-database-url", o.admin, "-clients", strconv.Itoa(dbosClients),
		"-duration", o.duration.String(), "-warmup", warmup.String(), "-marks", "-model-url", modelURL,
		"-http="+strconv.FormatBool(overHTTP))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return res, start, end, err
	}
	if err := cmd.Start(); err != nil {
		return res, start, end, err
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var r dbosResult
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			continue // not one of its lines
		}
		switch r.Mark {
		case "start":
			start = o.cpu.read()
		case "end":
			end = o.cpu.read()
		default:
			res = r
		}
	}
	if err := cmd.Wait(); err != nil {
		return res, start, end, fmt.Errorf("bench/dbos: %v\n%s", err, lastLines(stderr.String(), 20))
	}
	if res.DBOSVersion == "" {
		return res, start, end, fmt.Errorf("bench/dbos printed no result\n%s", lastLines(stderr.String(), 20))
	}
	return res, start, end, nil
}

// dbosBinary builds bench/dbos, the module next to this one's root.
func dbosBinary(ctx context.Context) (string, func(), error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the module's root: %w", err)
	}
	src := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "bench", "dbos")
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		return "", nil, fmt.Errorf("bench/dbos: %w (run agentbench from agentd's repository)", err)
	}
	dir, err := os.MkdirTemp("", "agentbench-dbos")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "dbos")
	var out bytes.Buffer
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir, build.Stdout, build.Stderr = src, &out, &out
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build bench/dbos: %v\n%s", err, out.String())
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(len(ls)-n, 0):], "\n")
}
