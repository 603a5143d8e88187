package agentd

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"
)

// The rules of a run's commands: what a cancel, a resume, an interrupt and
// a decision do to a run in each state. The store applies them under the
// run's row lock; they are here, apart from the SQL, so that every door
// and every store applies the same ones.

// CancelOf says what a cancel does to a run in status s: nothing (noop: it
// is cancelled already), flag it for its executor (a running run), or end
// it at once (any other run nobody executes). A run that ended otherwise
// gives ErrRunFinished.
func CancelOf(s RunStatus) (noop, flag bool, err error) {
	switch s {
	case StatusCancelled:
		return true, false, nil
	case StatusCompleted, StatusFailed, StatusTimedOut:
		return false, false, fmt.Errorf("run is %s: %w", s, ErrRunFinished)
	case StatusRunning:
		return false, true, nil
	}
	return false, false, nil
}

// ResumeOf says what a resume does to a run in status s: nothing (noop: it
// is queued, running or waiting for a client already), or queue it again
// (interrupted, failed, timed out, cancelled). A completed run gives
// ErrRunCompleted.
func ResumeOf(s RunStatus) (noop bool, err error) {
	switch s {
	case StatusQueued, StatusRunning, StatusRequiresAction:
		return true, nil
	case StatusCompleted:
		return false, ErrRunCompleted
	}
	return false, nil
}

// InterruptOf says what an interrupt (its stream's client went away, and
// the run asked to stop then) does to a run in status s: flag it for its
// executor (running), end it at once (queued), or nothing (any other).
func InterruptOf(s RunStatus) (flag, end bool) {
	return s == StatusRunning, s == StatusQueued
}

// StepEndOf is the status of a step left unfinished by a run that ends
// for reason r: failed when it timed out, else aborted.
func StepEndOf(r Reason) StepStatus {
	if r == ReasonTimedOutTotal || r == ReasonTimedOutStep {
		return StepFailed
	}
	return StepAborted
}

// NotRunError is the error of a call that never ran because its run ended
// for reason r first (while it waited to run, or for a decision).
func NotRunError(r Reason) ErrorDetail {
	return ErrorDetail{Kind: ErrorKind(r), Message: "the run ended (" + string(r) + ") before this call ran"}
}

// UnresolvedError is the error of a side effect whose outcome was still
// unknown when its run ended for reason r: it may have happened.
func UnresolvedError(r Reason) ErrorDetail {
	return ErrorDetail{Kind: ToolErrUnknown, Message: "the outcome is unknown: the run ended (" + string(r) +
		") before a client said what happened"}
}

// Resolution is what a decision does to the call a waiting run asks about:
// the call moves from status From to To, with Error (the model is told
// it) or Result, and Event says so in the run's log. The store applies it
// and queues the run again.
type Resolution struct {
	From, To CallStatus
	Error    *ErrorDetail
	Result   json.RawMessage
	Event    Payload
}

// Resolve checks decision p against what a run in status s waits for
// (action), as resolvedBy decides (ResolvedByClient, or
// ResolvedByActionTimeout), and says what it does to the call. Errors:
// ErrRunNotWaiting, ErrActionMismatch, a *DecisionError. A decision of
// DecisionOutputs is resolved call by call (ResolveOutputs).
func Resolve(s RunStatus, action RequiredAction, p ActionParams, resolvedBy string) (Resolution, error) {
	if err := p.Answers(s, action); err != nil {
		return Resolution{}, err
	}
	id := action.ToolCallID
	kind := func(k ErrorKind) ErrorKind {
		if resolvedBy == ResolvedByActionTimeout {
			return ToolErrActionTimeout
		}
		return k
	}
	switch p.Decision {
	case DecisionApprove:
		return Resolution{From: CallAwaitingApproval, To: CallPlanned,
			Event: ToolCallApprovedData{Actor: p.Actor, ResolvedBy: resolvedBy, Status: CallPlanned, ToolCallID: id}}, nil
	case DecisionReject:
		e := Rejection(p.Message)
		e.Kind = kind(ToolErrRejected)
		return Resolution{From: CallAwaitingApproval, To: CallRejected, Error: e,
			Event: ToolCallCompletedData{Actor: p.Actor, Error: e, ResolvedBy: resolvedBy, Status: CallRejected, ToolCallID: id}}, nil
	case DecisionResult:
		return Resolution{From: CallUnknown, To: CallSucceeded, Result: p.Result,
			Event: ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, Result: p.Result, Status: CallSucceeded, ToolCallID: id}}, nil
	case DecisionFail:
		e := &ErrorDetail{Kind: kind(ToolErrClient), Message: cmp.Or(p.Message, "the tool call was failed by the client")}
		return Resolution{From: CallUnknown, To: CallFailed, Error: e,
			Event: ToolCallCompletedData{Actor: p.Actor, Error: e, ResolvedBy: resolvedBy, Status: CallFailed, ToolCallID: id}}, nil
	case DecisionRetry:
		return Resolution{From: CallUnknown, To: CallRunning,
			Event: ToolCallRetryAllowedData{Actor: p.Actor, ResolvedBy: resolvedBy, Retry: true, Status: CallRunning, ToolCallID: id}}, nil
	}
	return Resolution{}, fmt.Errorf("unknown decision %q", p.Decision)
}

// Rejection is the error of a call a client rejected, with its reason
// (none: a default one).
func Rejection(reason string) *ErrorDetail {
	return &ErrorDetail{Kind: ToolErrRejected, Message: cmp.Or(reason, "the call was rejected by the client")}
}

// Answers checks that decision p answers what a run in status s waits
// for (action): the run waits, p names the call it asks about (by
// ToolCallID, CallID, both, or neither), and p's decision answers that
// action's type. Errors: ErrRunNotWaiting, ErrActionMismatch, a
// *DecisionError.
func (p ActionParams) Answers(s RunStatus, action RequiredAction) error {
	if s != StatusRequiresAction {
		return fmt.Errorf("run is %s: %w", s, ErrRunNotWaiting)
	}
	if (p.ToolCallID != "" && action.ToolCallID != p.ToolCallID) || (p.CallID != "" && action.CallID != p.CallID) {
		return ErrActionMismatch
	}
	if !p.Decision.Answers(action.Type) {
		return &DecisionError{Decision: p.Decision, Asks: action.Type}
	}
	return nil
}

// ResolveOutputs checks the outputs of a tool_outputs decision against the
// client tool calls a run waits for (each answered once, nothing else;
// ErrOutputsMismatch), and says what each does: a call with an output
// succeeds, one with an error fails with it.
func ResolveOutputs(action RequiredAction, p ActionParams, resolvedBy string) ([]Resolution, error) {
	if len(p.Outputs) != len(action.Calls) {
		return nil, ErrOutputsMismatch
	}
	want := map[string]bool{}
	for _, c := range action.Calls {
		want[c.ToolCallID] = true
	}
	out := make([]Resolution, 0, len(p.Outputs))
	for _, o := range p.Outputs {
		if !want[o.ToolCallID] {
			return nil, ErrOutputsMismatch
		}
		delete(want, o.ToolCallID) // each once
		d := ToolCallCompletedData{Actor: p.Actor, ResolvedBy: resolvedBy, ToolCallID: o.ToolCallID}
		r := Resolution{From: CallAwaitingClient}
		if o.Error != "" {
			kind := ToolErrClient
			if resolvedBy == ResolvedByActionTimeout {
				kind = ToolErrActionTimeout
			}
			r.To, r.Error = CallFailed, &ErrorDetail{Kind: kind, Message: o.Error}
			d.Status, d.Error = r.To, r.Error
		} else {
			r.To, r.Result = CallSucceeded, o.Output
			d.Status, d.Result = r.To, o.Output
		}
		r.Event = d
		out = append(out, r)
	}
	return out, nil
}

// TimeoutDecision is what the action timeout decides for a run that
// waited for a client's decision (action) longer than its timeouts allow,
// as a client would: an approval is rejected, an unknown outcome failed,
// each client tool call failed, each with an error that says why.
func TimeoutDecision(r Run, action RequiredAction) ActionParams {
	ms := r.Params.Timeouts.ActionMS
	if ms <= 0 {
		ms = DefaultActionMS
	}
	after := (time.Duration(ms) * time.Millisecond).String()
	p := ActionParams{RunID: r.ID, ToolCallID: action.ToolCallID, Decision: DecisionReject,
		Message: "no decision came within the run's action timeout (" + after + "): the call was rejected and did not run"}
	switch action.Type {
	case ActionToolOutcomeUnknown:
		p.Decision = DecisionFail
		p.Message = "no decision came within the run's action timeout (" + after +
			"): the call is taken as failed, though it may have had its effect"
	case ActionClientToolCalls:
		p.Decision = DecisionOutputs
		for _, c := range action.Calls {
			p.Outputs = append(p.Outputs, ToolOutput{ToolCallID: c.ToolCallID,
				Error: "the client gave no output within the run's action timeout (" + after + ")"})
		}
	}
	return p
}

// TimedOutWaitingError is the error of a run whose total timeout elapsed
// while it waited for a client's decision.
func TimedOutWaitingError() *ErrorDetail {
	return &ErrorDetail{Message: "the run's total timeout elapsed while it waited for a client's decision"}
}

// Action returns the run's required action, the zero one when it waits for
// none (or what is stored cannot be read).
func (r Run) Action() RequiredAction {
	var a RequiredAction
	if len(r.RequiredAction) > 0 {
		_ = json.Unmarshal(r.RequiredAction, &a)
	}
	return a
}
