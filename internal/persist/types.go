package persist

import (
	"encoding/json"
	"time"
)

// Run statuses.
const (
	StatusQueued         = "queued"
	StatusRunning        = "running"
	StatusRequiresAction = "requires_action"
	StatusInterrupted    = "interrupted"
	StatusCompleted      = "completed"
	StatusFailed         = "failed"
	StatusCancelled      = "cancelled"
	StatusTimedOut       = "timed_out"
)

// Terminal reasons refine how a run ended.
const (
	ReasonCompleted       = "completed"
	ReasonMaxSteps        = "max_steps"
	ReasonCancelled       = "cancelled"
	ReasonTimedOutTotal   = "timed_out_total"
	ReasonTimedOutStep    = "timed_out_step"
	ReasonModelError      = "model_error"
	ReasonToolError       = "tool_error"
	ReasonContextOverflow = "context_overflow"
	ReasonInterrupted     = "interrupted"
)

// Terminal reports whether a run status is final (resume may still re-queue
// some of them).
func Terminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusTimedOut:
		return true
	}
	return false
}

// Usage is token accounting, kept on runs and steps.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	ReasoningTokens   int64 `json:"reasoning_tokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens, ReasoningTokens: u.ReasoningTokens + v.ReasoningTokens}
}

// Timeouts of a run, in milliseconds; 0 means none.
type Timeouts struct {
	TotalMS int64 `json:"total_ms"`
	StepMS  int64 `json:"step_ms"`
	IdleMS  int64 `json:"idle_ms"`
	ToolMS  int64 `json:"tool_ms"`
}

// RunParams is what a run was asked to do, beyond its input.
type RunParams struct {
	Instructions string          `json:"instructions,omitempty"`
	Tools        []string        `json:"tools"` // nil: every registered tool
	MaxSteps     int             `json:"max_steps"`
	Timeouts     Timeouts        `json:"timeouts"`
	OnDisconnect string          `json:"on_disconnect"`
	IfBusy       string          `json:"if_busy"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// Run is a row of runs.
type Run struct {
	ID                string
	TenantID          string
	ConversationID    string
	Status            string
	TerminalReason    string
	Model             string
	Params            RunParams
	IdempotencyKey    string
	Epoch             int64
	LeaseOwner        string
	LeaseExpiresAt    *time.Time
	DeadlineAt        *time.Time
	CancelRequestedAt *time.Time
	// InterruptRequestedAt is set when the run's stream client went away
	// and the run asked to be interrupted then.
	InterruptRequestedAt *time.Time
	RequiredAction       json.RawMessage
	LastEventSeq         int64
	StepCount            int
	Usage                Usage
	Error                json.RawMessage
	CreatedAt            time.Time
	StartedAt            *time.Time
	FinishedAt           *time.Time
	UpdatedAt            time.Time
}

// Conversation is a row of conversations.
type Conversation struct {
	ID        string
	TenantID  string
	Title     string
	Metadata  json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Part is one piece of a message's content: text, a tool call, or a tool
// result. It is agentd's own provider-neutral shape.
type Part struct {
	Type       string `json:"type"` // text, tool_call, tool_result
	Text       string `json:"text,omitempty"`
	ID         string `json:"id,omitempty"`        // tool_call
	Name       string `json:"name,omitempty"`      // tool_call
	Arguments  string `json:"arguments,omitempty"` // tool_call: the model's JSON text
	ToolCallID string `json:"tool_call_id,omitempty"`
	Content    string `json:"content,omitempty"` // tool_result: JSON text given to the model
	IsError    bool   `json:"is_error,omitempty"`
}

// Message statuses.
const (
	MessageCompleted = "completed"
	MessageAborted   = "aborted"
)

// Message is a row of messages.
type Message struct {
	ID             string
	ConversationID string
	RunID          string
	Seq            int
	Role           string
	Content        []Part
	Status         string
	CreatedAt      time.Time
}

// Step statuses.
const (
	StepRunning   = "running"   // the model is being asked
	StepActing    = "acting"    // the model's output is committed; tools are running
	StepCompleted = "completed" // the step's tools (if any) are done
	StepFailed    = "failed"
	StepAborted   = "aborted"
)

// Step is a row of steps.
type Step struct {
	ID            string
	RunID         string
	Seq           int
	Status        string
	FinishReason  string
	Transition    string
	ModelAttempts int
	Usage         Usage
	Error         json.RawMessage
	StartedAt     time.Time
	FinishedAt    *time.Time
}

// Tool call statuses.
const (
	CallPlanned   = "planned"
	CallRunning   = "running"
	CallSucceeded = "succeeded"
	CallFailed    = "failed"
	CallUnknown   = "unknown"
	// CallAwaitingApproval: the tool needs a client's approval before it runs.
	CallAwaitingApproval = "awaiting_approval"
	// CallRejected: a client rejected the call, or its run ended while the
	// call waited for a decision.
	CallRejected = "rejected"
)

// ToolCall is a row of tool_calls.
type ToolCall struct {
	ID             string
	RunID          string
	StepID         string
	Position       int
	CallID         string
	Name           string
	Arguments      json.RawMessage
	IdempotencyKey string
	Effect         string
	Status         string
	Result         json.RawMessage
	Error          json.RawMessage
	Attempts       int
	CreatedAt      time.Time
	FinishedAt     *time.Time
}

// Attempt statuses.
const (
	AttemptRunning   = "running"
	AttemptSucceeded = "succeeded"
	AttemptFailed    = "failed"
	AttemptTimedOut  = "timed_out"
	AttemptUnknown   = "unknown"
)

// Attempt is a row of tool_attempts.
type Attempt struct {
	ID         string
	ToolCallID string
	N          int
	Status     string
	Error      json.RawMessage
	Worker     string
	Epoch      int64
	StartedAt  time.Time
	FinishedAt *time.Time
}

// Event is a row of run_events. Data is the full JSON envelope, exactly as
// it is sent to clients.
type Event struct {
	RunID     string
	Seq       int64
	Type      string
	Data      json.RawMessage
	CreatedAt time.Time
}

// EventIn is an event to append; the store assigns its seq and wraps Data in
// the envelope.
type EventIn struct {
	Type string
	Step int
	Data any
}

// Fence identifies a worker's claim on a run: writes made under it commit
// only while the run's epoch is still Epoch.
type Fence struct {
	RunID  string
	Epoch  int64
	Worker string
}
