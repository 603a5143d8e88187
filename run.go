package agentd

import (
	"encoding/json"
	"strings"
	"time"
)

// Artifact is a row of artifacts: a tool result kept whole because it was
// too large to show the model whole (the model is shown a preview
// instead, tools.Offload), or an image or a file of a run's input, which
// its message names (Part.ArtifactID).
type Artifact struct {
	ID         string
	RunID      string
	ToolCallID string // "" for an input's image or file
	// MediaType: of a tool result, text/plain; charset=utf-8 for a result
	// that was a JSON string, else application/json; of an input's, the
	// media type it was sent with.
	MediaType string
	SHA256    string // hex
	Content   []byte
	CreatedAt time.Time
}

// Size is the artifact's length in bytes.
func (a Artifact) Size() int { return len(a.Content) }

// ArtifactPage is part of an artifact's content.
type ArtifactPage struct {
	Content   []byte
	Size      int64 // of the whole artifact
	MediaType string
}

// Compaction is a row of compactions: a summary that replaces, in what the
// model is sent, a conversation's messages up to CoversToSeq (all but its
// first user message).
type Compaction struct {
	ID              string
	ConversationID  string
	RunID           string
	StepID          string
	CoversToSeq     int
	MessagesCovered int
	Summary         string
	TokensBefore    int
	TokensAfter     int
	InputTokens     int64
	OutputTokens    int64
	CreatedAt       time.Time
}

// InputMessage is one message of a run's input.
type InputMessage struct {
	Role    Role
	Content string
	// Parts, when not empty, are the message's content in order, in place
	// of Content (which is then empty): texts, and in a user message
	// images and files.
	Parts []InputPart
	// ToolCallID, for a message of role tool, is the call (the model's
	// call id) whose output Content is: an output of a client tool call
	// that the conversation's previous run ended at (ReasonClientToolCalls),
	// or of one of ToolCalls of an assistant message before it in the input.
	ToolCallID string
	// Reasoning, for a message of role assistant, are blocks of what the
	// model thought before it (PartReasoning parts) as a client that keeps
	// the history sends them back: they go back to the model with it.
	Reasoning []Part
	// ToolCalls, for a message of role assistant, are calls the model made
	// earlier, as a client that keeps the history sends them back (the
	// Responses API's function_call items); each is answered by a message of
	// role tool that follows.
	ToolCalls []InputCall
}

// InputPart is one piece of an input message's content: a text, an
// image or a file. An image comes by URL or as Data; a file as Data. Data
// is stored once, as an artifact of the run, and the message keeps a
// reference to it (Part.ArtifactID).
type InputPart struct {
	Type      PartType // PartText, PartImage or PartFile
	Text      string   // PartText
	URL       string   // PartImage: an http(s) URL, passed on to the model as it is
	Data      []byte   // PartImage, PartFile: the content
	MediaType string   // of Data
	Filename  string   // optional
	Detail    string   // PartImage: one of ImageDetails, or "" for the model's default
}

// TextOf is the text of the message's content: Content, or the text of
// its text parts joined with newlines.
func (m InputMessage) TextOf() string {
	if len(m.Parts) == 0 {
		return m.Content
	}
	var texts []string
	for _, p := range m.Parts {
		if p.Type == PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Attached reports whether p is an image or a file.
func (p InputPart) Attached() bool { return p.Type == PartImage || p.Type == PartFile }

// InputCall is a tool call of an assistant message of a run's input.
type InputCall struct {
	ID        string // the model's call id
	Name      string
	Arguments string // JSON text
}

// APIKey is a row of api_keys: a credential's prefix, tenant, name and
// scopes, and the SHA-256 of its secret (the secret itself is never kept).
type APIKey struct {
	Prefix     string
	TenantID   string
	Name       string
	Scopes     []string
	SecretHash []byte
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// RunState is the committed state the agent loop is rebuilt from.
type RunState struct {
	Run      Run
	Messages []Message // the conversation's completed messages, in order
	// MessageSeq is the number of the conversation's last numbered message,
	// whatever its status (when read from the store; 0: the last of
	// Messages): the next a run numbers follows it.
	MessageSeq int
	Steps      []Step     // the run's steps, in order
	Calls      []ToolCall // the tool calls of the run's last step, in order
	Attempts   []Attempt  // the attempts of those calls
	// CallCount is how many tool calls the run has planned, in all its
	// steps.
	CallCount int
	// Compaction is the conversation's latest compaction, nil when it has
	// none: the model is sent its summary instead of the messages it covers.
	Compaction *Compaction
	// CompactionFailures counts the conversation's compactions that failed
	// in a row.
	CompactionFailures int
	// Attachments are the bytes of the images and files (artifacts) that
	// its messages name and its model is sent, by artifact id, as the
	// engine loaded them for its model calls; a part whose artifact is not
	// here is sent as a note that names it. The store never fills it.
	Attachments map[string][]byte
}

// StepDetail is a step with its tool calls and their attempts.
type StepDetail struct {
	Step
	Calls []CallDetail
}

// CallDetail is a tool call with its attempts.
type CallDetail struct {
	ToolCall
	Attempts []Attempt
}

// RunHead is what a run's streams need of it: where its log ends, and its
// state for heartbeats.
type RunHead struct {
	RunID        string
	Status       RunStatus
	StepCount    int
	LastEventSeq int64
	UpdatedAt    time.Time
}

// Head returns the run's RunHead.
func (r Run) Head() RunHead {
	return RunHead{RunID: r.ID, Status: r.Status, StepCount: r.StepCount, LastEventSeq: r.LastEventSeq, UpdatedAt: r.UpdatedAt}
}

// Timeouts of a run, in milliseconds; 0 means none.
type Timeouts struct {
	TotalMS int64 `json:"total_ms"`
	StepMS  int64 `json:"step_ms"`
	IdleMS  int64 `json:"idle_ms"`
	ToolMS  int64 `json:"tool_ms"`
	// ActionMS bounds the wait for a client's decision (requires_action),
	// which the total timeout does not count; 0 in runs stored before it
	// existed means DefaultActionMS.
	ActionMS int64 `json:"action_ms"`
}

// DefaultActionMS is the action timeout of a run that names none (24 h).
const DefaultActionMS = 24 * 60 * 60 * 1000

// RunParams is what a run was asked to do, beyond its input.
type RunParams struct {
	Instructions string          `json:"instructions,omitempty"`
	Tools        []string        `json:"tools"` // nil: every registered tool
	MaxSteps     int             `json:"max_steps"`
	Timeouts     Timeouts        `json:"timeouts"`
	OnDisconnect OnDisconnect    `json:"on_disconnect"`
	IfBusy       IfBusy          `json:"if_busy"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	LoopLimits   LoopLimits      `json:"loop_limits"`
	// CompactAt, when set, replaces the model profile's compact_at for this
	// run: the fraction of the window past which older turns are compacted.
	CompactAt float64 `json:"compact_at,omitempty"`
	// CompactThreshold, when set, is the prompt size in tokens past which
	// this run compacts its conversation, in place of its model profile's
	// threshold (the Responses API's context_management compact_threshold);
	// it is capped at the room the model's window leaves for the prompt,
	// when the window is known.
	CompactThreshold int `json:"compact_threshold,omitempty"`
	// NoCompaction: the run never compacts its conversation; one that
	// outgrows the model's window fails (context_overflow), as the
	// Responses API's truncation: disabled asks.
	NoCompaction bool `json:"no_compaction,omitempty"`
	// ClientTools are tools the client runs: their calls wait for its
	// outputs (requires_action client_tool_calls).
	ClientTools []ClientTool `json:"client_tools,omitempty"`
	// ClientToolsEnd: when the model calls client tools, the run ends
	// (completed, ReasonClientToolCalls) instead of waiting, and the next
	// run of its conversation brings their outputs as its input, as the
	// Responses API's function tools do.
	ClientToolsEnd bool `json:"client_tools_end,omitempty"`
	// ApprovalTools are tools whose calls wait for a client's approval in
	// this run, beyond those its operator marks (tools.Spec.NeedsApproval).
	ApprovalTools []string `json:"approval_tools,omitempty"`
	// Approvals are the client's decisions on the calls that its
	// conversation's previous run ended at waiting for approval
	// (ClientToolsEnd): the run makes the approved calls, and gives the
	// model the rejections, before it asks the model anything.
	Approvals []ApprovalDecision `json:"approvals,omitempty"`
	// TraceParent is the W3C trace context of the request that created the
	// run, when tracing is on: the run's executions join that trace.
	TraceParent string `json:"trace_parent,omitempty"`
	// Sampling is how the model is asked to sample the run's answers; runs
	// stored before it existed have its zero value (the model's defaults).
	Sampling Sampling `json:"sampling,omitzero"`
	// CacheKey groups the run's model requests in the provider's prompt
	// cache (OpenAI's prompt_cache_key); empty: the conversation's id.
	CacheKey string `json:"cache_key,omitempty"`
	// Unstored: the run is not kept once it ended (the Responses API's
	// store: false): it and its conversation, which is its own, are
	// deleted then.
	Unstored bool `json:"unstored,omitempty"`
	// Webhook is the URL the run's stops are delivered to, beside the
	// tenant's subscriptions (POST /runs "webhook"), if any.
	Webhook *RunWebhook `json:"webhook,omitempty"`
	// Echo is what the door that created the run keeps of its request to
	// answer about it later, as that door reads it (the Responses API's
	// request fields: internal/responses.Echo); nothing for POST /runs.
	Echo json.RawMessage `json:"echo,omitempty"`
	// Agent is the agent version the run was started from, if any: its
	// other parameters are that version's definition with the run's own
	// fields over it.
	Agent *AgentRef `json:"agent,omitempty"`
	// Variables are the values the run's instructions were filled with
	// (a fork of the run under another version of its agent fills that
	// version's with them).
	Variables map[string]string `json:"variables,omitempty"`
	// ForkedFrom is the run and step this run was forked from
	// (POST /runs/{id}/fork): its input began with that run's
	// conversation up to the end of that step.
	ForkedFrom *ForkRef `json:"forked_from,omitempty"`
	// SubAgents are the agents the run may hand work to, each offered to
	// its model as a tool, at the version pinned when the run was created.
	SubAgents []SubAgent `json:"sub_agents,omitempty"`
	// Parent is the run whose call of a sub-agent started this run, if
	// any: the run's end answers that call.
	Parent *ParentRef `json:"parent,omitempty"`
	// Schedule is the schedule, and its slot, that started this run, if
	// one did (docs/schedules.md).
	Schedule *ScheduleRef `json:"schedule,omitempty"`
	// Thinking, when positive, asks the model for extended thinking with a
	// budget of that many tokens (POST /runs "thinking.budget_tokens").
	Thinking int `json:"thinking,omitempty"`
	// Fallbacks are the models a step's call moves to, in order, when the
	// run's model (Run.Model, the first of POST /runs "models") fails
	// with a retryable error after its retries (docs/providers.md).
	Fallbacks []string `json:"fallbacks,omitempty"`
	// MaxCost, when positive, caps what the run's model calls may cost, in
	// the currency of the models file's prices: past it the run ends
	// failed with ReasonBudgetExceeded before its next call.
	MaxCost float64 `json:"max_cost,omitempty"`
	// User is the run's end user (POST /runs "user", the Responses API's
	// user or safety_identifier), as its client names them: the {{user}}
	// of its memory's namespaces; "": none.
	User string `json:"user,omitempty"`
	// Memory is the memory the run may use, its namespaces filled; nil:
	// none.
	Memory *RunMemory `json:"memory,omitempty"`
	// Managed is its tenant's managed instructions as they were when the
	// run was created, which its system prompt begins with; nil: none.
	Managed *RunManaged `json:"managed,omitempty"`
	// Pinned is the memory of the run's pinned namespaces as it was when
	// the run was created, which its system prompt holds after its
	// instructions; nil: none.
	Pinned *RunPinned `json:"pinned,omitempty"`
	// Eval is the evaluation the run is one of, and what answers its tool
	// calls there (docs/evals.md); nil: none.
	Eval *RunEval `json:"eval,omitempty"`
}

// Models is the run's fallback chain: its model, then its fallbacks.
func (r Run) Models() []string { return append([]string{r.Model}, r.Params.Fallbacks...) }

// ForkRef names the run and step a fork started from.
type ForkRef struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
}

// ApprovalDecision is a client's decision on a call that waits for its
// approval in a run that ended there (RunParams.Approvals). The creation
// of the run that carries it fills in the call as it was planned.
type ApprovalDecision struct {
	ToolCallID string `json:"tool_call_id"`
	Approve    bool   `json:"approve"`
	Reason     string `json:"reason,omitempty"`

	CallID         string          `json:"call_id,omitempty"`
	Name           string          `json:"name,omitempty"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	Effect         Effect          `json:"effect,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

// Sampling is how the model is asked to sample a run's answers; a zero field leaves the model's default.
type Sampling struct {
	MaxOutputTokens int           `json:"max_output_tokens,omitempty"` // > 0: the cap of each model call's output tokens
	Temperature     *float64      `json:"temperature,omitempty"`
	TopP            *float64      `json:"top_p,omitempty"`
	Format          *OutputFormat `json:"format,omitempty"` // nil: plain text
	// ToolChoice is whether the model may, must or must not call tools,
	// or which one it must; nil: it chooses. One that makes the model call
	// a tool (required, or a named tool) holds for the run's first model
	// answer only: past it, the model chooses, else it could never answer.
	ToolChoice *ToolChoice `json:"tool_choice,omitempty"`
	// ParallelToolCalls, when false, asks the model for one call at a
	// time; nil: the model's default.
	ParallelToolCalls *bool `json:"parallel_tool_calls,omitempty"`
	// ReasoningEffort asks a reasoning model for that much thinking
	// (ReasoningEfforts); "": the model's default.
	ReasoningEffort string `json:"reasoning_effort,omitempty"`
}

// ReasoningEfforts are the values of Sampling.ReasoningEffort, least first.
var ReasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// ToolChoice is Mode ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired,
// or ToolChoiceTool with the Name of the tool the model must call.
type ToolChoice struct {
	Mode string `json:"mode"`
	Name string `json:"name,omitempty"`
}

// Modes of a ToolChoice.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
	ToolChoiceTool     = "tool"
)

// Forces reports whether c makes the model call a tool.
func (c *ToolChoice) Forces() bool {
	return c != nil && (c.Mode == ToolChoiceRequired || c.Mode == ToolChoiceTool)
}

// OutputFormat asks the model for structured output.
type OutputFormat struct {
	Type        string          `json:"type"` // OutputText, OutputJSONObject or OutputJSONSchema
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Output format types: plain text (the default), any JSON object, or JSON
// that a schema describes.
const (
	OutputText       = "text"
	OutputJSONObject = "json_object"
	OutputJSONSchema = "json_schema"
)

// ClientTool is a tool a run's client runs, as the model sees it.
type ClientTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ClientTool returns the run's client tool named name.
func (p RunParams) ClientTool(name string) (ClientTool, bool) {
	for _, t := range p.ClientTools {
		if t.Name == name {
			return t, true
		}
	}
	return ClientTool{}, false
}

// LoopLimits stop a model that keeps asking for the same tool call (the
// same name and arguments). 0 in a run stored before they existed takes
// the default.
type LoopLimits struct {
	// FailuresInARow: when the last this many identical calls all failed,
	// the model's asking for it again ends the run tool_error (default 3).
	FailuresInARow int `json:"failures_in_a_row"`
	// IdenticalCalls: the model's asking for a call for the this-many-th
	// time in the run ends it loop_detected (default 5).
	IdenticalCalls int `json:"identical_calls"`
}

// Defaults of LoopLimits.
const (
	DefaultFailuresInARow = 3
	DefaultIdenticalCalls = 5
)

// OrDefaults returns l with its zero fields at their defaults.
func (l LoopLimits) OrDefaults() LoopLimits {
	if l.FailuresInARow <= 0 {
		l.FailuresInARow = DefaultFailuresInARow
	}
	if l.IdenticalCalls <= 0 {
		l.IdenticalCalls = DefaultIdenticalCalls
	}
	return l
}

// Run is a row of runs.
type Run struct {
	ID                string
	TenantID          string
	ConversationID    string
	Status            RunStatus
	TerminalReason    Reason
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
	// StallClaims counts the takeovers of the running run (its worker died
	// or lost its lease) since it last started a new step.
	StallClaims int
	// CreatedBy, CancelledBy and ResumedBy are the actors (key:<prefix>,
	// oidc:<subject> or local) who created the run, asked for its cancel,
	// and last queued it again (a resume or a decision); empty when
	// unknown or never.
	CreatedBy, CancelledBy, ResumedBy string
	// InputsPending counts the inputs sent to the run that it has yet to
	// apply; InputsUnapplied those it ended without, not yet carried into
	// its conversation's next run.
	InputsPending, InputsUnapplied int
	// InputText is the text of what the run was asked, as a list shows
	// it (RunList: its first message's, cut at InputPreviewLen
	// characters) or a run's page (RunInputText: every message of its
	// input); empty where it was not read.
	InputText string
	// Output is the parts of a completed run's final assistant message
	// (JSON); nil otherwise.
	Output json.RawMessage
}

// Conversation is a row of conversations.
type Conversation struct {
	ID        string
	TenantID  string
	Title     string
	Metadata  json.RawMessage
	ChatID    string // the AI SDK chat it is the conversation of, or ""
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Message is a row of messages.
type Message struct {
	ID             string
	ConversationID string
	RunID          string
	Seq            int
	Role           Role
	Content        []Part
	Status         MessageStatus
	CreatedAt      time.Time
}

// Step is a row of steps.
type Step struct {
	ID            string
	RunID         string
	Seq           int
	Status        StepStatus
	FinishReason  FinishReason
	Transition    Transition
	ModelAttempts int
	Usage         Usage
	Error         json.RawMessage
	StartedAt     time.Time
	FinishedAt    *time.Time
	// Model is the model the step's calls go to when it is not the run's
	// own (Run.Model): the fallback it moved to; "" for the run's.
	Model string
}

// FirstStep is a run's first step as its claim (or its creation, claimed)
// starts it at at, for a RunState kept in memory.
func FirstStep(runID, stepID string, at time.Time) Step {
	return Step{ID: stepID, RunID: runID, Seq: 1, Status: StepRunning, ModelAttempts: 1, StartedAt: at}
}

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
	Effect         Effect
	Status         CallStatus
	Result         json.RawMessage
	Error          json.RawMessage
	Attempts       int
	CreatedAt      time.Time
	FinishedAt     *time.Time
	Policy         json.RawMessage // the policy decision on the call, when a policy decided
}

// Attempt is a row of tool_attempts.
type Attempt struct {
	ID         string
	ToolCallID string
	N          int
	Status     AttemptStatus
	Error      json.RawMessage
	Worker     string
	Epoch      int64
	StartedAt  time.Time
	FinishedAt *time.Time
	// ArgumentsSHA256 and ResultSHA256 are the attempt's receipt (hex): of
	// the arguments the tool was given and of the result it returned, as
	// bytes at execution; empty when not recorded.
	ArgumentsSHA256, ResultSHA256 string
}

// Event is a row of run_events. Data is the full JSON envelope, exactly as
// it is sent to clients.
type Event struct {
	RunID     string
	Seq       int64
	Type      EventType
	Data      json.RawMessage
	CreatedAt time.Time
}

// OutboxEntry is a row of the outbox: an event that told whoever waits on a
// run that it stopped (OutboxEventTypes), written in the event's own
// transaction. Its identity, stable across readers and retries, is its run
// and seq.
type OutboxEntry struct {
	RunID     string
	TenantID  string
	EventType EventType
	Seq       int64
	CreatedAt time.Time
}
