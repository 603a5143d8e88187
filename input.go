package agentd

import (
	"errors"
	"fmt"
	"time"
)

// Input sent to a run while it works (steering): a client's message
// (POST /runs/{id}/input, a conversation's door), a hook's continue, or a
// non-waiting sub-agent's answer. It is committed before it is
// acknowledged, and its run applies it at its next step boundary, once:
// its messages join the conversation after the results of the calls the
// model asked for, before the next model call.

// Events of a run's inputs.
const (
	EventInputAccepted  EventType = "input.accepted"
	EventInputApplied   EventType = "input.applied"
	EventInputUnapplied EventType = "input.unapplied"
	// EventHookCalled: a hook at the loop's boundaries (on_answer,
	// on_input) was called, and what it decided.
	EventHookCalled EventType = "hook.called"
)

// Hooks at the loop's boundaries, and their outcomes (hook.called).
const (
	HookOnAnswer = "on_answer"
	HookOnInput  = "on_input"

	HookContinue = "continue" // on_answer: the run goes on with the hook's input
	HookNone     = "none"     // on_answer: the answer ends the run
	HookLimit    = "limit"    // on_answer: a continue past max_continues; the run ends
	HookAllow    = "allow"    // on_input: as it came
	HookRewrite  = "rewrite"  // on_input: its texts rewritten
	HookFailed   = "failed"   // the hook failed; nothing changed
)

// HookCalledData is the data of hook.called.
type HookCalledData struct {
	Error   string `json:"error,omitempty"`
	Hook    string `json:"hook"`
	InputID string `json:"input_id,omitempty"`
	Note    bool   `json:"note,omitempty"` // on_input added a note
	Outcome string `json:"outcome"`
}

func (HookCalledData) EventType() EventType { return EventHookCalled }

// InputStatus is where an input is.
type InputStatus string

const (
	InputPending   InputStatus = "pending"   // accepted, not yet applied
	InputApplied   InputStatus = "applied"   // its messages are in the conversation
	InputUnapplied InputStatus = "unapplied" // its run ended without it
)

// InputStatuses lists the statuses of an input.
func InputStatuses() []InputStatus { return []InputStatus{InputPending, InputApplied, InputUnapplied} }

// InputSources lists who may send an input.
func InputSources() []InputSource {
	return []InputSource{InputFromClient, InputFromHook, InputFromAgent}
}

// InputSource is who sent an input.
type InputSource string

const (
	InputFromClient InputSource = "client" // a client of the API
	InputFromHook   InputSource = "hook"   // an on_answer hook's continue
	InputFromAgent  InputSource = "agent"  // a non-waiting sub-agent's answer
)

// InputWhen says when an input is applied.
type InputWhen string

const (
	// InputNext: at the run's next step boundary, the default.
	InputNext InputWhen = "next"
	// InputNow: a model call under way is cut (its streamed text
	// retracted) and asked again with the input; tool calls under way
	// are never cut.
	InputNow InputWhen = "now"
)

// InputWhens lists the values of "when"; the first is the default.
func InputWhens() []InputWhen { return []InputWhen{InputNext, InputNow} }

// RunInput is a row of run_inputs: one input of a run.
type RunInput struct {
	ID     string
	RunID  string
	N      int // its place in the order the run accepted its inputs, from 1
	Source InputSource
	When   InputWhen
	// Messages are the input's messages: the user's, and a system note an
	// on_input hook added; an image or a file names its artifact.
	Messages  []InputMessageView
	Status    InputStatus
	Step      int    // the step it was applied before (applied)
	Reason    Reason // why its run ended without it (unapplied)
	CarriedTo string // the run of the conversation that took it over (unapplied)
	CreatedBy string
	CreatedAt time.Time
	AppliedAt *time.Time
}

// InputCreate is an input to accept on a run.
type InputCreate struct {
	TenantID       string
	RunID          string
	Source         InputSource
	When           InputWhen
	Messages       []InputMessage // role user
	IdempotencyKey string
	RequestHash    string
	Actor          string
	// MaxPending bounds the run's pending inputs (0: no bound).
	MaxPending int
	// Hook, when set, is what the on_input hook decided about the input:
	// its hook.called event follows input.accepted.
	Hook *HookCalledData
}

// InputAcceptedData is the data of input.accepted.
type InputAcceptedData struct {
	Actor    string             `json:"actor,omitempty"`
	InputID  string             `json:"input_id"`
	Messages []InputMessageView `json:"messages"`
	N        int                `json:"n"`
	Source   InputSource        `json:"source"`
	When     InputWhen          `json:"when"`
}

// InputAppliedData is the data of input.applied: the input's messages
// were numbered into the conversation before step Step's model call.
type InputAppliedData struct {
	InputID    string   `json:"input_id"`
	MessageIDs []string `json:"message_ids"`
	N          int      `json:"n"`
}

// InputUnappliedData is the data of input.unapplied: the run ended (for
// Reason) without applying the input.
type InputUnappliedData struct {
	InputID string `json:"input_id"`
	N       int    `json:"n"`
	Reason  Reason `json:"reason"`
}

func (InputAcceptedData) EventType() EventType  { return EventInputAccepted }
func (InputAppliedData) EventType() EventType   { return EventInputApplied }
func (InputUnappliedData) EventType() EventType { return EventInputUnapplied }

// RunEndedError is the ErrConflict of sending input to a run that ended:
// its
// conversation's door (POST /conversations/{id}/messages) takes it.
type RunEndedError struct {
	RunID          string
	ConversationID string
	Status         RunStatus
}

func (e *RunEndedError) Error() string {
	return fmt.Sprintf("run %s has ended (%s): send the message to its conversation %s", e.RunID, e.Status, e.ConversationID)
}

// Is makes errors.Is(err, ErrConflict) true for a RunEndedError.
func (e *RunEndedError) Is(target error) bool { return target == ErrConflict }

// TooManyInputsError refuses an input past a run's bound of pending
// inputs.
type TooManyInputsError struct{ Pending, Max int }

func (e *TooManyInputsError) Error() string {
	return fmt.Sprintf("the run has %d inputs pending, as many as it may hold; send more once it applied them", e.Pending)
}

// ErrInputsChanged: a write that ends a run found pending inputs other
// than those it was made for; the executor reads them and decides again.
var ErrInputsChanged = errors.New("the run's pending inputs changed")

// Steerable reports whether a run in status s takes input: it is queued,
// running, or waits for a decision (which it applies after).
func Steerable(s RunStatus) bool {
	return s == StatusQueued || s == StatusRunning || s == StatusRequiresAction
}
