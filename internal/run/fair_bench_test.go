package run_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// BenchmarkTenantStartLatency measures how long tenant B's runs wait to
// start (started_at - created_at, as the database stamps them), one at a
// time, first on an idle server, then while tenant A floods it: 16 runs
// that hold their workers (a 10 s answer) and 200 more queued behind them.
// 8 workers; tenant runs in progress capped at 4 (the default of
// deploy/), and, for comparison, without a cap. It reports p50 and p99 of
// each phase in milliseconds; docs/benchmarks.md has the figures.
//
//	go test -run '^$' -bench TenantStartLatency -benchtime 1x ./internal/run/
func BenchmarkTenantStartLatency(b *testing.B) {
	for _, capRuns := range []int{4, 0} {
		b.Run(fmt.Sprintf("cap=%d", capRuns), func(b *testing.B) {
			for b.Loop() {
				idle, flood := tenantStartLatency(b, capRuns)
				b.ReportMetric(pct(idle, 50), "idle-p50-ms")
				b.ReportMetric(pct(idle, 99), "idle-p99-ms")
				b.ReportMetric(pct(flood, 50), "flood-p50-ms")
				b.ReportMetric(pct(flood, 99), "flood-p99-ms")
			}
		})
	}
}

func tenantStartLatency(b *testing.B, capRuns int) (idle, flood []float64) {
	b.StopTimer()
	defer b.StartTimer()
	url := persisttest.NewDatabase(b)
	store := persisttest.Open(b, persist.Config{URL: url, MaxConns: 32, TenantRunsInProgress: capRuns})
	store.StartGroupCommit(2, 64)
	defer store.StopGroupCommit()
	fsrv := httptest.NewServer(fakellm.New())
	defer fsrv.Close()
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		b.Fatal(err)
	}
	e := run.New(run.Config{Store: store, Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fsrv.URL + "/v1", APIKey: "x"}),
		Tools: reg, Workers: 8, LeaseTTL: 30 * time.Second, PollInterval: 100 * time.Millisecond})
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	}()
	create := func(tenant, input string) agentd.Run {
		r, _, err := store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: tenant, Model: "fake",
			Params: agentd.RunParams{MaxSteps: 3}, Input: []agentd.InputMessage{{Role: "user", Content: input}}})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	// startWait is how long a new run of tenant B waited to start.
	startWait := func() float64 {
		r := create("globex", "/say hi")
		done := persisttest.WaitRun(b, store, r.ID, func(r agentd.Run) bool { return r.StartedAt != nil }, 60*time.Second)
		return float64(done.StartedAt.Sub(done.CreatedAt).Microseconds()) / 1000
	}
	for range 50 {
		idle = append(idle, startWait())
	}
	var floodIDs []string
	for range 16 {
		floodIDs = append(floodIDs, create("acme", "/stream 100 100").ID)
	}
	for range 200 {
		floodIDs = append(floodIDs, create("acme", "/say queued").ID)
	}
	for range 50 {
		flood = append(flood, startWait())
	}
	for _, id := range floodIDs {
		if _, err := store.RunCancel(context.Background(), "acme", id, "local"); err != nil && !errors.Is(err, agentd.ErrRunFinished) {
			b.Fatal(err)
		}
	}
	return idle, flood
}

// pct is the p-th percentile of xs (nearest rank).
func pct(xs []float64, p int) float64 {
	s := slices.Sorted(slices.Values(xs))
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
