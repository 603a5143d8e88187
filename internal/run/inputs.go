package run

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"
)

// Input sent to a run under way (steering) is applied at the run's next
// step boundary: after the model's output and the results of the calls it
// asked for are committed, before the next model call. The write that
// starts the next step (or, for a step already started, one of its own
// before the model call) inserts the inputs' messages and marks them
// applied, so that an input is applied once: a takeover finds it applied
// with its messages, or still pending.
//
// The execution learns that input waits from the run's claim, from the
// notification of its acceptance, and from each lease extension; the
// write that ends the run checks, under the run's row lock, that no input
// it did not know of is pending (persist.InputsSettle): a run about to end
// with an answer then goes on with the input, any other end marks it
// unapplied.

// errInputNow is the cause of a model call cut by an input sent with
// when: now; the call is asked again with the input.
var errInputNow = errors.New("an input asked to be applied now")

// maxInputRaces bounds how many times an end is made again because inputs
// arrived while it was written.
const maxInputRaces = 8

// steer tells the execution that its run has input pending; now cuts a
// model call under way.
func (x *execution) steer(now bool) {
	x.steered.Store(true)
	if !now {
		return
	}
	x.modelMu.Lock()
	if x.modelCancel != nil {
		x.modelCancel(errInputNow)
	}
	x.modelMu.Unlock()
}

// applying is what applies a run's pending inputs in a write: their
// messages, the ops that mark them applied, and their events.
type applying struct {
	msgs []persist.MessageInsert
	ops  []persist.Op
	evs  []agentd.EventIn
}

// takeInputs reads the run's pending inputs, if it may have some, and
// returns what applies them before step seq's model call.
func (x *execution) takeInputs(st agentd.RunState, seq int) (applying, error) {
	if !x.steered.Swap(false) {
		return applying{}, nil
	}
	ins, err := x.loadInputs()
	if err != nil {
		x.steered.Store(true)
		return applying{}, err
	}
	var a applying
	ids := make([]string, 0, len(ins))
	for _, in := range ins {
		ids = append(ids, in.ID)
		msgIDs := make([]string, 0, len(in.Messages))
		for _, im := range in.Messages {
			m := persist.MessageInsert{ID: agentd.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
				Role: im.Role, Content: im.Content, Status: agentd.MessageCompleted}
			a.msgs = append(a.msgs, m)
			a.ops = append(a.ops, m)
			msgIDs = append(msgIDs, m.ID)
		}
		a.evs = append(a.evs, agentd.EventOf(seq, agentd.InputAppliedData{InputID: in.ID, MessageIDs: msgIDs, N: in.N}))
	}
	if len(ids) > 0 {
		a.ops = append(a.ops, persist.InputsApply{RunID: st.Run.ID, IDs: ids, Step: seq})
	}
	return a, nil
}

// applied adds the messages of inputs a write just applied to st.
func (a applying) applied(st *agentd.RunState) {
	for _, m := range a.msgs {
		appendMessage(st, m)
	}
}

// applyInputs applies the run's pending inputs before the model call of
// step, which has started, in a write of their own.
func (x *execution) applyInputs(st *agentd.RunState, step *agentd.Step) error {
	a, err := x.takeInputs(*st, step.Seq)
	if err != nil || len(a.ops) == 0 {
		return err
	}
	if err := x.write(x.ctx, a.evs, a.ops...); err != nil {
		x.steered.Store(true)
		return err
	}
	a.applied(st)
	return nil
}

// loadInputs reads the run's pending inputs.
func (x *execution) loadInputs() ([]agentd.RunInput, error) {
	ctx, cancel := context.WithTimeout(x.durable(), 10*time.Second)
	defer cancel()
	return x.d.store.InputsPending(ctx, x.fence.RunID)
}

// settleInputs is what an end with e writes of the run's inputs: the check
// that the pending ones are those it read, and for a run that stops for
// good their being unapplied, with an event each. An end with an answer
// that finds inputs pending does not end: ErrInputsChanged.
func (x *execution) settleInputs(st agentd.RunState, stepSeq int, e runEnd) (persist.Op, []agentd.EventIn, error) {
	settle := persist.InputsSettle{RunID: st.Run.ID, Unapplied: e.status != agentd.StatusRequiresAction, Reason: e.reason}
	if !x.steered.Swap(false) {
		return settle, nil, nil
	}
	ins, err := x.loadInputs()
	if err != nil {
		x.steered.Store(true)
		return nil, nil, err
	}
	if len(ins) > 0 && (e.answer || !settle.Unapplied) {
		x.steered.Store(true)
		if e.answer {
			return nil, nil, agentd.ErrInputsChanged
		}
	}
	settle.Expected = len(ins)
	if !settle.Unapplied {
		return settle, nil, nil
	}
	evs := make([]agentd.EventIn, 0, len(ins))
	for _, in := range ins {
		evs = append(evs, agentd.EventOf(stepSeq, agentd.InputUnappliedData{InputID: in.ID, N: in.N, Reason: e.reason}))
	}
	return settle, evs, nil
}

// answerThenInputs commits a step's final answer without ending the run,
// which has input pending: the step completes with the answer, and the
// next pass starts the next step with the input (nextStep). The run's
// answer is then the next one.
func (x *execution) answerThenInputs(st agentd.RunState, step *agentd.Step, out stepOutput) (done bool, err error) {
	ops := make([]persist.Op, 0, len(out.ops)+1)
	for _, op := range out.ops {
		if m, ok := op.(persist.MessageInsert); ok {
			m.Seq = 0 // numbered by this write
			op = m
		}
		ops = append(ops, op)
	}
	ops = append(ops, persist.StepUpdate{ID: step.ID, Status: agentd.StepCompleted, FinishReason: out.finish, Usage: out.usage, Finished: true})
	if err := x.write(x.durable(), out.evs, ops...); err != nil {
		return true, x.stopFor(st, err)
	}
	x.steered.Store(true)
	final := *step
	final.Status, final.FinishReason, final.Usage = agentd.StepCompleted, out.finish, final.Usage.Add(out.usage)
	setStep(&st, final)
	for _, op := range out.ops {
		if m, ok := op.(persist.MessageInsert); ok {
			appendMessage(&st, m)
		}
	}
	st.Run.Usage = st.Run.Usage.Add(out.usage)
	st.Calls, st.Attempts = nil, nil
	x.carry(st)
	return false, nil
}

// steeredNow takes a step whose model call input sent with when: now cut:
// what the call streamed is retracted, the input applied, and the step's
// messages built again for its next call.
func (x *execution) steeredNow(ctx context.Context, st agentd.RunState, step *agentd.Step, co *coalescer) (agentd.RunState, []llm.Message, llm.Request, error) {
	var evs []agentd.EventIn
	if co.sent > 0 {
		evs = append(evs, agentd.EventOf(step.Seq, agentd.StepRetractedData{Reason: agentd.RetractedSteered}))
	}
	if err := x.write(x.ctx, evs, persist.StepReask{ID: step.ID, Transition: agentd.TransitionSteered}); err != nil {
		return st, nil, llm.Request{}, err
	}
	if err := x.applyInputs(&st, step); err != nil {
		return st, nil, llm.Request{}, err
	}
	st, msgs, err := x.compactIfNeeded(ctx, st, step)
	return st, msgs, x.stepRequest(st, step, msgs), err
}

// onAnswer calls the on_answer hook, if there is one, with the answer of
// step: a continue is accepted as the run's input (from the hook, keyed
// by the step, so that the same answer asked again after a takeover makes
// no second input), and the run then goes on with it, as with any input
// pending at its end. It returns the end of a run whose hook asked it to
// go on past its max_continues (nil: none). What the hook decided goes
// out with the next write (hook.called).
func (x *execution) onAnswer(st agentd.RunState, step *agentd.Step, answer string) *runEnd {
	h := x.d.hooks
	if h == nil || h.OnAnswer == nil {
		return nil
	}
	data := agentd.HookCalledData{Hook: agentd.HookOnAnswer, Outcome: agentd.HookNone}
	defer func() { x.outbox.add([]agentd.EventIn{agentd.EventOf(step.Seq, data)}) }()
	ctx, cancel := context.WithTimeout(x.ctx, 30*time.Second)
	defer cancel()
	continues, err := x.d.store.InputsCount(ctx, st.Run.ID, agentd.InputFromHook)
	if err != nil {
		data.Outcome, data.Error = agentd.HookFailed, "count the run's continues: "+err.Error()
		return nil
	}
	key := "on_answer:" + step.ID
	v, _, err := h.Answer(ctx, key, tools.AnswerCall{TenantID: st.Run.TenantID, RunID: st.Run.ID,
		ConversationID: st.Run.ConversationID, Step: step.Seq, Answer: answer, Continues: continues})
	text, _ := clean.Text(strings.TrimSpace(v.Continue))
	switch {
	case err != nil:
		data.Outcome, data.Error = agentd.HookFailed, cutText(err.Error(), 500)
		return nil
	case text == "":
		return nil
	case continues >= h.Continues():
		data.Outcome = agentd.HookLimit
		e := endOf(agentd.StatusCompleted, agentd.ReasonMaxContinues, nil)
		return &e
	}
	in, _, err := x.d.store.InputAccept(ctx, agentd.InputCreate{TenantID: st.Run.TenantID, RunID: st.Run.ID, Source: agentd.InputFromHook,
		When: agentd.InputNext, Messages: []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}, IdempotencyKey: key, RequestHash: key})
	if err != nil {
		data.Outcome, data.Error = agentd.HookFailed, "accept its continue: "+cutText(err.Error(), 500)
		return nil
	}
	data.Outcome, data.InputID = agentd.HookContinue, in.ID
	x.steered.Store(true)
	return nil
}
