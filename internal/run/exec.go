package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"agentd/internal/llm"
	"agentd/internal/persist"
	"agentd/internal/tools"
)

// execution is one claim of one run on this instance.
type execution struct {
	e         *Engine
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
	modelMu     sync.Mutex
	modelCancel context.CancelCauseFunc
	first       bool // the first pass of the loop in this claim
	// next is the run's state as the last pass of the loop committed it,
	// when that pass went on normally: the next pass starts from it instead
	// of reading back what this execution itself wrote under its fence (no
	// one else writes a running run's steps, calls or conversation).
	next *persist.RunState
	// started holds the calls of the step in hand whose first attempt this
	// execution committed with the model's output: the tool is invoked
	// without a write of its own.
	started prestarted

	// pending holds what goes out with the next write: run.started or
	// run.resumed, so that a claim costs no transaction of its own, and the
	// completion of a step whose tool results are all committed, which the
	// next step's start (or the run's end) carries.
	pendingMu  sync.Mutex
	pending    []persist.EventIn
	pendingOps []persist.Op
}

func (e *Engine) newExecution(c persist.Claim) *execution {
	ctx, cancel := context.WithCancelCause(e.ctx)
	return &execution{
		e:      e,
		claim:  c,
		fence:  persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: e.cfg.WorkerID},
		log:    e.log.With("run_id", c.ID, "epoch", c.Epoch),
		ctx:    ctx,
		cancel: cancel,
		first:  true,
	}
}

// write commits ops and events under the run's fence. Writes that must
// survive the run's context ending (a tool result, a terminal status) pass a
// context without cancel; nothing is written once the engine was abandoned.
func (x *execution) write(ctx context.Context, evs []persist.EventIn, ops ...persist.Op) error {
	if x.abandoned.Load() {
		return errAbandoned
	}
	x.pendingMu.Lock()
	pending, pendingOps := x.pending, x.pendingOps
	x.pending, x.pendingOps = nil, nil
	x.pendingMu.Unlock()
	if len(pending) > 0 {
		evs = append(pending, evs...)
	}
	if len(pendingOps) > 0 {
		ops = append(pendingOps, ops...)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := x.e.cfg.Store.Exec(wctx, x.fence, evs, ops...)
	if errors.Is(err, persist.ErrLeaseLost) {
		x.e.m.LeasesLost.Inc()
		x.cancel(persist.ErrLeaseLost)
	}
	if err == nil {
		x.e.m.EventsAppended.Add(float64(len(evs)))
	}
	return err
}

// later queues evs and ops to go out with the next write.
func (x *execution) later(evs []persist.EventIn, ops ...persist.Op) {
	x.pendingMu.Lock()
	x.pending = append(x.pending, evs...)
	x.pendingOps = append(x.pendingOps, ops...)
	x.pendingMu.Unlock()
}

// flush commits what is pending, if anything, before the execution hands
// the run back.
func (x *execution) flush() error {
	ops, evs := x.started.unbegun()
	x.later(evs, ops...)
	x.pendingMu.Lock()
	n := len(x.pending) + len(x.pendingOps)
	x.pendingMu.Unlock()
	if n == 0 {
		return nil
	}
	return x.write(x.durable(), nil)
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
	stopBeat := x.heartbeat()
	defer stopBeat()
	if x.claim.DeadlineAt != nil {
		var cancel context.CancelFunc
		x.ctx, cancel = context.WithDeadlineCause(x.ctx, *x.claim.DeadlineAt, ErrRunDeadline)
		defer cancel()
	}
	if x.claim.CancelRequestedAt != nil {
		x.cancel(ErrCancelRequested)
	}
	if x.claim.InterruptRequestedAt != nil {
		x.interrupt()
	}
	err := x.loop()
	cause := context.Cause(x.ctx)
	switch {
	case errors.Is(err, errAbandoned) || errors.Is(cause, errAbandoned):
	case errors.Is(err, persist.ErrLeaseLost) || errors.Is(cause, persist.ErrLeaseLost):
		x.log.Warn("lease lost; another worker owns the run")
	case errors.Is(cause, ErrShutdown):
		// Stopped at a step boundary, or cut when the grace period ended:
		// hand the run back so that a peer claims it at once.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 5*time.Second)
		defer cancel()
		if err := x.flush(); err != nil && !errors.Is(err, errAbandoned) {
			x.log.Warn("commit pending writes at shutdown", "err", err)
		}
		if err := x.e.cfg.Store.LeaseRelease(ctx, x.fence); err != nil && !errors.Is(err, persist.ErrLeaseLost) {
			x.log.Warn("release lease at shutdown", "err", err)
		}
	case err != nil:
		x.log.Error("run execution failed", "err", err)
	}
}

// heartbeat extends the lease every TTL/3 until the returned func is called; a
// failed extension cancels the run at once.
func (x *execution) heartbeat() func() {
	ctx, stop := context.WithCancel(x.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(x.e.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c, cancel := context.WithTimeout(ctx, x.e.cfg.LeaseTTL/3)
			state, err := x.e.cfg.Store.LeaseExtend(c, x.fence, x.e.cfg.LeaseTTL)
			cancel()
			switch {
			case errors.Is(err, persist.ErrLeaseLost):
				x.e.m.LeasesLost.Inc()
				x.cancel(persist.ErrLeaseLost)
				return
			case err != nil:
				if ctx.Err() == nil {
					x.log.Warn("extend lease", "err", err)
				}
			case state.CancelRequested:
				x.cancel(ErrCancelRequested)
			case state.InterruptRequested:
				x.interrupt()
			}
		}
	}()
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
		}
		if x.ctx.Err() != nil {
			return x.stopFor(st, nil)
		}
		var last *persist.Step
		if n := len(st.Steps); n > 0 {
			last = &st.Steps[n-1]
		}
		if x.interrupted.Load() {
			return x.end(st, last, persist.StatusInterrupted, persist.ReasonInterrupted, nil)
		}
		switch {
		case last == nil || last.Status == persist.StepCompleted:
			if x.draining.Load() {
				x.cancel(ErrShutdown) // execute commits what is pending, then hands the run back
				return nil
			}
			if st.Run.StepCount >= st.Run.Params.MaxSteps {
				return x.end(st, nil, persist.StatusCompleted, persist.ReasonMaxSteps, nil)
			}
			seq := 1
			if last != nil {
				seq = last.Seq + 1
			}
			step := persist.Step{ID: persist.NewID(), RunID: st.Run.ID, Seq: seq, Status: persist.StepRunning}
			transition := ""
			if last != nil {
				transition = "tool_results"
			}
			if err := x.write(x.ctx, []persist.EventIn{{Type: "step.started", Step: seq, Data: map[string]any{"transition": nullable(transition)}}},
				persist.StepInsert{ID: step.ID, RunID: st.Run.ID, Seq: seq, Transition: transition}); err != nil {
				return x.stopFor(st, err)
			}
			st.Run.StepCount = max(st.Run.StepCount, seq)
			st.Steps = append(st.Steps, step)
			if done, err := x.modelPhase(st, &st.Steps[len(st.Steps)-1], false); err != nil || done {
				return err
			}
		case last.Status == persist.StepRunning && x.first && last.ID == x.claim.StartedStep:
			// The claim started the run's first step: ask the model.
			if done, err := x.modelPhase(st, last, false); err != nil || done {
				return err
			}
		case last.Status == persist.StepRunning:
			// The model's output for this step was never committed: ask again.
			if done, err := x.modelPhase(st, last, true); err != nil || done {
				return err
			}
		case last.Status == persist.StepActing:
			done, err := x.toolPhase(st, last)
			if err != nil || done {
				return err
			}
		case len(st.Calls) > 0:
			// A step that was cancelled, failed or timed out after its model
			// output was committed, and then resumed: finish its tools.
			done, err := x.toolPhase(st, last)
			if err != nil || done {
				return err
			}
		default:
			// The same, before the model's output was committed: ask again.
			if done, err := x.modelPhase(st, last, true); err != nil || done {
				return err
			}
		}
		x.first = false
	}
}

// state returns the run's committed state: what the last pass of the loop
// left, else read from the database.
func (x *execution) state() (persist.RunState, error) {
	if st := x.next; st != nil {
		x.next = nil
		return *st, nil
	}
	x.started.set(nil)
	return x.load()
}

// carry keeps st, just committed, for the next pass of the loop.
func (x *execution) carry(st persist.RunState) { x.next = &st }

// setStep replaces the step of st with step's id by step.
func setStep(st *persist.RunState, step persist.Step) {
	for i := range st.Steps {
		if st.Steps[i].ID == step.ID {
			st.Steps[i] = step
		}
	}
}

// appendMessage adds a message just committed to st, numbered as the
// database numbered it (after the conversation's last message).
func appendMessage(st *persist.RunState, m persist.MessageInsert) {
	seq := 1
	if n := len(st.Messages); n > 0 {
		seq = st.Messages[n-1].Seq + 1
	}
	st.Messages = append(st.Messages, m.Message(seq))
}

func (x *execution) load() (persist.RunState, error) {
	ctx, cancel := context.WithTimeout(x.durable(), 10*time.Second)
	defer cancel()
	return x.e.cfg.Store.RunStateLoad(ctx, x.fence.RunID)
}

// announce emits run.started on a run's first claim, run.resumed otherwise,
// with the claim's first write; a claim that started the run's first step
// committed run.started with it.
func (x *execution) announce(st persist.RunState) {
	if x.claim.StartedStep != "" {
		return
	}
	typ, data := "run.started", map[string]any{"epoch": x.fence.Epoch, "worker": x.fence.Worker}
	if x.claim.Epoch > 1 {
		typ = "run.resumed"
		data["reason"] = "resumed"
		if x.claim.PrevStatus == persist.StatusRunning {
			data["reason"] = "recovered"
		}
	}
	x.later([]persist.EventIn{{Type: typ, Step: st.Run.StepCount, Data: data}})
}

// stopFor ends the run as its context's cause says (cancel, deadline), or
// returns err for the caller to handle (lease lost, shutdown, abandon).
func (x *execution) stopFor(st persist.RunState, err error) error {
	cause := context.Cause(x.ctx)
	var step *persist.Step
	if n := len(st.Steps); n > 0 && st.Steps[n-1].Status != persist.StepCompleted {
		step = &st.Steps[n-1]
	}
	switch {
	case errors.Is(cause, ErrCancelRequested):
		return x.end(st, step, persist.StatusCancelled, persist.ReasonCancelled, nil)
	case errors.Is(cause, ErrRunDeadline):
		return x.end(st, step, persist.StatusTimedOut, persist.ReasonTimedOutTotal, map[string]any{"message": "the run's total timeout elapsed"})
	}
	if err != nil {
		return err
	}
	return cause
}

// end commits the run's last state and its terminal (or waiting) event in one
// transaction. A step left unfinished is marked aborted (or failed).
func (x *execution) end(st persist.RunState, step *persist.Step, status, reason string, runErr any) error {
	return x.endWith(st, step, status, reason, runErr, nil, nil)
}

func (x *execution) endWith(st persist.RunState, step *persist.Step, status, reason string, runErr any, extraOps []persist.Op, extraEvs []persist.EventIn) error {
	ops, evs := x.started.unbegun()
	ops = append(ops, extraOps...)
	evs = append(evs, extraEvs...)
	stepSeq := st.Run.StepCount
	if step != nil {
		stepSeq = step.Seq
	}
	if step != nil && status != persist.StatusRequiresAction && step.Status != persist.StepCompleted {
		stepStatus := persist.StepAborted
		if status == persist.StatusFailed || status == persist.StatusTimedOut {
			stepStatus = persist.StepFailed
		}
		ops = append(ops, persist.StepUpdate{ID: step.ID, Status: stepStatus, Error: runErr, Finished: true})
	}
	ops = append(ops, persist.RunEnd{ID: st.Run.ID, Status: status, Reason: reason, Error: runErr})
	data := map[string]any{"status": status, "reason": nullable(reason)}
	if runErr != nil {
		data["error"] = runErr
	}
	typ := "run." + status
	if status == persist.StatusTimedOut {
		typ = "run.timed_out"
	}
	evs = append(evs, persist.EventIn{Type: typ, Step: stepSeq, Data: data})
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return err
	}
	x.e.m.RunsEnded.WithLabelValues(status, reason).Inc()
	if f := x.e.cfg.OnEndFunc; f != nil {
		f(st.Run.ID, status)
	}
	if status != persist.StatusRequiresAction {
		x.e.m.RunDuration.Observe(time.Since(st.Run.CreatedAt).Seconds())
	}
	x.log.Info("run left executor", "status", status, "reason", reason)
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// stepContext bounds one phase of a step (its model call, or its tools) by
// the run's step timeout, counted from now: time the run spent waiting for a
// worker (after a crash, an interrupt or a shutdown) does not count against
// its step; the total timeout bounds the whole run.
func (x *execution) stepContext(st persist.RunState, _ *persist.Step) (context.Context, context.CancelFunc) {
	ms := st.Run.Params.Timeouts.StepMS
	if ms <= 0 {
		return context.WithCancel(x.ctx)
	}
	return context.WithTimeoutCause(x.ctx, time.Duration(ms)*time.Millisecond, ErrStepDeadline)
}

// modelPhase asks the model for a step's output and commits it: the
// assistant message with its planned tool calls (the step goes on to its
// tools), or the final answer with the run's end.
func (x *execution) modelPhase(st persist.RunState, step *persist.Step, reask bool) (done bool, err error) {
	started := time.Now()
	ctx, cancel := x.stepContext(st, step)
	defer cancel()
	if reask {
		// Recovery: what was streamed for this step is dropped.
		if err := x.write(x.ctx, []persist.EventIn{{Type: "step.retracted", Step: step.Seq, Data: map[string]any{"reason": "recovered"}}},
			persist.StepReask{ID: step.ID, Transition: "resumed"}); err != nil {
			return true, x.stopFor(st, err)
		}
	}
	req := llm.Request{Model: st.Run.Model, Messages: buildMessages(st), Tools: x.offered(st.Run.Params.Tools)}
	idle := time.Duration(st.Run.Params.Timeouts.IdleMS) * time.Millisecond
	for attempt := 1; ; attempt++ {
		co := newCoalescer(x, step.Seq, x.e.cfg.DeltaWindow, x.e.cfg.DeltaMaxBytes)
		resp, err := x.callModel(ctx, req, idle, co)
		if err == nil {
			co.stop()
			x.e.m.ModelRequests.WithLabelValues("ok").Inc()
			x.countTokens(resp.Usage)
			return x.commitModelOutput(st, step, resp, co.pending(), started)
		}
		co.stop()
		kind := "error"
		var me *llm.Error
		if errors.As(err, &me) {
			kind = string(me.Kind)
		}
		x.e.m.ModelRequests.WithLabelValues(kind).Inc()
		if co.failed != nil {
			return true, x.stopFor(st, co.failed)
		}
		if x.interrupted.Load() && x.ctx.Err() == nil {
			return true, x.end(st, step, persist.StatusInterrupted, persist.ReasonInterrupted, nil)
		}
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), ErrStepDeadline) && x.ctx.Err() == nil {
				return true, x.end(st, step, persist.StatusTimedOut, persist.ReasonTimedOutStep, map[string]any{"message": "the step's timeout elapsed"})
			}
			return true, x.stopFor(st, err)
		}
		if llm.IsRetryable(err) && attempt < x.e.cfg.ModelAttempts {
			wait := x.e.cfg.ModelBackoff << (attempt - 1)
			if me != nil && me.RetryAfter > wait {
				wait = me.RetryAfter
			}
			x.log.Warn("model call failed; retrying", "attempt", attempt, "err", err, "wait", wait)
			evs := []persist.EventIn{}
			if co.sent > 0 {
				evs = append(evs, persist.EventIn{Type: "step.retracted", Step: step.Seq, Data: map[string]any{"reason": "model_retry"}})
			}
			if err := x.write(x.ctx, evs, persist.StepReask{ID: step.ID, Transition: "model_retry"}); err != nil {
				return true, x.stopFor(st, err)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				if errors.Is(context.Cause(ctx), ErrStepDeadline) && x.ctx.Err() == nil {
					return true, x.end(st, step, persist.StatusTimedOut, persist.ReasonTimedOutStep, map[string]any{"message": "the step's timeout elapsed"})
				}
				return true, x.stopFor(st, nil)
			}
			continue
		}
		reason := persist.ReasonModelError
		if me != nil && me.Kind == llm.KindContextOverflow {
			reason = persist.ReasonContextOverflow
		}
		return true, x.end(st, step, persist.StatusFailed, reason, map[string]any{"message": modelErrorMessage(err), "kind": kind})
	}
}

func modelErrorMessage(err error) string {
	var me *llm.Error
	if errors.As(err, &me) {
		switch me.Kind {
		case llm.KindRateLimited:
			return "the model kept rate-limiting the request"
		case llm.KindServer:
			return "the model's server kept failing"
		case llm.KindConnection, llm.KindIdle:
			return "the connection to the model kept failing"
		case llm.KindAuth:
			return "the model refused the credentials"
		case llm.KindContextOverflow:
			return "the conversation is too long for the model"
		case llm.KindBadRequest:
			return "the model rejected the request"
		}
	}
	return "the model call failed"
}

func (x *execution) callModel(ctx context.Context, req llm.Request, idle time.Duration, co *coalescer) (llm.Response, error) {
	sent := time.Now()
	first := true
	req.IdleTimeout = idle
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.modelMu.Lock()
	x.modelCancel = cancel
	x.modelMu.Unlock()
	defer func() {
		x.modelMu.Lock()
		x.modelCancel = nil
		x.modelMu.Unlock()
	}()
	if x.interrupted.Load() {
		cancel(ErrInterruptRequested)
	}
	resp, err := x.e.cfg.Model.Stream(ctx, req, func(text string) {
		if first {
			first = false
			x.e.m.TimeToFirstTok.Observe(time.Since(sent).Seconds())
		}
		co.add(text)
	})
	return resp, err
}

func (x *execution) countTokens(u llm.Usage) {
	x.e.m.Tokens.WithLabelValues("input").Add(float64(u.InputTokens))
	x.e.m.Tokens.WithLabelValues("output").Add(float64(u.OutputTokens))
	x.e.m.Tokens.WithLabelValues("cached_input").Add(float64(u.CachedInputTokens))
	x.e.m.Tokens.WithLabelValues("reasoning").Add(float64(u.ReasoningTokens))
}

// offered returns the tool specs offered to the model: the run's list, or all.
func (x *execution) offered(names []string) []llm.ToolSpec {
	var specs []tools.Spec
	if names == nil {
		specs = x.e.cfg.Tools.List()
	} else {
		for _, n := range names {
			if t, ok := x.e.cfg.Tools.Get(n); ok {
				specs = append(specs, t.Spec())
			}
		}
	}
	out := make([]llm.ToolSpec, len(specs))
	for i, s := range specs {
		out[i] = llm.ToolSpec{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	return out
}

func usageOf(u llm.Usage) persist.Usage {
	return persist.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningTokens}
}

// commitModelOutput commits a step's model output in one transaction.
func (x *execution) commitModelOutput(st persist.RunState, step *persist.Step, resp llm.Response, tail string, started time.Time) (done bool, err error) {
	var evs []persist.EventIn
	if tail != "" {
		evs = append(evs, persist.EventIn{Type: "message.delta", Step: step.Seq, Data: map[string]any{"text": tail}})
	}
	msgID := persist.NewID()
	var parts []persist.Part
	if resp.Text != "" {
		parts = append(parts, persist.Part{Type: "text", Text: resp.Text})
	}
	for _, c := range resp.ToolCalls {
		parts = append(parts, persist.Part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	if len(parts) == 0 {
		parts = []persist.Part{{Type: "text", Text: ""}}
	}
	msg := persist.MessageInsert{ID: msgID, ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
		Role: "assistant", Content: parts, Status: persist.MessageCompleted}
	ops := []persist.Op{msg}
	evs = append(evs, persist.EventIn{Type: "message.completed", Step: step.Seq, Data: map[string]any{
		"message_id": msgID, "role": "assistant", "content": parts, "finish_reason": resp.FinishReason,
		"usage": usageOf(resp.Usage)}})
	usage := usageOf(resp.Usage)
	if len(resp.ToolCalls) == 0 {
		ops = append(ops, persist.StepUpdate{ID: step.ID, Status: persist.StepCompleted,
			FinishReason: resp.FinishReason, Usage: usage, Finished: true})
		evs = append(evs, persist.EventIn{Type: "step.completed", Step: step.Seq, Data: map[string]any{"finish_reason": resp.FinishReason}})
		x.e.m.StepDuration.Observe(time.Since(started).Seconds())
		final := *step
		final.Status = persist.StepCompleted
		return true, x.endWith(st, &final, persist.StatusCompleted, persist.ReasonCompleted, nil, ops, evs)
	}
	ops = append(ops, persist.StepUpdate{ID: step.ID, Status: persist.StepActing,
		FinishReason: resp.FinishReason, Usage: usage})
	calls := make([]persist.ToolCall, 0, len(resp.ToolCalls))
	begun := map[string]prestart{}
	var startEvs []persist.EventIn
	for i, c := range resp.ToolCalls {
		id := persist.NewID()
		effect, status := string(tools.ReadOnly), persist.CallPlanned
		if t, ok := x.e.cfg.Tools.Get(c.Name); ok {
			effect = string(t.Spec().Effect)
			if t.Spec().NeedsApproval && offered(st.Run.Params.Tools, c.Name) {
				status = persist.CallAwaitingApproval
			}
		}
		args := json.RawMessage(c.Arguments)
		if !json.Valid(args) {
			b, _ := json.Marshal(c.Arguments) // keep the model's text as a JSON string
			args = b
		}
		key := fmt.Sprintf("%s:%d:%s", st.Run.ID, step.Seq, c.ID)
		call := persist.ToolCallInsert{ID: id, RunID: st.Run.ID, StepID: step.ID, Position: i,
			CallID: c.ID, Name: c.Name, Arguments: args, IdempotencyKey: key, Effect: effect, Status: status}
		ops = append(ops, call)
		calls = append(calls, call.Call())
		evs = append(evs, persist.EventIn{Type: "tool_call.created", Step: step.Seq, Data: map[string]any{
			"tool_call_id": id, "call_id": c.ID, "name": c.Name, "arguments": args, "effect": effect, "idempotency_key": key,
			"status": status}})
		if x.startsWithOutput(st, c.Name, effect, status, args) {
			// Its first attempt is committed with the model's output, so
			// the tool runs without a write of its own. Only for tools that
			// may run again: were the execution to die before invoking it,
			// the attempt found running would be made again.
			a := persist.AttemptStart{ID: persist.NewID(), ToolCallID: id, N: 1, Worker: x.fence.Worker, Epoch: x.fence.Epoch}
			ops = append(ops, a)
			startEvs = append(startEvs, persist.EventIn{Type: "tool_attempt.started", Step: step.Seq, Data: map[string]any{
				"tool_call_id": id, "call_id": c.ID, "name": c.Name, "attempt": 1}})
			begun[id] = prestart{attemptID: a.ID, callID: c.ID, name: c.Name, step: step.Seq, position: i}
			calls[i].Status, calls[i].Attempts = persist.CallRunning, 1
		}
	}
	evs = append(evs, startEvs...)
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return true, x.stopFor(st, err)
	}
	x.started.set(begun)
	acting := *step
	acting.Status, acting.FinishReason, acting.Usage = persist.StepActing, resp.FinishReason, acting.Usage.Add(usage)
	setStep(&st, acting)
	appendMessage(&st, msg)
	st.Run.Usage = st.Run.Usage.Add(usage)
	st.Calls, st.Attempts = calls, nil
	x.carry(st)
	return false, nil
}

// startsWithOutput reports whether a call's first attempt may be committed
// with the model's output: a valid call of a read_only or idempotent tool
// offered to the run, that needs no approval, in a run not interrupted.
func (x *execution) startsWithOutput(st persist.RunState, name, effect, status string, args json.RawMessage) bool {
	if status != persist.CallPlanned || effect == string(tools.SideEffect) || x.interrupted.Load() {
		return false
	}
	if _, ok := x.e.cfg.Tools.Get(name); !ok || !offered(st.Run.Params.Tools, name) {
		return false
	}
	return x.e.cfg.Tools.Validate(name, args) == nil
}
