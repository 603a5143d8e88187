package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// evalFixture saves agent helper at version 1 ("Be exact.") and version 2
// ("Be quick."), and dataset name with a case that passes when the
// instructions hold "Be exact." (the fake model answers "/system" with
// its system prompt) and one that every version passes.
func evalFixture(t *testing.T, c *client.Client, dataset string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "helper", Instructions: "Be exact."}); err != nil &&
		!client.IsCode(err, "agent_exists") {
		t.Fatal(err)
	}
	if _, err := c.UpdateAgent(ctx, "helper", client.AgentDefinition{Instructions: "Be quick."}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Datasets().Create(ctx, client.NewDataset{Name: dataset, Cases: []client.NewCase{
		{ID: "prompt", Name: "follows the prompt", Input: "/system", Checks: []client.Check{{Type: agentd.CheckContains, Value: "Be exact."}}},
		{ID: "quiet", Input: "Say hi.\n/say hi", Checks: []client.Check{{Type: agentd.CheckEquals, Value: "hi"}}},
	}}); err != nil {
		t.Fatal(err)
	}
}

// TestEvals: against a real server (its evaluation driver and the fake
// model), an evaluation of version 2 and a candidate against version 1
// is started once under an idempotency key sent twice; Wait reports its
// progress and returns it completed, with the report typed as the API
// answers it, key for key: per-version totals, the one regression (the
// case version 2 broke, with the failed score's reason) and each case's
// runs; the candidate passes; List pages the evaluations, newest first;
// Cancel cancels a running one and refuses an ended one; unknown ids and
// bad fields are errors with their codes; Wait ends with its context.
func TestEvals(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	base := "http://" + addr
	ctx := context.Background()
	c := client.New(base)
	evalFixture(t, c, "smoke")
	evs := c.Evals()

	ne := client.NewEval{Agent: "helper", Versions: []int{2}, Baseline: 1, Dataset: "smoke", Repeat: 2, Concurrency: 8,
		Candidate: json.RawMessage(`{"instructions": "Be exact. And kind."}`), IdempotencyKey: "eval-once"}
	first, err := evs.Create(ctx, ne)
	if err != nil || first.Status != agentd.EvalRunning || first.Runs != 2*3*2 || first.Report != nil ||
		!slices.Equal(first.Versions, []string{"1", "2", agentd.CandidateLabel}) || first.Baseline != "1" || first.DatasetVersion != 1 {
		t.Fatalf("create: %+v %v", first, err)
	}
	if again, err := evs.Create(ctx, ne); err != nil || again.ID != first.ID {
		t.Fatalf("create again under the same key: %+v %v", again, err)
	}
	var polls atomic.Int32
	done, err := evs.Wait(ctx, first.ID, 100*time.Millisecond, func(e *client.Eval) { polls.Add(1) })
	if err != nil || done.Status != agentd.EvalCompleted || done.Scored != done.Runs || done.Report == nil || polls.Load() < 1 {
		t.Fatalf("wait: %+v %v (%d polls)", done, err, polls.Load())
	}
	got := sameShape[client.Eval](t, base, "/evals/"+first.ID)
	rep := got.Report
	if len(rep.Regressions) != 1 {
		t.Fatalf("regressions: %+v", rep.Regressions)
	}
	reg := rep.Regressions[0]
	if reg.CaseID != "prompt" || reg.Name != "follows the prompt" || reg.Version != "2" || reg.Baseline != 1 || reg.Now != 0 ||
		len(reg.Failed) != 2 || *reg.Failed[0].Passed || reg.Failed[0].RunID == "" ||
		!strings.Contains(reg.Failed[0].Scores[0].Reason, "Be exact.") {
		t.Fatalf("the regression: %+v", reg)
	}
	for label, want := range map[string]float64{"1": 1, "2": 0.5, agentd.CandidateLabel: 1} {
		v, ok := rep.Totals(label)
		if !ok || v.Runs != 4 || v.PassRate != want || v.LatencyMS.P50 == nil {
			t.Errorf("version %s: %+v, want a pass rate of %v", label, v, want)
		}
	}
	if len(rep.Cases) != 2 || rep.Cases[0].Versions["2"].Runs != 2 || len(rep.Cases[0].Versions["2"].Results) != 2 {
		t.Fatalf("cases: %+v", rep.Cases)
	}

	if _, err := evs.Cancel(ctx, first.ID); !client.IsCode(err, "evaluation_ended") {
		t.Fatalf("cancel an ended evaluation: %v", err)
	}
	evalCancelAndList(t, c, base, first.ID)

	if _, err := evs.Get(ctx, "00000000-0000-0000-0000-000000000000"); !client.IsCode(err, "evaluation_not_found") {
		t.Fatalf("an unknown evaluation: %v", err)
	}
	if _, err := evs.Create(ctx, client.NewEval{Agent: "helper", Versions: []int{9}, Dataset: "smoke"}); !fieldIs(err, "versions[0]") {
		t.Fatalf("an unknown version: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	slow, err := evs.Create(ctx, client.NewEval{Agent: "helper", Versions: []int{1}, Dataset: "smoke"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evs.Wait(short, slow.ID, time.Hour, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past its context: %v", err)
	}
}

// evalCancelAndList cancels a running evaluation (its cases' model is
// slow) and pages the evaluations: the cancelled one first, then earlier.
func evalCancelAndList(t *testing.T, c *client.Client, base, earlier string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Datasets().Create(ctx, client.NewDataset{Name: "slow", Cases: []client.NewCase{
		{ID: "slow", Input: "/stream 20 500\n/say late"},
	}}); err != nil {
		t.Fatal(err)
	}
	running, err := c.Evals().Create(ctx, client.NewEval{Agent: "helper", Versions: []int{1, 2}, Dataset: "slow", Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.Evals().Cancel(ctx, running.ID)
	if err != nil || cancelled.Status != agentd.EvalCancelled || cancelled.FinishedAt == nil {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	page, err := c.Evals().List(ctx, 1, "")
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != running.ID || !page.HasMore || page.Data[0].Report != nil {
		t.Fatalf("the first page: %+v %v", page, err)
	}
	next, err := c.Evals().List(ctx, 1, *page.NextCursor)
	if err != nil || len(next.Data) != 1 || next.Data[0].ID != earlier {
		t.Fatalf("the second page: %+v %v", next, err)
	}
	sameShape[client.Page[client.Eval]](t, base, "/evals")
}
