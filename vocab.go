package agentd

// RunStatus is where a run is in its lifecycle (DESIGN section 4).
type RunStatus string

// Run statuses.
const (
	StatusQueued         RunStatus = "queued"
	StatusRunning        RunStatus = "running"
	StatusRequiresAction RunStatus = "requires_action" // waiting for a client's decision
	StatusInterrupted    RunStatus = "interrupted"     // its client went away and it asked to stop then
	StatusCompleted      RunStatus = "completed"
	StatusFailed         RunStatus = "failed"
	StatusCancelled      RunStatus = "cancelled"
	StatusTimedOut       RunStatus = "timed_out"
)

// RunStatuses lists every run status, in lifecycle order.
func RunStatuses() []RunStatus {
	return []RunStatus{StatusQueued, StatusRunning, StatusRequiresAction, StatusInterrupted,
		StatusCompleted, StatusFailed, StatusCancelled, StatusTimedOut}
}

// Terminal reports whether the run has ended for good unless a client
// resumes it: completed, failed, cancelled or timed out.
func (s RunStatus) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusTimedOut:
		return true
	}
	return false
}

// Stopped reports whether no worker will touch the run until a client acts:
// a terminal status, or interrupted. Its event stream has ended.
func (s RunStatus) Stopped() bool { return s.Terminal() || s == StatusInterrupted }

// Reason refines how a run ended (its terminal_reason).
type Reason string

// Terminal reasons.
const (
	ReasonCompleted       Reason = "completed"
	ReasonMaxSteps        Reason = "max_steps"
	ReasonCancelled       Reason = "cancelled"
	ReasonTimedOutTotal   Reason = "timed_out_total"
	ReasonTimedOutStep    Reason = "timed_out_step"
	ReasonModelError      Reason = "model_error"
	ReasonToolError       Reason = "tool_error"
	ReasonContextOverflow Reason = "context_overflow"
	ReasonInterrupted     Reason = "interrupted"
	// ReasonStorageError: the database refused one of the run's writes as
	// data; trying again would fail the same way.
	ReasonStorageError Reason = "storage_error"
	// ReasonNoProgress: the run was taken over again and again (its
	// workers died or lost their leases) without starting a new step.
	ReasonNoProgress Reason = "no_progress"
	// ReasonToolLimit: the model asked for tool calls after the run had
	// made as many as it may.
	ReasonToolLimit Reason = "tool_limit"
	// ReasonLoopDetected: the model asked for a tool call (the same name
	// and arguments) as many times in the run as its loop limits allow.
	ReasonLoopDetected Reason = "loop_detected"
	// ReasonMaxOutputTokens: the answer was still cut at the model's output
	// limit after it was continued 3 times, or was cut at the run's own
	// Sampling.MaxOutputTokens, which is never continued (a completed run).
	ReasonMaxOutputTokens Reason = "max_output_tokens"
	// ReasonContentFilter: the model's content filter stopped its answer.
	ReasonContentFilter Reason = "content_filter"
	// ReasonClientToolCalls: the model called client tools of a run that
	// ends then (RunParams.ClientToolsEnd, the Responses API's function
	// tools); a completed run, whose calls stay awaiting_client until the
	// next run of its conversation gives their outputs.
	ReasonClientToolCalls Reason = "client_tool_calls"
	// ReasonBudgetExceeded: a budget (the tenant's monthly one, or the
	// run's max_cost) was spent before a model call, which was not made
	// (a failed run; its error is a BudgetError's).
	ReasonBudgetExceeded Reason = "budget_exceeded"
	// ReasonMaxContinues: the run's on_answer hook asked it to go on more
	// times than the hook's max_continues allows; the run ends completed
	// with its last answer.
	ReasonMaxContinues Reason = "max_continues"
)

// Reasons lists every terminal reason.
func Reasons() []Reason {
	return []Reason{ReasonCompleted, ReasonMaxSteps, ReasonCancelled, ReasonTimedOutTotal, ReasonTimedOutStep,
		ReasonModelError, ReasonToolError, ReasonContextOverflow, ReasonInterrupted, ReasonStorageError, ReasonNoProgress, ReasonToolLimit,
		ReasonLoopDetected, ReasonMaxOutputTokens, ReasonContentFilter, ReasonClientToolCalls, ReasonBudgetExceeded, ReasonMaxContinues}
}

// IfBusy says what a new run does when its conversation has a run in flight.
type IfBusy string

// If-busy policies.
const (
	IfBusyReject    IfBusy = "reject"    // refuse the new run (409)
	IfBusyEnqueue   IfBusy = "enqueue"   // start it when the busy one ends
	IfBusyInterrupt IfBusy = "interrupt" // cancel the busy one, then start
	// IfBusySteer: the input goes to the busy run as steering input
	// (POST /runs/{id}/input); a new run starts only when none is busy.
	IfBusySteer IfBusy = "steer"
)

// IfBusyPolicies lists the if_busy policies; the first is the default.
func IfBusyPolicies() []IfBusy {
	return []IfBusy{IfBusyReject, IfBusyEnqueue, IfBusyInterrupt, IfBusySteer}
}

// OnQuota says what a new run does when its tenant has as many runs in
// progress as its quota allows.
type OnQuota string

// The on_quota policies.
const (
	OnQuotaQueue  OnQuota = "queue"  // wait queued until one of the tenant's runs ends
	OnQuotaReject OnQuota = "reject" // refuse the new run (429 quota_exceeded)
)

// OnQuotaPolicies lists the on_quota policies; the first is the default.
func OnQuotaPolicies() []OnQuota { return []OnQuota{OnQuotaQueue, OnQuotaReject} }

// OnDisconnect says what happens to a run whose stream's client (of POST
// /runs with "stream": true) goes away before it ends.
type OnDisconnect string

// On-disconnect policies.
const (
	OnDisconnectContinue  OnDisconnect = "continue"  // the run goes on
	OnDisconnectInterrupt OnDisconnect = "interrupt" // it stops at its next safe point as interrupted
)

// OnDisconnectPolicies lists the on_disconnect policies; the first is the
// default.
func OnDisconnectPolicies() []OnDisconnect {
	return []OnDisconnect{OnDisconnectContinue, OnDisconnectInterrupt}
}

// Effect says what running a tool twice would do, and so how it may be
// retried (DESIGN section 7).
type Effect string

// Effects, from the safest to retry to the least.
const (
	EffectReadOnly   Effect = "read_only"   // no effect: retry freely
	EffectIdempotent Effect = "idempotent"  // effect keyed by the idempotency key: retry with the same key
	EffectSideEffect Effect = "side_effect" // never retried blindly
)

// Effects lists the effects, from the safest to retry to the least.
func Effects() []Effect { return []Effect{EffectReadOnly, EffectIdempotent, EffectSideEffect} }

// Valid reports whether e is a known effect.
func (e Effect) Valid() bool {
	return e == EffectReadOnly || e == EffectIdempotent || e == EffectSideEffect
}

// StepStatus is where a step is.
type StepStatus string

// Step statuses.
const (
	StepRunning   StepStatus = "running"   // the model is being asked
	StepActing    StepStatus = "acting"    // the model's output is committed; tools are running
	StepCompleted StepStatus = "completed" // the step's tools (if any) are done
	StepFailed    StepStatus = "failed"
	StepAborted   StepStatus = "aborted"
)

// StepStatuses lists every step status.
func StepStatuses() []StepStatus {
	return []StepStatus{StepRunning, StepActing, StepCompleted, StepFailed, StepAborted}
}

// Transition says why the loop went on to a step, or asked its model again.
type Transition string

// Transitions; the first step has none.
const (
	TransitionNone        Transition = ""
	TransitionToolResults Transition = "tool_results" // the step follows a step's tool calls
	TransitionModelRetry  Transition = "model_retry"  // a model call failed and is asked again
	TransitionResumed     Transition = "resumed"      // the step's output was never committed; asked again on a new claim
	// TransitionModelFallback: the step's model kept failing, and its call
	// moved to the next model of the run's fallback chain.
	TransitionModelFallback Transition = "model_fallback"
	// TransitionInput: the step follows an answer, with input the run was
	// sent while it worked (steering).
	TransitionInput Transition = "input"
	// TransitionSteered: the step's model call was cut by input sent with
	// when: now, and is asked again with it.
	TransitionSteered Transition = "steered"
)

// CallStatus is where a tool call is.
type CallStatus string

// Tool call statuses.
const (
	CallPlanned   CallStatus = "planned"
	CallRunning   CallStatus = "running"
	CallSucceeded CallStatus = "succeeded"
	CallFailed    CallStatus = "failed"
	CallUnknown   CallStatus = "unknown" // a side effect's outcome is unknown
	// CallAwaitingApproval: the tool needs a client's approval before it runs.
	CallAwaitingApproval CallStatus = "awaiting_approval"
	// CallRejected: a client rejected the call, or its run ended while the
	// call waited for a decision.
	CallRejected CallStatus = "rejected"
	// CallAwaitingClient: a call of a client tool (the run's client_tools),
	// which the client runs and answers with its output.
	CallAwaitingClient CallStatus = "awaiting_client"
	// CallAwaitingAgent: a call of a sub-agent, whose child run gives its
	// result when it ends.
	CallAwaitingAgent CallStatus = "awaiting_agent"
)

// CallStatuses lists every tool call status.
func CallStatuses() []CallStatus {
	return []CallStatus{CallPlanned, CallRunning, CallSucceeded, CallFailed, CallUnknown, CallAwaitingApproval,
		CallRejected, CallAwaitingClient, CallAwaitingAgent}
}

// Final reports whether the call's outcome is settled for good.
func (s CallStatus) Final() bool {
	return s == CallSucceeded || s == CallFailed || s == CallRejected
}

// Pending reports whether the call is still to be (or being) attempted.
func (s CallStatus) Pending() bool { return s == CallPlanned || s == CallRunning }

// AttemptStatus is how a tool attempt ended, or that it runs.
type AttemptStatus string

// Attempt statuses.
const (
	AttemptRunning   AttemptStatus = "running"
	AttemptSucceeded AttemptStatus = "succeeded"
	AttemptFailed    AttemptStatus = "failed"
	AttemptTimedOut  AttemptStatus = "timed_out"
	AttemptUnknown   AttemptStatus = "unknown"
)

// AttemptStatuses lists every attempt status.
func AttemptStatuses() []AttemptStatus {
	return []AttemptStatus{AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptUnknown}
}

// MessageStatus is the state of a stored message.
type MessageStatus string

// Message statuses.
const (
	// MessagePending: the input of a run queued behind another run of its
	// conversation, not numbered into the conversation until the run
	// starts.
	MessagePending   MessageStatus = "pending"
	MessageCompleted MessageStatus = "completed"
	MessageAborted   MessageStatus = "aborted" // input of a run that ended before any answer of its own
)

// MessageStatuses lists every message status.
func MessageStatuses() []MessageStatus {
	return []MessageStatus{MessagePending, MessageCompleted, MessageAborted}
}

// ActionType is what a run in requires_action waits for.
type ActionType string

// Required actions.
const (
	ActionToolApproval       ActionType = "tool_approval"        // may this call run?
	ActionToolOutcomeUnknown ActionType = "tool_outcome_unknown" // did this side effect happen?
	ActionClientToolCalls    ActionType = "client_tool_calls"    // the outputs of the step's client tool calls
	// ActionAgentRuns: the run waits for the child runs of its calls of
	// sub-agents; no client answers it, but a decision a child waits for
	// may be given on the parent.
	ActionAgentRuns ActionType = "agent_runs"
)

// Decision is a client's answer to a required action.
type Decision string

// Decisions: approve or reject answer an approval; result, retry or fail an
// unknown outcome.
const (
	DecisionApprove Decision = "approve" // run the call
	DecisionReject  Decision = "reject"  // do not; the model sees an error
	DecisionResult  Decision = "result"  // it happened; here is its result
	DecisionRetry   Decision = "retry"   // it did not happen; attempt it again with the same key
	DecisionFail    Decision = "fail"    // give up on it; the model sees an error
	// DecisionOutputs answers client tool calls with their outputs: an
	// action of type tool_outputs, not a "decision" a client names.
	DecisionOutputs Decision = "tool_outputs"
)

// Decisions lists every decision.
func Decisions() []Decision {
	return []Decision{DecisionApprove, DecisionReject, DecisionResult, DecisionRetry, DecisionFail}
}

// Answers reports whether d answers action a.
func (d Decision) Answers(a ActionType) bool {
	switch d {
	case DecisionApprove, DecisionReject:
		return a == ActionToolApproval
	case DecisionOutputs:
		return a == ActionClientToolCalls
	}
	return a == ActionToolOutcomeUnknown
}

// ErrorKind says why something failed: the "kind" of an error in events
// and in GET /runs/{id} and /runs/{id}/steps. A tool attempt's or call's
// error has one of ToolErrorKinds; a failed or timed-out run's, one of
// RunErrorKinds.
type ErrorKind string

// The tool error kinds. The first four are the tool's own (internal/tools
// classifies them); the others say who or what ended the call.
const (
	ToolErrFinal      ErrorKind = "final"      // the tool refused (bad arguments, a 4xx, not offered); never retried
	ToolErrTransient  ErrorKind = "transient"  // it failed before or without its effect (a 5xx)
	ToolErrTimeout    ErrorKind = "timeout"    // the attempt ran out of time; the effect may have happened
	ToolErrConnection ErrorKind = "connection" // the connection was lost; the effect may have happened
	ToolErrClient     ErrorKind = "client"     // a client failed the call (decision fail)
	ToolErrPolicy     ErrorKind = "policy"     // the operator's policy denied the call
	ToolErrRejected   ErrorKind = "rejected"   // a client rejected a call that needed approval
	ToolErrReconciled ErrorKind = "reconciled" // the tool's reconciler reported that the call failed
	ToolErrNotBegun   ErrorKind = "not_begun"  // the run stopped after the attempt was committed, before the tool was invoked
	ToolErrUnknown    ErrorKind = "unknown"    // the outcome is not known (a worker died, or the run ended first)
	ToolErrAgent      ErrorKind = "agent"      // the sub-agent's run did not complete (or could not start)
	// ToolErrActionTimeout: no client decided within the run's action
	// timeout, so the call was rejected (an approval) or failed (an unknown
	// outcome).
	ToolErrActionTimeout ErrorKind = "action_timeout"
	// A call that never ran because its run ended first carries the run's
	// reason as its kind.
	ToolErrCancelled     ErrorKind = ErrorKind(ReasonCancelled)
	ToolErrTimedOutTotal ErrorKind = ErrorKind(ReasonTimedOutTotal)
)

// ToolErrorKinds lists every tool error kind.
func ToolErrorKinds() []ErrorKind {
	return []ErrorKind{ToolErrFinal, ToolErrTransient, ToolErrTimeout, ToolErrConnection, ToolErrClient,
		ToolErrRejected, ToolErrReconciled, ToolErrNotBegun, ToolErrUnknown, ToolErrActionTimeout, ToolErrCancelled,
		ToolErrTimedOutTotal, ToolErrPolicy, ToolErrAgent}
}

// The run error kinds: how the model call failed (the first eight), or
// what else ended the run.
const (
	ModelErrRateLimited     ErrorKind = "rate_limited"     // 429, after every retry
	ModelErrServer          ErrorKind = "server_error"     // 5xx, or a stream that broke its promises
	ModelErrConnection      ErrorKind = "connection"       // refused, reset, a truncated stream
	ModelErrIdle            ErrorKind = "idle_timeout"     // no chunk within the idle timeout
	ModelErrBadRequest      ErrorKind = "bad_request"      // 400 and other 4xx
	ModelErrAuth            ErrorKind = "auth"             // the endpoint refused the API key; never retried
	ModelErrContextOverflow ErrorKind = "context_overflow" // the prompt is longer than the model's window
	ModelErrCancelled       ErrorKind = "cancelled"        // the call's context ended
	// ModelErrUnclassified: a model call failed in a way no kind names.
	ModelErrUnclassified ErrorKind = "error"
	RunErrStorage        ErrorKind = "storage"     // reason storage_error
	RunErrNoProgress     ErrorKind = "no_progress" // reason no_progress
	RunErrToolLimit      ErrorKind = "tool_limit"  // reason tool_limit
	RunErrToolError      ErrorKind = ErrorKind(ReasonToolError)
	RunErrLoopDetected   ErrorKind = ErrorKind(ReasonLoopDetected)
	RunErrContentFilter  ErrorKind = ErrorKind(ReasonContentFilter)
	RunErrBudgetExceeded ErrorKind = ErrorKind(ReasonBudgetExceeded)
)

// RunErrorKinds lists every kind of a run's error.
func RunErrorKinds() []ErrorKind {
	return []ErrorKind{ModelErrRateLimited, ModelErrServer, ModelErrConnection, ModelErrIdle, ModelErrBadRequest,
		ModelErrAuth, ModelErrContextOverflow, ModelErrCancelled, ModelErrUnclassified, RunErrStorage, RunErrNoProgress,
		RunErrToolLimit, RunErrToolError, RunErrLoopDetected, RunErrContentFilter, RunErrBudgetExceeded}
}

// FinishReason is why a model stopped its answer, as a step and its
// message.completed record it.
type FinishReason string

// Finish reasons.
const (
	FinishStop          FinishReason = "stop"           // a final answer
	FinishToolCalls     FinishReason = "tool_calls"     // it asks for tool calls
	FinishLength        FinishReason = "length"         // cut at the output limit
	FinishContentFilter FinishReason = "content_filter" // stopped by the provider's filter
)

// FinishReasons lists every finish reason.
func FinishReasons() []FinishReason {
	return []FinishReason{FinishStop, FinishToolCalls, FinishLength, FinishContentFilter}
}

// StopEvent is the type of the event that tells whoever waits on a run that
// it stopped with status s: its EndEvent, or run.requires_action; "" for a
// status it runs or waits to run in. Each has an outbox row
// (OutboxEventTypes).
func (s RunStatus) StopEvent() EventType {
	if s == StatusRequiresAction {
		return EventRunRequiresAction
	}
	return s.EndEvent()
}

// EndEvent is the type of the terminal event of a run that stops with
// status s: run.completed, run.failed, run.cancelled, run.timed_out or
// run.interrupted; "" for a status that is no end.
func (s RunStatus) EndEvent() EventType {
	switch s {
	case StatusCompleted:
		return EventRunCompleted
	case StatusFailed:
		return EventRunFailed
	case StatusCancelled:
		return EventRunCancelled
	case StatusTimedOut:
		return EventRunTimedOut
	case StatusInterrupted:
		return EventRunInterrupted
	}
	return ""
}
