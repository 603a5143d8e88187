package eval_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// TestEvalRunsGoBehindLiveRuns: while its tenant has a live run waiting
// in the queue, a driver's pass makes none of an evaluation's runs; once
// the queue holds none, it makes them, at most its concurrency; another
// tenant's queue does not hold it back.
func TestEvalRunsGoBehindLiveRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, _ := persisttest.New(t)
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	comp := compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "fake"}, reg), Agents: store, Registry: reg})
	// No engine runs: what is queued stays queued.
	d := eval.NewDriver(eval.DriverConfig{Store: store, Composer: comp, Runs: run.New(run.Config{Store: store}).Service(),
		Owner: "test", Poll: 10 * time.Millisecond, Lease: 200 * time.Millisecond})
	if _, err := store.AgentCreate(ctx, agentd.AgentDefine{TenantID: "default", Name: "helper",
		Definition: json.RawMessage(`{"instructions": "Be exact."}`), Actor: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	in := agentd.DatasetDefine{TenantID: "default", Name: "set", Actor: "test"}
	for _, id := range []string{"a", "b", "c"} {
		in.Cases = append(in.Cases, agentd.DatasetCase{ID: id, Input: json.RawMessage(`"hi"`), Checks: []agentd.Check{}, Stubs: []agentd.Stub{}})
	}
	if _, err := store.DatasetCreate(ctx, in); err != nil {
		t.Fatal(err)
	}
	cases, err := store.DatasetCases(ctx, "default", "set", 0, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	live := func(tenant string) agentd.Run {
		r, _, err := store.RunCreate(ctx, persist.RunCreateParams{TenantID: tenant, Model: "fake",
			Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "live"}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waiting := live("default")
	live("other")
	ev, err := store.EvalCreate(ctx, agentd.EvalCreate{Cases: cases, Eval: agentd.Evaluation{ID: agentd.NewID(), TenantID: "default",
		Agent: "helper", Versions: []string{"1"}, Baseline: "1", Dataset: "set", DatasetVersion: 1, Repeat: 1, Concurrency: 2, Actor: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	made := func() int {
		rows, err := store.EvalRuns(ctx, ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if r.RunID != "" {
				n++
			}
		}
		return n
	}
	d.Pass(ctx)
	if n := made(); n != 0 {
		t.Fatalf("%d runs made while a live run waited", n)
	}
	if _, err := store.RunCancel(ctx, "default", waiting.ID, "test"); err != nil {
		t.Fatal(err)
	}
	d.Pass(ctx)
	if n := made(); n != 2 {
		t.Fatalf("%d runs made, want the concurrency's 2", n)
	}
}
