package agentd

import (
	"encoding/json"
)

// The data of each event type. Fields are declared in the alphabetical order
// of their JSON keys (see the package comment).

// RunCreatedData is the data of run.created.
type RunCreatedData struct {
	Actor          string    `json:"actor,omitempty"` // who created it: key:<prefix>, oidc:<subject> or local
	ConversationID string    `json:"conversation_id"`
	Model          string    `json:"model"`
	Status         RunStatus `json:"status"` // always queued
}

// RunStartedData is the data of run.started.
type RunStartedData struct {
	Epoch  int64  `json:"epoch"`
	Worker string `json:"worker"`
}

// Resume reasons of run.resumed.
const (
	ResumedByClient = "resumed"   // queued again by a resume or a decision
	ResumedRecovery = "recovered" // its previous worker died, lost its lease or shut down
)

// RunResumedData is the data of run.resumed.
type RunResumedData struct {
	// Actor is who queued the run again (a resume or a decision), for
	// reason resumed.
	Actor  string `json:"actor,omitempty"`
	Epoch  int64  `json:"epoch"`
	Reason string `json:"reason"` // ResumedByClient or ResumedRecovery
	Worker string `json:"worker"`
}

// StepStartedData is the data of step.started.
type StepStartedData struct {
	Transition *Transition `json:"transition"` // nil for the first step
}

// MessageDeltaData is the data of message.delta.
type MessageDeltaData struct {
	Text string `json:"text"`
}

// MessageCompletedData is the data of message.completed.
type MessageCompletedData struct {
	Content      []Part       `json:"content"`
	FinishReason FinishReason `json:"finish_reason"`
	MessageID    string       `json:"message_id"`
	Role         Role         `json:"role"`
	Usage        Usage        `json:"usage"`
}

// ToolCallCreatedData is the data of tool_call.created.
type ToolCallCreatedData struct {
	Arguments      json.RawMessage `json:"arguments"`
	CallID         string          `json:"call_id"`
	Effect         Effect          `json:"effect"`
	IdempotencyKey string          `json:"idempotency_key"`
	Name           string          `json:"name"`
	// Policy is the operator's policy decision on the call, when a policy
	// decided.
	Policy     json.RawMessage `json:"policy,omitempty"`
	Status     CallStatus      `json:"status"` // planned, awaiting_approval, awaiting_client, or failed (denied)
	ToolCallID string          `json:"tool_call_id"`
}

// ToolAttemptStartedData is the data of tool_attempt.started.
type ToolAttemptStartedData struct {
	Attempt    int    `json:"attempt"`
	CallID     string `json:"call_id"`
	Name       string `json:"name"`
	ToolCallID string `json:"tool_call_id"`
}

// ToolAttemptFailedData is the data of tool_attempt.failed. CallID and Name
// are set when an attempt committed with the model's output never began.
type ToolAttemptFailedData struct {
	Attempt    int         `json:"attempt"`
	CallID     string      `json:"call_id,omitempty"`
	Error      ErrorDetail `json:"error"`
	Name       string      `json:"name,omitempty"`
	ToolCallID string      `json:"tool_call_id"`
	WillRetry  bool        `json:"will_retry"`
}

// Who resolved a call's outcome, when the executor did not.
const (
	ResolvedByClient     = "client"     // a decision on POST /runs/{id}/actions
	ResolvedByReconciler = "reconciler" // the tool's reconciler
	// ResolvedByActionTimeout: no decision came within the run's action
	// timeout; the approval was rejected, the unknown outcome failed.
	ResolvedByActionTimeout = "action_timeout"
)

// ToolCallCompletedData is the data of tool_call.completed: by the executor
// (with CallID and Name), by a client's decision (ResolvedBy client), or
// when a run waiting on the call ended (ResolvedBy the run's reason).
type ToolCallCompletedData struct {
	Actor      string          `json:"actor,omitempty"` // who decided, for ResolvedBy client
	CallID     string          `json:"call_id,omitempty"`
	Error      *ErrorDetail    `json:"error,omitempty"`
	Name       string          `json:"name,omitempty"`
	ResolvedBy string          `json:"resolved_by,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	// ResultRaw is the bytes the tool returned, base64, when Result had to
	// be changed to be stored (internal/clean).
	ResultRaw  string     `json:"result_raw,omitempty"`
	Status     CallStatus `json:"status"`
	ToolCallID string     `json:"tool_call_id"`
}

// ToolCallReusedData is the data of tool_call.reused.
type ToolCallReusedData struct {
	CallID         string `json:"call_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Name           string `json:"name"`
	ToolCallID     string `json:"tool_call_id"`
}

// ToolCallUnknownData is the data of tool_call.unknown: with Status and
// Error when an attempt ended in doubt on a running worker, with Attempt
// when a new claim found an attempt its dead worker left running.
type ToolCallUnknownData struct {
	Attempt        int          `json:"attempt,omitempty"`
	CallID         string       `json:"call_id"`
	Error          *ErrorDetail `json:"error,omitempty"`
	IdempotencyKey string       `json:"idempotency_key"`
	Name           string       `json:"name"`
	Status         CallStatus   `json:"status,omitempty"`
	ToolCallID     string       `json:"tool_call_id"`
}

// ToolCallRetryAllowedData is the data of tool_call.retry_allowed.
type ToolCallRetryAllowedData struct {
	Actor      string     `json:"actor,omitempty"` // who decided
	ResolvedBy string     `json:"resolved_by"`
	Retry      bool       `json:"retry"` // always true
	Status     CallStatus `json:"status"`
	ToolCallID string     `json:"tool_call_id"`
}

// ToolCallApprovedData is the data of tool_call.approved.
type ToolCallApprovedData struct {
	Actor      string     `json:"actor,omitempty"` // who decided
	ResolvedBy string     `json:"resolved_by"`
	Status     CallStatus `json:"status"`
	ToolCallID string     `json:"tool_call_id"`
}

// StepCompletedData is the data of step.completed.
type StepCompletedData struct {
	FinishReason FinishReason `json:"finish_reason"`
	ToolCalls    int          `json:"tool_calls,omitempty"` // for a step that ran tool calls
}

// Retraction reasons of step.retracted.
const (
	RetractedRecovered  = "recovered"   // the step's output was never committed; asked again
	RetractedModelRetry = "model_retry" // a model call failed after streaming text; retried
	RetractedSteered    = "steered"     // input sent with when: now cut the model call; asked again with it
)

// StepRetractedData is the data of step.retracted.
type StepRetractedData struct {
	Reason string `json:"reason"`
}

// ModelFallbackData is the data of step.model_fallback: the step's call
// moved from model From to model To, the next of the run's chain, because
// From failed with Error (its kind says the class: rate_limited,
// server_error, connection, idle_timeout) after Attempts calls.
type ModelFallbackData struct {
	From     string       `json:"from"`
	To       string       `json:"to"`
	Attempts int          `json:"attempts"`
	Error    *ErrorDetail `json:"error"`
}

// RunRequiresActionData is the data of run.requires_action.
type RunRequiresActionData struct {
	RequiredAction RequiredAction `json:"required_action"`
}

// RunEndedData is the data of a run's terminal event; its Status names the
// type (run.completed, run.failed, run.cancelled, run.timed_out,
// run.interrupted).
type RunEndedData struct {
	// Actor is who asked for the end (a cancel), when a client did.
	Actor string       `json:"actor,omitempty"`
	Error *ErrorDetail `json:"error,omitempty"`
	// OutputText is a completed run's answer: the text of its final
	// assistant message.
	OutputText *string   `json:"output_text,omitempty"`
	Reason     Reason    `json:"reason"`
	Status     RunStatus `json:"status"`
	// UnresolvedToolCalls lists the side-effect calls whose outcome was
	// still unknown when a run nobody executed ended: they may have
	// happened.
	UnresolvedToolCalls []string `json:"unresolved_tool_calls,omitempty"`
}

// ContextCompactedData is the data of context.compacted: the older part of
// the conversation is now sent to the model as a summary.
type ContextCompactedData struct {
	CompactionID    string `json:"compaction_id"`
	CoversToSeq     int    `json:"covers_to_seq"`
	MessagesCovered int    `json:"messages_covered"`
	TokensAfter     int    `json:"tokens_after"`
	TokensBefore    int    `json:"tokens_before"`
}

// EventType implements Payload.
func (ContextCompactedData) EventType() EventType { return EventContextCompacted }

// EventType implements Payload.
func (RunCreatedData) EventType() EventType { return EventRunCreated }

// EventType implements Payload.
func (RunStartedData) EventType() EventType { return EventRunStarted }

// EventType implements Payload.
func (RunResumedData) EventType() EventType { return EventRunResumed }

// EventType implements Payload.
func (StepStartedData) EventType() EventType { return EventStepStarted }

// EventType implements Payload.
func (MessageDeltaData) EventType() EventType { return EventMessageDelta }

// EventType implements Payload.
func (MessageCompletedData) EventType() EventType { return EventMessageCompleted }

// EventType implements Payload.
func (ToolCallCreatedData) EventType() EventType { return EventToolCallCreated }

// EventType implements Payload.
func (ToolAttemptStartedData) EventType() EventType { return EventToolAttemptStarted }

// EventType implements Payload.
func (ToolAttemptFailedData) EventType() EventType { return EventToolAttemptFailed }

// EventType implements Payload.
func (ToolCallCompletedData) EventType() EventType { return EventToolCallCompleted }

// EventType implements Payload.
func (ToolCallReusedData) EventType() EventType { return EventToolCallReused }

// EventType implements Payload.
func (ToolCallUnknownData) EventType() EventType { return EventToolCallUnknown }

// EventType implements Payload.
func (ToolCallRetryAllowedData) EventType() EventType { return EventToolCallRetryAllowed }

// EventType implements Payload.
func (ToolCallApprovedData) EventType() EventType { return EventToolCallApproved }

// EventType implements Payload.
func (StepCompletedData) EventType() EventType { return EventStepCompleted }

// EventType implements Payload.
func (StepRetractedData) EventType() EventType { return EventStepRetracted }

// EventType implements Payload.
func (ModelFallbackData) EventType() EventType { return EventModelFallback }

// EventType implements Payload.
func (RunRequiresActionData) EventType() EventType { return EventRunRequiresAction }

// EventType implements Payload: the terminal type of the run's status.
func (d RunEndedData) EventType() EventType { return d.Status.EndEvent() }

// StepStartEvent is the event that starts step seq, which follows the previous
// step for transition (none for the first step).
func StepStartEvent(seq int, transition Transition) EventIn {
	d := StepStartedData{}
	if transition != TransitionNone {
		d.Transition = &transition
	}
	return EventIn{Step: seq, Data: d}
}

// ClaimedEvent is the event that opens a claim of a run at step: run.started for
// its first claim (epoch 1), run.resumed for a later one, recovered when
// the previous worker stopped mid-run rather than the run being queued
// again.
//
// actor is who queued the run again, when it was not recovered.
func ClaimedEvent(step int, epoch int64, worker string, recovered bool, actor string) EventIn {
	if epoch <= 1 {
		return EventIn{Step: step, Data: RunStartedData{Epoch: epoch, Worker: worker}}
	}
	if recovered {
		return EventIn{Step: step, Data: RunResumedData{Epoch: epoch, Reason: ResumedRecovery, Worker: worker}}
	}
	return EventIn{Step: step, Data: RunResumedData{Actor: actor, Epoch: epoch, Reason: ResumedByClient, Worker: worker}}
}

// FirstStepEvents is the events that a run's first claim commits when the claim
// itself starts the run's first step: Claimed and StepStart, as the
// engine's loop would write them. A claim of a queued run and a run claimed
// as it is created both start it with these.
func FirstStepEvents(worker string) []EventIn {
	return []EventIn{ClaimedEvent(0, 1, worker, false, ""), StepStartEvent(1, TransitionNone)}
}

// RunEndEvent is the terminal event of a run that ends at step with status and
// reason, and err when it failed or timed out; actor is who asked for the
// end, when a client did. A completed run's event has an OutputText (empty
// here; see WithOutput).
func RunEndEvent(step int, status RunStatus, reason Reason, err *ErrorDetail, actor string) EventIn {
	d := RunEndedData{Actor: actor, Error: err, Reason: reason, Status: status}
	if status == StatusCompleted {
		d.OutputText = new(string)
	}
	return EventIn{Step: step, Data: d}
}

// WithOutput returns the run end e with the run's answer, text.
func WithOutput(e EventIn, text string) EventIn {
	if d, ok := e.Data.(RunEndedData); ok {
		d.OutputText = &text
		e.Data = d
	}
	return e
}

// WithUnresolved returns the run end e listing ids, the side-effect calls
// whose outcome was still unknown when the run ended.
func WithUnresolved(e EventIn, ids []string) EventIn {
	if d, ok := e.Data.(RunEndedData); ok {
		d.UnresolvedToolCalls = ids
		e.Data = d
	}
	return e
}
