package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// EventType is the type of a stored event: the SSE "event:" field and the
// envelope's "type".
type EventType string

// Event types, in the order a run usually emits them.
const (
	EventRunCreated           EventType = "run.created"
	EventRunStarted           EventType = "run.started"
	EventRunResumed           EventType = "run.resumed"
	EventStepStarted          EventType = "step.started"
	EventMessageDelta         EventType = "message.delta"
	EventMessageCompleted     EventType = "message.completed"
	EventToolCallCreated      EventType = "tool_call.created"
	EventToolAttemptStarted   EventType = "tool_attempt.started"
	EventToolAttemptFailed    EventType = "tool_attempt.failed"
	EventToolCallCompleted    EventType = "tool_call.completed"
	EventToolCallReused       EventType = "tool_call.reused"
	EventToolCallUnknown      EventType = "tool_call.unknown"
	EventToolCallRetryAllowed EventType = "tool_call.retry_allowed"
	EventToolCallApproved     EventType = "tool_call.approved"
	EventStepCompleted        EventType = "step.completed"
	EventStepRetracted        EventType = "step.retracted"
	// EventModelFallback: the step's model kept failing with a retryable
	// error, and its call moves to the next model of the run's chain.
	EventModelFallback     EventType = "step.model_fallback"
	EventRunRequiresAction EventType = "run.requires_action"
	EventRunCompleted      EventType = "run.completed"
	EventRunFailed         EventType = "run.failed"
	EventRunCancelled      EventType = "run.cancelled"
	EventRunTimedOut       EventType = "run.timed_out"
	EventRunInterrupted    EventType = "run.interrupted"
	EventContextCompacted  EventType = "context.compacted"
	// EventAgentStarted is in a parent's log: a call of a sub-agent
	// started its child run. The call's tool_call.completed says how the
	// child ended.
	EventAgentStarted EventType = "agent.started"
)

// EventHeartbeat is the type of the un-stored heartbeat of a stream; it is no
// event of the log and has no envelope.
const EventHeartbeat EventType = "heartbeat"

// EventAgentEvent is the SSE event name of an event of a sub-agent's child
// run forwarded in its parent's stream: its data is the child's envelope
// (whose run_id is the child's); it has no id, since the stream's position
// is the parent's. It is no event of the log.
const EventAgentEvent = "agent.event"

// EventTypes lists every stored event type.
func EventTypes() []EventType {
	return []EventType{EventRunCreated, EventRunStarted, EventRunResumed, EventStepStarted, EventMessageDelta, EventMessageCompleted,
		EventToolCallCreated, EventToolAttemptStarted, EventToolAttemptFailed, EventToolCallCompleted, EventToolCallReused, EventToolCallUnknown,
		EventToolCallRetryAllowed, EventToolCallApproved, EventStepCompleted, EventStepRetracted, EventModelFallback,
		EventRunRequiresAction, EventContextCompacted, EventAgentStarted, EventInputAccepted, EventInputApplied, EventInputUnapplied, EventHookCalled, EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunTimedOut, EventRunInterrupted}
}

// Terminal reports whether t ends a run's stream: the server closes it after
// such an event (a resume may add more events later).
func (t EventType) Terminal() bool {
	switch t {
	case EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunTimedOut, EventRunInterrupted:
		return true
	}
	return false
}

// Payload is the data of an event; it names the event's type.
type Payload interface {
	EventType() EventType
}

// EventIn is an event to append to a run's log: the store numbers it and wraps
// its data in the envelope.
type EventIn struct {
	Step int // the step it belongs to; 0 before the first
	Data Payload
}

// Type is the event's type, as its data names it.
func (e EventIn) Type() EventType { return e.Data.EventType() }

// EventOf returns the event of step with data p.
func EventOf(step int, p Payload) EventIn { return EventIn{Step: step, Data: p} }

// ErrorDetail says why something failed: a tool attempt or call ("kind" is the
// tool failure's kind), a model call, or a run that timed out (no kind).
// For a model call, the Provider fields are what the model's endpoint said
// (its error body's code, message and type, or an excerpt of a body that
// was no OpenAI error), capped and without the API key; Message says it in
// words a user understands, and includes the provider's message.
type ErrorDetail struct {
	Kind            ErrorKind `json:"kind,omitempty"`
	Message         string    `json:"message"`
	ProviderCode    string    `json:"provider_code,omitempty"`    // e.g. invalid_api_key
	ProviderMessage string    `json:"provider_message,omitempty"` // at most about 500 bytes
	ProviderType    string    `json:"provider_type,omitempty"`    // e.g. invalid_request_error
	Status          int       `json:"status,omitempty"`           // the HTTP error status a tool or the model's endpoint answered, when it answered one
}

// ClientCall is a call of a client tool that a run waits for the output of.
type ClientCall struct {
	Arguments  json.RawMessage `json:"arguments"`
	CallID     string          `json:"call_id"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
}

// RequiredAction is what a run in requires_action waits for: a decision on
// POST /runs/{id}/actions about one tool call. It is kept on the run and
// carried by run.requires_action.
type RequiredAction struct {
	Arguments json.RawMessage `json:"arguments"`
	CallID    string          `json:"call_id"`
	// Calls are, for client_tool_calls, every client tool call of the step
	// (the fields above are the first one's).
	Calls []ClientCall `json:"calls,omitempty"`
	// Agents are, for agent_runs, the step's calls of sub-agents and the
	// child runs they started.
	Agents         []AgentCall `json:"agents,omitempty"`
	IdempotencyKey string      `json:"idempotency_key"`
	Name           string      `json:"name"`
	Step           int         `json:"step"`
	ToolCallID     string      `json:"tool_call_id"`
	Type           ActionType  `json:"type"`
}

// Envelope is a stored event as clients receive it: the "data" of an event
// of a run's SSE stream, and what Event.Data holds, byte for byte.
type Envelope struct {
	Seq   int64           `json:"seq"`
	Type  EventType       `json:"type"`
	RunID string          `json:"run_id"`
	Step  int             `json:"step"` // the step it belongs to; 0 before the first
	At    time.Time       `json:"at"`
	Data  json.RawMessage `json:"data"` // the type's payload, as JSON
}

// DecodeEnvelope reads an event's envelope from its JSON.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return Envelope{}, fmt.Errorf("decode event envelope: %w", err)
	}
	return e, nil
}

// Decode reads the stored event's envelope.
func (e Event) Decode() (Envelope, error) { return DecodeEnvelope(e.Data) }

// Terminal reports whether the event ends its run's stream.
func (e Envelope) Terminal() bool { return e.Type.Terminal() }

// Payload decodes the envelope's data into the struct of its type: a
// RunCreatedData for run.created, a RunEndedData for every terminal type,
// and so on, as a value (not a pointer), so that a type switch reads
//
//	switch d := p.(type) {
//	case agentd.MessageDeltaData: ...
//	}
//
// An unknown type (from a newer server) gives ErrUnknownEventType.
func (e Envelope) Payload() (Payload, error) {
	decode, ok := payloadDecoders[e.Type]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEventType, e.Type)
	}
	p, err := decode(e.Data)
	if err != nil {
		return nil, fmt.Errorf("decode %s data: %w", e.Type, err)
	}
	return p, nil
}

// ErrUnknownEventType: an event's type is none of EventTypes.
var ErrUnknownEventType = errors.New("unknown event type")

func decodeAs[T Payload](data json.RawMessage) (Payload, error) {
	var d T
	err := json.Unmarshal(data, &d)
	return d, err
}

// payloadDecoders decode each stored type's data.
var payloadDecoders = map[EventType]func(json.RawMessage) (Payload, error){
	EventRunCreated:           decodeAs[RunCreatedData],
	EventRunStarted:           decodeAs[RunStartedData],
	EventRunResumed:           decodeAs[RunResumedData],
	EventStepStarted:          decodeAs[StepStartedData],
	EventMessageDelta:         decodeAs[MessageDeltaData],
	EventMessageCompleted:     decodeAs[MessageCompletedData],
	EventToolCallCreated:      decodeAs[ToolCallCreatedData],
	EventToolAttemptStarted:   decodeAs[ToolAttemptStartedData],
	EventToolAttemptFailed:    decodeAs[ToolAttemptFailedData],
	EventToolCallCompleted:    decodeAs[ToolCallCompletedData],
	EventToolCallReused:       decodeAs[ToolCallReusedData],
	EventToolCallUnknown:      decodeAs[ToolCallUnknownData],
	EventToolCallRetryAllowed: decodeAs[ToolCallRetryAllowedData],
	EventToolCallApproved:     decodeAs[ToolCallApprovedData],
	EventStepCompleted:        decodeAs[StepCompletedData],
	EventStepRetracted:        decodeAs[StepRetractedData],
	EventModelFallback:        decodeAs[ModelFallbackData],
	EventRunRequiresAction:    decodeAs[RunRequiresActionData],
	EventContextCompacted:     decodeAs[ContextCompactedData],
	EventAgentStarted:         decodeAs[AgentStartedData],
	EventInputAccepted:        decodeAs[InputAcceptedData],
	EventInputApplied:         decodeAs[InputAppliedData],
	EventInputUnapplied:       decodeAs[InputUnappliedData],
	EventHookCalled:           decodeAs[HookCalledData],
	EventRunCompleted:         decodeAs[RunEndedData],
	EventRunFailed:            decodeAs[RunEndedData],
	EventRunCancelled:         decodeAs[RunEndedData],
	EventRunTimedOut:          decodeAs[RunEndedData],
	EventRunInterrupted:       decodeAs[RunEndedData],
}

// OutboxEventTypes lists the events that tell whoever waits on a run
// (webhooks, a parent run) that it stopped: its ends and
// run.requires_action. Whichever path writes one writes the run's outbox
// row with it, in the same transaction.
func OutboxEventTypes() []EventType {
	return []EventType{EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunTimedOut, EventRunInterrupted,
		EventRunRequiresAction}
}
