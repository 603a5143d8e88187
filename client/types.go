package client

import (
	"encoding/json"
	"strings"
	"time"
)

// Run is a run as agentd shows it (GET /runs/{id}).
type Run struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	TenantID       string          `json:"tenant_id"`
	ConversationID string          `json:"conversation_id"`
	Status         string          `json:"status"`          // queued, running, requires_action, completed, failed, cancelled, timed_out, interrupted
	TerminalReason *string         `json:"terminal_reason"` // why it ended, once it has
	Model          string          `json:"model"`
	Instructions   *string         `json:"instructions"`
	Tools          []string        `json:"tools"` // nil: every registered tool
	MaxSteps       int             `json:"max_steps"`
	Timeouts       Timeouts        `json:"timeouts"`
	LoopLimits     LoopLimits      `json:"loop_limits"`
	CompactAt      *float64        `json:"compact_at"`
	OnDisconnect   string          `json:"on_disconnect"`
	IfBusy         string          `json:"if_busy"`
	Metadata       json.RawMessage `json:"metadata"`
	Usage          Usage           `json:"usage"`
	StepCount      int             `json:"step_count"`
	LastEventSeq   int64           `json:"last_event_seq"`
	RequiredAction *RequiredAction `json:"required_action"`
	Error          *ErrorDetail    `json:"error"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	DeadlineAt     *time.Time      `json:"deadline_at"`
	CreatedBy      *string         `json:"created_by"`
	CancelledBy    *string         `json:"cancelled_by"`
	ResumedBy      *string         `json:"resumed_by"`
	OutputText     *string         `json:"output_text"`
	Output         []Part          `json:"output"`
}

// Ended reports whether the run is in a terminal status.
func (r *Run) Ended() bool {
	switch r.Status {
	case "completed", "failed", "cancelled", "timed_out", "interrupted":
		return true
	}
	return false
}

// Timeouts bound a run, in milliseconds (0 in a request: the server's
// ceiling).
type Timeouts struct {
	TotalMS  int64 `json:"total_ms"`
	StepMS   int64 `json:"step_ms"`
	IdleMS   int64 `json:"idle_ms"`
	ToolMS   int64 `json:"tool_ms"`
	ActionMS int64 `json:"action_ms"`
}

// LoopLimits stop a run stuck on a tool call.
type LoopLimits struct {
	FailuresInARow int `json:"failures_in_a_row,omitempty"`
	IdenticalCalls int `json:"identical_calls,omitempty"`
}

// Usage counts a run's or a step's tokens.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	ReasoningTokens   int64 `json:"reasoning_tokens"`
}

// Part is a part of a message's content.
type Part struct {
	Type       string `json:"type"` // text, tool_call, tool_result
	Text       string `json:"text,omitempty"`
	ID         string `json:"id,omitempty"`
	Name       string `json:"name,omitempty"`
	Arguments  string `json:"arguments,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Content    string `json:"content,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
}

// RequiredAction is what a run in requires_action waits for.
type RequiredAction struct {
	Type           string          `json:"type"` // tool_approval or tool_outcome_unknown
	ToolCallID     string          `json:"tool_call_id"`
	CallID         string          `json:"call_id"`
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key"`
	Step           int             `json:"step"`
}

// ErrorDetail says why a run, a step, a call or an attempt failed.
type ErrorDetail struct {
	Kind            string `json:"kind,omitempty"`
	Message         string `json:"message"`
	Status          int    `json:"status,omitempty"`
	ProviderCode    string `json:"provider_code,omitempty"`
	ProviderMessage string `json:"provider_message,omitempty"`
	ProviderType    string `json:"provider_type,omitempty"`
}

// Step is one step of a run, with its tool calls.
type Step struct {
	ID            string       `json:"id"`
	Seq           int          `json:"seq"`
	Status        string       `json:"status"`
	FinishReason  *string      `json:"finish_reason"`
	Transition    *string      `json:"transition"`
	ModelAttempts int          `json:"model_attempts"`
	Usage         Usage        `json:"usage"`
	Error         *ErrorDetail `json:"error"`
	StartedAt     time.Time    `json:"started_at"`
	FinishedAt    *time.Time   `json:"finished_at"`
	ToolCalls     []ToolCall   `json:"tool_calls"`
}

// ToolCall is a tool call of a step, with its attempts.
type ToolCall struct {
	ID             string          `json:"id"`
	CallID         string          `json:"call_id"`
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key"`
	Effect         string          `json:"effect"`
	Status         string          `json:"status"`
	Result         json.RawMessage `json:"result"`
	Error          *ErrorDetail    `json:"error"`
	Attempts       int             `json:"attempts"`
	AttemptLog     []Attempt       `json:"attempt_log"`
	CreatedAt      time.Time       `json:"created_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
}

// Attempt is one attempt of a tool call.
type Attempt struct {
	N          int          `json:"n"`
	Status     string       `json:"status"`
	Error      *ErrorDetail `json:"error"`
	Worker     string       `json:"worker"`
	Epoch      int64        `json:"epoch"`
	StartedAt  time.Time    `json:"started_at"`
	FinishedAt *time.Time   `json:"finished_at"`
}

// Conversation is a conversation of runs.
type Conversation struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"`
	TenantID  string          `json:"tenant_id"`
	Title     string          `json:"title"`
	Metadata  json.RawMessage `json:"metadata"`
	ChatID    *string         `json:"chat_id"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Message is a message of a conversation.
type Message struct {
	ID             string    `json:"id"`
	Object         string    `json:"object"`
	ConversationID string    `json:"conversation_id"`
	RunID          *string   `json:"run_id"`
	Seq            int       `json:"seq"`
	Role           string    `json:"role"`
	Content        []Part    `json:"content"`
	Status         string    `json:"status"`
	InContext      bool      `json:"in_context"`
	CreatedAt      time.Time `json:"created_at"`
}

// Text is the text of a message's text parts, joined with newlines, as
// the server joins them for a run's output_text.
func (m Message) Text() string {
	var texts []string
	for _, p := range m.Content {
		if p.Type == "text" && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Tool is a tool a run may call.
type Tool struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Parameters    json.RawMessage `json:"parameters"`
	Effect        string          `json:"effect"`
	TimeoutMS     *int64          `json:"timeout_ms"`
	NeedsApproval bool            `json:"needs_approval"`
}

// Page is a page of a list, and where the next one starts.
type Page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
	HasMore    bool    `json:"has_more"`
}

// InputMessage is one message of a run's input.
type InputMessage struct {
	Role    string `json:"role"` // user or system
	Content string `json:"content"`
}

// CreateRun is a POST /runs request. Zero fields take the server's
// defaults.
type CreateRun struct {
	// Input is the new user message; InputMessages, when given, replaces it.
	Input          string          `json:"-"`
	InputMessages  []InputMessage  `json:"-"`
	ConversationID string          `json:"conversation_id,omitempty"`
	Model          string          `json:"model,omitempty"`
	Instructions   string          `json:"instructions,omitempty"`
	Tools          *[]string       `json:"tools,omitempty"` // nil: every tool; &[]string{}: none
	MaxSteps       int             `json:"max_steps,omitempty"`
	Timeouts       *Timeouts       `json:"timeouts,omitempty"`
	OnDisconnect   string          `json:"on_disconnect,omitempty"` // continue or interrupt
	IfBusy         string          `json:"if_busy,omitempty"`       // reject, enqueue or interrupt
	OnQuota        string          `json:"on_quota,omitempty"`      // queue or reject
	CompactAt      float64         `json:"compact_at,omitempty"`
	LoopLimits     *LoopLimits     `json:"loop_limits,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header; empty: the
	// client makes one, and sends it again on each retry of the call.
	IdempotencyKey string `json:"-"`
}

// Action is a decision on what a run in requires_action waits for.
type Action struct {
	ToolCallID string          `json:"tool_call_id,omitempty"`
	CallID     string          `json:"call_id,omitempty"`
	Decision   string          `json:"decision"`         // approve, reject (approvals); result, retry, fail (unknown outcomes)
	Result     json.RawMessage `json:"result,omitempty"` // with result
	Error      string          `json:"error,omitempty"`  // with reject or fail: what the model is told
	// IdempotencyKey: as in CreateRun.
	IdempotencyKey string `json:"-"`
}

// Event is one event of a run's stream.
type Event struct {
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	RunID string          `json:"run_id"`
	Step  int             `json:"step"`
	At    time.Time       `json:"at"`
	Data  json.RawMessage `json:"data"`
}

// Terminal reports whether the event ends its run.
func (e Event) Terminal() bool {
	switch e.Type {
	case "run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted":
		return true
	}
	return false
}
