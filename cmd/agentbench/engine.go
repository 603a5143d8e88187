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

	"agentd/internal/llm"
	"agentd/internal/persist"
	"agentd/internal/run"
	"agentd/internal/tools"
)

// benchFloor measures what PostgreSQL sustains here: 16 connections, each
// committing transactions of 5 single-row inserts of a 200-byte jsonb.
func benchFloor(ctx context.Context, o options) (float64, error) {
	url, drop, err := newDatabase(ctx, o.admin, "floor")
	if err != nil {
		return 0, err
	}
	defer drop()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE floor (id bigserial PRIMARY KEY, data jsonb NOT NULL)`); err != nil {
		return 0, err
	}
	doc := fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", 188)) // 200 bytes
	var count atomic.Int64
	deadline := time.Now().Add(o.duration)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
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
		return 0, err
	}
	tps := float64(count.Load()) / time.Since(start).Seconds()
	fmt.Fprintf(o.out, "floor: 16 connections, 5 inserts (200-byte jsonb) per transaction\n  %.0f transactions/s\n\n", tps)
	return tps, nil
}

// benchSteps drives 16 concurrent runs of 3 durable steps each through the
// engine: the model asks for a tool, the tool runs, the model answers.
func benchSteps(ctx context.Context, o options, fake string, floorTPS float64) error {
	url, drop, err := newDatabase(ctx, o.admin, "steps")
	if err != nil {
		return err
	}
	defer drop()
	const concurrency = 16
	store, err := persist.Open(ctx, url, 48)
	if err != nil {
		return err
	}
	defer store.Close()
	store.StartGroupCommit(2, 64)
	defer store.StopGroupCommit()
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		return err
	}
	slots := make(chan struct{}, concurrency)
	var ended atomic.Int64
	var failed atomic.Int64
	eng := run.New(run.Config{Store: store, Tools: reg, Workers: concurrency,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake, APIKey: "bench"}),
		OnEndFunc: func(_ string, status string) {
			if status != persist.StatusCompleted {
				failed.Add(1)
			}
			ended.Add(1)
			<-slots
		}})
	if err := eng.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Stop(sctx)
	}()
	input := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."
	create := func() error {
		_, _, err := store.RunCreate(ctx, persist.RunCreateParams{TenantID: "bench", Model: "fake",
			Params: persist.RunParams{MaxSteps: 4, OnDisconnect: "continue", IfBusy: "reject",
				Timeouts: persist.Timeouts{TotalMS: 60000, StepMS: 30000, IdleMS: 30000, ToolMS: 30000}},
			Input: []persist.InputMessage{{Role: "user", Content: input}}})
		return err
	}
	stop := make(chan struct{})
	var producer sync.WaitGroup
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
		return err
	}
	gcBefore, cpuBefore, endedBefore := store.GroupCommitStats(), cpuTime(), ended.Load()
	start := time.Now()
	time.Sleep(o.duration)
	elapsed := time.Since(start)
	runs := ended.Load() - endedBefore
	gcAfter, cpuAfter := store.GroupCommitStats(), cpuTime()
	close(stop)
	producer.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	after, err := readCounters(ctx, url) // counts the runs still finishing; a small overestimate
	if err != nil {
		return err
	}
	wal, err := walBytes(ctx, url, before.wal, after.wal)
	if err != nil {
		return err
	}
	steps := float64(runs * 3)
	stepsPerSec := steps / elapsed.Seconds()
	fmt.Fprintf(o.out, "steps: %d concurrent runs of 3 durable steps (model asks for a tool, the tool runs, the model answers)\n", concurrency)
	fmt.Fprintf(o.out, "  %d runs in %.1fs (%d not completed): %.0f steps/s, %.2fx the floor\n", runs, elapsed.Seconds(), failed.Load(), stepsPerSec, stepsPerSec/floorTPS)
	fmt.Fprintf(o.out, "  executor write transactions per step: %.2f (%d writes shared %d transactions)\n",
		float64(gcAfter.Transactions-gcBefore.Transactions)/steps, gcAfter.Requests-gcBefore.Requests, gcAfter.Transactions-gcBefore.Transactions)
	fmt.Fprintf(o.out, "  all commits per step (run creation, claims and reads included): %.2f\n", float64(after.commits-before.commits)/steps)
	fmt.Fprintf(o.out, "  WAL per step: %.0f bytes\n", float64(wal)/steps)
	walBreakdown(ctx, o.out, url, before.wal, after.wal, steps, "step")
	fmt.Fprintf(o.out, "  agentd CPU per step: %.3f ms (engine, store and load driver; the model runs in another process)\n\n",
		float64((cpuAfter-cpuBefore).Microseconds())/1000/steps)
	return nil
}
