package run

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"agentd/internal/persist"
	"agentd/internal/tools"
)

// toolPhase runs the tool calls of a step whose model output is committed,
// then completes the step. done is true when the run left the executor.
func (x *execution) toolPhase(st persist.RunState, step *persist.Step) (done bool, err error) {
	started := time.Now()
	ctx, cancel := x.stepContext(st, step)
	defer cancel()
	calls := append([]persist.ToolCall(nil), st.Calls...)
	if err := x.recoverCalls(st, step, calls); err != nil {
		return true, x.stopFor(st, err)
	}
	var pending []int
	parallel := true
	for i, c := range calls {
		if c.Status == persist.CallPlanned || c.Status == persist.CallRunning {
			pending = append(pending, i)
			if c.Effect == string(tools.SideEffect) {
				parallel = false
			}
		}
	}
	if parallel && len(pending) > 1 {
		var wg sync.WaitGroup
		for _, i := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x.runCall(ctx, st, step, &calls[i])
			}()
		}
		wg.Wait()
	} else {
		for _, i := range pending {
			if ctx.Err() != nil || x.interrupted.Load() {
				break
			}
			x.runCall(ctx, st, step, &calls[i])
		}
	}
	if x.abandoned.Load() {
		return true, errAbandoned
	}
	if x.ctx.Err() != nil {
		return true, x.stopFor(st, nil)
	}
	for i := range calls {
		if calls[i].Status == persist.CallUnknown && x.ctx.Err() == nil {
			x.reconcile(ctx, st, step, &calls[i])
		}
	}
	if x.ctx.Err() != nil {
		return true, x.stopFor(st, nil)
	}
	for _, c := range calls {
		if c.Status == persist.CallUnknown {
			return true, x.requireAction(st, step, c, persist.ActionToolOutcomeUnknown)
		}
	}
	for _, c := range calls {
		if c.Status == persist.CallAwaitingApproval {
			return true, x.requireAction(st, step, c, persist.ActionToolApproval)
		}
	}
	if x.interrupted.Load() {
		for _, c := range calls {
			if c.Status == persist.CallPlanned || c.Status == persist.CallRunning {
				// The rest of the step runs when the run is resumed.
				return true, x.end(st, step, persist.StatusInterrupted, persist.ReasonInterrupted, nil)
			}
		}
	}
	if ctx.Err() != nil {
		return true, x.end(st, step, persist.StatusTimedOut, persist.ReasonTimedOutStep, map[string]any{"message": "the step's timeout elapsed"})
	}
	for _, c := range calls {
		if c.Status == persist.CallPlanned || c.Status == persist.CallRunning {
			// A write failed (the database, not the lease): what the tool did
			// is not committed, so the step must not complete on a guess. The
			// run is left to its lease; whoever claims it next recovers the call.
			return true, errors.New("tool call " + c.ID + " has no committed outcome")
		}
	}
	ops := make([]persist.Op, 0, len(calls)+1)
	msgs := make([]persist.MessageInsert, 0, len(calls))
	for _, c := range calls {
		content, isErr := resultText(c)
		m := persist.MessageInsert{ID: persist.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
			Role: "tool", Status: persist.MessageCompleted,
			Content: []persist.Part{{Type: "tool_result", ToolCallID: c.CallID, Content: content, IsError: isErr}}}
		msgs = append(msgs, m)
		ops = append(ops, m)
	}
	ops = append(ops, persist.StepUpdate{ID: step.ID, Status: persist.StepCompleted, Finished: true})
	evs := []persist.EventIn{{Type: "step.completed", Step: step.Seq, Data: map[string]any{"finish_reason": "tool_calls", "tool_calls": len(calls)}}}
	// Every tool result is committed already; the step's completion (its
	// tool messages) goes out with the next write, which follows at once:
	// the next step's start, or the run's end. Should the execution stop
	// before, the next claim finds the step acting with every call settled,
	// and completes it then.
	x.later(evs, ops...)
	x.e.m.StepDuration.Observe(time.Since(started).Seconds())
	completed := *step
	completed.Status = persist.StepCompleted
	setStep(&st, completed)
	for _, m := range msgs {
		appendMessage(&st, m)
	}
	st.Calls, st.Attempts = calls, nil
	x.carry(st)
	return false, nil
}

// recoverCalls applies the recovery rules to calls found in the ledger on a
// new claim: a succeeded call is reused; an attempt found running belonged
// to a dead worker, so its outcome is unknown: a read_only or idempotent call
// is simply attempted again with the same key, a side_effect call becomes
// unknown.
func (x *execution) recoverCalls(st persist.RunState, step *persist.Step, calls []persist.ToolCall) error {
	running := map[string]persist.Attempt{}
	for _, a := range st.Attempts {
		if a.Status == persist.AttemptRunning {
			running[a.ToolCallID] = a
		}
	}
	var ops []persist.Op
	var evs []persist.EventIn
	for i := range calls {
		c := &calls[i]
		if c.Status == persist.CallSucceeded && x.first {
			evs = append(evs, persist.EventIn{Type: "tool_call.reused", Step: step.Seq, Data: map[string]any{
				"tool_call_id": c.ID, "call_id": c.CallID, "name": c.Name, "idempotency_key": c.IdempotencyKey}})
			continue
		}
		a, ok := running[c.ID]
		if !ok || a.Epoch >= x.fence.Epoch {
			continue
		}
		errData := map[string]any{"message": "the worker running this attempt stopped before it finished", "kind": "unknown"}
		ops = append(ops, persist.AttemptFinish{ID: a.ID, Status: persist.AttemptUnknown, Error: errData})
		x.e.m.ToolAttempts.WithLabelValues(c.Name, "unknown").Inc()
		if c.Effect == string(tools.SideEffect) {
			c.Status = persist.CallUnknown
			ops = append(ops, persist.ToolCallFinish{ID: c.ID, Status: persist.CallUnknown, Error: errData})
			evs = append(evs, persist.EventIn{Type: "tool_call.unknown", Step: step.Seq, Data: map[string]any{
				"tool_call_id": c.ID, "call_id": c.CallID, "name": c.Name, "idempotency_key": c.IdempotencyKey, "attempt": a.N}})
		}
	}
	if len(ops) == 0 && len(evs) == 0 {
		return nil
	}
	return x.write(x.ctx, evs, ops...)
}

// requireAction stops the run until a client decides about call c: what
// happened to a side-effect call whose outcome is unknown, or whether a call
// that needs approval may run.
func (x *execution) requireAction(st persist.RunState, step *persist.Step, c persist.ToolCall, kind string) error {
	action := map[string]any{"type": kind, "tool_call_id": c.ID, "call_id": c.CallID,
		"name": c.Name, "idempotency_key": c.IdempotencyKey, "arguments": c.Arguments, "step": step.Seq}
	ops, evs := x.started.unbegun()
	ops = append(ops, persist.RunEnd{ID: st.Run.ID, Status: persist.StatusRequiresAction, RequiredAction: action})
	evs = append(evs, persist.EventIn{Type: "run.requires_action", Step: step.Seq, Data: map[string]any{"required_action": action}})
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return err
	}
	x.e.m.RunsEnded.WithLabelValues(persist.StatusRequiresAction, "").Inc()
	if f := x.e.cfg.OnEndFunc; f != nil {
		f(st.Run.ID, persist.StatusRequiresAction)
	}
	x.log.Info("run requires action", "type", kind, "tool_call_id", c.ID)
	return nil
}

// runCall makes attempts of one call until it succeeds, fails, or its outcome
// becomes unknown, committing the attempt before the tool is invoked and its
// result right after. It updates c to what was committed.
func (x *execution) runCall(ctx context.Context, st persist.RunState, step *persist.Step, c *persist.ToolCall) {
	tool, ok := x.e.cfg.Tools.Get(c.Name)
	startedID, started := x.started.take(c.ID) // validated, and its attempt 1 committed
	var verr error
	switch {
	case started:
	case !ok:
		verr = &tools.Error{Kind: tools.KindFinal, Message: "unknown tool " + c.Name}
	case !offered(st.Run.Params.Tools, c.Name):
		verr = &tools.Error{Kind: tools.KindFinal, Message: "tool " + c.Name + " is not offered to this run"}
	default:
		verr = x.e.cfg.Tools.Validate(c.Name, c.Arguments)
	}
	if verr != nil {
		// The model sees the error and may repair its call; no attempt is made.
		x.finishCall(step, c, persist.CallFailed, nil, toolErrorData(verr), nil)
		return
	}
	spec := tool.Spec()
	def := x.e.cfg.ToolTimeout
	if ms := st.Run.Params.Timeouts.ToolMS; ms > 0 {
		def = time.Duration(ms) * time.Millisecond
	}
	timeout := spec.AttemptTimeout(def)
	if ms := st.Run.Params.Timeouts.ToolMS; ms > 0 && time.Duration(ms)*time.Millisecond < timeout {
		timeout = time.Duration(ms) * time.Millisecond
	}
	for {
		n, attemptID := c.Attempts+1, persist.NewID()
		if started {
			n, attemptID, started = c.Attempts, startedID, false
		} else {
			if n > 1 && x.interrupted.Load() {
				return // attempted again when the run is resumed
			}
			if err := x.write(ctx, []persist.EventIn{{Type: "tool_attempt.started", Step: step.Seq, Data: map[string]any{
				"tool_call_id": c.ID, "call_id": c.CallID, "name": c.Name, "attempt": n}}},
				persist.AttemptStart{ID: attemptID, ToolCallID: c.ID, N: n, Worker: x.fence.Worker, Epoch: x.fence.Epoch}); err != nil {
				return
			}
		}
		c.Attempts, c.Status = n, persist.CallRunning
		actx, cancel := context.WithTimeout(ctx, timeout)
		result, err := tool.Invoke(actx, tools.Call{RunID: st.Run.ID, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
			Attempt: n, Arguments: c.Arguments})
		cancel()
		if err == nil {
			x.e.m.ToolAttempts.WithLabelValues(c.Name, "succeeded").Inc()
			result = tools.Truncate(result, spec.ResultLimit())
			x.finishCall(step, c, persist.CallSucceeded, result, nil,
				persist.AttemptFinish{ID: attemptID, Status: persist.AttemptSucceeded})
			return
		}
		errData := toolErrorData(err)
		if ctx.Err() != nil {
			// The run or the step ended under the tool. Its effect may have
			// happened: a side-effect call's outcome is unknown; other calls
			// are attempted again when the run goes on.
			errData["message"] = "the attempt was cancelled: " + context.Cause(ctx).Error()
			if spec.Effect == tools.SideEffect {
				x.e.m.ToolAttempts.WithLabelValues(c.Name, "unknown").Inc()
				x.finishCall(step, c, persist.CallUnknown, nil, errData,
					persist.AttemptFinish{ID: attemptID, Status: persist.AttemptUnknown, Error: errData})
				return
			}
			x.e.m.ToolAttempts.WithLabelValues(c.Name, "cancelled").Inc()
			_ = x.write(x.durable(), []persist.EventIn{{Type: "tool_attempt.failed", Step: step.Seq, Data: map[string]any{
				"tool_call_id": c.ID, "attempt": n, "error": errData, "will_retry": false}}},
				persist.AttemptFinish{ID: attemptID, Status: persist.AttemptFailed, Error: errData})
			return
		}
		attemptStatus := persist.AttemptFailed
		if k := tools.KindOf(err); k == tools.KindTimeout {
			attemptStatus = persist.AttemptTimedOut
		}
		switch tools.Decide(spec, err, n) {
		case tools.Retry:
			x.e.m.ToolAttempts.WithLabelValues(c.Name, attemptStatus).Inc()
			if err := x.write(x.durable(), []persist.EventIn{{Type: "tool_attempt.failed", Step: step.Seq, Data: map[string]any{
				"tool_call_id": c.ID, "attempt": n, "error": errData, "will_retry": true}}},
				persist.AttemptFinish{ID: attemptID, Status: attemptStatus, Error: errData}); err != nil {
				return
			}
			select {
			case <-time.After(spec.BackoffFor(n)):
			case <-ctx.Done():
				return
			}
		case tools.Unknown:
			x.e.m.ToolAttempts.WithLabelValues(c.Name, "unknown").Inc()
			x.finishCall(step, c, persist.CallUnknown, nil, errData,
				persist.AttemptFinish{ID: attemptID, Status: persist.AttemptUnknown, Error: errData})
			return
		default:
			x.e.m.ToolAttempts.WithLabelValues(c.Name, attemptStatus).Inc()
			x.finishCall(step, c, persist.CallFailed, nil, errData,
				persist.AttemptFinish{ID: attemptID, Status: attemptStatus, Error: errData})
			return
		}
	}
}

// finishCall commits a call's outcome (with its last attempt's) right after
// the tool returned, in a transaction of its own that a later cancel cannot
// undo.
func (x *execution) finishCall(step *persist.Step, c *persist.ToolCall, status string, result json.RawMessage, errData map[string]any, attempt persist.Op) {
	var ops []persist.Op
	var evs []persist.EventIn
	if attempt != nil && status != persist.CallSucceeded {
		evs = append(evs, persist.EventIn{Type: "tool_attempt.failed", Step: step.Seq, Data: map[string]any{
			"tool_call_id": c.ID, "attempt": c.Attempts, "error": errData, "will_retry": false}})
	}
	if attempt != nil {
		ops = append(ops, attempt)
	}
	var errArg any
	if errData != nil {
		errArg = errData
	}
	ops = append(ops, persist.ToolCallFinish{ID: c.ID, Status: status, Result: result, Error: errArg})
	data := map[string]any{"tool_call_id": c.ID, "call_id": c.CallID, "name": c.Name, "status": status}
	if result != nil {
		data["result"] = result
	}
	if errData != nil {
		data["error"] = errData
	}
	typ := "tool_call.completed"
	if status == persist.CallUnknown {
		typ = "tool_call.unknown"
		data["idempotency_key"] = c.IdempotencyKey
	}
	evs = append(evs, persist.EventIn{Type: typ, Step: step.Seq, Data: data})
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return
	}
	c.Status, c.Result = status, result
	if errData != nil {
		b, _ := json.Marshal(errData)
		c.Error = b
	}
}

// reconcile asks the tool's reconciler, when it has one, what became of a
// call whose outcome is unknown: it happened (its result is recorded), it
// failed, it did not happen (it is attempted again with the same key), or
// nobody knows (the call stays unknown and a client decides).
func (x *execution) reconcile(ctx context.Context, st persist.RunState, step *persist.Step, c *persist.ToolCall) {
	tool, ok := x.e.cfg.Tools.Get(c.Name)
	if !ok {
		return
	}
	rec, ok := tool.(tools.Reconciler)
	if !ok || !rec.CanReconcile() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, tool.Spec().AttemptTimeout(x.e.cfg.ToolTimeout))
	res, err := rec.Reconcile(rctx, tools.Call{RunID: st.Run.ID, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
		Attempt: c.Attempts, Arguments: c.Arguments})
	cancel()
	if err != nil {
		x.log.Warn("reconcile tool call", "tool_call_id", c.ID, "err", err)
		return
	}
	x.e.m.ToolAttempts.WithLabelValues(c.Name, "reconciled_"+string(res.Outcome)).Inc()
	switch res.Outcome {
	case tools.OutcomeSucceeded:
		result := res.Result
		if len(result) == 0 {
			result = json.RawMessage(`null`)
		}
		x.finishCall(step, c, persist.CallSucceeded, tools.Truncate(result, tool.Spec().ResultLimit()), nil, nil)
	case tools.OutcomeFailed:
		msg := res.Message
		if msg == "" {
			msg = "the tool call failed (reported by its reconciler)"
		}
		x.finishCall(step, c, persist.CallFailed, nil, map[string]any{"message": msg, "kind": "reconciled"}, nil)
	case tools.OutcomeNotApplied:
		if err := x.write(x.durable(), []persist.EventIn{{Type: "tool_call.retry_allowed", Step: step.Seq, Data: map[string]any{
			"tool_call_id": c.ID, "status": persist.CallRunning, "retry": true, "resolved_by": "reconciler"}}},
			persist.ToolCallFinish{ID: c.ID, Status: persist.CallRunning}); err != nil {
			return
		}
		c.Status = persist.CallRunning
		x.runCall(ctx, st, step, c)
	}
}

func offered(names []string, name string) bool {
	if names == nil {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func toolErrorData(err error) map[string]any {
	var te *tools.Error
	if errors.As(err, &te) {
		d := map[string]any{"message": te.Message, "kind": string(te.Kind)}
		if te.Status != 0 {
			d["status"] = te.Status
		}
		return d
	}
	return map[string]any{"message": "the tool failed", "kind": string(tools.KindOf(err))}
}

// resultText is what the model is told of a finished call.
func resultText(c persist.ToolCall) (string, bool) {
	if c.Status == persist.CallSucceeded {
		if len(c.Result) == 0 {
			return "null", false
		}
		return string(c.Result), false
	}
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(c.Error, &e)
	if e.Message == "" {
		e.Message = "the tool call " + c.Status
	}
	b, _ := json.Marshal(map[string]string{"error": e.Message})
	return string(b), true
}
