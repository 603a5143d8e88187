package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role names who said a message.
type Role string

// Roles of the provider-neutral conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation sent to the model. Assistant
// messages may carry ToolCalls; tool messages answer one call by ToolCallID.
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is one function call the model asked for. Arguments is the raw JSON
// text the model produced (it may be invalid JSON; the engine validates it).
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// ToolSpec describes a function offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema of the arguments
}

// Request is one completion request.
type Request struct {
	Model    string
	Messages []Message
	Tools    []ToolSpec
	// IdleTimeout, when positive, overrides the adapter's idle timeout for
	// this request: the longest wait for the next chunk of the stream.
	IdleTimeout time.Duration
}

// Usage is the token accounting of one completion.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	ReasoningTokens   int64
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + v.InputTokens,
		OutputTokens:      u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens,
		ReasoningTokens:   u.ReasoningTokens + v.ReasoningTokens,
	}
}

// Response is the complete output of one streamed completion.
type Response struct {
	Text         string
	ToolCalls    []ToolCall
	FinishReason string // stop, tool_calls, length, content_filter
	Usage        Usage
}

// Model is a chat model that streams its answer.
//
// Stream sends req and calls onDelta with each piece of assistant text as it
// arrives (onDelta may be nil). It returns the assembled response once the
// stream ends. Errors are *Error values, so callers can tell a retryable
// failure from a final one with IsRetryable; a cancelled ctx returns an error
// that wraps ctx's cause.
type Model interface {
	Stream(ctx context.Context, req Request, onDelta func(text string)) (Response, error)
}

// ErrorKind classifies a model failure.
type ErrorKind string

// Kinds of model failure. Retryable kinds may succeed if the same request is
// sent again; the others will not.
const (
	KindRateLimited     ErrorKind = "rate_limited"     // 429; RetryAfter may be set
	KindServer          ErrorKind = "server_error"     // 5xx
	KindConnection      ErrorKind = "connection"       // reset, refused, truncated stream
	KindIdle            ErrorKind = "idle_timeout"     // no chunk within the idle timeout
	KindBadRequest      ErrorKind = "bad_request"      // 400 and other 4xx
	KindAuth            ErrorKind = "auth"             // 401, 403
	KindContextOverflow ErrorKind = "context_overflow" // the prompt is too long for the model
	KindCancelled       ErrorKind = "cancelled"        // the caller's context ended
)

// Error is a classified model failure.
type Error struct {
	Kind       ErrorKind
	Status     int           // HTTP status, 0 when there was none
	RetryAfter time.Duration // from a Retry-After header, 0 when absent
	Err        error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("model %s (status %d): %v", e.Kind, e.Status, e.Err)
	}
	return fmt.Sprintf("model %s: %v", e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether sending the same request again may succeed.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindConnection, KindIdle:
		return true
	}
	return false
}

// IsRetryable reports whether err is a model error that a retry may mend.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}
