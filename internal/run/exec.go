package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// execStore is what an execution needs of persistence: its fenced writes,
// its lease, and the committed state it is rebuilt from.
type execStore interface {
	Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error)
	ExecDeferred(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error)
	DeferTicks() time.Duration
	FlushDeferred()
	LeaseExtend(ctx context.Context, f persist.Fence, ttl time.Duration) (persist.LeaseState, error)
	LeaseRelease(ctx context.Context, f persist.Fence) error
	RunStateLoad(ctx context.Context, runID string) (agentd.RunState, error)
	ArtifactsLoad(ctx context.Context, runID string, ids []string) (map[string][]byte, error)
	RunCancelledBy(ctx context.Context, runID string) (string, error)
	ToolCallRepeats(ctx context.Context, runID string, keys []persist.CallKey) ([]persist.CallRepeats, error)
	BudgetGet(ctx context.Context, tenant string) (*float64, error)
	BudgetHold(ctx context.Context, p persist.BudgetHoldParams) (persist.BudgetHeld, error)
	InputsPending(ctx context.Context, runID string) ([]agentd.RunInput, error)
	InputAccept(ctx context.Context, p agentd.InputCreate) (agentd.RunInput, bool, error)
	InputsCount(ctx context.Context, runID string, source agentd.InputSource) (int, error)
}

// deps is what an execution needs of its engine: its ports, its metrics and
// the settings of a run's execution. Nothing of the engine's own state (its
// workers, its claims) is reachable from an execution.
type deps struct {
	store execStore
	model llm.Model
	tools *tools.Registry
	// toolsFor gives a tenant's registry (nil: tools for every tenant).
	toolsFor func(ctx context.Context, tenant string, need ...string) (*tools.Registry, error)
	m        *Metrics
	log      *slog.Logger
	onLeft   func(runID string, status agentd.RunStatus) // nil: none
	limits   limits
	// profiles give models their context windows; nil: no compaction.
	profiles *compact.Profiles
	// toolSlots bounds the tool calls this instance runs at once.
	toolSlots chan struct{}
	// traceContent puts messages, arguments and results on spans.
	traceContent bool
	// composer composes a sub-agent's child run (nil: none starts), and
	// spawn creates it (the engine's create).
	composer Composer
	spawn    func(ctx context.Context, p persist.RunCreateParams) (agentd.Run, bool, error)
	// budgets checks a run's budgets before each model call; priceVersion
	// names the price table the ledger's costs are computed at.
	budgets      *budgets
	priceVersion string
	// hooks are the hooks at the loop's boundaries (nil: none).
	hooks *tools.LoopHooks
}

// limits are the settings of a run's execution, from Config.
type limits struct {
	leaseTTL      time.Duration
	modelAttempts int
	modelBackoff  time.Duration
	toolTimeout   time.Duration
	deltaWindow   time.Duration
	deltaMaxBytes int
	callsPerStep  int
	callsPerRun   int
	// maxStallClaims is how many takeovers without a new step a run may
	// have; the one after fails it.
	maxStallClaims int
	// agentDepth caps how deep sub-agents nest; treeRuns the runs of a run
	// tree, and children the open children of a run.
	agentDepth, treeRuns, children int
	// inputFilesBytes caps the images' and files' bytes of one model
	// request.
	inputFilesBytes int64
}

// execution is one claim of one run on this instance.
type execution struct {
	d         *deps
	claim     persist.Claim
	fence     persist.Fence
	log       *slog.Logger
	ctx       context.Context // the run's context: ends on cancel, deadline, lease loss, shutdown
	cancel    context.CancelCauseFunc
	draining  atomic.Bool // stop at the next step boundary (graceful shutdown)
	abandoned atomic.Bool // write nothing more (crash stand-in)
	// interrupted: stop at the next safe point (a step boundary, or before
	// the next tool attempt); a model call under way is cut, since its step
	// is simply asked again on resume.
	interrupted atomic.Bool
	// steered: the run may have input pending (inputs.go).
	steered     atomic.Bool
	modelMu     sync.Mutex
	modelCancel context.CancelCauseFunc
	first       bool // the first pass of the loop in this claim
	refusedOnce sync.Once
	refused     error // the write the database refused as data, once one was

	// What the execution keeps in memory between its writes, so that it
	// need not read back what it wrote under its fence (no one else writes a
	// running run's steps, calls or conversation):
	//
	// next is the run's state as the last pass of the loop committed it,
	// when that pass went on normally; the next pass starts from it.
	next *agentd.RunState
	// started holds the calls of the step in hand whose first attempt was
	// committed with the model's output: the tool is invoked without a write
	// of its own.
	started prestarted
	// outbox holds what goes out with the next write.
	outbox outbox
	// sent is the estimate and the model's count of the prompt of the
	// execution's last model call, for the next call's budget.
	sent sentPrompt
	// answerTokens is the longest answer of the execution's model calls,
	// for the next call's estimate; holding says that the run holds part
	// of its tenant's monthly budget, which the write of the next ledger
	// rows releases; uncapped that no run from this one up its tree has a
	// max_cost (a hold said so), so that with no monthly budget its calls
	// hold nothing.
	answerTokens int64
	holding      bool
	uncapped     bool
	// fellBack is the last fallback of a step of this execution, which
	// the ledger's rows of the calls after it name.
	fellBack fallback
	// msgSeq is the number of the conversation's last message that the
	// execution knows of: its state's last, then each one it numbered
	// itself (numberMessages); 0 until it has a state.
	msgSeq int
	// takeNext, from the engine, is the claim of the next run of its queue,
	// which the run's stop carries (nil: none); handed is the one it
	// carried, whose worker slot the stopped run hands over.
	takeNext func() *persist.ClaimNext
	handed   *persist.ClaimNext
	// reg is the registry of the run's tenant, set as the execution
	// starts (nil: the engine's).
	reg *tools.Registry
	// answer is the run to answer from its children's ends once the
	// execution is gone: its parent, after a child's end; itself, after it
	// began to wait for its children ("": none).
	answer string
	// files holds the bytes of the images and files its model requests
	// are sent, by artifact id, loaded once (attach).
	files map[string][]byte
}

// tools is the registry of the run's tools: its tenant's.
func (x *execution) tools() *tools.Registry {
	if x.reg != nil {
		return x.reg
	}
	return x.d.tools
}

func newExecution(parent context.Context, d *deps, c persist.Claim, worker string) *execution {
	ctx, cancel := context.WithCancelCause(parent)
	return &execution{
		d:      d,
		claim:  c,
		fence:  persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: worker},
		log:    d.log.With("run_id", c.ID, "epoch", c.Epoch),
		ctx:    ctx,
		cancel: cancel,
		first:  true,
	}
}

// outbox holds events and ops that go out with an execution's next write:
// run.started or run.resumed, so that a claim costs no transaction of its
// own, and the completion of a step whose tool results are all committed,
// which the next step's start (or the run's end) carries.
type outbox struct {
	mu  sync.Mutex
	evs []agentd.EventIn
	ops []persist.Op
}

// add queues evs and ops.
func (o *outbox) add(evs []agentd.EventIn, ops ...persist.Op) {
	o.mu.Lock()
	o.evs = append(o.evs, evs...)
	o.ops = append(o.ops, ops...)
	o.mu.Unlock()
}

// take returns what is queued, and empties the outbox.
func (o *outbox) take() ([]agentd.EventIn, []persist.Op) {
	o.mu.Lock()
	defer o.mu.Unlock()
	evs, ops := o.evs, o.ops
	o.evs, o.ops = nil, nil
	return evs, ops
}

// write commits what the outbox holds, then ops and events, under the run's
// fence. Writes that must survive the run's context ending (a tool result, a
// terminal status) pass a context without cancel; nothing is written once
// the engine was abandoned.
func (x *execution) write(ctx context.Context, evs []agentd.EventIn, ops ...persist.Op) error {
	return x.writeWith(x.d.store.Exec, ctx, evs, ops...)
}

// writeDeferred is write for what may wait for the store's next tick of
// deferred writes, to share a transaction with other runs' (a streamed
// answer's text deltas).
func (x *execution) writeDeferred(ctx context.Context, evs []agentd.EventIn, ops ...persist.Op) error {
	return x.writeWith(x.d.store.ExecDeferred, ctx, evs, ops...)
}

func (x *execution) writeWith(exec func(context.Context, persist.Fence, []agentd.EventIn, ...persist.Op) (int64, error),
	ctx context.Context, evs []agentd.EventIn, ops ...persist.Op) error {
	if x.abandoned.Load() {
		return errAbandoned
	}
	pendingEvs, pendingOps := x.outbox.take()
	if len(pendingEvs) > 0 {
		evs = append(pendingEvs, evs...)
	}
	if len(pendingOps) > 0 {
		ops = append(pendingOps, ops...)
	}
	seq := x.msgSeq
	x.numberMessages(ops)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := exec(wctx, x.fence, evs, ops...)
	switch {
	case errors.Is(err, agentd.ErrInputsChanged):
		// Nothing was written: what the outbox held goes with the next
		// write, numbered again.
		x.msgSeq = seq
		for i, op := range ops[:len(pendingOps)] {
			if m, ok := op.(persist.MessageInsert); ok && m.Seq > seq {
				m.Seq = 0
				pendingOps[i] = m
			}
		}
		x.outbox.add(pendingEvs, pendingOps...)
	case errors.Is(err, persist.ErrLeaseLost):
		x.d.m.LeasesLost.Inc()
		x.cancel(persist.ErrLeaseLost)
	case errors.Is(err, persist.ErrInvalidValue), errors.Is(err, persist.ErrConstraint):
		x.refusedOnce.Do(func() {
			x.refused = err
			x.log.Error("the database refused a write of the run; it fails", "error", err)
			x.cancel(ErrStorage)
		})
	}
	if err == nil {
		x.d.m.EventsAppended.Add(float64(len(evs)))
	}
	return err
}

// numberMessages numbers the messages of a write, in its order, after
// the last the execution knows of: a running run numbers its own messages
// (nobody else numbers its conversation's while it runs), so that a
// message costs no update of the conversation's counter, which the run's
// stop moves past them (persist.RunEnd). They are numbered as its state
// numbers them (appendMessage), in the same order. Before the execution
// has a state, the counter numbers them.
func (x *execution) numberMessages(ops []persist.Op) {
	if x.msgSeq == 0 {
		return
	}
	for i, op := range ops {
		if m, ok := op.(persist.MessageInsert); ok && m.Seq == 0 {
			x.msgSeq++
			m.Seq = x.msgSeq
			ops[i] = m
		}
	}
}

// flush commits what is pending, if anything, before the execution hands
// the run back.
func (x *execution) flush() error {
	ops, evs := x.started.unbegun()
	x.outbox.add(evs, ops...)
	evs, ops = x.outbox.take()
	if len(evs)+len(ops) == 0 {
		return nil
	}
	return x.write(x.durable(), evs, ops...)
}

// interrupt asks the run to stop at its next safe point.
func (x *execution) interrupt() {
	x.interrupted.Store(true)
	x.modelMu.Lock()
	if x.modelCancel != nil {
		x.modelCancel(ErrInterruptRequested)
	}
	x.modelMu.Unlock()
}

// durable returns a context for writes that must land even though the run's
// context ended.
func (x *execution) durable() context.Context { return context.WithoutCancel(x.ctx) }

func (x *execution) execute() {
	defer x.cancel(nil)
	var span trace.Span
	x.ctx, span = x.agentSpan(x.ctx)
	defer span.End()
	stopBeat := x.heartbeat()
	defer stopBeat()
	if x.claim.DeadlineAt != nil {
		var cancel context.CancelFunc
		x.ctx, cancel = context.WithDeadlineCause(x.ctx, *x.claim.DeadlineAt, ErrRunDeadline)
		defer cancel()
	}
	if x.d.toolsFor != nil {
		reg, err := x.d.toolsFor(x.ctx, x.claim.TenantID, x.claim.Params.Tools...)
		if err != nil {
			// The run is left to its lease, as when the database cannot
			// serve its writes: its tools cannot be known now.
			x.log.Warn("run execution stopped: its tenant's tools could not be read", "error", err)
			return
		}
		x.reg = reg
	}
	if x.claim.CancelRequestedAt != nil {
		x.cancel(ErrCancelRequested)
	}
	if x.claim.InterruptRequestedAt != nil {
		x.interrupt()
	}
	if x.claim.InputsPending > 0 {
		x.steered.Store(true)
	}
	err := x.loop()
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	cause := context.Cause(x.ctx)
	switch {
	case errors.Is(err, errAbandoned) || errors.Is(cause, errAbandoned):
	case errors.Is(err, persist.ErrLeaseLost) || errors.Is(cause, persist.ErrLeaseLost):
		x.log.Warn("lease lost; another worker owns the run")
	case errors.Is(cause, ErrShutdown):
		x.handBack()
	case errors.Is(err, agentd.ErrUnavailable):
		// The lease runs out, and an executor claims the run again once
		// the database is back.
		x.log.Warn("run execution stopped: the database is unavailable", "error", err)
	case err != nil:
		x.log.Error("run execution failed", "error", err)
	}
}

// handBack commits what is pending and releases the lease, so that a peer
// claims the run at once: the run stopped at a step boundary, or was cut
// when the shutdown's grace period ended.
func (x *execution) handBack() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 5*time.Second)
	defer cancel()
	if err := x.flush(); err != nil && !errors.Is(err, errAbandoned) {
		x.log.Warn("commit pending writes at shutdown", "error", err)
	}
	if err := x.d.store.LeaseRelease(ctx, x.fence); err != nil && !errors.Is(err, persist.ErrLeaseLost) {
		x.log.Warn("release lease at shutdown", "error", err)
	}
}

// heartbeat extends the lease every TTL/3 until the returned func is called; a
// failed extension cancels the run at once.
func (x *execution) heartbeat() func() {
	ctx, stop := context.WithCancel(x.ctx)
	ttl := x.d.limits.leaseTTL
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c, cancel := context.WithTimeout(ctx, ttl/3)
			state, err := x.d.store.LeaseExtend(c, x.fence, ttl)
			cancel()
			switch {
			case errors.Is(err, persist.ErrLeaseLost):
				x.d.m.LeasesLost.Inc()
				x.cancel(persist.ErrLeaseLost)
				return
			case err != nil:
				if ctx.Err() == nil {
					x.log.Warn("extend lease", "error", err)
				}
			case state.CancelRequested:
				x.cancel(ErrCancelRequested)
			case state.InterruptRequested:
				x.interrupt()
			case state.InputsPending:
				x.steered.Store(true)
			}
		}
	})
	return func() { stop(); wg.Wait() }
}

// loop drives the run from its committed state until it leaves the executor.
func (x *execution) loop() error {
	for {
		st, err := x.state()
		if err != nil {
			return err
		}
		if x.first {
			x.announce(st)
			if x.claim.PrevStatus == agentd.StatusRunning && x.claim.StallClaims > x.d.limits.maxStallClaims {
				return x.end(st, lastStep(st), endOf(agentd.StatusFailed, agentd.ReasonNoProgress, &agentd.ErrorDetail{Kind: agentd.RunErrNoProgress,
					Message: fmt.Sprintf("the run was taken over %d times without starting a new step", x.claim.StallClaims)}))
			}
		}
		if x.ctx.Err() != nil {
			return x.stopFor(st, nil)
		}
		last := lastStep(st)
		if x.interrupted.Load() {
			return x.end(st, last, endOf(agentd.StatusInterrupted, agentd.ReasonInterrupted, nil))
		}
		done, err := x.pass(st, last)
		if err != nil || done {
			return err
		}
		x.first = false
	}
}

// pass makes one pass of the loop from st, whose last step is last (nil
// before the first): it starts the next step, or finishes the last one.
// done is true when the run left the executor.
func (x *execution) pass(st agentd.RunState, last *agentd.Step) (done bool, err error) {
	switch {
	case last == nil || last.Status == agentd.StepCompleted:
		return x.nextStep(st, last)
	case adopts(st, last):
		return x.adoptApprovals(st, last)
	case last.Status == agentd.StepRunning && x.first && last.ID == x.claim.StartedStep:
		// The claim started the run's first step: ask the model.
		return x.modelPhase(st, last, false)
	case last.Status == agentd.StepRunning:
		// The model's output for this step was never committed: ask again.
		return x.modelPhase(st, last, true)
	case last.Status == agentd.StepActing, len(st.Calls) > 0:
		// Acting, or a step cancelled, failed or timed out after its model
		// output was committed, and then resumed: finish its tools.
		return x.toolPhase(st, last)
	default:
		// The same, before the model's output was committed: ask again.
		return x.modelPhase(st, last, true)
	}
}

// nextStep starts the step after last (the first when last is nil) and asks
// the model for it, unless the run stops here: at a shutdown's step
// boundary, or at its step budget.
func (x *execution) nextStep(st agentd.RunState, last *agentd.Step) (done bool, err error) {
	if x.draining.Load() {
		x.cancel(ErrShutdown) // execute commits what is pending, then hands the run back
		return true, nil
	}
	if st.Run.StepCount >= st.Run.Params.MaxSteps {
		return true, x.end(st, nil, endOf(agentd.StatusCompleted, agentd.ReasonMaxSteps, nil))
	}
	seq, transition, model := 1, agentd.TransitionNone, ""
	if last != nil {
		// A run that fell back stays on the model it fell back to.
		seq, transition, model = last.Seq+1, agentd.TransitionToolResults, last.Model
		if last.FinishReason != agentd.FinishToolCalls {
			transition = agentd.TransitionInput // it answered, and input was pending
		}
	}
	step := agentd.Step{ID: agentd.NewID(), RunID: st.Run.ID, Seq: seq, Status: agentd.StepRunning, Model: model}
	// The inputs pending now are applied with the step's start.
	in, err := x.takeInputs(st, seq)
	if err != nil {
		return true, x.stopFor(st, err)
	}
	if err := x.write(x.ctx, append([]agentd.EventIn{agentd.StepStartEvent(seq, transition)}, in.evs...),
		append([]persist.Op{persist.StepInsert{ID: step.ID, RunID: st.Run.ID, Seq: seq, Transition: transition, Model: model}}, in.ops...)...); err != nil {
		if len(in.ops) > 0 {
			x.steered.Store(true)
		}
		return true, x.stopFor(st, err)
	}
	in.applied(&st)
	st.Run.StepCount = max(st.Run.StepCount, seq)
	st.Steps = append(st.Steps, step)
	if adopts(st, &st.Steps[len(st.Steps)-1]) {
		return x.adoptApprovals(st, &st.Steps[len(st.Steps)-1])
	}
	return x.modelPhase(st, &st.Steps[len(st.Steps)-1], false)
}

// adopts reports whether step, the run's first, is yet to take over the
// calls its approvals decide (RunParams.Approvals).
func adopts(st agentd.RunState, step *agentd.Step) bool {
	return step.Seq == 1 && step.Status == agentd.StepRunning && len(st.Run.Params.Approvals) > 0 && len(st.Calls) == 0
}

// adoptApprovals begins the run's first step with the calls its approvals
// decide, as the previous run of its conversation planned them: in one
// write the step takes them over and is acting, the approved calls to be
// made, the rejected ones with their rejection. The next pass finds the
// step acting and runs its tool phase as for any step's calls (recovered
// the same way after a crash); the model is asked at the next step.
func (x *execution) adoptApprovals(st agentd.RunState, step *agentd.Step) (done bool, err error) {
	ds := st.Run.Params.Approvals
	ids := make([]string, len(ds))
	evs := make([]agentd.EventIn, 0, 2*len(ds))
	for i, d := range ds {
		ids[i] = d.ToolCallID
		status := agentd.CallPlanned
		if !d.Approve {
			status = agentd.CallRejected
		}
		evs = append(evs, agentd.EventOf(step.Seq, agentd.ToolCallCreatedData{Arguments: d.Arguments, CallID: d.CallID,
			Effect: d.Effect, IdempotencyKey: d.IdempotencyKey, Name: d.Name, Status: status, ToolCallID: d.ToolCallID}))
		if !d.Approve {
			evs = append(evs, agentd.EventOf(step.Seq, agentd.ToolCallCompletedData{CallID: d.CallID, Error: agentd.Rejection(d.Reason),
				Name: d.Name, Status: agentd.CallRejected, ToolCallID: d.ToolCallID}))
		}
	}
	if err := x.write(x.durable(), evs, persist.CallsAdopt{RunID: st.Run.ID, StepID: step.ID, IDs: ids},
		persist.StepUpdate{ID: step.ID, Status: agentd.StepActing, FinishReason: agentd.FinishToolCalls}); err != nil {
		return true, x.stopFor(st, err)
	}
	return false, nil // the next pass loads the step with its calls
}

// lastStep returns the run's last step, nil before the first.
func lastStep(st agentd.RunState) *agentd.Step {
	if n := len(st.Steps); n > 0 {
		return &st.Steps[n-1]
	}
	return nil
}

// state returns the run's committed state: what the last pass of the loop
// left, else read from the database; with the bytes of the images and
// files its model is sent (attach).
func (x *execution) state() (agentd.RunState, error) {
	st, err := x.committed()
	if err != nil {
		return st, err
	}
	return st, x.attach(&st)
}

// committed is the run's committed state (see state).
func (x *execution) committed() (agentd.RunState, error) {
	if st := x.next; st != nil {
		x.next = nil
		if x.msgSeq == 0 {
			x.msgSeq = lastMessageSeq(*st)
		}
		return *st, nil
	}
	x.started.set(nil)
	st, err := x.load()
	if err == nil {
		x.msgSeq = lastMessageSeq(st)
	}
	return st, err
}

// lastMessageSeq is the number of the last message of st's conversation.
func lastMessageSeq(st agentd.RunState) int {
	seq := st.MessageSeq
	if n := len(st.Messages); n > 0 {
		seq = max(seq, st.Messages[n-1].Seq)
	}
	return seq
}

// carry keeps st, just committed, for the next pass of the loop.
func (x *execution) carry(st agentd.RunState) { x.next = &st }

// setStep replaces the step of st with step's id by step.
func setStep(st *agentd.RunState, step agentd.Step) {
	for i := range st.Steps {
		if st.Steps[i].ID == step.ID {
			st.Steps[i] = step
		}
	}
}

// appendMessage adds a message just committed to st, numbered as its
// write numbered it (numberMessages: after the conversation's last
// message).
func appendMessage(st *agentd.RunState, m persist.MessageInsert) {
	seq := lastMessageSeq(*st) + 1
	st.MessageSeq = seq
	st.Messages = append(st.Messages, m.Message(seq))
}

func (x *execution) load() (agentd.RunState, error) {
	ctx, cancel := context.WithTimeout(x.durable(), 10*time.Second)
	defer cancel()
	return x.d.store.RunStateLoad(ctx, x.fence.RunID)
}

// announce emits run.started on a run's first claim, run.resumed otherwise,
// with the claim's first write; a claim that started the run's first step
// committed run.started with it.
func (x *execution) announce(st agentd.RunState) {
	if x.claim.StartedStep != "" {
		return
	}
	recovered := x.claim.PrevStatus == agentd.StatusRunning
	x.outbox.add([]agentd.EventIn{agentd.ClaimedEvent(st.Run.StepCount, x.fence.Epoch, x.fence.Worker, recovered, st.Run.ResumedBy)})
}

// stopFor ends the run as its context's cause says (cancel, deadline), or
// returns err for the caller to handle (lease lost, shutdown, abandon).
func (x *execution) stopFor(st agentd.RunState, err error) error {
	cause := context.Cause(x.ctx)
	var step *agentd.Step
	if n := len(st.Steps); n > 0 && st.Steps[n-1].Status != agentd.StepCompleted {
		step = &st.Steps[n-1]
	}
	switch {
	case errors.Is(cause, ErrCancelRequested):
		e := endOf(agentd.StatusCancelled, agentd.ReasonCancelled, nil)
		actor, err := x.d.store.RunCancelledBy(x.durable(), st.Run.ID)
		if err != nil {
			x.log.Warn("read who cancelled the run", "error", err)
		}
		e.actor = actor
		return x.end(st, step, e)
	case errors.Is(cause, ErrRunDeadline):
		return x.end(st, step, endOf(agentd.StatusTimedOut, agentd.ReasonTimedOutTotal,
			&agentd.ErrorDetail{Message: "the run's total timeout elapsed"}))
	case errors.Is(cause, ErrStorage):
		// What the refused write carried would be refused again: it is
		// dropped with what was pending. What was committed stays.
		x.outbox.take()
		msg, _ := clean.Text("the database refused to store a value of the run: " + x.refused.Error())
		return x.end(st, step, endOf(agentd.StatusFailed, agentd.ReasonStorageError, &agentd.ErrorDetail{Kind: agentd.RunErrStorage, Message: msg}))
	}
	if err != nil {
		return err
	}
	return cause
}

// runEnd is how a run leaves the executor: its status and reason, the error
// it failed with, and what the end's transaction carries besides (the
// step's last output, for a completed run).
type runEnd struct {
	actor  string // who asked for it (a cancel), when a client did
	status agentd.RunStatus
	reason agentd.Reason
	err    *agentd.ErrorDetail
	ops    []persist.Op
	evs    []agentd.EventIn
	// answer: the run ends with its model's answer, which input pending
	// makes it go on from.
	answer bool
}

func endOf(status agentd.RunStatus, reason agentd.Reason, err *agentd.ErrorDetail) runEnd {
	return runEnd{status: status, reason: reason, err: err}
}

// end commits the run's last state and its terminal event in one
// transaction. A step left unfinished is marked aborted (or failed). The
// inputs the run has pending are unapplied with it; when one arrived while
// the end was written, it is made again. An end with an answer gives
// agentd.ErrInputsChanged when input is pending, and writes nothing.
func (x *execution) end(st agentd.RunState, step *agentd.Step, e runEnd) error {
	ops, evs := x.started.unbegun()
	e.ops = append(ops, e.ops...)
	e.evs = append(evs, e.evs...)
	for try := 1; ; try++ {
		err := x.endOnce(st, step, e)
		if !errors.Is(err, agentd.ErrInputsChanged) || e.answer || try >= maxInputRaces {
			return err
		}
		x.steered.Store(true)
	}
}

// endOnce is one try of end.
func (x *execution) endOnce(st agentd.RunState, step *agentd.Step, e runEnd) error {
	ops := append([]persist.Op(nil), e.ops...)
	evs := append([]agentd.EventIn(nil), e.evs...)
	stepSeq := st.Run.StepCount
	if step != nil {
		stepSeq = step.Seq
	}
	if step != nil && step.Status != agentd.StepCompleted {
		stepStatus := agentd.StepAborted
		switch {
		case e.status == agentd.StatusFailed || e.status == agentd.StatusTimedOut:
			stepStatus = agentd.StepFailed
		case e.reason == agentd.ReasonClientToolCalls:
			stepStatus = agentd.StepCompleted // its calls are the client's to answer
		}
		ops = append(ops, persist.StepUpdate{ID: step.ID, Status: stepStatus, Error: e.err, Finished: true})
	}
	if e.reason == agentd.ReasonStorageError || e.reason == agentd.ReasonNoProgress {
		// Attempts may be left running (their results never committed).
		ops = append(ops, persist.AttemptsClose{RunID: st.Run.ID, Error: agentd.ErrorDetail{Kind: agentd.ToolErrUnknown,
			Message: "the run failed (" + string(e.reason) + ") before this attempt's outcome was committed"}})
	}
	end := persist.RunEnd{ID: st.Run.ID, Status: e.status, Reason: e.reason, Error: e.err, Actor: e.actor}
	endEv := agentd.RunEndEvent(stepSeq, e.status, e.reason, e.err, e.actor)
	if e.status == agentd.StatusCompleted {
		end.Output = finalAnswer(st, ops)
		endEv = agentd.WithOutput(endEv, agentd.TextOf(end.Output))
	}
	settle, unapplied, err := x.settleInputs(st, stepSeq, e)
	if err != nil {
		return err
	}
	ops = x.withNext(append(ops, settle, end))
	evs = append(append(evs, unapplied...), endEv)
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return err
	}
	x.left(st.Run, e.status, e.reason)
	if p := st.Run.Params.Parent; p != nil && e.status.Terminal() {
		x.answer = p.RunID
	}
	x.d.m.RunDuration.Observe(time.Since(st.Run.CreatedAt).Seconds())
	return nil
}

// withNext adds to ops, a stop's write that ends with its persist.RunEnd,
// the claim of the next run of the engine's queue, once.
func (x *execution) withNext(ops []persist.Op) []persist.Op {
	if x.handed != nil {
		// A stop made again: its first write committed nothing.
		return append(ops, x.handed)
	}
	if x.takeNext == nil {
		return ops
	}
	if x.handed = x.takeNext(); x.handed != nil {
		ops = append(ops, x.handed)
	}
	return ops
}

// left records that the run left the executor with status, committed.
func (x *execution) left(run agentd.Run, status agentd.RunStatus, reason agentd.Reason) {
	x.d.m.RunsEnded.WithLabelValues(string(status), string(reason)).Inc()
	if x.d.onLeft != nil {
		x.d.onLeft(run.ID, status)
	}
	x.log.Info("run left executor", "status", status, "reason", reason)
}

// stepContext bounds one phase of a step (its model call, or its tools) by
// the run's step timeout, counted from now: time the run spent waiting for a
// worker (after a crash, an interrupt or a shutdown) does not count against
// its step; the total timeout bounds the whole run.
func (x *execution) stepContext(st agentd.RunState) (context.Context, context.CancelFunc) {
	ms := st.Run.Params.Timeouts.StepMS
	if ms <= 0 {
		return context.WithCancel(x.ctx)
	}
	return context.WithTimeoutCause(x.ctx, time.Duration(ms)*time.Millisecond, ErrStepDeadline)
}

// stepTimedOut is the end of a run whose step ran out of time.
func stepTimedOut() runEnd {
	return endOf(agentd.StatusTimedOut, agentd.ReasonTimedOutStep, &agentd.ErrorDetail{Message: "the step's timeout elapsed"})
}

// finalAnswer is the parts of a completing run's final assistant message:
// the one this write inserts, else the run's last one committed (a run that
// reached max_steps after its tools ran). Never nil.
func finalAnswer(st agentd.RunState, ops []persist.Op) []agentd.Part {
	for i := len(ops) - 1; i >= 0; i-- {
		if m, ok := ops[i].(persist.MessageInsert); ok && m.Role == agentd.RoleAssistant {
			return m.Content
		}
	}
	for i := len(st.Messages) - 1; i >= 0; i-- {
		if m := st.Messages[i]; m.RunID == st.Run.ID && m.Role == agentd.RoleAssistant {
			return m.Content
		}
	}
	return []agentd.Part{}
}
