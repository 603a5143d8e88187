package run_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
)

func createVia(t *testing.T, create func(context.Context, agentd.RunCreate) (agentd.Run, bool, error), conv, input string, ifBusy agentd.IfBusy) agentd.Run {
	t.Helper()
	r, created, err := create(context.Background(), agentd.RunCreate{TenantID: "default", Spec: agentd.RunSpec{Model: "fake", ConversationID: conv,
		Params: agentd.RunParams{MaxSteps: 10, IfBusy: ifBusy}, Input: []agentd.InputMessage{{Role: "user", Content: input}}}})
	if err != nil || !created {
		t.Fatalf("create: %v (created %v)", err, created)
	}
	return r
}

// A run created through an engine with a free worker starts there at once:
// it is created running at epoch 1 with its first step started, and no claim
// ever takes it.
func TestCreateOnAFreeWorkerStartsWithoutAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.engine(t, 5*time.Second)
	r := createVia(t, e.Service().Create, "", "/call calculator {\"expression\":\"6*7\"}\n/say 42", "")
	if r.Status != agentd.StatusRunning || r.Epoch != 1 || r.LeaseOwner == "" || r.StepCount != 1 || r.LastEventSeq != 3 {
		t.Fatalf("created: status %s epoch %d owner %q steps %d last seq %d", r.Status, r.Epoch, r.LeaseOwner, r.StepCount, r.LastEventSeq)
	}
	r = b.wait(t, r.ID, nil)
	if r.Status != agentd.StatusCompleted || r.Epoch != 1 {
		t.Fatalf("run ended %s at epoch %d", r.Status, r.Epoch)
	}
	evs := b.events(t, r.ID)
	var types []string
	for _, ev := range evs[:4] {
		types = append(types, string(ev.Type))
	}
	c := countTypes(evs)
	if types[0] != "run.created" || types[1] != "run.started" || types[2] != "step.started" || types[3] == "step.retracted" ||
		c["run.started"] != 1 || c["step.started"] != 2 || c["step.retracted"] != 0 || c["tool_call.completed"] != 1 {
		t.Fatalf("events %v, counts %v", types, c)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 2 || steps[0].ModelAttempts != 1 {
		t.Fatalf("steps: %v %+v", err, steps)
	}
	// The execution started from the state the creation knew, not from a
	// read: the model saw the input, then the tool's result.
	var sent []int
	for _, req := range b.fake.Requests() {
		sent = append(sent, len(req.Sent))
	}
	if len(sent) != 2 || sent[0] != 1 || sent[1] != 3 || !strings.Contains(string(b.fake.Requests()[0].Sent[0]), "6*7") {
		t.Fatalf("messages sent per model call %v", sent)
	}
}

// A run that must wait (its conversation is busy, or every worker is) is
// created queued, as without the engine, and a worker claims it later.
func TestCreateQueuesWhatCannotStartAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.engine(t, 5*time.Second)
	first := createVia(t, e.Service().Create, "", "/stream 20 30", "")
	next := createVia(t, e.Service().Create, first.ConversationID, "/say next", "enqueue")
	if first.Status != agentd.StatusRunning || next.Status != agentd.StatusQueued || next.Epoch != 0 {
		t.Fatalf("first %s, enqueued %s at epoch %d", first.Status, next.Status, next.Epoch)
	}
	// Four workers: three more runs take them (one created while the
	// dispatcher held a slot for a moment waits for its claim), and then
	// the fifth waits.
	var busy []agentd.Run
	for range 3 {
		busy = append(busy, createVia(t, e.Service().Create, "", "/stream 20 30", ""))
	}
	for _, r := range busy {
		b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status == agentd.StatusRunning })
	}
	extra := createVia(t, e.Service().Create, "", "/say extra", "")
	if extra.Status != agentd.StatusQueued {
		t.Fatalf("with every worker busy the run is %s", extra.Status)
	}
	for _, r := range append(busy, first, next, extra) {
		if r = b.wait(t, r.ID, nil); r.Status != agentd.StatusCompleted {
			t.Fatalf("run %s ended %s", r.ID, r.Status)
		}
	}
	// Once the engine stops, a run is only created.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if late := createVia(t, e.Service().Create, "", "/say late", ""); late.Status != agentd.StatusQueued {
		t.Fatalf("created by a stopped engine: %s", late.Status)
	}
}

// A call whose first attempt was committed with the model's output, but
// whose tool the run never invoked (it was cancelled first), is left with no
// attempt running: the attempt fails as not begun and the call is planned
// again.
func TestCancelBeforeAPrestartedAttemptBeginsClosesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	// A side-effect call makes the step's calls run one by one; the
	// calculator's attempt was committed with the model's output.
	r := b.create(t, "/call block_effect {}\n/call calculator {\"expression\":\"1\"}\n/say never", agentd.RunParams{})
	b.sink.WaitEntered(t, "/block", 15*time.Second)
	if _, err := b.store.RunCancel(context.Background(), "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if r = b.wait(t, r.ID, nil); r.Status != agentd.StatusCancelled {
		t.Fatalf("run ended %s", r.Status)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 1 || len(steps[0].Calls) != 2 {
		t.Fatalf("steps: %v %+v", err, steps)
	}
	calc := steps[0].Calls[1]
	if calc.Name != "calculator" || calc.Status != agentd.CallPlanned || len(calc.Attempts) != 1 ||
		calc.Attempts[0].Status != agentd.AttemptFailed || !strings.Contains(string(calc.Attempts[0].Error), "not_begun") {
		t.Fatalf("calculator call %s with attempts %+v", calc.Status, calc.Attempts)
	}
	for _, c := range steps[0].Calls {
		for _, a := range c.Attempts {
			if a.Status == agentd.AttemptRunning {
				t.Fatalf("call %s has an attempt still running in a cancelled run", c.Name)
			}
		}
	}
	if c := countTypes(b.events(t, r.ID)); c["tool_attempt.started"] != 2 || c["tool_attempt.failed"] != 2 || c["tool_call.unknown"] != 1 {
		t.Fatalf("events %v", c)
	}
}

// A worker whose run stops claims the next run of its engine's queue in
// the stop's own transaction (persist.ClaimNext): with one worker, the runs
// queued behind a running one start in the order they were created, each
// handed its worker by the stop of the one before; a queued run that is not
// claimable when the stop tries (cancelled meanwhile) goes back to the
// queue, whose claim finds it gone, and the run after it still starts.
func TestAStopClaimsTheNextQueuedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	e := b.start(t, run.Config{Workers: 1, LeaseTTL: 5 * time.Second, PollInterval: time.Minute, Metrics: run.NewMetrics(reg)})
	// The first run streams for 2 s, so that the runs behind it are
	// queued, and one of them cancelled, well before it stops.
	first := createVia(t, e.Service().Create, "", "/stream 40 50", "")
	var queued []agentd.Run
	for i := range 4 {
		r := createVia(t, e.Service().Create, "", fmt.Sprintf("/say %d", i), "")
		if r.Status != agentd.StatusQueued {
			t.Fatalf("run %d behind the busy worker is %s", i, r.Status)
		}
		queued = append(queued, r)
	}
	if _, err := e.Service().Cancel(context.Background(), "default", queued[2].ID, "local"); err != nil {
		t.Fatal(err)
	}
	if r, err := b.store.RunByID(context.Background(), first.ID); err != nil || r.Status != agentd.StatusRunning {
		t.Fatalf("the first run stopped (%s, %v) before the runs behind it were set up", r.Status, err)
	}
	var starts []time.Time
	for i, r := range append([]agentd.Run{first}, queued...) {
		r = b.wait(t, r.ID, nil)
		want := agentd.StatusCompleted
		if i == 3 {
			want = agentd.StatusCancelled
		}
		if r.Status != want {
			t.Fatalf("run %d ended %s, want %s", i, r.Status, want)
		}
		if want == agentd.StatusCompleted {
			if r.Epoch != 1 || r.StartedAt == nil {
				t.Fatalf("run %d: epoch %d, started %v", i, r.Epoch, r.StartedAt)
			}
			starts = append(starts, *r.StartedAt)
		}
	}
	if !slices.IsSortedFunc(starts, time.Time.Compare) {
		t.Fatalf("the runs started out of their order: %v", starts)
	}
	// first's stop claimed queued[0], whose stop claimed queued[1]; that
	// one's found queued[2] cancelled, so its worker claimed queued[3] from
	// the queue, with a claim of its own. first was claimed at its creation,
	// or from the queue when the dispatcher's first search held the worker
	// at that moment.
	claims := func(result string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "agentd_claims_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	if claims("handed") != 2 || claims("queued")+claims("at_creation") != 2 || claims("queued_gone") != 1 {
		t.Fatalf("claims: handed %v, queued %v, at creation %v, queued_gone %v", claims("handed"), claims("queued"),
			claims("at_creation"), claims("queued_gone"))
	}
}
