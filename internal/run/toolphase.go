package run

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"

	"github.com/google/uuid"
)

// toolPhase runs the tool calls of a step whose model output is committed,
// then completes the step. done is true when the run left the executor.
func (x *execution) toolPhase(st agentd.RunState, step *agentd.Step) (done bool, err error) {
	started := time.Now()
	ctx, cancel := x.stepContext(st)
	defer cancel()
	calls := append([]agentd.ToolCall(nil), st.Calls...)
	if err := x.recoverCalls(st, step, calls); err != nil {
		return true, x.stopFor(st, err)
	}
	if detail := x.evalRefused(st, calls); detail != nil {
		// An evaluation's run makes no call that might have a side effect.
		return true, x.end(st, step, endOf(agentd.StatusFailed, agentd.ReasonToolError, detail))
	}
	x.runPending(ctx, st, step, calls)
	if x.abandoned.Load() {
		return true, errAbandoned
	}
	if x.ctx.Err() != nil {
		return true, x.stopFor(st, nil)
	}
	for i := range calls {
		if calls[i].Status == agentd.CallUnknown && x.ctx.Err() == nil {
			x.reconcile(ctx, st, step, &calls[i])
		}
	}
	if x.ctx.Err() != nil {
		return true, x.stopFor(st, nil)
	}
	if done, err := x.settle(ctx, st, step, calls); done {
		return true, err
	}
	x.completeStep(st, step, calls)
	x.d.m.StepDuration.Observe(time.Since(started).Seconds())
	return false, nil
}

// runPending attempts the step's calls still to be made: at once when all
// of them may run again (read_only or idempotent), else one after another,
// stopping at an interrupt or when the step's context ends.
func (x *execution) runPending(ctx context.Context, st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) {
	var pending []int
	parallel := true
	for i, c := range calls {
		if c.Status.Pending() {
			pending = append(pending, i)
			if c.Effect == agentd.EffectSideEffect {
				parallel = false
			}
		}
	}
	if parallel && len(pending) > 1 {
		var wg sync.WaitGroup
		for _, i := range pending {
			if !x.toolSlot(ctx) {
				break // the step's context ended: the rest stay pending
			}
			wg.Go(func() {
				defer func() { <-x.d.toolSlots }()
				x.runCall(ctx, st, step, &calls[i])
			})
		}
		wg.Wait()
		return
	}
	for _, i := range pending {
		if x.interrupted.Load() || !x.toolSlot(ctx) {
			return
		}
		x.runCall(ctx, st, step, &calls[i])
		<-x.d.toolSlots
	}
}

// toolSlot takes one of the instance's slots for a tool call, waiting for
// one to be free; false when ctx ended first.
func (x *execution) toolSlot(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case x.d.toolSlots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// settle decides, once the step's calls were attempted, whether the run
// stops here: for a client's decision (an unknown outcome, an approval), an
// interrupt, the step's timeout, or a write that failed. done is true when
// it stopped the run (or left it to its lease), with what that returned.
func (x *execution) settle(ctx context.Context, st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) (done bool, err error) {
	for _, want := range []struct {
		status agentd.CallStatus
		action agentd.ActionType
	}{{agentd.CallUnknown, agentd.ActionToolOutcomeUnknown}, {agentd.CallAwaitingApproval, agentd.ActionToolApproval}} {
		if want.status == agentd.CallAwaitingApproval && st.Run.Params.ClientToolsEnd {
			break // the run ends at them, with the client's calls
		}
		for _, c := range calls {
			if c.Status == want.status {
				return true, x.requireAction(st, step, c, want.action)
			}
		}
	}
	var pending *agentd.ToolCall
	var client []agentd.ToolCall
	agents := false
	for i := range calls {
		if calls[i].Status.Pending() && pending == nil {
			pending = &calls[i]
		}
		agents = agents || calls[i].Status == agentd.CallAwaitingAgent
		if calls[i].Status == agentd.CallAwaitingClient || calls[i].Status == agentd.CallAwaitingApproval {
			client = append(client, calls[i])
		}
	}
	switch {
	case pending != nil && x.interrupted.Load():
		// The rest of the step runs when the run is resumed.
		return true, x.end(st, step, endOf(agentd.StatusInterrupted, agentd.ReasonInterrupted, nil))
	case ctx.Err() != nil:
		return true, x.end(st, step, stepTimedOut())
	case pending != nil:
		// A write failed (the database, not the lease): what the tool did
		// is not committed, so the step must not complete on a guess. The
		// run is left to its lease; whoever claims it next recovers the call.
		return true, errors.New("tool call " + pending.ID + " has no committed outcome")
	case agents:
		// The sub-agents first; the client's calls, if any, when they are done.
		if done, err := x.awaitAgents(ctx, st, step, calls); done {
			return true, err
		}
		return x.settle(ctx, st, step, calls)
	case len(client) > 0 && st.Run.Params.ClientToolsEnd:
		// The run ends at the client's calls (and those that wait for its
		// approval), which stay waiting: the next run of the conversation
		// brings their outputs and decisions. The results of the step's
		// other calls are given to the model now, in the step's tool
		// messages, which those of the client's calls will follow.
		e := endOf(agentd.StatusCompleted, agentd.ReasonClientToolCalls, nil)
		e.ops, _ = x.toolMessages(st, calls, func(c agentd.ToolCall) bool { return c.Status.Final() })
		e.evs = append(e.evs, agentd.EventOf(step.Seq, agentd.StepCompletedData{FinishReason: agentd.FinishToolCalls, ToolCalls: len(calls)}))
		return true, x.end(st, step, e)
	case len(client) > 0:
		// The server's calls are done; the client's wait for its outputs.
		return true, x.requireClient(st, step, client)
	}
	return false, nil
}

// requireClient stops the run for the outputs of the step's client tool
// calls, all together.
func (x *execution) requireClient(st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) error {
	c := calls[0]
	action := agentd.RequiredAction{Arguments: c.Arguments, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
		Name: c.Name, Step: step.Seq, ToolCallID: c.ID, Type: agentd.ActionClientToolCalls}
	for _, c := range calls {
		action.Calls = append(action.Calls, agentd.ClientCall{Arguments: c.Arguments, CallID: c.CallID, Name: c.Name, ToolCallID: c.ID})
	}
	return x.waitFor(st, step, action)
}

// waitFor commits that the run requires action (after the events before),
// and leaves it to the client.
func (x *execution) waitFor(st agentd.RunState, step *agentd.Step, action agentd.RequiredAction, before ...agentd.EventIn) error {
	ops, evs := x.started.unbegun()
	ops = x.withNext(append(ops, persist.RunEnd{ID: st.Run.ID, Status: agentd.StatusRequiresAction, RequiredAction: &action}))
	evs = append(append(evs, before...), agentd.EventOf(step.Seq, agentd.RunRequiresActionData{RequiredAction: action}))
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return err
	}
	x.left(st.Run, agentd.StatusRequiresAction, "")
	x.log.Info("run requires action", "type", action.Type, "tool_call_id", action.ToolCallID, "calls", max(len(action.Calls), 1))
	return nil
}

// completeStep completes a step whose calls all have a committed outcome.
// Its completion (its tool messages) goes out with the next write, which
// follows at once: the next step's start, or the run's end. Should the
// execution stop before, the next claim finds the step acting with every
// call settled, and completes it then.
func (x *execution) completeStep(st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) {
	ops, msgs := x.toolMessages(st, calls, func(agentd.ToolCall) bool { return true })
	if m, ok := x.notRun(st, calls); ok && !adopted(st, step) {
		msgs = append(msgs, m)
		ops = append(ops, m)
	}
	ops = append(ops, persist.StepUpdate{ID: step.ID, Status: agentd.StepCompleted, Finished: true})
	x.outbox.add([]agentd.EventIn{agentd.EventOf(step.Seq, agentd.StepCompletedData{FinishReason: agentd.FinishToolCalls, ToolCalls: len(calls)})}, ops...)
	completed := *step
	completed.Status = agentd.StepCompleted
	setStep(&st, completed)
	for _, m := range msgs {
		appendMessage(&st, m)
	}
	st.Calls, st.Attempts = calls, nil
	x.carry(st)
}

// toolMessages are the tool messages that give the model the results of
// the calls that keep says, one a call.
func (x *execution) toolMessages(st agentd.RunState, calls []agentd.ToolCall, keep func(agentd.ToolCall) bool) ([]persist.Op, []persist.MessageInsert) {
	ops := make([]persist.Op, 0, len(calls)+2)
	msgs := make([]persist.MessageInsert, 0, len(calls))
	for _, c := range calls {
		if !keep(c) {
			continue
		}
		content, isErr := resultText(c)
		m := persist.MessageInsert{ID: agentd.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
			Role: agentd.RoleTool, Status: agentd.MessageCompleted,
			Content: []agentd.Part{{Type: agentd.PartToolResult, ToolCallID: c.CallID, Content: content, IsError: isErr}}}
		msgs = append(msgs, m)
		ops = append(ops, m)
	}
	return ops, msgs
}

// adopted reports whether step is the run's first, which took over the
// calls its approvals decided (adoptApprovals): they are only part of the
// model output that asked for them, whose other calls were answered then.
func adopted(st agentd.RunState, step *agentd.Step) bool {
	return step.Seq == 1 && len(st.Run.Params.Approvals) > 0
}

// notRun is the tool message that answers the calls of the step's model
// output that were not planned, past the step's cap of calls: one message
// with a tool error per call, since the model's API needs an answer to each.
func (x *execution) notRun(st agentd.RunState, calls []agentd.ToolCall) (persist.MessageInsert, bool) {
	var asked *agentd.Message
	for i := len(st.Messages) - 1; i >= 0 && asked == nil; i-- {
		if st.Messages[i].Role == agentd.RoleAssistant {
			asked = &st.Messages[i]
		}
	}
	if asked == nil {
		return persist.MessageInsert{}, false
	}
	asks := 0
	for _, p := range asked.Content {
		if p.Type == agentd.PartToolCall {
			asks++
		}
	}
	if asks <= len(calls) {
		return persist.MessageInsert{}, false // every call was planned
	}
	planned := make(map[string]bool, len(calls))
	for _, c := range calls {
		planned[c.CallID] = true
	}
	why := fmt.Sprintf("not run: a step may make at most %d tool calls; ask for fewer at a time", x.d.limits.callsPerStep)
	if st.CallCount >= x.d.limits.callsPerRun {
		why = fmt.Sprintf("not run: a run may make at most %d tool calls, and this one has; answer without tools",
			x.d.limits.callsPerRun)
	}
	refusal, _ := json.Marshal(map[string]string{"error": why})
	var parts []agentd.Part
	for _, p := range asked.Content {
		if p.Type == agentd.PartToolCall && !planned[p.ID] {
			parts = append(parts, agentd.Part{Type: agentd.PartToolResult, ToolCallID: p.ID, Content: string(refusal), IsError: true})
		}
	}
	return persist.MessageInsert{ID: agentd.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
		Role: agentd.RoleTool, Status: agentd.MessageCompleted, Content: parts}, true
}

// recoverCalls applies the recovery rules to calls found in the ledger on a
// new claim: a succeeded call is reused; an attempt found running belonged
// to a dead worker, so its outcome is unknown: a read_only or idempotent call
// is simply attempted again with the same key, a side_effect call becomes
// unknown.
func (x *execution) recoverCalls(st agentd.RunState, step *agentd.Step, calls []agentd.ToolCall) error {
	running := map[string]agentd.Attempt{}
	for _, a := range st.Attempts {
		if a.Status == agentd.AttemptRunning {
			running[a.ToolCallID] = a
		}
	}
	var ops []persist.Op
	var evs []agentd.EventIn
	for i := range calls {
		c := &calls[i]
		if c.Status == agentd.CallSucceeded && x.first {
			evs = append(evs, agentd.EventOf(step.Seq, agentd.ToolCallReusedData{CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
				Name: c.Name, ToolCallID: c.ID}))
			continue
		}
		a, ok := running[c.ID]
		if !ok || a.Epoch >= x.fence.Epoch {
			continue
		}
		errData := &agentd.ErrorDetail{Kind: agentd.ToolErrUnknown, Message: "the worker running this attempt stopped before it finished"}
		ops = append(ops, persist.AttemptFinish{ID: a.ID, Status: agentd.AttemptUnknown, Error: errData})
		x.d.m.attempt(c.Name, attemptUnknown)
		if c.Effect == agentd.EffectSideEffect {
			c.Status = agentd.CallUnknown
			ops = append(ops, persist.ToolCallFinish{ID: c.ID, Status: agentd.CallUnknown, Error: errData})
			evs = append(evs, agentd.EventOf(step.Seq, agentd.ToolCallUnknownData{Attempt: a.N, CallID: c.CallID,
				IdempotencyKey: c.IdempotencyKey, Name: c.Name, ToolCallID: c.ID}))
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
func (x *execution) requireAction(st agentd.RunState, step *agentd.Step, c agentd.ToolCall, kind agentd.ActionType) error {
	action := agentd.RequiredAction{Arguments: c.Arguments, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
		Name: c.Name, Step: step.Seq, ToolCallID: c.ID, Type: kind}
	return x.waitFor(st, step, action)
}

// attemptTimeout is the time one attempt of a tool may take: the tool's
// own, else the run's tool timeout, else the engine's default, and never
// more than the run's tool timeout.
func (x *execution) attemptTimeout(st agentd.RunState, spec tools.Spec) time.Duration {
	def := x.d.limits.toolTimeout
	run := time.Duration(st.Run.Params.Timeouts.ToolMS) * time.Millisecond
	if run > 0 {
		def = run
	}
	timeout := spec.AttemptTimeout(def)
	if run > 0 && run < timeout {
		timeout = run
	}
	return timeout
}

// callable checks that c may be attempted: a registered tool, offered to
// the run, with valid arguments. A call whose first attempt was committed
// with the model's output was checked then.
func (x *execution) callable(st agentd.RunState, c *agentd.ToolCall) (tools.Tool, error) {
	tool, ok := x.tools().Get(c.Name)
	switch {
	case !ok:
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "unknown tool " + c.Name}
	case !offered(st.Run.Params, c.Name):
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "tool " + c.Name + " is not offered to this run"}
	}
	return tool, x.tools().Validate(c.Name, c.Arguments)
}

// runCall makes attempts of one call until it succeeds, fails, or its outcome
// becomes unknown, committing the attempt before the tool is invoked and its
// result right after. It updates c to what was committed.
func (x *execution) runCall(ctx context.Context, st agentd.RunState, step *agentd.Step, c *agentd.ToolCall) {
	startedID, started := x.started.take(c.ID) // validated, and its attempt 1 committed
	var tool tools.Tool
	var verr error
	if started {
		tool, _ = x.tools().Get(c.Name)
	} else {
		tool, verr = x.callable(st, c)
	}
	if verr != nil {
		// The model sees the error and may repair its call; no attempt is made.
		x.finishCall(step, c, callOutcome{status: agentd.CallFailed, err: toolErrorData(verr)})
		return
	}
	tool = evalTooled(st.Run, *c, tool)
	timeout := x.attemptTimeout(st, tool.Spec())
	for {
		n, attemptID := c.Attempts+1, agentd.NewID()
		if started {
			n, attemptID, started = c.Attempts, startedID, false
		} else {
			if n > 1 && x.interrupted.Load() {
				return // attempted again when the run is resumed
			}
			if err := x.write(ctx, []agentd.EventIn{agentd.EventOf(step.Seq, agentd.ToolAttemptStartedData{Attempt: n, CallID: c.CallID,
				Name: c.Name, ToolCallID: c.ID})},
				persist.AttemptStart{ID: attemptID, ToolCallID: c.ID, N: n, Worker: x.fence.Worker, Epoch: x.fence.Epoch,
					ArgumentsSHA256: argumentsSum(c.Effect, c.Arguments)}); err != nil {
				return
			}
		}
		c.Attempts, c.Status = n, agentd.CallRunning
		actx, cancel := context.WithTimeout(ctx, timeout)
		actx, span := x.toolSpan(actx, step, c, tool.Spec())
		result, err := tool.Invoke(actx, tools.Call{RunID: st.Run.ID, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
			Attempt: n, Arguments: c.Arguments, Run: &st.Run, Step: step.Seq, ToolCallID: c.ID})
		endToolSpan(span, result, err, x.d.traceContent)
		cancel()
		a := attemptResult{id: attemptID, spec: tool.Spec(), result: result, err: err}
		if err == nil {
			a.sum = receiptSum(c.Effect, result) // before anything is done to the result
		}
		if !x.attempted(ctx, step, c, a) {
			return
		}
	}
}

// attemptResult is what one attempt of a call gave.
type attemptResult struct {
	id     string
	spec   tools.Spec
	result json.RawMessage
	err    error
	sum    string // the receipt's hash of result as the tool returned it ("": none)
}

// receiptSum is the SHA-256 (hex) of b, the exact bytes a tool returned,
// for the receipt of an attempt of a call with an effect (idempotent or
// side_effect); "" for a read_only call, which keeps none.
func receiptSum(effect agentd.Effect, b []byte) string {
	if effect == agentd.EffectReadOnly {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// argumentsSum is receiptSum of the arguments a tool is given, compacted
// (json.Compact: the whitespace between tokens dropped, keys in the order
// the tool is given them), the form a webhook sends them in: the same
// arguments hash the same whether they come from the model's text (the
// first execution) or from jsonb (a later one, which spaces them).
// Arguments that are not JSON are hashed as they are.
func argumentsSum(effect agentd.Effect, args json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		return receiptSum(effect, args)
	}
	return receiptSum(effect, b.Bytes())
}

// attempted commits how an attempt of c ended, and reports whether another
// attempt follows (after its backoff).
func (x *execution) attempted(ctx context.Context, step *agentd.Step, c *agentd.ToolCall, a attemptResult) (again bool) {
	if a.err == nil && len(a.result) > tools.MaxResultBytes {
		a.err = tools.TooLarge(len(a.result))
	}
	if a.err == nil && x.tools().Hooked() {
		// The operator's hook may redact the result before it is kept.
		out, err := x.tools().After(ctx, tools.HookCall{RunID: c.RunID, Tool: c.Name, Arguments: c.Arguments}, a.result)
		if err != nil {
			a.err = &tools.Error{Kind: tools.KindFinal, Message: "the operator's policy hook refused the result: " + err.Error(), Err: err}
		} else {
			a.result = out
		}
	}
	if a.err == nil {
		x.d.m.attempt(c.Name, attemptSucceeded)
		o := resultOf(a.result, a.spec.ResultLimit())
		o.attempt = &persist.AttemptFinish{ID: a.id, Status: agentd.AttemptSucceeded, ResultSHA256: a.sum}
		x.finishCall(step, c, o)
		return false
	}
	errData := toolErrorData(a.err)
	if ctx.Err() != nil {
		// The run or the step ended under the tool. Its effect may have
		// happened: a side-effect call's outcome is unknown; other calls
		// are attempted again when the run goes on.
		errData.Message = "the attempt was cancelled: " + context.Cause(ctx).Error()
		if a.spec.Effect == agentd.EffectSideEffect {
			x.unknown(step, c, a, errData)
			return false
		}
		x.d.m.attempt(c.Name, attemptCancelled)
		_ = x.write(x.durable(), []agentd.EventIn{attemptFailed(step, c, errData, false)},
			persist.AttemptFinish{ID: a.id, Status: agentd.AttemptFailed, Error: errData, ResultSHA256: a.sum})
		return false
	}
	status := agentd.AttemptFailed
	if tools.KindOf(a.err) == tools.KindTimeout {
		status = agentd.AttemptTimedOut
	}
	switch tools.Decide(a.spec, a.err, c.Attempts) {
	case tools.Retry:
		x.d.m.attempt(c.Name, attemptEnded(status))
		if err := x.write(x.durable(), []agentd.EventIn{attemptFailed(step, c, errData, true)},
			persist.AttemptFinish{ID: a.id, Status: status, Error: errData, ResultSHA256: a.sum}); err != nil {
			return false
		}
		select {
		case <-time.After(a.spec.BackoffFor(c.Attempts)):
			return true
		case <-ctx.Done():
			return false
		}
	case tools.Unknown:
		x.unknown(step, c, a, errData)
	default:
		x.d.m.attempt(c.Name, attemptEnded(status))
		x.finishCall(step, c, callOutcome{status: agentd.CallFailed, err: errData,
			attempt: &persist.AttemptFinish{ID: a.id, Status: status, Error: errData, ResultSHA256: a.sum}})
	}
	return false
}

// unknown commits that the outcome of c's last attempt, a, is unknown.
func (x *execution) unknown(step *agentd.Step, c *agentd.ToolCall, a attemptResult, errData *agentd.ErrorDetail) {
	x.d.m.attempt(c.Name, attemptUnknown)
	x.finishCall(step, c, callOutcome{status: agentd.CallUnknown, err: errData,
		attempt: &persist.AttemptFinish{ID: a.id, Status: agentd.AttemptUnknown, Error: errData, ResultSHA256: a.sum}})
}

// storableResult makes a tool's result storable (internal/clean): JSON that
// jsonb cannot hold is cleaned, and a result that is not JSON at all is kept
// as a JSON string of its (cleaned) text. It reports whether it changed the
// result: the caller then keeps the bytes the tool returned too.
func storableResult(result json.RawMessage) (json.RawMessage, bool) {
	if len(result) == 0 {
		return result, false
	}
	out, changed, err := clean.JSON(result)
	if err != nil {
		text, _ := clean.Text(string(result))
		out, _ = json.Marshal(text)
		changed = true
	}
	return out, changed
}

// resultOf is the outcome of a call that succeeded with result, stored as
// it can be: a result over limit bytes is kept whole as an artifact, and
// the call's result is its preview (tools.Offload). When the result had to
// be changed to be stored, the bytes the tool returned are kept too
// (base64, cut to limit), since they may matter to whoever looks.
func resultOf(result json.RawMessage, limit int) callOutcome {
	out, changed := storableResult(result)
	o := callOutcome{status: agentd.CallSucceeded}
	o.result, o.artifact = tools.Offload(out, limit, uuid.NewString())
	if changed {
		o.raw = result[:min(len(result), limit)]
	}
	return o
}

// attemptFailed is the tool_attempt.failed event of c's last attempt.
func attemptFailed(step *agentd.Step, c *agentd.ToolCall, errData *agentd.ErrorDetail, willRetry bool) agentd.EventIn {
	return agentd.EventOf(step.Seq, agentd.ToolAttemptFailedData{Attempt: c.Attempts, CallID: c.CallID, Error: *errData,
		Name: c.Name, ToolCallID: c.ID, WillRetry: willRetry})
}

// callOutcome is how a call ended: its status, its result or error, and the
// end of its last attempt when one was made.
type callOutcome struct {
	status   agentd.CallStatus
	result   json.RawMessage
	raw      []byte           // the bytes the tool returned, when result had to be changed to be stored
	artifact *agentd.Artifact // the whole result, when result is its preview
	err      *agentd.ErrorDetail
	attempt  *persist.AttemptFinish
}

// finishCall commits a call's outcome (with its last attempt's) right after
// the tool returned, in a transaction of its own that a later cancel cannot
// undo.
func (x *execution) finishCall(step *agentd.Step, c *agentd.ToolCall, o callOutcome) {
	var ops []persist.Op
	var evs []agentd.EventIn
	if o.attempt != nil {
		if o.status != agentd.CallSucceeded {
			evs = append(evs, attemptFailed(step, c, o.err, false))
		}
		ops = append(ops, *o.attempt)
	}
	ops = append(ops, persist.ToolCallFinish{ID: c.ID, Status: o.status, Result: o.result, Error: o.err})
	if o.artifact != nil {
		ops = append(ops, persist.ArtifactInsert{RunID: c.RunID, ToolCallID: c.ID, Artifact: *o.artifact})
	}
	if o.status == agentd.CallUnknown {
		evs = append(evs, agentd.EventOf(step.Seq, agentd.ToolCallUnknownData{CallID: c.CallID, Error: o.err,
			IdempotencyKey: c.IdempotencyKey, Name: c.Name, Status: o.status, ToolCallID: c.ID}))
	} else {
		d := agentd.ToolCallCompletedData{CallID: c.CallID, Error: o.err, Name: c.Name, Result: o.result,
			Status: o.status, ToolCallID: c.ID}
		if o.raw != nil {
			d.ResultRaw = base64.StdEncoding.EncodeToString(o.raw)
		}
		evs = append(evs, agentd.EventOf(step.Seq, d))
	}
	if err := x.write(x.durable(), evs, ops...); err != nil {
		return
	}
	c.Status, c.Result = o.status, o.result
	if o.err != nil {
		b, _ := json.Marshal(o.err)
		c.Error = b
	}
}

// reconcile asks the tool's reconciler, when it has one, what became of a
// call whose outcome is unknown: it happened (its result is recorded), it
// failed, it did not happen (it is attempted again with the same key), or
// nobody knows (the call stays unknown and a client decides).
func (x *execution) reconcile(ctx context.Context, st agentd.RunState, step *agentd.Step, c *agentd.ToolCall) {
	tool, ok := x.tools().Get(c.Name)
	if !ok {
		return
	}
	rec, ok := tool.(tools.Reconciler)
	if !ok || !rec.CanReconcile() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, tool.Spec().AttemptTimeout(x.d.limits.toolTimeout))
	res, err := rec.Reconcile(rctx, tools.Call{RunID: st.Run.ID, CallID: c.CallID, IdempotencyKey: c.IdempotencyKey,
		Attempt: c.Attempts, Arguments: c.Arguments, Run: &st.Run, Step: step.Seq, ToolCallID: c.ID})
	cancel()
	if err != nil {
		x.log.Warn("reconcile tool call", "tool_call_id", c.ID, "error", err)
		return
	}
	x.d.m.attempt(c.Name, reconciled(res.Outcome))
	switch res.Outcome {
	case tools.OutcomeSucceeded:
		result := res.Result
		if len(result) == 0 {
			result = json.RawMessage(`null`)
		}
		if len(result) > tools.MaxResultBytes {
			e := tools.TooLarge(len(result))
			x.finishCall(step, c, callOutcome{status: agentd.CallFailed, err: &agentd.ErrorDetail{Kind: e.Kind, Message: e.Message}})
			return
		}
		x.finishCall(step, c, resultOf(result, tool.Spec().ResultLimit()))
	case tools.OutcomeFailed:
		msg, _ := clean.Text(res.Message)
		if msg == "" {
			msg = "the tool call failed (reported by its reconciler)"
		}
		x.finishCall(step, c, callOutcome{status: agentd.CallFailed, err: &agentd.ErrorDetail{Kind: agentd.ToolErrReconciled, Message: msg}})
	case tools.OutcomeNotApplied:
		if err := x.write(x.durable(), []agentd.EventIn{agentd.EventOf(step.Seq, agentd.ToolCallRetryAllowedData{
			ResolvedBy: agentd.ResolvedByReconciler, Retry: true, Status: agentd.CallRunning, ToolCallID: c.ID})},
			persist.ToolCallFinish{ID: c.ID, Status: agentd.CallRunning}); err != nil {
			return
		}
		c.Status = agentd.CallRunning
		x.runCall(ctx, st, step, c)
	}
}

// offered reports whether a run with params p offered tool name: a memory
// tool when its memory offers it, another when its list names it (nil:
// every tool); read_artifact comes with any tool.
func offered(p agentd.RunParams, name string) bool {
	if agentd.IsMemoryTool(name) {
		return p.Memory.Offers(name)
	}
	names := p.Tools
	if names == nil || (name == tools.ReadArtifactName && len(names) > 0) {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// toolErrorData is what the model and clients are told of a tool's failure.
func toolErrorData(err error) *agentd.ErrorDetail {
	var te *tools.Error
	if errors.As(err, &te) {
		msg, _ := clean.Text(te.Message) // it may quote what a webhook answered
		return &agentd.ErrorDetail{Kind: te.Kind, Message: msg, Status: te.Status}
	}
	return &agentd.ErrorDetail{Kind: tools.KindOf(err), Message: "the tool failed"}
}

// resultText is what the model is told of a finished call.
func resultText(c agentd.ToolCall) (string, bool) {
	if c.Status == agentd.CallSucceeded {
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
		e.Message = "the tool call " + string(c.Status)
	}
	b, _ := json.Marshal(map[string]string{"error": e.Message})
	return string(b), true
}
