package client

import (
	"encoding/json"
	"time"

	"github.com/agentd/agentd"
)

// The answers of the API are the domain's own types (package agentd, the
// module's root), which the server builds its answers from: these names
// are aliases of them, so that the SDK and the server cannot disagree on a
// shape. Statuses, reasons, effects, event types and the rest are typed,
// with the domain's constants: run.Status == agentd.StatusCompleted,
// ev.Type == agentd.EventMessageDelta.

// Run is a run as agentd shows it (GET /runs/{id}); Ended reports whether
// it has stopped.
type Run = agentd.RunView

// Timeouts bound a run, in milliseconds (0 in a request: the server's
// ceiling).
type Timeouts = agentd.Timeouts

// LoopLimits stop a run stuck on a tool call. In a CreateRun, a zero field
// takes the server's default.
type LoopLimits = agentd.LoopLimits

// Usage counts a run's or a step's tokens.
type Usage = agentd.Usage

// Part is a part of a message's content.
type Part = agentd.Part

// RequiredAction is what a run in requires_action waits for.
type RequiredAction = agentd.RequiredAction

// ErrorDetail says why a run, a step, a call or an attempt failed.
type ErrorDetail = agentd.ErrorDetail

// Step is one step of a run, with its tool calls.
type Step = agentd.StepView

// ToolCall is a tool call of a step, with its attempts.
type ToolCall = agentd.ToolCallView

// Attempt is one attempt of a tool call.
type Attempt = agentd.AttemptView

// Conversation is a conversation of runs.
type Conversation = agentd.ConversationView

// Message is a message of a conversation; Text is its text.
type Message = agentd.MessageView

// Tool is a tool a run may call.
type Tool = agentd.ToolView

// Page is a page of a list, and where the next one starts.
type Page[T any] = agentd.Page[T]

// Event is one event of a run's stream: its envelope, whose Payload decodes
// its data into the struct of its type (agentd.MessageDeltaData, ...), and
// Terminal reports whether it ends the run.
type Event = agentd.Envelope

// InputMessage is one message of a run's input: its text, Content, or
// its parts, Parts (texts, and in a user message images and files; see
// InputPart), which POST /runs takes as the message's content given as a
// list. With both, Content is sent as a text part before Parts.
type InputMessage struct {
	Role    agentd.Role // user or system
	Content string
	Parts   []InputPart
}

// CreateRun is a POST /runs request. Zero fields take the server's
// defaults.
type CreateRun struct {
	// Input is the new user message; InputMessages, when given, replaces it.
	Input          string         `json:"-"`
	InputMessages  []InputMessage `json:"-"`
	ConversationID string         `json:"conversation_id,omitempty"`
	Model          string         `json:"model,omitempty"`
	Models         []string       `json:"models,omitempty"` // in place of Model: a chain, each model's fallback the next
	Instructions   string         `json:"instructions,omitempty"`
	Tools          *[]string      `json:"tools,omitempty"` // nil: every tool; &[]string{}: none
	// SubAgents are agents of the tenant the run may hand work to, each
	// offered to the model as a tool of its name (a "tools" entry of type
	// agent), pinned at its latest version. They are tools: with Tools nil
	// the run has them and no server tool, so name the server tools to
	// keep beside them.
	SubAgents    []string            `json:"-"`
	MaxSteps     int                 `json:"max_steps,omitempty"`
	Timeouts     *Timeouts           `json:"timeouts,omitempty"`
	OnDisconnect agentd.OnDisconnect `json:"on_disconnect,omitempty"`
	// IfBusy is what to do when the conversation has a run in flight:
	// with agentd.IfBusySteer the input goes to that run, as SteerRun
	// sends it, and the answer is that run (a new run starts only when
	// none is in flight).
	IfBusy     agentd.IfBusy   `json:"if_busy,omitempty"`
	OnQuota    agentd.OnQuota  `json:"on_quota,omitempty"`
	CompactAt  float64         `json:"compact_at,omitempty"`
	LoopLimits *LoopLimits     `json:"loop_limits,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	// Agent starts the run from this agent of the tenant (its version
	// AgentVersion; 0: the latest): the fields given here override its
	// definition's.
	Agent        string `json:"agent,omitempty"`
	AgentVersion int    `json:"agent_version,omitempty"`
	// Variables fill the {{name}} placeholders of the instructions.
	Variables map[string]string `json:"variables,omitempty"`
	// User is the run's end user: the {{user}} of its memory's
	// namespaces.
	User string `json:"user,omitempty"`
	// Memory is the run's memory as POST /runs takes it: false for none,
	// or {"pinned", "search", "write", "extract"}; nothing: the agent's.
	Memory json.RawMessage `json:"memory,omitempty"`
	// Webhook, when set, is where the run's stops are delivered, beside
	// the tenant's subscriptions.
	Webhook *RunWebhook `json:"webhook,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header; empty: the
	// client makes one, and sends it again on each retry of the call.
	IdempotencyKey string `json:"-"`
	// Wait, when set, asks the server to answer once the run has settled
	// (RunView.Settled) or Wait has passed (?wait=N, whole seconds, capped
	// by the server's AGENTD_MAX_WAIT); WaitRun waits for the rest.
	Wait time.Duration `json:"-"`
}

// toolsOf is a "tools" list as POST /runs and POST /agents take it: the
// server tools' names, then each sub-agent as {"type": "agent", "agent":
// name}; nil (left out) when neither is given.
func toolsOf(names *[]string, agents []string) any {
	if len(agents) == 0 {
		if names == nil {
			return nil
		}
		return *names
	}
	out := []any{}
	if names != nil {
		for _, n := range *names {
			out = append(out, n)
		}
	}
	for _, a := range agents {
		out = append(out, map[string]string{"type": "agent", "agent": a})
	}
	return out
}

// loopLimitsRequest is LoopLimits as a request sends them: a zero field is
// left out, so that the server applies its default (it refuses a 0).
type loopLimitsRequest struct {
	FailuresInARow int `json:"failures_in_a_row,omitempty"`
	IdenticalCalls int `json:"identical_calls,omitempty"`
}

func loopLimitsOf(l *LoopLimits) *loopLimitsRequest {
	if l == nil {
		return nil
	}
	return &loopLimitsRequest{FailuresInARow: l.FailuresInARow, IdenticalCalls: l.IdenticalCalls}
}

// Action is a decision on what a run in requires_action waits for.
type Action struct {
	ToolCallID string          `json:"tool_call_id,omitempty"`
	CallID     string          `json:"call_id,omitempty"`
	Decision   agentd.Decision `json:"decision"`         // approve, reject (approvals); result, retry, fail (unknown outcomes)
	Result     json.RawMessage `json:"result,omitempty"` // with result
	Error      string          `json:"error,omitempty"`  // with reject or fail: what the model is told
	// IdempotencyKey: as in CreateRun.
	IdempotencyKey string `json:"-"`
}
