package agentd

import (
	"encoding/json"
	"time"
)

// The API's response bodies, as the server writes them (Run.View and the
// other View methods, and api/views.go, build them from the rows; a
// webhook's payload holds a RunView too) and the Go SDK reads them (client's types are aliases
// of these). Keys are snake_case; an absent value is null rather than
// missing, so that every object of a kind has the same keys; openapi.yaml
// describes each, and the API's tests check every answer against it.
//
// Columns that hold one of the domain's types as JSON (a run's
// required_action, the error of a run, step, call or attempt) are typed
// here, because they are only ever written by marshalling that type: read
// back, they encode to the same JSON (in the type's key order, where the
// jsonb column keeps its own). Values agentd does not shape (a tool's
// arguments and result, a policy decision, metadata) stay raw.

// Object names of the views that carry one ("object").
const (
	ObjectRun          = "run"
	ObjectConversation = "conversation"
	ObjectMessage      = "message"
)

// RunView is a run as GET /runs/{id} (and every route that answers a run)
// shows it.
type RunView struct {
	ID             string       `json:"id"`
	Object         string       `json:"object"` // ObjectRun
	TenantID       string       `json:"tenant_id"`
	ConversationID string       `json:"conversation_id"`
	Status         RunStatus    `json:"status"`
	TerminalReason *Reason      `json:"terminal_reason"` // why it ended, once it has
	Model          string       `json:"model"`
	Instructions   *string      `json:"instructions"`
	Tools          []string     `json:"tools"` // nil: every registered tool
	ClientTools    []ClientTool `json:"client_tools"`
	MaxSteps       int          `json:"max_steps"`
	Timeouts       Timeouts     `json:"timeouts"`
	LoopLimits     LoopLimits   `json:"loop_limits"`
	CompactAt      *float64     `json:"compact_at"` // nil: the model profile's
	OnDisconnect   OnDisconnect `json:"on_disconnect"`
	IfBusy         IfBusy       `json:"if_busy"`
	// Metadata is the client's own JSON object, {} when it gave none.
	Metadata json.RawMessage `json:"metadata"`
	// Usage is the run's tokens, its sub-agents' runs' among them.
	Usage RunUsage `json:"usage"`
	// Cost is what the run's model calls cost by the ledger, with those of
	// its sub-agents' runs, in the currency of the models file's prices (0
	// for calls of models without prices).
	Cost           float64         `json:"cost"`
	StepCount      int             `json:"step_count"`
	LastEventSeq   int64           `json:"last_event_seq"`
	RequiredAction *RequiredAction `json:"required_action"` // while requires_action
	Error          *ErrorDetail    `json:"error"`           // why it failed or timed out
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	DeadlineAt     *time.Time      `json:"deadline_at"`
	CreatedBy      *string         `json:"created_by"`
	CancelledBy    *string         `json:"cancelled_by"`
	ResumedBy      *string         `json:"resumed_by"`
	// CancelRequestedAt is when a cancel was asked of the run (a running
	// run that has it is stopping); a resume clears it.
	CancelRequestedAt *time.Time `json:"cancel_requested_at"`
	// OutputText and Output are a completed run's answer: the text and
	// the parts of its final assistant message; nil until then.
	OutputText *string `json:"output_text"`
	Output     []Part  `json:"output"`
	// Agent is the agent version the run was started from; nil: none.
	Agent *AgentRef `json:"agent"`
	// ForkedFrom is the run and step this run was forked from; nil: none.
	ForkedFrom *ForkRef `json:"forked_from"`
	// ParentRunID and ParentToolCallID name the run, and its call of a
	// sub-agent, that started this run; nil: none.
	ParentRunID      *string `json:"parent_run_id"`
	ParentToolCallID *string `json:"parent_tool_call_id"`
	// SubAgents are the agents the run may hand work to, as pinned.
	SubAgents []SubAgent `json:"sub_agents"`
	// ScheduleID and ScheduledFor name the schedule, and its slot, that
	// started the run; nil: none.
	ScheduleID   *string    `json:"schedule_id"`
	ScheduledFor *time.Time `json:"scheduled_for"`
	// Webhook is the URL the run's stops are delivered to (POST /runs
	// "webhook"); nil: none. Its secret is never shown.
	Webhook *string `json:"webhook"`
	// Models is the run's fallback chain: its model, then the models a
	// step's call moves to when it keeps failing (POST /runs "models").
	Models []string `json:"models"`
	// Thinking is the run's extended thinking budget; nil: none.
	Thinking *ThinkingView `json:"thinking"`
	// MaxCost caps what the run's model calls may cost; nil: no cap.
	MaxCost *float64 `json:"max_cost"`
	// InputsPending counts the inputs sent to the run (steering) that it
	// has yet to apply; InputsUnapplied those it ended without, not yet
	// carried into its conversation's next run.
	InputsPending   int `json:"inputs_pending"`
	InputsUnapplied int `json:"inputs_unapplied"`
	// Inputs are those inputs, on GET /runs/{id} and the answers of the
	// routes that send input; nil elsewhere.
	Inputs []InputView `json:"inputs"`
	// InputText is the text of what the run was asked: on GET /runs its
	// first message's, cut at InputPreviewLen characters; on GET
	// /runs/{id} every message of its input; nil elsewhere.
	InputText *string `json:"input_text"`
	// User is the run's end user; nil: none.
	User *string `json:"user"`
	// Memory is the memory the run may use, its namespaces filled; nil:
	// none.
	Memory *RunMemory `json:"memory"`
	// ManagedInstructions is the version of its tenant's managed
	// instructions the run was given; nil: none.
	ManagedInstructions *ManagedView `json:"managed_instructions"`
	// PinnedMemory are the items of its pinned namespaces the run was
	// given, at their versions; nil: none.
	PinnedMemory []PinnedView `json:"pinned_memory"`
	// Evaluation is the evaluation the run is one of, and its case; nil:
	// none.
	Evaluation *EvalRef `json:"evaluation"`
}

// EvalRef names the evaluation a run is one of, and the case.
type EvalRef struct {
	ID   string `json:"id"`
	Case string `json:"case"`
}

// ObjectInput is the object of an InputView.
const ObjectInput = "run.input"

// InputView is an input sent to a run (POST /runs/{id}/input).
type InputView struct {
	ID     string      `json:"id"`
	Object string      `json:"object"` // ObjectInput
	RunID  string      `json:"run_id"`
	N      int         `json:"n"` // its place in the order the run accepted its inputs, from 1
	Source InputSource `json:"source"`
	When   InputWhen   `json:"when"`
	Status InputStatus `json:"status"`
	// Messages are its messages: the user's, and a system note an
	// on_input hook added.
	Messages  []InputMessageView `json:"messages"`
	Step      *int               `json:"step"`       // the step it was applied before
	Reason    *Reason            `json:"reason"`     // why its run ended without it
	CarriedTo *string            `json:"carried_to"` // the run that took it over, when unapplied
	CreatedBy *string            `json:"created_by"`
	CreatedAt time.Time          `json:"created_at"`
	AppliedAt *time.Time         `json:"applied_at"`
}

// InputMessageView is a message of an input, as stored and shown.
type InputMessageView struct {
	Role    Role   `json:"role"`
	Content []Part `json:"content"`
}

// View is in as the API shows it.
func (in RunInput) View() InputView {
	v := InputView{ID: in.ID, Object: ObjectInput, RunID: in.RunID, N: in.N, Source: in.Source, When: in.When, Status: in.Status,
		Messages: in.Messages, Step: nullIfZero(in.Step), Reason: nullIfZero(in.Reason),
		CarriedTo: nullIfZero(in.CarriedTo), CreatedBy: nullIfZero(in.CreatedBy), CreatedAt: in.CreatedAt.UTC(), AppliedAt: utcOf(in.AppliedAt)}
	if v.Messages == nil {
		v.Messages = []InputMessageView{}
	}
	return v
}

// Actions of POST /conversations/{id}/messages.
const (
	SendSteered = "steered" // a run in flight took the message as input
	SendStarted = "started" // the conversation's next run started with it
)

// SendView is the answer of POST /conversations/{id}/messages: what the
// message did, the run it went to, and the input it became (nil when it
// started a run).
type SendView struct {
	Object string     `json:"object"` // "conversation.send"
	Action string     `json:"action"` // SendSteered or SendStarted
	Run    RunView    `json:"run"`
	Input  *InputView `json:"input"`
}

// View is r as GET /runs/{id} shows it, but for its cost (Cost and
// Usage.CacheWriteTokens), which the ledger's rows hold: a reader adds
// them (RunCost).
func (r Run) View() RunView {
	md := r.Params.Metadata
	if len(md) == 0 {
		md = json.RawMessage(`{}`)
	}
	v := RunView{
		ID:              r.ID,
		Object:          ObjectRun,
		TenantID:        r.TenantID,
		ConversationID:  r.ConversationID,
		Status:          r.Status,
		TerminalReason:  nullIfZero(r.TerminalReason),
		Model:           r.Model,
		Instructions:    nullIfZero(r.Params.Instructions),
		Tools:           r.Params.Tools,
		ClientTools:     orEmpty(r.Params.ClientTools),
		MaxSteps:        r.Params.MaxSteps,
		Timeouts:        r.Params.Timeouts.orActionDefault(),
		LoopLimits:      r.Params.LoopLimits.OrDefaults(),
		CompactAt:       nullIfZero(r.Params.CompactAt),
		OnDisconnect:    r.Params.OnDisconnect,
		IfBusy:          r.Params.IfBusy,
		Metadata:        md,
		Usage:           RunUsage{Usage: r.Usage},
		StepCount:       r.StepCount,
		LastEventSeq:    r.LastEventSeq,
		RequiredAction:  StoredAs[RequiredAction](r.RequiredAction),
		Error:           StoredAs[ErrorDetail](r.Error),
		CreatedAt:       r.CreatedAt.UTC(),
		StartedAt:       utcOf(r.StartedAt),
		FinishedAt:      utcOf(r.FinishedAt),
		UpdatedAt:       r.UpdatedAt.UTC(),
		DeadlineAt:      utcOf(r.DeadlineAt),
		CreatedBy:       nullIfZero(r.CreatedBy),
		CancelledBy:     nullIfZero(r.CancelledBy),
		ResumedBy:       nullIfZero(r.ResumedBy),
		InputsPending:   r.InputsPending,
		InputsUnapplied: r.InputsUnapplied,
	}
	v.CancelRequestedAt = utcOf(r.CancelRequestedAt)
	v.InputText = nullIfZero(r.InputText)
	v.Agent, v.ForkedFrom = r.Params.Agent, r.Params.ForkedFrom
	v.SubAgents = r.Params.SubAgents
	if v.SubAgents == nil {
		v.SubAgents = []SubAgent{}
	}
	if h := r.Params.Webhook; h != nil {
		v.Webhook = &h.URL
	}
	v.Models = r.Models()
	if r.Params.Thinking > 0 {
		v.Thinking = &ThinkingView{BudgetTokens: r.Params.Thinking}
	}
	if r.Params.MaxCost > 0 {
		v.MaxCost = &r.Params.MaxCost
	}
	v.memoryView(r.Params)
	if p := r.Params.Parent; p != nil {
		v.ParentRunID, v.ParentToolCallID = &p.RunID, &p.ToolCallID
	}
	if sc := r.Params.Schedule; sc != nil {
		slot := sc.Slot.UTC()
		v.ScheduleID, v.ScheduledFor = &sc.ID, &slot
	}
	if len(r.Output) > 0 {
		// Written by the executor from []Part; a row it cannot read
		// shows no output rather than failing the read.
		if err := json.Unmarshal(r.Output, &v.Output); err == nil {
			text := TextOf(v.Output)
			v.OutputText = &text
		}
	}
	return v
}

// memoryView sets what v shows of the user, memory, managed
// instructions and evaluation of a run of parameters p.
func (v *RunView) memoryView(p RunParams) {
	v.User, v.Memory = nullIfZero(p.User), p.Memory.view()
	if m := p.Managed; m != nil {
		v.ManagedInstructions = &ManagedView{Version: m.Version}
	}
	v.PinnedMemory = p.Pinned.view()
	if ev := p.Eval; ev != nil {
		v.Evaluation = &EvalRef{ID: ev.ID, Case: ev.Case}
	}
}

// orActionDefault is t, waiting DefaultActionMS for an action when t says
// nothing (a run stored before action timeouts existed).
func (t Timeouts) orActionDefault() Timeouts {
	if t.ActionMS <= 0 {
		t.ActionMS = DefaultActionMS
	}
	return t
}

// StoredAs decodes a column that the store writes only by marshalling a T
// (a run's required_action, an error detail), so that what it holds
// encodes again to the same JSON; nil (JSON null) when it is empty. A value
// that does not decode (no writer makes one) shows as null rather than
// failing the read, as a run's unreadable output does.
func StoredAs[T any](raw json.RawMessage) *T {
	if len(raw) == 0 {
		return nil
	}
	var v *T
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return v
}

// nullIfZero is &v, or nil (JSON null) for the zero value.
func nullIfZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// utcOf is *t in UTC, or nil.
func utcOf(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// orEmpty is list, or an empty list (JSON []) for nil.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// ThinkingView is a run's extended thinking as asked.
type ThinkingView struct {
	BudgetTokens int `json:"budget_tokens"`
}

// Ended reports whether the run has stopped: a terminal status, or
// interrupted (RunStatus.Stopped). Its event stream has ended; only a
// client's resume starts it again.
func (r RunView) Ended() bool { return r.Status.Stopped() }

// Settled reports whether the run is where a client that waits for it is
// answered: it has stopped, or it waits for a client's decision (not only
// for its sub-agents: a parent is settled when one of them, or of theirs,
// waits for a decision, which GET /runs/{id} shows in
// required_action.agents).
func (r RunView) Settled() bool {
	if r.Ended() {
		return true
	}
	a := r.RequiredAction
	return r.Status == StatusRequiresAction && a != nil && (a.Type != ActionAgentRuns || decisionBelow(a.Agents))
}

// decisionBelow reports whether a child among agents (or one of theirs)
// waits for a decision.
func decisionBelow(agents []AgentCall) bool {
	for _, a := range agents {
		if ra := a.RequiredAction; ra != nil && (ra.Type != ActionAgentRuns || decisionBelow(ra.Agents)) {
			return true
		}
	}
	return false
}

// StepView is a step of a run, with its tool calls (GET /runs/{id}/steps).
type StepView struct {
	ID            string         `json:"id"`
	Seq           int            `json:"seq"`
	Status        StepStatus     `json:"status"`
	FinishReason  *FinishReason  `json:"finish_reason"`
	Transition    *Transition    `json:"transition"` // nil for the first step
	ModelAttempts int            `json:"model_attempts"`
	Usage         Usage          `json:"usage"`
	Error         *ErrorDetail   `json:"error"`
	StartedAt     time.Time      `json:"started_at"`
	FinishedAt    *time.Time     `json:"finished_at"`
	ToolCalls     []ToolCallView `json:"tool_calls"`
	// Model is the model of the run's chain that the step fell back to;
	// nil: the run's model (or, after a fallback in an earlier step, the
	// one that step moved to).
	Model *string `json:"model"`
}

// ToolCallView is a tool call of a step, with its attempts.
type ToolCallView struct {
	ID             string          `json:"id"`
	CallID         string          `json:"call_id"`
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key"`
	Effect         Effect          `json:"effect"`
	Status         CallStatus      `json:"status"`
	Result         json.RawMessage `json:"result"` // the result, or the preview of an artifact
	Error          *ErrorDetail    `json:"error"`
	Attempts       int             `json:"attempts"`
	AttemptLog     []AttemptView   `json:"attempt_log"`
	Policy         json.RawMessage `json:"policy"` // the policy decision on the call, when a policy decided
	CreatedAt      time.Time       `json:"created_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	// Receipt is the receipt of the call's last attempt, the one that gave
	// its outcome; nil for a call with no attempt or a read_only one.
	Receipt *Receipt `json:"receipt"`
}

// Receipt proves what one attempt of a call with an effect ran: the
// SHA-256 (hex) of the arguments the tool was given (compacted, in the key
// order it was given them: the bytes a webhook sends) and of the exact
// bytes of the result it returned, both computed at execution (the stored
// arguments and result are jsonb, reordered; a result kept as an artifact
// or cut is hashed whole, as the tool returned it), named by the call's
// idempotency key, the key the tool received.
type Receipt struct {
	IdempotencyKey  string  `json:"idempotency_key"`
	Attempt         int     `json:"attempt"`
	ArgumentsSHA256 *string `json:"arguments_sha256"`
	ResultSHA256    *string `json:"result_sha256"` // nil: the attempt returned no result
}

// AttemptView is one attempt of a tool call.
type AttemptView struct {
	N          int           `json:"n"`
	Status     AttemptStatus `json:"status"`
	Error      *ErrorDetail  `json:"error"`
	Worker     string        `json:"worker"`
	Epoch      int64         `json:"epoch"`
	StartedAt  time.Time     `json:"started_at"`
	FinishedAt *time.Time    `json:"finished_at"`
	// ArgumentsSHA256 and ResultSHA256 are the attempt's receipt (see
	// Receipt); nil when not recorded.
	ArgumentsSHA256 *string `json:"arguments_sha256"`
	ResultSHA256    *string `json:"result_sha256"`
}

// ConversationView is a conversation (GET /conversations/{id}).
type ConversationView struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"` // ObjectConversation
	TenantID  string          `json:"tenant_id"`
	Title     string          `json:"title"`
	Metadata  json.RawMessage `json:"metadata"`
	ChatID    *string         `json:"chat_id"` // the AI SDK chat it is the conversation of
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// MessageView is a message of a conversation
// (GET /conversations/{id}/messages).
type MessageView struct {
	ID             string        `json:"id"`
	Object         string        `json:"object"` // ObjectMessage
	ConversationID string        `json:"conversation_id"`
	RunID          *string       `json:"run_id"`
	Seq            int           `json:"seq"`
	Role           Role          `json:"role"`
	Content        []Part        `json:"content"`
	Status         MessageStatus `json:"status"`
	// InContext says whether the model is still sent the message: false
	// once a compaction's summary stands for it, and for a message that is
	// not completed.
	InContext bool      `json:"in_context"`
	CreatedAt time.Time `json:"created_at"`
}

// Text is the text of the message's text parts, joined with newlines, as a
// run's output_text joins them.
func (m MessageView) Text() string { return TextOf(m.Content) }

// ToolView is a tool runs may call (GET /tools).
type ToolView struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Parameters    json.RawMessage `json:"parameters"` // JSON Schema of the arguments
	Effect        Effect          `json:"effect"`
	TimeoutMS     *int64          `json:"timeout_ms"` // nil: the run's tool timeout
	NeedsApproval bool            `json:"needs_approval"`
	// Tenant is true for a tool the tenant declared (POST /tools), which
	// only its runs see.
	Tenant bool `json:"tenant"`
}

// List is the body of a list that is not paged.
type List[T any] struct {
	Data []T `json:"data"`
}

// Page is a page of a paged list, the same on every such route: NextCursor,
// passed as "cursor", gives the next page; it is nil and HasMore false on
// the last page.
type Page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
	HasMore    bool    `json:"has_more"`
}
