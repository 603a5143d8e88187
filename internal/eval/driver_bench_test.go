package eval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// BenchmarkEvalAgainstRuns times an evaluation of 100 cases under two
// versions (200 runs, at a concurrency of 32: the engine's 16 workers busy, 16 more queued) against the same 200 runs
// made at once on the same engine (16 workers), alternately, and reports
// the ratio of their wall times: what making, holding and scoring the
// evaluation's runs costs beyond the runs themselves. Each case calls the
// calculator, then answers (two model calls).
func BenchmarkEvalAgainstRuns(b *testing.B) {
	store, _ := persisttest.New(b)
	fake := httptest.NewServer(fakellm.New())
	b.Cleanup(fake.Close)
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		b.Fatal(err)
	}
	comp := compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "fake"}, reg), Agents: store, Registry: reg})
	e := run.New(run.Config{Store: store, Tools: reg, Workers: 16, Composer: comp, LeaseTTL: 5 * time.Second,
		PollInterval: 100 * time.Millisecond, Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "test"})})
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Stop(context.Background()) })
	d := eval.NewDriver(eval.DriverConfig{Store: store, Composer: comp, Runs: e.Service(), Owner: "bench"})
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Stop(context.Background()) })
	cases := benchDataset(b, store)
	var evalTook, runsTook time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			evalTook += timeEval(b, store, cases)
			runsTook += timeRuns(b, store, comp, cases)
		} else {
			runsTook += timeRuns(b, store, comp, cases)
			evalTook += timeEval(b, store, cases)
		}
	}
	b.ReportMetric(evalTook.Seconds()/float64(b.N), "eval-s")
	b.ReportMetric(runsTook.Seconds()/float64(b.N), "runs-s")
	b.ReportMetric(float64(evalTook)/float64(runsTook), "eval/runs")
}

// benchDataset saves two versions of agent helper and a dataset of 100
// cases, and returns the cases.
func benchDataset(b *testing.B, store *persist.Store) []agentd.StoredCase {
	ctx := context.Background()
	def := agentd.AgentDefine{TenantID: "default", Name: "helper", Definition: json.RawMessage(`{"instructions": "Be exact."}`),
		Actor: "bench"}
	if _, err := store.AgentCreate(ctx, def, nil); err != nil {
		b.Fatal(err)
	}
	def.Definition = json.RawMessage(`{"instructions": "Be quick."}`)
	if _, err := store.AgentUpdate(ctx, def, nil); err != nil {
		b.Fatal(err)
	}
	in := agentd.DatasetDefine{TenantID: "default", Name: "bench", Actor: "bench"}
	for i := range 100 {
		in.Cases = append(in.Cases, agentd.DatasetCase{ID: fmt.Sprintf("c%d", i),
			Input:  json.RawMessage(fmt.Sprintf(`"/call calculator {\"expression\": \"%d*2\"}\n/stream 3 100\n/say %d"`, i, 2*i)),
			Checks: []agentd.Check{{Type: agentd.CheckEquals, Value: fmt.Sprint(2 * i)}}, Stubs: []agentd.Stub{}})
	}
	if _, err := store.DatasetCreate(ctx, in); err != nil {
		b.Fatal(err)
	}
	cases, err := store.DatasetCases(ctx, "default", "bench", 0, 0, 100)
	if err != nil || len(cases) != 100 {
		b.Fatalf("cases: %d %v", len(cases), err)
	}
	return cases
}

// timeEval makes an evaluation of versions 1 and 2 on cases and waits for
// it to complete with every run passed.
func timeEval(b *testing.B, store *persist.Store, cases []agentd.StoredCase) time.Duration {
	ctx := context.Background()
	start := time.Now()
	ev, err := store.EvalCreate(ctx, agentd.EvalCreate{Cases: cases, Eval: agentd.Evaluation{ID: agentd.NewID(), TenantID: "default",
		Agent: "helper", Versions: []string{"1", "2"}, Baseline: "1", Dataset: "bench", DatasetVersion: 1, Repeat: 1,
		Concurrency: 32, Actor: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	for {
		got, err := store.EvalGet(ctx, "default", ev.ID)
		if err != nil {
			b.Fatal(err)
		}
		if got.Status.Ended() {
			if got.Status != agentd.EvalCompleted || got.Scored != 200 {
				b.Fatalf("the evaluation: %+v", got)
			}
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// timeRuns makes the runs of the cases under both versions at once, as
// a client's POST /runs of the agent's versions would (composed as the
// evaluation's are, less what makes them an evaluation's), and waits for
// all of them to complete.
func timeRuns(b *testing.B, store *persist.Store, comp *compose.Composer, cases []agentd.StoredCase) time.Duration {
	ctx := context.Background()
	start := time.Now()
	e := agentd.Evaluation{ID: agentd.NewID(), TenantID: "default", Agent: "helper", Actor: "bench", CreatedAt: start}
	var ids []string
	for _, v := range []string{"1", "2"} {
		for _, c := range cases {
			rc, err := comp.Case(ctx, e, c.Case, v)
			if err != nil {
				b.Fatal(err)
			}
			rc.Spec.Params.Eval, rc.Spec.Params.Memory, rc.Spec.Params.Pinned = nil, nil, nil
			r, _, err := store.RunCreate(ctx, persist.CreateOf(rc))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
	}
	for _, id := range ids {
		if r := persisttest.WaitRun(b, store, id, nil, time.Minute); r.Status != agentd.StatusCompleted || r.StepCount != 2 {
			b.Fatalf("run %s: %s after %d steps", id, r.Status, r.StepCount)
		}
	}
	return time.Since(start)
}
