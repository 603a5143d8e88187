package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Inputs of the answers phase: the 3-step run (model, calculator, model)
// answering one word, and the same run streaming 300 tokens at 100 tokens/s.
const (
	oneWordRun  = calculatorStep + oneWordAnswer
	streamedRun = calculatorStep + streamedAnswer
	// calculatorStep is the runs' first model step, a tool call; the
	// answers are their last, and what the relay is asked.
	calculatorStep = "/call calculator {\"expression\":\"6*7\"}\n"
	oneWordAnswer  = "/say ok"
	streamedAnswer = "/stream 300 10"
	// streamedTokens is how many chunks streamedAnswer is.
	streamedTokens = 300
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
// After each level the relay (relay.go) is driven at the same level, and
// at the end CPU per streamed token of agentd and PostgreSQL is set
// against the relay's.
func benchAnswers(ctx context.Context, o options, fake string) ([]metric, error) {
	srv, url, stop, err := phaseAgentd(ctx, o, "answers", fake, 300)
	if err != nil {
		return nil, err
	}
	defer stop()
	var rl *relayProcess
	if fake != "" { // with agentd's built-in model there is no model for a relay to call
		if rl, err = startRelay(fake); err != nil {
			return nil, err
		}
		defer rl.stop()
	}

	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"answers", name, unit, v, t}) }
	got := map[string]answersCost{}
	for _, l := range answersLevels(o.quick) {
		before, err := readCounters(ctx, url)
		if err != nil {
			return nil, err
		}
		agentd0, machine0, backends0 := processCPU(srv.pid), o.cpu.read(), o.cpu.backends(url)
		start := time.Now()
		lat, failed := pathRuns(ctx, []string{srv.base}, l.clients, o.duration, "stream", l.input, nil)
		elapsed := time.Since(start)
		agentd, machine, backends := processCPU(srv.pid)-agentd0, o.cpu.read(), o.cpu.backends(url)-backends0
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
		pr := answersCost{wal: float64(cost.wal) / n, writeTx: float64(cost.writeTx) / n}
		if o.cpu.postmaster > 0 {
			add("PostgreSQL CPU per run"+tag, "ms", msOf(machine.postgres-machine0.postgres)/n, nil)
			pr.agentdPG = msOf(agentd+machine.postgres-machine0.postgres) / n
			add("agentd and PostgreSQL CPU per run"+tag, "ms", pr.agentdPG, nil)
			pr.agentdDB = msOf(agentd+backends) / n
			add("PostgreSQL CPU of the phase's database's backends per run"+tag, "ms", msOf(backends)/n, nil)
		}
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
		if rl != nil { // at once, so that the machine's drift spreads over both
			ms = append(ms, rl.level(ctx, o, l)...)
		}
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
	ms = append(ms, perThousandTokens(got)...)
	if rl != nil {
		ms = append(ms, rl.perToken(got)...)
	}
	sayTargets(o.out, ms)
	return ms, nil
}

// perThousandTokens gives the WAL and the write transactions per 1,000
// streamed tokens: the 300-token run's less the one-word run's at 16
// clients, over the 299 tokens more, scaled to 1,000; at 256 clients the
// same less the one-word run at 16.
func perThousandTokens(got map[string]answersCost) []metric {
	var ms []metric
	word, ok := got[", one word, 16 clients"]
	if !ok {
		return nil
	}
	perK := func(streamed, word float64) float64 { return 1000 * (streamed - word) / (streamedTokens - 1) }
	for _, streamed := range []string{", 300 tokens, 16 clients", ", 300 tokens, 256 clients"} {
		s, ok := got[streamed]
		if !ok {
			continue
		}
		ms = append(ms, metric{"answers", "WAL per 1,000 streamed tokens" + streamed, "KB", perK(s.wal, word.wal) / 1000, nil},
			metric{"answers", "write transactions per 1,000 streamed tokens" + streamed, "tx", perK(s.writeTx, word.writeTx), nil})
	}
	return ms
}

// sayTargets writes each figure of ms that has a target (other than a
// count of failures, which the table judges) beside its target, one line
// each, so that a repetition's output reads as issue 50's list does.
func sayTargets(w io.Writer, ms []metric) {
	for _, m := range ms {
		if m.Target == nil || strings.Contains(m.Name, "failed") {
			continue
		}
		fmt.Fprintf(w, "  %s: %s: %s%s (target %s)\n", m.Phase, m.Name, formatValue(m.Value), unitSuffix(m.Unit), m.Target.phrase(m.Unit))
	}
}

// unitSuffix is how a value of unit is written after it: "2.30x", "250 ms".
func unitSuffix(unit string) string {
	if unit == "x" || unit == "%" {
		return unit
	}
	return " " + unit
}

// answersLevel is one level of the answers phase: the run's input (input)
// and, for the relay, its answer alone (answer), from clients clients.
type answersLevel struct {
	name, input, answer string
	clients             int
}

// answersLevels are the answers phase's levels: one word and 300 tokens at
// 16 clients, then 300 tokens at 256 (not with quick).
func answersLevels(quick bool) []answersLevel {
	levels := []answersLevel{{"one word", oneWordRun, oneWordAnswer, 16}, {"300 tokens", streamedRun, streamedAnswer, 16},
		{"300 tokens", streamedRun, streamedAnswer, 256}}
	if quick {
		levels = levels[:2]
	}
	return levels
}

// answersCost is what one run of a level cost, in ms of CPU (machine, the
// machine less the fake model, agentd and PostgreSQL together), bytes of
// WAL and write transactions; a figure not measured is 0.
type answersCost struct{ machine, lessModel, agentdPG, agentdDB, wal, writeTx float64 }

// relayProcess is the answers phase's relay in its child process, at
// base, and what each level's request cost it in ms of CPU, by level.
type relayProcess struct {
	base string
	pid  int
	stop func()
	cpu  map[string]float64
}

// startRelay runs the relay of the fake model at fake in a child process
// (this binary with -serve-relay).
func startRelay(fake string) (*relayProcess, error) {
	base, pid, stop, err := startChild("relay", "-serve-relay", fake)
	if err != nil {
		return nil, err
	}
	return &relayProcess{base: base, pid: pid, stop: stop, cpu: map[string]float64{}}, nil
}

// level drives the relay at level l with its answer alone, and reports per
// request its CPU and the model's.
func (rl *relayProcess) level(ctx context.Context, o options, l answersLevel) []metric {
	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"answers", name, unit, v, t}) }
	relay0, machine0 := processCPU(rl.pid), o.cpu.read()
	start := time.Now()
	lat, failed := pathRuns(ctx, []string{rl.base}, l.clients, o.duration, "relay", l.answer, nil)
	elapsed := time.Since(start)
	relay, machine := processCPU(rl.pid)-relay0, o.cpu.read()
	n := float64(max(len(lat), 1))
	p50, p99 := percentiles(lat)
	tag := fmt.Sprintf(", %s, %d clients", l.name, l.clients)
	rl.cpu[tag] = msOf(relay) / n
	add("relay requests/s"+tag, "requests/s", float64(len(lat))/elapsed.Seconds(), nil)
	add("relay failed requests"+tag, "requests", float64(failed), atMost(0))
	add("relay CPU per request"+tag, "ms", rl.cpu[tag], nil)
	if o.cpu.fakePID > 0 {
		add("fake model CPU per relay request"+tag, "ms", msOf(machine.fake-machine0.fake)/n, nil)
	}
	fmt.Fprintf(o.out, "  answers: relay, %s, %d clients: %d requests in %.1fs (%d failed), p50 %v p99 %v; relay %.2f ms a request\n",
		l.name, l.clients, len(lat), elapsed.Seconds(), failed, p50.Round(time.Millisecond), p99.Round(time.Millisecond), rl.cpu[tag])
	return ms
}

// perToken gives CPU per streamed token, for agentd and PostgreSQL (from
// agentd's runs, got) and for the relay alike: the 300-token run's CPU
// less the one-word run's at 16 clients, over the 299 tokens more; at 256
// clients the same less the one-word run at 16 (there is no one-word level
// at 256). Then the ratio of the two, with its target.
func (rl *relayProcess) perToken(got map[string]answersCost) []metric {
	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"answers", name, unit, v, t}) }
	perToken := func(streamed, word float64) float64 { return 1000 * (streamed - word) / (streamedTokens - 1) }
	word := ", one word, 16 clients"
	for _, streamed := range []string{", 300 tokens, 16 clients", ", 300 tokens, 256 clients"} {
		if _, ok := rl.cpu[streamed]; !ok {
			continue
		}
		how := " (300-token run less one-word run, over 299)" + streamed
		if streamed != ", 300 tokens, 16 clients" {
			how = " (300-token run less one-word run at 16 clients, over 299)" + streamed
		}
		relay := perToken(rl.cpu[streamed], rl.cpu[word])
		add("relay CPU per streamed token"+how, "µs", relay, nil)
		if got[streamed].agentdPG == 0 || got[word].agentdPG == 0 {
			continue // PostgreSQL's CPU is not readable here
		}
		durable := perToken(got[streamed].agentdPG, got[word].agentdPG)
		add("agentd and PostgreSQL CPU per streamed token"+how, "µs", durable, nil)
		if relay > 0 {
			add("agentd and PostgreSQL CPU per streamed token to the relay's"+streamed, "x", durable/relay, atMost(1.5))
		}
		// PostgreSQL's CPU above is the whole cluster's: on a machine
		// where other databases are busy, its backends for this one
		// alone say what agentd cost it.
		own := perToken(got[streamed].agentdDB, got[word].agentdDB)
		add("agentd and its database's backends' CPU per streamed token"+how, "µs", own, nil)
		if relay > 0 {
			add("agentd and its database's backends' CPU per streamed token to the relay's"+streamed, "x", own/relay, atMost(1.5))
		}
	}
	return ms
}
