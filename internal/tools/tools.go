package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentd/agentd"
)

// Spec describes a tool: what the model sees and how the engine runs it.
type Spec struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema (an object schema) of the arguments
	Effect      agentd.Effect
	// Timeout caps one attempt; 0 means the engine's default.
	Timeout time.Duration
	// MaxAttempts caps attempts of one call when a failure is retryable under
	// the effect's policy; 0 means the default (3 for read_only and idempotent,
	// 1 for side_effect).
	MaxAttempts int
	// Backoff is the wait before the second attempt; it doubles after that.
	Backoff time.Duration
	// MaxResultBytes is the largest result passed back to the model whole;
	// a larger one is kept as an artifact and the model sees a preview.
	// 0 means 16 KiB.
	MaxResultBytes int
	// NeedsApproval marks a tool whose calls wait for a client's approval.
	NeedsApproval bool
}

// Call is one invocation of a tool.
type Call struct {
	RunID          string
	CallID         string
	IdempotencyKey string // run_id:step_seq:call_id, stable across retries and recovery
	Attempt        int    // 1-based
	Arguments      json.RawMessage
	// Run is the run that made the call, as its executor holds it (read
	// only): its tenant and its parameters, for the tools that act within
	// them (memory's). Step is the call's step, ToolCallID its row's id.
	Run        *agentd.Run
	Step       int
	ToolCallID string
}

// Tool is something the model can call.
//
// Invoke runs one attempt. It returns the result as JSON, or an *Error that
// says what kind of failure it was. It must honour ctx: when ctx ends it
// returns promptly.
type Tool interface {
	Spec() Spec
	Invoke(ctx context.Context, call Call) (json.RawMessage, error)
}

// ErrorKind classifies a failed attempt: one of vocab's tool error kinds.
type ErrorKind = agentd.ErrorKind

// Kinds of tool failure.
const (
	// KindFinal: the tool ran and refused (bad arguments, a 4xx); the model
	// sees the error and may repair its call. Never retried.
	KindFinal = agentd.ToolErrFinal
	// KindTransient: the tool answered that it failed (a 5xx) before or
	// without doing its effect.
	KindTransient = agentd.ToolErrTransient
	// KindTimeout: the attempt ran out of time; the effect may have happened.
	KindTimeout = agentd.ToolErrTimeout
	// KindConnection: the connection was lost; the effect may have happened.
	KindConnection = agentd.ToolErrConnection
)

// Error is a classified tool failure.
type Error struct {
	Kind    ErrorKind
	Message string // shown to the model
	Status  int    // HTTP status for webhook tools, else 0
	Err     error
}

// Error describes the failure with its kind, message and cause.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("tool %s: %s: %v", e.Kind, e.Message, e.Err)
	}
	return fmt.Sprintf("tool %s: %s", e.Kind, e.Message)
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }
