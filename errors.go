package agentd

import (
	"errors"
	"fmt"
)

// Errors of resolving what a waiting run asks (ActionParams).
var (
	// ErrRunNotWaiting: the run is not in requires_action.
	ErrRunNotWaiting = errors.New("run is not waiting for an action")
	// ErrActionMismatch: the run waits for an action about another tool call.
	ErrActionMismatch = errors.New("the run waits for an action about another tool call")
)

// DecisionError says that a decision does not answer what the run asks:
// approve or reject answer an approval (tool_approval); result, retry or
// fail an unknown outcome (tool_outcome_unknown).
type DecisionError struct {
	Decision Decision   // what the client decided
	Asks     ActionType // the type of the run's required action
}

func (e *DecisionError) Error() string {
	return "decision " + string(e.Decision) + " does not answer what the run asks (" + string(e.Asks) + ")"
}

// ErrOutputsMismatch: a tool_outputs action that does not answer exactly
// the client tool calls the run waits for.
var ErrOutputsMismatch = errors.New("the outputs do not answer the client tool calls the run waits for")

// PendingCallsError says that a new run's input does not answer the client
// tool calls its conversation's previous run ended at
// (ReasonClientToolCalls): each must get one output (a message of role tool,
// first in the input), and no other call may.
type PendingCallsError struct {
	Missing []string // call ids that wait for an output the input does not give
	Unknown []string // call ids of outputs that no call waits for
	// The same for the calls that wait for an approval
	// (RunParams.Approvals), by their tool call ids.
	MissingApprovals []string
	UnknownApprovals []string
}

// Empty reports whether the input answers what waits, and nothing else.
func (e *PendingCallsError) Empty() bool {
	return len(e.Missing)+len(e.Unknown)+len(e.MissingApprovals)+len(e.UnknownApprovals) == 0
}

func (e *PendingCallsError) Error() string {
	switch {
	case len(e.UnknownApprovals) > 0:
		return fmt.Sprintf("no tool call of the conversation waits for an approval with id %s (or it is decided twice)", e.UnknownApprovals[0])
	case len(e.MissingApprovals) > 0 && len(e.Missing)+len(e.Unknown) == 0:
		return fmt.Sprintf("the conversation waits for a decision on the approval of tool call %s (%d in all): give each",
			e.MissingApprovals[0], len(e.MissingApprovals))
	}
	if len(e.Unknown) > 0 {
		return fmt.Sprintf("no function call of the conversation waits for an output with call id %s", e.Unknown[0])
	}
	return fmt.Sprintf("the conversation waits for the output of function call %s (%d in all): give each in the input",
		e.Missing[0], len(e.Missing))
}

// ErrArtifactNotFound is the ErrNotFound of an artifact.
var ErrArtifactNotFound = fmt.Errorf("artifact %w", ErrNotFound)

// ErrConversationBusy is the ErrConflict of deleting a conversation that has
// a run in progress (queued, running or waiting for a client).
var ErrConversationBusy = fmt.Errorf("conversation has a run in progress: %w", ErrConflict)

// BusyError says that a conversation already has a run in flight.
type BusyError struct{ RunID string }

func (e *BusyError) Error() string { return "conversation is busy with run " + e.RunID }

// Is makes errors.Is(err, ErrConflict) true for a BusyError.
func (e *BusyError) Is(target error) bool { return target == ErrConflict }

// ErrIdempotencyMismatch: an idempotency key was reused with a different request.
var ErrIdempotencyMismatch = errors.New("idempotency key reused with a different request")

// Errors of the store and the engine's commands.
var (
	// ErrNotFound: the row does not exist (or belongs to another tenant).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique constraint or a state rule refused the write.
	ErrConflict = errors.New("conflict")
	// ErrRunNotFound is the ErrNotFound of a run (none of the tenant's has
	// this id).
	ErrRunNotFound = fmt.Errorf("run %w", ErrNotFound)
	// ErrConversationNotFound is the ErrNotFound of a conversation.
	ErrConversationNotFound = fmt.Errorf("conversation %w", ErrNotFound)
	// ErrRunFinished is the ErrConflict of cancelling a run that already
	// ended otherwise than cancelled.
	ErrRunFinished = fmt.Errorf("run already finished: %w", ErrConflict)
	// ErrQuotaExceeded: the tenant has as many runs in progress as it may,
	// and the run asked to be refused rather than queued.
	ErrQuotaExceeded = errors.New("the tenant has as many runs in progress as its quota allows")
	// ErrRunCompleted is the ErrConflict of resuming a completed run.
	ErrRunCompleted = fmt.Errorf("run is completed: %w", ErrConflict)
	// ErrInvalidValue: the database refused a value as data (a NUL
	// character, invalid UTF-8, a number out of range, a malformed value).
	// Values from outside pass internal/clean first, so this is a value
	// that slipped past it; the error says which.
	ErrInvalidValue = errors.New("value cannot be stored")
	// ErrUnavailable: the database cannot serve the call now (it refuses
	// connections, is restarting or failing over, or only a read-only
	// standby answers); nothing of the call was committed unless the
	// connection broke during its commit. The store's errors that say so
	// wrap it and the driver's error. Retry shortly, with the same
	// idempotency key for a creation.
	ErrUnavailable = errors.New("database unavailable")
)
