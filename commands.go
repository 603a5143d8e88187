package agentd

import (
	"encoding/json"

	"github.com/google/uuid"
)

// ActionParams resolve what a requires_action run waits for.
//
// The call is named by ToolCallID (agentd's id), by CallID (the model's),
// or by both, which must then name the same call.
type ActionParams struct {
	TenantID, RunID, ToolCallID string
	CallID                      string
	Decision                    Decision
	Result                      json.RawMessage // for DecisionResult
	Artifact                    *Artifact       // the whole result, when Result is its preview
	Message                     string          // for DecisionFail and DecisionReject: what the model is told
	Actor                       string          // who decides: kept on the call (decided_by), the run (resumed_by) and the event
	// Outputs, for DecisionOutputs, answer every client tool call the
	// run waits for.
	Outputs []ToolOutput
}

// ToolOutput is a client's answer to one client tool call: its output (a
// result), or the error the model is told.
type ToolOutput struct {
	ToolCallID string
	Output     json.RawMessage
	Artifact   *Artifact // the whole output, when Output is its preview
	Error      string    // when set, the call failed
}

// ConversationListParams select a page of a tenant's conversations, newest
// first.
type ConversationListParams struct {
	TenantID string
	// Metadata, when not empty, keeps the conversations whose metadata
	// holds each of its keys with that value.
	Metadata map[string]string
	ChatID   string // when not empty, the conversation of this AI SDK chat
	Before   string // a conversation id: only older ones
	Limit    int
	// MayLag: the page may come from a read replica, up to its maximum
	// lag behind the primary (a listing for a person or a dashboard).
	MayLag bool
}

// IdempotencyRecord is what a key stored: the fingerprint of its first
// request and, once that request finished, its response.
type IdempotencyRecord struct {
	RequestHash string
	Done        bool
	Status      int
	ContentType string
	Response    []byte
}

// IdempotencyResponse is the response stored for an idempotency key.
type IdempotencyResponse struct {
	TenantID, Key string
	Status        int
	ContentType   string
	Body          []byte
}

// RunListParams filter and page RunList.
type RunListParams struct {
	TenantID       string
	ConversationID string    // optional
	Status         RunStatus // optional
	// Agent and AgentVersion keep the runs of that agent (and version);
	// optional.
	Agent        string
	AgentVersion int
	// ParentRunID keeps the child runs of that run's calls of
	// sub-agents; optional.
	ParentRunID string
	// ScheduleID keeps the runs of that schedule's slots; optional.
	ScheduleID string
	// Text keeps the runs whose input (the text of its first message)
	// contains it, in any case; optional.
	Text   string
	Before string // cursor: runs with a smaller id (older)
	Limit  int
	// MayLag: the page may come from a read replica, up to its maximum
	// lag behind the primary (a listing for a person or a dashboard).
	MayLag bool
}

// InputPreviewLen is how many characters of a run's input a list of runs
// shows (RunView.InputText).
const InputPreviewLen = 200

// NewID returns a new time-ordered id (UUIDv7), as every row of agentd has.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// RunSpec is what a run is asked to do, resolved: its input, model and
// parameters with the server's defaults and ceilings applied
// (internal/runspec builds it, for every door that starts runs).
type RunSpec struct {
	ConversationID string // empty: a new conversation
	Input          []InputMessage
	Model          string
	Params         RunParams
	// OnQuota says what the run does when its tenant has as many runs in
	// progress as its quota allows.
	OnQuota OnQuota
}

// RunCreate asks for a new run: its spec, who asks, and the request's
// idempotency key with its fingerprint (a repeated key with the same
// fingerprint is the first run; with another, ErrIdempotencyMismatch).
type RunCreate struct {
	TenantID       string
	Actor          string // the credential's actor; optional
	Spec           RunSpec
	IdempotencyKey string // optional
	RequestHash    string
	// Carry, when set, names the unapplied inputs of the conversation's
	// previous run that the run's input takes over (a conversation's door
	// starts the next run with them): they are marked carried to it in its
	// creating transaction, which fails with ErrInputsChanged when one of
	// them was carried already.
	Carry *InputCarry
	// ReportOf, when set, is a detached sub-agent's run whose end the new
	// run reports (its input says how the child ended): the child is
	// marked reported in the run's creating transaction, which fails with
	// ErrInputsChanged when it was reported already.
	ReportOf string
	// Hook, when set, is what the on_input hook decided about the run's
	// input: its hook.called event follows run.created.
	Hook *HookCalledData
}

// InputCarry names unapplied inputs of run RunID.
type InputCarry struct {
	RunID string
	IDs   []string
}
