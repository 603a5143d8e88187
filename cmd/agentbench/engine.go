package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// benchFloor measures what PostgreSQL sustains here: 16 connections, each
// committing transactions of 5 single-row inserts of a 200-byte jsonb.
func benchFloor(ctx context.Context, o options) ([]metric, error) {
	url, drop, err := newDatabase(ctx, o.admin, "floor")
	if err != nil {
		return nil, err
	}
	defer drop()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE floor (id bigserial PRIMARY KEY, data jsonb NOT NULL)`); err != nil {
		return nil, err
	}
	doc := fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", 188)) // 200 bytes
	var count atomic.Int64
	deadline := time.Now().Add(o.duration)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	cpuBefore := o.cpu.read()
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for range 5 {
						if _, err := tx.Exec(ctx, `INSERT INTO floor (data) VALUES ($1)`, doc); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errc <- err
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	tps := float64(count.Load()) / time.Since(start).Seconds()
	cpuAfter := o.cpu.read()
	fmt.Fprintf(o.out, "  floor: %.0f transactions/s (16 connections, 5 inserts of a 200-byte jsonb each)\n", tps)
	ms := []metric{{"floor", "transactions/s", "tx/s", tps, nil}}
	n := float64(count.Load())
	ms = append(ms, metric{"floor", "load driver CPU per transaction", "ms", msOf(cpuAfter.self-cpuBefore.self) / max(n, 1), nil})
	noFake := machineCPU{postmaster: o.cpu.postmaster} // the floor does not use the model
	return append(ms, noFake.metrics("floor", "transaction", n, cpuBefore, cpuAfter, nil)...), nil
}

// benchSteps drives 16 concurrent runs of 3 durable steps each through the
// engine: the model asks for a tool, the tool runs, the model answers. The
// ratio is to floorTPS, the floor of the same repetition.
func benchSteps(ctx context.Context, o options, fake string, floorTPS float64) ([]metric, error) {
	url, drop, err := newDatabase(ctx, o.admin, "steps")
	if err != nil {
		return nil, err
	}
	defer drop()
	const concurrency = 16
	store, err := persist.Open(ctx, persist.Config{URL: url, MaxConns: 48})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	// Group commit is on, as in cmd/server: the guarantees are checked in
	// the configuration that is measured.
	store.StartGroupCommit(1, 64) // the server's default
	defer store.StopGroupCommit()
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		return nil, err
	}
	slots := make(chan struct{}, concurrency)
	var ended atomic.Int64
	var failed atomic.Int64
	eng := run.New(run.Config{Store: store, Tools: reg, Workers: concurrency,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake, APIKey: "bench"}),
		OnLeftFunc: func(_ string, status agentd.RunStatus) {
			if status != agentd.StatusCompleted {
				failed.Add(1)
			}
			ended.Add(1)
			<-slots
		}})
	if err := eng.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Stop(sctx)
	}()
	input := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."
	create := func() error {
		_, _, err := eng.Service().Create(ctx, agentd.RunCreate{TenantID: "bench", Spec: agentd.RunSpec{Model: "fake",
			Params: agentd.RunParams{MaxSteps: 4, OnDisconnect: "continue", IfBusy: "reject",
				Timeouts: agentd.Timeouts{TotalMS: 60000, StepMS: 30000, IdleMS: 30000, ToolMS: 30000}},
			Input: []agentd.InputMessage{{Role: "user", Content: input}}}})
		return err
	}
	stop := make(chan struct{})
	var producer sync.WaitGroup
	stopProducer := sync.OnceFunc(func() { close(stop); producer.Wait() })
	defer stopProducer()
	producer.Add(1)
	errc := make(chan error, 1)
	go func() {
		defer producer.Done()
		for {
			select {
			case slots <- struct{}{}:
			case <-stop:
				return
			}
			if err := create(); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(time.Second) // warm up
	before, err := readCounters(ctx, url)
	if err != nil {
		return nil, err
	}
	gcBefore, cpuBefore, endedBefore, failedBefore := store.GroupCommitStats(), o.cpu.read(), ended.Load(), failed.Load()
	start := time.Now()
	time.Sleep(o.duration)
	elapsed := time.Since(start)
	runs, notCompleted := ended.Load()-endedBefore, failed.Load()-failedBefore
	gcAfter, cpuAfter := store.GroupCommitStats(), o.cpu.read()
	cpu := cpuAfter.self - cpuBefore.self
	stopProducer()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	after, cost, err := costSince(ctx, o.out, "steps", url, before) // counts the runs still finishing; a small overestimate
	if err != nil {
		return nil, err
	}
	steps := float64(runs * 3)
	stepsPerSec := steps / elapsed.Seconds()
	fmt.Fprintf(o.out, "  steps: %d runs of 3 steps in %.1fs, %d not completed: %.0f steps/s, %.2fx the floor; executor writes: %d in %d transactions\n",
		runs, elapsed.Seconds(), notCompleted, stepsPerSec, stepsPerSec/floorTPS,
		gcAfter.Requests-gcBefore.Requests, gcAfter.Transactions-gcBefore.Transactions)
	walBreakdown(ctx, o.out, url, before.wal, after.wal, steps, "step")
	ms := []metric{
		{"steps", "steps/s", "steps/s", stepsPerSec, nil},
		{"steps", "steps/s to the floor", "x", stepsPerSec / floorTPS, atLeast(1)},
		{"steps", "runs not completed", "runs", float64(notCompleted), nil},
	}
	// The step targets for a machine of 2 shared cores: WAL has a floor
	// set by the design's rows, and a whole step's machine CPU is the
	// yardstick rather than a multiple of the insert floor.
	ms = append(ms, perUnit("steps", "step", steps, cost, cpu, costTargets{writeTx: atMost(1), wal: atMost(3200), cpu: atMost(0.15)})...)
	ms = append(ms, metric{"steps", "executor write transactions per step", "tx",
		float64(gcAfter.Transactions-gcBefore.Transactions) / max(steps, 1), nil})
	ms = append(ms, o.cpu.metrics("steps", "step", steps, cpuBefore, cpuAfter, atMost(0.45))...)
	violations, err := checkRuns(ctx, o.out, "steps", store, url, nil)
	if err != nil {
		return nil, fmt.Errorf("check runs: %w", err)
	}
	return append(ms, violations), nil
}
