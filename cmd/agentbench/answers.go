package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Inputs of the answers phase: the 3-step run (model, calculator, model)
// answering one word, and the same run streaming 300 tokens at 100 tokens/s.
const (
	oneWordRun  = "/call calculator {\"expression\":\"6*7\"}\n/say ok"
	streamedRun = "/call calculator {\"expression\":\"6*7\"}\n/stream 300 10"
	// streamedFor is how long the streamed answer takes the model itself.
	streamedFor = 3 * time.Second
)

// benchAnswers measures what a streamed answer costs against a one-word
// one, in one run of the same build: agentd (cmd/server, AGENTD_WORKERS=300)
// on a database of its own, calling the fake model in its child process
// (fake, when given; else agentd's built-in one), the 3-step run
// made with POST /runs and "stream": true and followed to its end by its
// SSE client, at 16 clients answering one word and streaming 300 tokens,
// then at 256 clients streaming. Per run: machine, agentd and PostgreSQL
// CPU, write transactions and WAL; the ratios of the streamed run to the
// one-word run; at 256 clients, failed runs, how far latency's p99 is past
// the answer's own 3 s, and how busy the machine was. With the fake model
// in a process of its own, the machine's CPU is also given less the
// model's: what the model spends producing 300 chunks is not agentd's.
func benchAnswers(ctx context.Context, o options, fake string) ([]metric, error) {
	bin, url, cleanup, err := agentdAndDatabase(ctx, o, "answers")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	env := []string{"AGENTD_WORKERS=300", "AGENTD_DB_MAX_CONNS=64"}
	if fake != "" {
		env = append(env, "OPENAI_API_KEY=bench", "OPENAI_BASE_URL="+fake, "AGENTD_MODEL=fake")
	}
	srv, err := startAgentd(ctx, bin, url, env...)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	defer client.CloseIdleConnections()

	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"answers", name, unit, v, t}) }
	type level struct {
		name    string
		input   string
		clients int
	}
	levels := []level{{"one word", oneWordRun, 16}, {"300 tokens", streamedRun, 16}, {"300 tokens", streamedRun, 256}}
	if o.quick {
		levels = levels[:2]
	}
	type perRun struct{ machine, lessModel, wal, writeTx float64 }
	got := map[string]perRun{}
	for _, l := range levels {
		before, err := readCounters(ctx, url)
		if err != nil {
			return nil, err
		}
		agentd0, machine0 := processCPU(srv.pid), o.cpu.read()
		start := time.Now()
		lat, failed := pathRuns(ctx, []string{srv.base}, l.clients, o.duration, "stream", l.input)
		elapsed := time.Since(start)
		agentd, machine := processCPU(srv.pid)-agentd0, o.cpu.read()
		_, cost, err := costSince(ctx, o.out, "answers", url, before)
		if err != nil {
			return nil, err
		}
		n := float64(max(len(lat), 1))
		p50, p99 := percentiles(lat)
		tag := fmt.Sprintf(", %s, %d clients", l.name, l.clients)
		add("runs/s"+tag, "runs/s", float64(len(lat))/elapsed.Seconds(), nil)
		add("failed runs"+tag, "runs", float64(failed), atMost(0))
		add("run latency p50"+tag, "ms", msOf(p50), nil)
		add("run latency p99"+tag, "ms", msOf(p99), nil)
		add("agentd CPU per run"+tag, "ms", msOf(agentd)/n, nil)
		if o.cpu.postmaster > 0 {
			add("PostgreSQL CPU per run"+tag, "ms", msOf(machine.postgres-machine0.postgres)/n, nil)
		}
		pr := perRun{wal: float64(cost.wal) / n, writeTx: float64(cost.writeTx) / n}
		var commitsT *target
		if l.input == streamedRun && l.clients == 16 {
			commitsT = atMost(8)
		}
		add("write transactions per run"+tag, "tx", pr.writeTx, commitsT)
		add("WAL per run"+tag, "B", pr.wal, nil)
		if machine.machine > 0 {
			pr.machine = msOf(machine.machine-machine0.machine) / n
			add("machine CPU per run"+tag, "ms", pr.machine, nil)
			if o.cpu.fakePID > 0 && fake != "" {
				add("fake model CPU per run"+tag, "ms", msOf(machine.fake-machine0.fake)/n, nil)
				pr.lessModel = pr.machine - msOf(machine.fake-machine0.fake)/n
				add("machine CPU per run less the model's"+tag, "ms", pr.lessModel, nil)
			}
		}
		got[tag] = pr
		if l.clients == 256 {
			add("run latency p99 past the answer's own 3 s, 300 tokens, 256 clients", "ms", msOf(p99-streamedFor), atMost(250))
			if machine.machine > 0 {
				busy := float64(machine.machine-machine0.machine) / (float64(elapsed) * float64(runtime.NumCPU()))
				add("machine busy, 300 tokens, 256 clients", "%", 100*busy, atMost(50))
			}
		}
		fmt.Fprintf(o.out, "  answers: %s, %d clients: %d runs in %.1fs (%d failed), p50 %v p99 %v; %.1f tx, %.0f B WAL per run\n",
			l.name, l.clients, len(lat), elapsed.Seconds(), failed, p50.Round(time.Millisecond), p99.Round(time.Millisecond),
			pr.writeTx, pr.wal)
	}
	word, streamed := got[", one word, 16 clients"], got[", 300 tokens, 16 clients"]
	if word.machine > 0 && streamed.machine > 0 {
		add("machine CPU per run, 300 tokens to one word, 16 clients", "x", streamed.machine/word.machine, atMost(2))
	}
	if word.lessModel > 0 && streamed.lessModel > 0 {
		add("machine CPU per run less the model's, 300 tokens to one word, 16 clients", "x", streamed.lessModel/word.lessModel, atMost(2))
	}
	if word.wal > 0 {
		add("WAL per run, 300 tokens to one word, 16 clients", "x", streamed.wal/word.wal, atMost(2))
	}
	return ms, nil
}
