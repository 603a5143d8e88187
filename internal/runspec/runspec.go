package runspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/tools"
)

// Limits of a request beyond its transport's own (a body's size).
const (
	MaxMetadataBytes = 16 << 10
	MaxModelLen      = 256
	// MaxInputMessages caps the messages of a run's input; the body's size
	// (AGENTD_MAX_BODY_BYTES) caps their text.
	MaxInputMessages = 1000
	// MaxClientTools caps a run's client tools.
	MaxClientTools = 64
	// MaxDescriptionBytes caps a client tool's description: coding agents
	// describe their tools at length (Codex's spawn_agent takes 5 KB).
	MaxDescriptionBytes = 32 << 10
	// MaxLoopLimit caps each of a run's loop limits.
	MaxLoopLimit = 1000
	// MaxCompactThreshold caps a run's compaction threshold, in tokens:
	// far above any model's window.
	MaxCompactThreshold = 100_000_000
)

// Request is what a client asked of a new run, as a transport decoded it:
// a nil pointer is a field the client did not send, which takes the
// server's default. Ids are the transport's to parse: ConversationID is
// canonical or empty.
type Request struct {
	ConversationID string // empty: a new conversation
	// Input is the run's input messages, in order; InputText says that it
	// came as one text (one user message), which errors then name "input".
	Input        []agentd.InputMessage
	InputText    bool
	Model        *string
	Instructions *string
	Tools        *[]string // nil: every tool of the server; empty: none
	// SubAgents name the tenant's agents the run may hand work to (the
	// "tools" list's agent tools); the door resolves them to versions
	// (agentd.RunParams.SubAgents). They come and go with Tools.
	SubAgents []string
	// Detached name those of SubAgents the run does not wait for.
	Detached     []string
	ClientTools  *[]ClientTool
	MaxSteps     *int
	Timeouts     *Timeouts
	OnDisconnect *string
	IfBusy       *string
	OnQuota      *string
	CompactAt    *float64
	// CompactThreshold is the prompt size, in tokens, past which the run
	// compacts (agentd.RunParams.CompactThreshold); nil: its model's.
	CompactThreshold *int
	LoopLimits       *LoopLimits
	Sampling         *Sampling       // nil: the model's defaults
	Metadata         json.RawMessage // a JSON object, or nothing
	// Echo is kept with the run as it is (agentd.RunParams.Echo): the
	// door that sends it wrote it.
	Echo json.RawMessage
	// ClientToolsEnd: the run ends when its model calls client tools
	// (agentd.RunParams.ClientToolsEnd).
	ClientToolsEnd bool
	// NoCompaction: the run never compacts (agentd.RunParams.NoCompaction).
	NoCompaction bool
	// ApprovalTools are tools whose calls wait for an approval in the run
	// (agentd.RunParams.ApprovalTools); each must be offered to it.
	ApprovalTools []string
	// Approvals decide the calls that the conversation's previous run
	// ended at waiting for an approval (agentd.RunParams.Approvals).
	Approvals []agentd.ApprovalDecision
	// CacheKey is the run's prompt cache key (agentd.RunParams.CacheKey).
	CacheKey *string
	// Unstored: the run is deleted once it ended (agentd.RunParams.Unstored);
	// only in a new conversation.
	Unstored bool
	// Agent is the agent version the request starts from (Over put its
	// definition under the run's fields); nil: none.
	Agent *agentd.AgentRef
	// Variables fill the {{name}} placeholders of the instructions of a run
	// that gives them or starts from an agent; nil: none given.
	Variables map[string]string
	// Models is the run's fallback chain, its model first; nil: Model
	// alone. With both, Model must be its first.
	Models *[]string
	// Thinking is the budget of the model's extended thinking, in tokens;
	// nil or 0: none.
	Thinking *int
	// MaxCost caps what the run's model calls may cost; nil: no cap.
	MaxCost *float64
	// User is the run's end user (agentd.RunParams.User); nil: none.
	User *string
	// Memory is the memory the run may use, its namespaces templates that
	// the builder fills; nil: none.
	Memory *Memory
	// PartField names the content (j < 0) or part j of input message i as
	// the door's wire format does (messages[3].parts[1]), in the errors
	// about texts, images and files of messages given as parts; nil:
	// input[i].content and input[i].content[j].
	PartField func(i, j int) string
	// Registry, when set, is the registry of the run's tenant (the
	// server's tools and the tenant's own), which its tools are checked
	// against in place of the builder's.
	Registry *tools.Registry
}

// ClientTool is one of a run's client tools, as asked.
type ClientTool struct {
	Name        *string
	Description *string
	Parameters  json.RawMessage // a JSON Schema of an object; nothing: no arguments
}

// Timeouts are a run's timeouts as asked, in milliseconds: 0 asks for the
// server's ceiling.
type Timeouts struct {
	TotalMS, StepMS, IdleMS, ToolMS, ActionMS *int64
}

// LoopLimits are a run's loop limits as asked.
type LoopLimits struct {
	FailuresInARow, IdenticalCalls *int
}

// Builder turns requests into run specs with the server's defaults and
// ceilings applied. It is safe for concurrent use.
type Builder struct {
	d     Defaults
	tools *tools.Registry // nil: no tools
}

// New returns a Builder with defaults d (its zero fields at their
// documented defaults) and the server's tools, which a run's tools are
// checked against (nil: none).
func New(d Defaults, reg *tools.Registry) *Builder {
	return &Builder{d: d.resolved(), tools: reg}
}

// Defaults returns the builder's defaults and ceilings, resolved.
func (b *Builder) Defaults() Defaults { return b.d }

// MaxCacheKeyBytes caps a run's prompt cache key.
const MaxCacheKeyBytes = 256

// Build checks req and fills in what it left out. Its errors are a
// *FieldError, or an *UnknownToolError for a tool the server does not have:
// the request is refused, naming the field.
func (b *Builder) Build(req Request) (agentd.RunSpec, error) {
	if req.Registry != nil {
		tenant := *b
		tenant.tools = req.Registry
		b = &tenant
	}
	spec := agentd.RunSpec{ConversationID: req.ConversationID}
	var err error
	if spec.Input, err = input(req.Input, req.InputText, len(req.Approvals) > 0); err != nil {
		return spec, err
	}
	if spec.Model, err = b.model(req.Model); err != nil {
		return spec, err
	}
	var fallbacks []string
	if spec.Model, fallbacks, err = b.models(req.Model, spec.Model, req.Models); err != nil {
		return spec, err
	}
	if spec.Params, err = b.params(req); err != nil {
		return spec, err
	}
	spec.Params.Fallbacks = fallbacks
	if spec.Params.User, err = user(req.User); err != nil {
		return spec, err
	}
	if spec.Params.Memory, err = memory(req.Memory, spec.Params.User, req.Variables); err != nil {
		return spec, err
	}
	if err := b.attachments(req, append([]string{spec.Model}, fallbacks...)); err != nil {
		return spec, err
	}
	if spec.OnQuota, err = OneOf("on_quota", req.OnQuota, agentd.OnQuotaPolicies()); err != nil {
		return spec, err
	}
	return spec, nil
}

// params builds the run's parameters beyond its input and model.
func (b *Builder) params(req Request) (agentd.RunParams, error) {
	p := agentd.RunParams{Agent: req.Agent}
	if req.Agent != nil || req.Variables != nil {
		p.Variables = req.Variables
	}
	var err error
	if p.Instructions, err = instructions(req); err != nil {
		return p, err
	}
	if p.Tools, err = b.toolNames(req.Tools); err != nil {
		return p, err
	}
	if p.ClientTools, err = b.clientTools(req.ClientTools); err != nil {
		return p, err
	}
	if p.MaxSteps, err = b.maxSteps(req.MaxSteps); err != nil {
		return p, err
	}
	if p.Timeouts, err = b.timeouts(req.Timeouts); err != nil {
		return p, err
	}
	if p.OnDisconnect, err = OneOf("on_disconnect", req.OnDisconnect, agentd.OnDisconnectPolicies()); err != nil {
		return p, err
	}
	if p.IfBusy, err = OneOf("if_busy", req.IfBusy, agentd.IfBusyPolicies()); err != nil {
		return p, err
	}
	if p.CompactAt, p.CompactThreshold, err = compaction(req); err != nil {
		return p, err
	}
	if p.LoopLimits, err = loopLimits(req.LoopLimits); err != nil {
		return p, err
	}
	if p.Sampling, err = sampling(req.Sampling); err != nil {
		return p, err
	}
	if err := checkToolChoice(p); err != nil {
		return p, err
	}
	if p.Metadata, err = Metadata(req.Metadata); err != nil {
		return p, err
	}
	p.Echo = req.Echo
	p.NoCompaction = req.NoCompaction
	if req.Unstored && req.ConversationID != "" {
		return p, fieldError("unstored", "a run that is not kept starts a conversation of its own")
	}
	p.Unstored = req.Unstored
	if k := req.CacheKey; k != nil {
		if len(*k) > MaxCacheKeyBytes {
			return p, fieldError("cache_key", "must be at most %d bytes", MaxCacheKeyBytes)
		}
		if err := Storable("cache_key", *k); err != nil {
			return p, err
		}
		p.CacheKey = *k
	}
	for _, name := range req.ApprovalTools {
		if p.Tools != nil && !slices.Contains(p.Tools, name) {
			return p, fieldError("approval_tools", "%q is not a tool offered to the run", name)
		}
	}
	p.ApprovalTools = req.ApprovalTools
	p.ClientToolsEnd = req.ClientToolsEnd && (len(p.ClientTools) > 0 || len(p.ApprovalTools) > 0)
	if err := checkApprovals(req.Approvals); err != nil {
		return p, err
	}
	p.Approvals = req.Approvals
	if p.Thinking, err = thinking(req.Thinking); err != nil {
		return p, err
	}
	p.MaxCost, err = maxCost(req.MaxCost)
	return p, err
}

// compaction checks where a run compacts its conversation: compact_at, a
// fraction of its model's window, and compact_threshold, in tokens; 0 for
// what the request leaves out.
func compaction(req Request) (at float64, threshold int, err error) {
	if req.CompactAt != nil {
		if *req.CompactAt <= 0 || *req.CompactAt >= 1 {
			return 0, 0, fieldError("compact_at", "must be a fraction between 0 and 1 (exclusive), such as 0.8")
		}
		at = *req.CompactAt
	}
	if n := req.CompactThreshold; n != nil {
		if *n < 1 || *n > MaxCompactThreshold {
			return 0, 0, fieldError("compact_threshold", "must be a number of tokens from 1 to %d", MaxCompactThreshold)
		}
		threshold = *n
	}
	return at, threshold, nil
}

// checkApprovals checks the decisions a request brings.
func checkApprovals(ds []agentd.ApprovalDecision) error {
	for i, d := range ds {
		if d.ToolCallID == "" {
			return fieldError(fmt.Sprintf("approvals[%d]", i), "names no tool call")
		}
		if err := Storable(fmt.Sprintf("approvals[%d].reason", i), d.Reason); err != nil {
			return err
		}
	}
	return nil
}

// maxCost checks a run's cost cap: a positive number, or nil for none.
func maxCost(c *float64) (float64, error) {
	if c == nil {
		return 0, nil
	}
	if !(*c > 0) || math.IsInf(*c, 0) {
		return 0, fieldError("max_cost", "must be a positive number, in the currency of the models file's prices")
	}
	return *c, nil
}

// Bounds of a run's thinking budget and fallback chain.
const (
	MinThinkingTokens = 1024
	MaxThinkingTokens = 128000
	MaxModels         = 5
)

// thinking checks a run's thinking budget: 0 for none, or from
// MinThinkingTokens to MaxThinkingTokens.
func thinking(n *int) (int, error) {
	if n == nil || *n == 0 {
		return 0, nil
	}
	if *n < MinThinkingTokens || *n > MaxThinkingTokens {
		return 0, fieldError("thinking.budget_tokens", "must be between %d and %d (or 0 for no thinking)",
			MinThinkingTokens, MaxThinkingTokens)
	}
	return *n, nil
}

// models checks a run's fallback chain and returns its first model and
// the others; without a chain, model (what b.model made of asked) alone.
func (b *Builder) models(asked *string, model string, chain *[]string) (string, []string, error) {
	if chain == nil {
		return model, nil, nil
	}
	list := *chain
	if len(list) == 0 || len(list) > MaxModels {
		return "", nil, fieldError("models", "must list from 1 to %d models, the first tried first", MaxModels)
	}
	for i, m := range list {
		if _, err := b.model(&m); err != nil {
			return "", nil, fieldError(fmt.Sprintf("models[%d]", i), "must be a non-empty string of at most %d bytes", MaxModelLen)
		}
		if slices.Index(list, m) != i {
			return "", nil, fieldError(fmt.Sprintf("models[%d]", i), "%q is listed twice", m)
		}
	}
	if asked != nil && *asked != list[0] {
		return "", nil, fieldError("model", "must be the first of models (%q), or left out", list[0])
	}
	return list[0], slices.Clone(list[1:]), nil
}

// instructions checks a run's instructions, and fills their placeholders
// from its variables when it gives them or starts from an agent.
func instructions(req Request) (string, error) {
	var text string
	if req.Instructions != nil {
		if err := Storable("instructions", *req.Instructions); err != nil {
			return "", err
		}
		text = *req.Instructions
	}
	if req.Agent == nil && req.Variables == nil {
		return text, nil
	}
	return fill(text, req.Variables)
}

// input checks a run's input messages: at least one and at most
// MaxInputMessages, each of role user, assistant or system, with a text
// that can be stored: a non-empty one, or for input sent as one text (text),
// one that is not all white space.
func input(msgs []agentd.InputMessage, text, approvals bool) ([]agentd.InputMessage, error) {
	if approvals {
		// The decided calls' results follow their model output: nothing
		// but the outputs of the other calls it asked may come between.
		for i, m := range msgs {
			if m.Role != agentd.RoleTool || m.ToolCallID == "" || len(m.ToolCalls) > 0 {
				return nil, fieldError(fmt.Sprintf("input[%d]", i), "a request that decides approvals may hold only those and the outputs "+
					"of the calls its conversation waits for: send new messages with the next request")
			}
		}
		if len(msgs) == 0 {
			return nil, nil
		}
	}
	switch {
	case len(msgs) == 0:
		return nil, fieldError("input", "is required: a non-empty string or a non-empty array of messages")
	case len(msgs) > MaxInputMessages:
		return nil, fieldError("input", "must hold at most %d messages, not %d", MaxInputMessages, len(msgs))
	case text:
		if len(msgs) != 1 || msgs[0].Role != agentd.RoleUser {
			return nil, fieldError("input", "must be one user message when it is a text")
		}
		if strings.TrimSpace(msgs[0].Content) == "" {
			return nil, fieldError("input", "must not be empty")
		}
		return msgs, Storable("input", msgs[0].Content)
	}
	// The calls of the input's assistant messages that no output answered
	// yet: an output answers one of them, or (before any other message) a
	// call the conversation waits for, which the store checks.
	open := map[string]bool{}
	other := false // a message that is not an output came before
	for i, m := range msgs {
		field := fmt.Sprintf("input[%d]", i)
		if m.Role == agentd.RoleTool && m.ToolCallID != "" && other && !open[m.ToolCallID] {
			return nil, fieldError(field+".call_id", "%q answers no call of the input before it", m.ToolCallID)
		}
		if m.Role != agentd.RoleTool {
			other = true
		}
		if m.Role != agentd.RoleTool && len(open) > 0 {
			for id := range open {
				return nil, fieldError(field, "comes before the output of call %s: each call's output must follow it", id)
			}
		}
		if err := inputMessage(field, m, open); err != nil {
			return nil, err
		}
	}
	for id := range open {
		return nil, fieldError("input", "has no output for call %s: each call of the input needs one", id)
	}
	return msgs, nil
}

// inputMessage checks one message of an input of messages. The calls of an
// assistant message go into open; an output takes its call out of it.
func inputMessage(field string, m agentd.InputMessage, open map[string]bool) error {
	for _, p := range m.Reasoning {
		if m.Role != agentd.RoleAssistant || p.Type != agentd.PartReasoning {
			return fieldError(field, "only an assistant message has reasoning")
		}
		for _, v := range []string{p.Text, p.Signature, p.Data} {
			if err := Storable(field+".reasoning", v); err != nil {
				return err
			}
		}
	}
	if len(m.ToolCalls) > 0 {
		if m.Role != agentd.RoleAssistant {
			return fieldError(field, "only an assistant message has tool calls")
		}
		for j, c := range m.ToolCalls {
			cf := fmt.Sprintf("%s.tool_calls[%d]", field, j)
			if c.ID == "" || c.Name == "" {
				return fieldError(cf, "needs its call id and name")
			}
			for _, v := range []string{c.ID, c.Name, c.Arguments} {
				if err := Storable(cf, v); err != nil {
					return err
				}
			}
			if c.Arguments != "" && !json.Valid([]byte(c.Arguments)) {
				return fieldError(cf+".arguments", "must be JSON text")
			}
			open[c.ID] = true
		}
		return nil
	}
	switch m.Role {
	case agentd.RoleUser, agentd.RoleAssistant, agentd.RoleSystem:
	case agentd.RoleTool:
		// An output of a call of the input, or of a client call the
		// conversation waits for (the Responses API's
		// function_call_output); the store checks that one waits.
		delete(open, m.ToolCallID)
		if m.ToolCallID == "" { // what only the Responses API's door sends
			return fieldError(field+".role", "must be user, assistant or system, not %q", m.Role)
		}
		if err := Storable(field+".call_id", m.ToolCallID); err != nil {
			return err
		}
		return Storable(field+".output", m.Content)
	default:
		return fieldError(field+".role", "must be user, assistant or system, not %q", m.Role)
	}
	if len(m.Parts) > 0 {
		return nil // the builder checks parts (attachments)
	}
	if m.Content == "" {
		return fieldError(field+".content", "is required: a non-empty string")
	}
	return Storable(field+".content", m.Content)
}

func (b *Builder) model(m *string) (string, error) {
	if m == nil {
		if b.d.Model == "" {
			return "", fieldError("model", "is required: the server has no default model")
		}
		return b.d.Model, nil
	}
	if strings.TrimSpace(*m) == "" || len(*m) > MaxModelLen {
		return "", fieldError("model", "must be a non-empty string of at most %d bytes", MaxModelLen)
	}
	if err := Storable("model", *m); err != nil {
		return "", err
	}
	return *m, nil
}

func (b *Builder) maxSteps(n *int) (int, error) {
	if n == nil {
		return b.d.MaxSteps, nil
	}
	if *n < 1 || *n > b.d.MaxStepsLimit {
		return 0, fieldError("max_steps", "must be between 1 and %d", b.d.MaxStepsLimit)
	}
	return *n, nil
}

// toolNames checks the requested tools: nil (absent) means every
// registered tool, an empty list none; a name listed twice counts once.
func (b *Builder) toolNames(names *[]string) ([]string, error) {
	if names == nil {
		return nil, nil
	}
	out := make([]string, 0, len(*names))
	for _, n := range *names {
		if !b.serverTool(n) {
			return nil, &UnknownToolError{Tool: n}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (b *Builder) serverTool(name string) bool {
	if b.tools == nil {
		return false
	}
	_, ok := b.tools.Get(name)
	return ok
}

// clientTools checks a run's client tools: names as tool names go, not
// the name of a server tool nor used twice, descriptions of at most
// MaxDescriptionBytes, parameters a JSON object schema (absent: no
// arguments).
func (b *Builder) clientTools(req *[]ClientTool) ([]agentd.ClientTool, error) {
	if req == nil {
		return nil, nil
	}
	if len(*req) > MaxClientTools {
		return nil, fieldError("client_tools", "must hold at most %d tools", MaxClientTools)
	}
	out := make([]agentd.ClientTool, 0, len(*req))
	seen := map[string]bool{}
	for i, t := range *req {
		ct, err := b.clientTool(i, t, seen)
		if err != nil {
			return nil, err
		}
		out = append(out, ct)
	}
	return out, nil
}

// clientTool checks the i-th client tool; seen holds the names before it.
func (b *Builder) clientTool(i int, t ClientTool, seen map[string]bool) (agentd.ClientTool, error) {
	field := func(name string) string { return fmt.Sprintf("client_tools[%d].%s", i, name) }
	if t.Name == nil || !tools.ValidName(*t.Name) {
		return agentd.ClientTool{}, fieldError(field("name"), "must match ^[a-zA-Z0-9_-]{1,64}$")
	}
	name := *t.Name
	if seen[name] {
		return agentd.ClientTool{}, fieldError(field("name"), "%q is used twice", name)
	}
	seen[name] = true
	if b.serverTool(name) {
		return agentd.ClientTool{}, fieldError(field("name"), "%q is the name of a server tool (GET /tools)", name)
	}
	ct := agentd.ClientTool{Name: name, Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}
	if t.Description != nil {
		if len(*t.Description) > MaxDescriptionBytes {
			return agentd.ClientTool{}, fieldError(field("description"), "must be at most %d bytes", MaxDescriptionBytes)
		}
		if err := Storable(field("description"), *t.Description); err != nil {
			return agentd.ClientTool{}, err
		}
		ct.Description = *t.Description
	}
	if !IsNull(t.Parameters) {
		if err := StorableJSON(field("parameters"), t.Parameters); err != nil {
			return agentd.ClientTool{}, err
		}
		if err := tools.CheckParameters(name, t.Parameters); err != nil {
			return agentd.ClientTool{}, fieldError(field("parameters"), "%v", err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, t.Parameters); err != nil {
			return agentd.ClientTool{}, fieldError(field("parameters"), "is not JSON")
		}
		ct.Parameters = buf.Bytes()
	}
	return ct, nil
}

// timeouts checks the requested timeouts against the server's ceilings: a
// field may not exceed its ceiling, and 0 asks for the ceiling itself.
func (b *Builder) timeouts(t *Timeouts) (agentd.Timeouts, error) {
	out, ceil := b.d.Timeouts, b.d.MaxTimeouts
	if t == nil {
		return out, nil
	}
	for _, f := range []struct {
		name string
		in   *int64
		max  int64
		out  *int64
	}{
		{"timeouts.total_ms", t.TotalMS, ceil.TotalMS, &out.TotalMS},
		{"timeouts.step_ms", t.StepMS, ceil.StepMS, &out.StepMS},
		{"timeouts.idle_ms", t.IdleMS, ceil.IdleMS, &out.IdleMS},
		{"timeouts.tool_ms", t.ToolMS, ceil.ToolMS, &out.ToolMS},
		{"timeouts.action_ms", t.ActionMS, ceil.ActionMS, &out.ActionMS},
	} {
		switch {
		case f.in == nil:
		case *f.in < 0 || *f.in > f.max:
			return out, fieldError(f.name, "must be between 0 (the server's ceiling) and %d, the server's ceiling", f.max)
		case *f.in == 0:
			*f.out = f.max
		default:
			*f.out = *f.in
		}
	}
	return out, nil
}

// loopLimits checks the requested loop limits; absent ones take the
// defaults.
func loopLimits(l *LoopLimits) (agentd.LoopLimits, error) {
	out := agentd.LoopLimits{}.OrDefaults()
	if l == nil {
		return out, nil
	}
	for _, f := range []struct {
		name string
		in   *int
		out  *int
	}{
		{"loop_limits.failures_in_a_row", l.FailuresInARow, &out.FailuresInARow},
		{"loop_limits.identical_calls", l.IdenticalCalls, &out.IdenticalCalls},
	} {
		if f.in == nil {
			continue
		}
		if *f.in < 1 || *f.in > MaxLoopLimit {
			return out, fieldError(f.name, "must be between 1 and %d", MaxLoopLimit)
		}
		*f.out = *f.in
	}
	return out, nil
}

// OneOf checks an optional enum field against values; absent gives the
// first value, which is the default.
func OneOf[T ~string](field string, v *string, values []T) (T, error) {
	if v == nil {
		return values[0], nil
	}
	if slices.Contains(values, T(*v)) {
		return T(*v), nil
	}
	names := make([]string, len(values))
	for i, x := range values {
		names[i] = string(x)
	}
	return "", fieldError(field, "must be one of %s, not %q", strings.Join(names, ", "), *v)
}

// Metadata checks a metadata field: nothing, or a JSON object of at most
// MaxMetadataBytes once compacted, that can be stored. It returns the
// compacted object, or nil.
func Metadata(raw json.RawMessage) (json.RawMessage, error) {
	if IsNull(raw) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] != '{' {
		return nil, fieldError("metadata", "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fieldError("metadata", "must be a JSON object")
	}
	if buf.Len() > MaxMetadataBytes {
		return nil, fieldError("metadata", "must be at most %d bytes of JSON", MaxMetadataBytes)
	}
	if err := StorableJSON("metadata", buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// IsNull reports whether raw is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// Storable refuses a string field that cannot be stored as it is (a NUL
// character, invalid UTF-8): agentd keeps what a client sends, or refuses
// it.
func Storable(field, s string) error {
	if problem := clean.TextProblem(s); problem != "" {
		return fieldError(field, "%s; send valid UTF-8 text without NUL characters", problem)
	}
	return nil
}

// StorableJSON refuses a JSON field that cannot be stored as it is: a NUL
// character, a lone surrogate escape, invalid UTF-8, or a number outside
// float64's range (send it as a string).
func StorableJSON(field string, raw []byte) error {
	if problem := clean.JSONProblem(raw); problem != "" {
		return fieldError(field, "%s; numbers must fit a float64 (send others as strings) and strings must be valid Unicode without NUL", problem)
	}
	return nil
}

// TextAsSent refuses a request body (JSON) that holds a string which
// decoding would change: invalid UTF-8, or the \u escape of a lone
// surrogate, both of which encoding/json turns into U+FFFD without a word
// (clean.StringProblem). agentd keeps the text a client sends, or refuses
// it, so such a body is a *FieldError naming the field where the string
// is: its path in the body (input[1].content), cut after the first of
// jsonFields, the fields whose values are JSON kept whole (metadata), with
// the string's own place in the message. A door calls it on the body as
// sent, before decoding its fields: a decoded string no longer shows it.
func TextAsSent(body []byte, jsonFields ...string) error {
	at, problem := clean.StringProblem(body)
	if problem == "" {
		return nil
	}
	field := at
	for i, step := range at {
		if name, ok := step.(string); ok && slices.Contains(jsonFields, name) {
			field = at[:i+1]
			break
		}
	}
	if len(field) < len(at) {
		problem += " (at " + at.String() + ")"
	}
	name := field.String()
	if name == "" {
		name = "body"
	}
	return fieldError(name, "%s; send text as valid UTF-8, and a character outside the BMP as a surrogate pair", problem)
}

// MaxSteeringMessages caps the messages of one input sent to a run under
// way.
const MaxSteeringMessages = 16

// Steering checks the messages of an input sent to a run under way whose
// chain is models: one to MaxSteeringMessages messages, each of role user
// with a text or parts that can be stored, their images and files taken
// by each model. text says that the input came as one text.
func (b *Builder) Steering(msgs []agentd.InputMessage, text bool, models []string) error {
	if len(msgs) > MaxSteeringMessages {
		return fieldError("input", "must hold at most %d messages, not %d", MaxSteeringMessages, len(msgs))
	}
	for i, m := range msgs {
		if m.Role != agentd.RoleUser || m.ToolCallID != "" || len(m.ToolCalls) > 0 {
			return fieldError(fmt.Sprintf("input[%d].role", i), "must be user: input to a run under way is what its user says")
		}
	}
	if _, err := input(msgs, text, false); err != nil {
		return err
	}
	return b.attachments(Request{Input: msgs}, models)
}

// CheckInput checks the messages of an input as the builder checks a new
// run's (text: it came as one text), with their images and files, without
// building a run: what a dataset's case keeps for the runs it will start.
// A model's taking the images and files is checked when a run is built.
func (b *Builder) CheckInput(msgs []agentd.InputMessage, text bool) error {
	if _, err := input(msgs, text, false); err != nil {
		return err
	}
	return b.attachments(Request{Input: msgs}, nil)
}

// CheckVariables checks a run's variables as the builder does (names,
// count, sizes), without instructions to fill.
func CheckVariables(vars map[string]string) error {
	_, err := fill("", vars)
	return err
}

// CheckUser checks a run's end user as the builder does.
func CheckUser(u string) error {
	_, err := user(&u)
	return err
}
