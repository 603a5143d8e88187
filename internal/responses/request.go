package responses

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// Request is the body of POST /v1/responses, as far as agentd reads it.
// Decode refuses any other field, naming it.
type Request struct {
	Model         *string           `json:"model"`
	Input         json.RawMessage   `json:"input"`
	Instructions  *string           `json:"instructions"`
	Stream        *bool             `json:"stream"`
	StreamOptions json.RawMessage   `json:"stream_options"`
	Background    *bool             `json:"background"`
	Store         *bool             `json:"store"`
	Metadata      map[string]string `json:"metadata"`
	// ClientMetadata is a client's own JSON object (Codex sends one on
	// every request; OpenAI's published API has no such field): kept with
	// the run beside its metadata, never refused for being there.
	ClientMetadata     json.RawMessage `json:"client_metadata"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Text               *struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	} `json:"text"`
	Truncation        *string         `json:"truncation"`
	User              *string         `json:"user"`
	SafetyIdentifier  *string         `json:"safety_identifier"`
	PromptCacheKey    *string         `json:"prompt_cache_key"`
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Include           []string        `json:"include"`
	ServiceTier       *string         `json:"service_tier"`
	Reasoning         json.RawMessage `json:"reasoning"`
	MaxToolCalls      *int            `json:"max_tool_calls"`
	TopLogprobs       *int            `json:"top_logprobs"`
	// ContextManagement is OpenAI's context management: a compaction
	// entry's compact_threshold is the run's (ContextManagement).
	ContextManagement json.RawMessage `json:"context_management"`
	// Prompt names an agent of the tenant (its id the agent's name, its
	// version the agent's, as a string) and the variables of its
	// instructions (strings, or input_text items).
	Prompt *struct {
		ID        *string                    `json:"id"`
		Version   *string                    `json:"version"`
		Variables map[string]json.RawMessage `json:"variables"`
	} `json:"prompt"`

	// Resolve, when set, finds the output item an item_reference names
	// (nil: none of the tenant's); the caller sets it.
	Resolve func(id string) (*Item, error) `json:"-"`
	// Labelled, when set, names the operator's tools that an mcp tool's
	// server_label stands for (ok false: no such server now), and
	// NeedsApproval says which of them wait for a client's approval; the
	// caller sets them. LabelAgentd stands for agentd's own tools.
	Labelled      func(label string) (names []string, ok bool) `json:"-"`
	NeedsApproval func(name string) bool                       `json:"-"`
	// HostedTool, when set, names the operator's tool that a hosted tool
	// type (Hosted) stands for (ok false: none); the caller sets it.
	HostedTool func(kind string) (tool string, ok bool) `json:"-"`

	// probe: Decode is finding what else the request is refused for, with
	// nothing resolved (references, labels).
	probe bool
}

// AgentPrompt is the agent a request's prompt names (ok false: it has no
// prompt): its name, its version (0: the latest) and the variables of its
// instructions, whose values must be strings.
func (r Request) AgentPrompt() (name string, version int, vars map[string]string, ok bool, err error) {
	p := r.Prompt
	if p == nil {
		return "", 0, nil, false, nil
	}
	if p.ID == nil || *p.ID == "" {
		return "", 0, nil, true, field("prompt.id", "is required: the name of an agent of agentd (GET /agents)")
	}
	if p.Version != nil {
		if version, err = strconv.Atoi(*p.Version); err != nil || version < 1 {
			return "", 0, nil, true, field("prompt.version", "must be an agent's version: a whole number from 1, as a string")
		}
	}
	if p.Variables != nil {
		vars = make(map[string]string, len(p.Variables))
		for k, raw := range p.Variables {
			var v string
			var text struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			switch {
			case json.Unmarshal(raw, &v) == nil:
			case json.Unmarshal(raw, &text) == nil && text.Type == "input_text" && text.Text != nil:
				v = *text.Text
			default:
				return "", 0, nil, true, field("prompt.variables."+k, "must be a string or an input_text: agentd fills instructions with text only")
			}
			vars[k] = v
		}
	}
	return *p.ID, version, vars, true, nil
}

// HasTools reports whether the request gives tools of its own: without
// them, a response of an agent takes the agent's.
func (r Request) HasTools() bool { return len(r.Tools) > 0 && string(r.Tools) != "null" }

// LabelAgentd is the server_label of agentd's own tools (its built-ins and
// those of its tools file), in an mcp tool of a request.
const LabelAgentd = "agentd"

// Limits of the fields agentd keeps.
const (
	maxMetadataKeys  = 16  // as OpenAI's
	maxMetadataKey   = 64  // characters
	maxMetadataValue = 512 // characters
	maxIdentifier    = 512 // user, safety_identifier, prompt_cache_key
)

// Decode reads a create request strictly: a field agentd does not know is
// refused, named; one error names every field refused, and what the rest
// of the request is refused for (see Spec) with them.
func Decode(body []byte) (Request, error) {
	var r Request
	var p refusals
	known := unknownFields(body, &p)
	dec := json.NewDecoder(bytes.NewReader(known))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		if fe, ok := decodeError(err).(*runspec.FieldError); ok && fe.Field != "" {
			fe.Field = fieldPath(known, fe.Field)
			p.add(fe)
			return r, p.err()
		}
		return r, decodeError(err)
	}
	if dec.More() {
		return r, field("", "the body must be one JSON object")
	}
	if len(p.fields) > 0 {
		// What else the request is refused for, as far as it can be told
		// without the tenant's items and tools.
		r.probe = true
		r.spec("", &p)
		r.probe = false
	}
	return r, p.err()
}

// fieldPath is the path of an unknown field that the decoder names alone:
// the request's own, or one of its object fields' (text.verbosity).
func fieldPath(body []byte, name string) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return name
	}
	if _, ok := top[name]; ok {
		return name
	}
	for k, v := range top {
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) == nil {
			if _, ok := inner[name]; ok {
				return k + "." + name
			}
		}
	}
	return name
}

// strict decodes raw into v, refusing fields v does not have.
func strict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// decodeError names the field of a JSON error.
func decodeError(err error) error {
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ute):
		return field(ute.Field, "must be of type %s", jsonType(ute.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return field(name, "is not a field of a response request that agentd knows")
	}
	return field("", "the body is not valid JSON: %v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "ptr", "struct", "map":
		return "object"
	case "slice":
		return "array"
	case "int", "int64", "float64":
		return "number"
	}
	return kind
}

func field(name, format string, args ...any) *runspec.FieldError {
	return &runspec.FieldError{Field: name, Message: fmt.Sprintf(format, args...)}
}

// Streaming reports whether the request asks for a stream.
func (r Request) Streaming() bool { return r.Stream != nil && *r.Stream }

// InBackground reports whether the request asks for a background response.
func (r Request) InBackground() bool { return r.Background != nil && *r.Background }

// PreviousRunID returns the run of previous_response_id ("" when none);
// an id that is not a response's is refused.
func (r Request) PreviousRunID() (string, error) {
	if r.PreviousResponseID == nil || *r.PreviousResponseID == "" {
		return "", nil
	}
	id, ok := RunID(*r.PreviousResponseID)
	if !ok {
		return "", field("previous_response_id", "%q is not a response id (resp_ and 32 hex digits)", *r.PreviousResponseID)
	}
	return id, nil
}

// Stored reports whether the response is to be kept once it ended (store,
// true by default).
func (r Request) Stored() bool { return r.Store == nil || *r.Store }

// ConversationRunID returns agentd's conversation of the request's
// conversation (a conv_ id, or {"id": ...}); "" when none.
func (r Request) ConversationRunID() (string, error) {
	if len(r.Conversation) == 0 || string(r.Conversation) == "null" {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(r.Conversation, &id); err != nil {
		var obj struct {
			ID string `json:"id"`
		}
		if err := strict(r.Conversation, &obj); err != nil {
			return "", field("conversation", "must be a conversation id or an object with its id")
		}
		id = obj.ID
	}
	conv, ok := ConversationOf(id)
	if !ok {
		return "", field("conversation", "%q is not a conversation id (conv_ and 32 hex digits)", id)
	}
	return conv, nil
}

// Spec turns the request into agentd's run request (the server's
// defaults and ceilings are runspec's to apply) and the echo the response
// keeps. conversationID is the run's conversation, as the caller resolved
// it from conversation or previous_response_id ("" for a new one). Its
// error names every field refused.
func (r Request) Spec(conversationID string) (runspec.Request, error) {
	var p refusals
	req := r.spec(conversationID, &p)
	return req, p.err()
}

// spec is Spec, adding what it refuses to p.
func (r Request) spec(conversationID string, p *refusals) runspec.Request {
	req := runspec.Request{ConversationID: conversationID, Model: r.Model, Instructions: r.Instructions}
	var err error
	var at []int
	req.Input, req.InputText, req.Approvals, at = r.input(p)
	req.PartField = func(i, j int) string {
		if j < 0 {
			return fmt.Sprintf("input[%d].content", at[i])
		}
		return fmt.Sprintf("input[%d].content[%d]", at[i], j)
	}
	r.unsupported(p)
	none := []string{}
	req.Tools = &none // the operator's tools only when asked for (mcp tools)
	ts := r.functionTools(p)
	req.ApprovalTools = ts.approve
	if len(ts.fns) > 0 {
		req.ClientTools = &ts.fns
	}
	// A response ends at its function calls, and at the calls that wait
	// for the client's approval.
	req.ClientToolsEnd = true
	if len(ts.mcp) > 0 {
		names := make([]string, 0, len(ts.mcp))
		for name := range ts.mcp {
			names = append(names, name)
		}
		slices.Sort(names)
		req.Tools = &names
	}
	onDisconnect := string(agentd.OnDisconnectContinue)
	req.OnDisconnect = &onDisconnect // a dropped connection never cancels a response
	if conversationID != "" {
		reject := string(agentd.IfBusyReject)
		req.IfBusy = &reject
	}
	req.NoCompaction = r.Truncation != nil && *r.Truncation == "disabled"
	req.CompactThreshold, err = ContextManagement(r.ContextManagement)
	p.add(err)
	req.Unstored = !r.Stored()
	req.CacheKey = r.PromptCacheKey
	req.User = cmp.Or(r.User, r.SafetyIdentifier) // the run's end user: its memory's {{user}}
	req.Sampling, err = r.sampling(ts.mcp)
	p.add(err)
	echo, err := r.echo()
	p.add(err)
	echo.Tools, echo.MCP, echo.Namespaces, echo.Warnings = ts.echoed, ts.mcp, ts.namespaces, ts.warnings
	echo.Custom = ts.custom
	if len(r.ToolChoice) > 0 && string(r.ToolChoice) != "null" {
		echo.ToolChoice = r.ToolChoice
	}
	if req.Echo, err = json.Marshal(echo); err != nil {
		p.add(err)
	}
	return req
}

// Includables are the values of include OpenAI takes. Each names a part of
// an output item kind agentd does not produce (web and file searches,
// code interpreter and computer calls, log probabilities, encrypted
// reasoning) or the input's images, which agentd's items give whole: so
// each is accepted, and includes nothing more (Codex, and the AI SDK with
// store: false, send reasoning.encrypted_content on every request).
var Includables = []string{"web_search_call.action.sources", "web_search_call.results", "code_interpreter_call.outputs",
	"computer_call_output.output.image_url", "file_search_call.results", "message.input_image.image_url",
	"message.output_text.logprobs", "reasoning.encrypted_content"}

// unsupported refuses what agentd does not do (yet), naming the field,
// rather than ignoring it.
func (r Request) unsupported(p *refusals) {
	for i, inc := range r.Include {
		if !slices.Contains(Includables, inc) {
			p.add(field(fmt.Sprintf("include[%d]", i), "%q is none of OpenAI's: %s", inc, strings.Join(Includables, ", ")))
		}
	}
	if r.ServiceTier != nil && *r.ServiceTier != "auto" && *r.ServiceTier != "default" {
		p.add(field("service_tier", `must be "auto" or "default"`))
	}
	if r.MaxToolCalls != nil {
		p.add(field("max_tool_calls", "is not supported: this response has no tools"))
	}
	if r.TopLogprobs != nil && *r.TopLogprobs != 0 {
		p.add(field("top_logprobs", "log probabilities are not supported"))
	}
	if r.Truncation != nil && *r.Truncation != "auto" && *r.Truncation != "disabled" {
		p.add(field("truncation", `must be "auto" (agentd compacts a conversation that outgrows the model's window) or "disabled"`))
	}
	if v := r.Text; v != nil && v.Verbosity != nil && !slices.Contains([]string{"low", "medium", "high"}, *v.Verbosity) {
		p.add(field("text.verbosity", `must be "low", "medium" or "high"`))
	}
	if r.InBackground() && r.Store != nil && !*r.Store {
		p.add(field("background", "a background response must be stored (store: true)"))
	}
	if !r.Stored() && (r.PreviousResponseID != nil || (len(r.Conversation) > 0 && string(r.Conversation) != "null")) {
		p.add(field("store", "a response that is not stored cannot continue a conversation here (agentd's conversations are "+
			"kept whole): give the whole history as input, or store the response"))
	}
}

// mcpTool reads an mcp tool: the operator's tools of its server_label
// (LabelAgentd: agentd's own) that allowed_tools keeps, which the run may
// call through its ledger, those of them whose calls wait for the
// client's approval (require_approval, "always" unless it says otherwise,
// as OpenAI's; and always a tool its operator marked so), and what the
// response echoes of it. agentd connects only to the MCP servers its
// operator configured.
func (r Request) mcpTool(name string, raw json.RawMessage) (names, approve []string, label string, echo json.RawMessage, err error) {
	var t struct {
		Type              string          `json:"type"`
		ServerLabel       string          `json:"server_label"`
		ServerDescription *string         `json:"server_description"`
		ServerURL         *string         `json:"server_url"`
		ConnectorID       *string         `json:"connector_id"`
		Authorization     *string         `json:"authorization"`
		Headers           json.RawMessage `json:"headers"`
		AllowedTools      json.RawMessage `json:"allowed_tools"`
		RequireApproval   json.RawMessage `json:"require_approval"`
	}
	if err := strict(raw, &t); err != nil {
		return nil, nil, "", nil, decodeItemError(name, err)
	}
	switch {
	case t.ServerURL != nil || t.ConnectorID != nil || t.Authorization != nil || (len(t.Headers) > 0 && string(t.Headers) != "null"):
		return nil, nil, "", nil, field(name+".server_url", "agentd calls only the MCP servers its operator configured: name one by server_label")
	case t.ServerLabel == "":
		return nil, nil, "", nil, field(name+".server_label", "is required: a configured MCP server, or %q for agentd's own tools", LabelAgentd)
	case r.Labelled == nil:
		return nil, nil, "", nil, field(name+".server_label", "this server has no tools")
	}
	source := t.ServerLabel
	if source == LabelAgentd {
		source = ""
	}
	all, ok := r.Labelled(source)
	if !ok {
		return nil, nil, "", nil, field(name+".server_label", "%q names no MCP server of this server's (see GET /tools)", t.ServerLabel)
	}
	keep := all
	if len(t.AllowedTools) > 0 && string(t.AllowedTools) != "null" {
		var list []string
		if json.Unmarshal(t.AllowedTools, &list) != nil {
			var filter struct {
				ToolNames []string `json:"tool_names"`
			}
			if err := strict(t.AllowedTools, &filter); err != nil {
				return nil, nil, "", nil, field(name+".allowed_tools", "must be a list of tool names, or {\"tool_names\": [...]}")
			}
			list = filter.ToolNames
		}
		keep = nil
		for _, n := range list {
			if !slices.Contains(all, n) {
				return nil, nil, "", nil, field(name+".allowed_tools", "%q is not a tool of %s", n, t.ServerLabel)
			}
			keep = append(keep, n)
		}
	}
	policy, needs, err := approvalPolicy(name+".require_approval", t.RequireApproval)
	if err != nil {
		return nil, nil, "", nil, err
	}
	for _, n := range keep {
		if needs(n) || (r.NeedsApproval != nil && r.NeedsApproval(n)) {
			approve = append(approve, n)
		}
	}
	e := map[string]any{"type": "mcp", "server_label": t.ServerLabel, "allowed_tools": keep, "require_approval": policy}
	if t.ServerDescription != nil {
		e["server_description"] = *t.ServerDescription
	}
	b, err := json.Marshal(e)
	return keep, approve, t.ServerLabel, b, err
}

// approvalPolicy reads an mcp tool's require_approval: "always" (also
// when absent), "never", or {"always": {"tool_names": [...]}, "never":
// {"tool_names": [...]}}, where a tool neither names needs an approval.
// It returns the policy as the response echoes it, and which tools need
// an approval by it.
func approvalPolicy(name string, raw json.RawMessage) (json.RawMessage, func(string) bool, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null", `"always"`:
		return json.RawMessage(`"always"`), func(string) bool { return true }, nil
	case `"never"`:
		return raw, func(string) bool { return false }, nil
	}
	type filter struct {
		ToolNames []string `json:"tool_names"`
	}
	var f struct {
		Always *filter `json:"always"`
		Never  *filter `json:"never"`
	}
	if err := strict(raw, &f); err != nil {
		return nil, nil, field(name, `must be "always", "never", or {"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}`)
	}
	never := map[string]bool{}
	if f.Never != nil {
		for _, n := range f.Never.ToolNames {
			never[n] = true
		}
	}
	if f.Always != nil {
		for _, n := range f.Always.ToolNames {
			if never[n] {
				return nil, nil, field(name, "%q cannot be both always and never", n)
			}
		}
	}
	return raw, func(n string) bool { return !never[n] }, nil
}

// toolChoice reads tool_choice: "auto", "none", "required", a function
// tool ({"type": "function", "name"}) or a tool of an mcp tool ({"type":
// "mcp", "server_label", "name"}, mcp mapping the request's operator tools
// to their server_label) the model must call; nil when absent.
// A forced call holds for the response's first model answer (see
// agentd.Sampling.ToolChoice).
func (r Request) toolChoice(mcp map[string]string) (*agentd.ToolChoice, error) {
	raw := bytes.TrimSpace(r.ToolChoice)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case agentd.ToolChoiceAuto, agentd.ToolChoiceNone, agentd.ToolChoiceRequired:
			return &agentd.ToolChoice{Mode: mode}, nil
		}
		return nil, field("tool_choice", `must be "auto", "none", "required", or an object naming a tool`)
	}
	var t struct {
		Type        string  `json:"type"`
		Name        *string `json:"name"`
		ServerLabel *string `json:"server_label"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, field("tool_choice", `must be "auto", "none", "required", or an object naming a tool`)
	}
	switch {
	case t.Type == "function" || t.Type == "mcp":
	case slices.Contains(Hosted, t.Type):
		if r.HostedTool != nil {
			if tool, ok := r.HostedTool(t.Type); ok {
				return &agentd.ToolChoice{Mode: agentd.ToolChoiceTool, Name: tool}, nil
			}
		}
		return nil, field("tool_choice.type", "%q is a tool OpenAI hosts, which this server does not run: it cannot be forced", t.Type)
	case t.Type == "allowed_tools":
		return nil, field("tool_choice", "allowed_tools is not supported: give the tools themselves in tools")
	default:
		return nil, field("tool_choice.type", "%q: only a function or an mcp tool can be chosen here", t.Type)
	}
	if err := strict(raw, &t); err != nil {
		return nil, decodeItemError("tool_choice", err)
	}
	if t.Name == nil || *t.Name == "" {
		return nil, field("tool_choice.name", "is required: the tool the model must call")
	}
	if t.Type == "mcp" && (t.ServerLabel == nil || mcp[*t.Name] != *t.ServerLabel) {
		return nil, field("tool_choice.server_label", "must be the server_label of an mcp tool of the request that offers %q", *t.Name)
	}
	return &agentd.ToolChoice{Mode: agentd.ToolChoiceTool, Name: *t.Name}, nil
}

// sampling maps max_output_tokens, temperature, top_p and text.format.
func (r Request) sampling(mcp map[string]string) (*runspec.Sampling, error) {
	s := &runspec.Sampling{MaxOutputTokens: r.MaxOutputTokens, Temperature: r.Temperature, TopP: r.TopP,
		ParallelToolCalls: r.ParallelToolCalls}
	var err error
	if s.ToolChoice, err = r.toolChoice(mcp); err != nil {
		return nil, err
	}
	effort, _, err := r.reasoningConfig()
	if err != nil {
		return nil, err
	}
	if effort != "" {
		s.ReasoningEffort = &effort
	}
	if r.Text != nil && len(r.Text.Format) > 0 && string(r.Text.Format) != "null" {
		var f struct {
			Type        *string         `json:"type"`
			Name        *string         `json:"name"`
			Description *string         `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		}
		if err := strict(r.Text.Format, &f); err != nil {
			return nil, field("text.format", "must be an object of type text, json_object or json_schema: %v", err)
		}
		s.Format = &runspec.OutputFormat{Type: f.Type, Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}
	}
	return s, nil
}

// echo is what the response repeats of the request.
func (r Request) echo() (Echo, error) {
	e := Echo{Background: r.InBackground(), Conversation: len(r.Conversation) > 0 && string(r.Conversation) != "null",
		Truncation: "auto"}
	if r.Truncation != nil && *r.Truncation == "disabled" {
		e.Truncation = "disabled"
	}
	if r.PreviousResponseID != nil {
		e.PreviousResponseID = *r.PreviousResponseID
	}
	for _, f := range []struct {
		name string
		v    *string
		to   *string
	}{{"user", r.User, &e.User}, {"safety_identifier", r.SafetyIdentifier, &e.SafetyIdentifier},
		{"prompt_cache_key", r.PromptCacheKey, &e.PromptCacheKey}} {
		if f.v == nil {
			continue
		}
		if len(*f.v) > maxIdentifier {
			return e, field(f.name, "must be at most %d characters", maxIdentifier)
		}
		if err := runspec.Storable(f.name, *f.v); err != nil {
			return e, err
		}
		*f.to = *f.v
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return e, err
	}
	if len(r.Metadata) > 0 {
		e.Metadata = r.Metadata
	}
	var err error
	if _, e.ReasoningSummary, err = r.reasoningConfig(); err != nil {
		return e, nil // sampling refuses it
	}
	if r.Text != nil && r.Text.Verbosity != nil {
		e.Verbosity = *r.Text.Verbosity
	}
	e.EncryptedReasoning = slices.Contains(r.Include, "reasoning.encrypted_content")
	e.ClientMetadata, err = clientMetadata(r.ClientMetadata)
	return e, err
}

// clientMetadata checks a request's client_metadata: nothing, or a JSON
// object of at most runspec.MaxMetadataBytes, compacted.
func clientMetadata(raw json.RawMessage) (json.RawMessage, error) {
	if runspec.IsNull(raw) {
		return nil, nil
	}
	var buf bytes.Buffer
	if raw = bytes.TrimSpace(raw); raw[0] != '{' || json.Compact(&buf, raw) != nil {
		return nil, field("client_metadata", "must be a JSON object")
	}
	if buf.Len() > runspec.MaxMetadataBytes {
		return nil, field("client_metadata", "must be at most %d bytes of JSON", runspec.MaxMetadataBytes)
	}
	if err := runspec.StorableJSON("client_metadata", buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkMetadata checks metadata as OpenAI bounds it.
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataKeys {
		return field("metadata", "must have at most %d keys", maxMetadataKeys)
	}
	for k, v := range md {
		if len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return field("metadata", "keys must be at most %d characters and values %d", maxMetadataKey, maxMetadataValue)
		}
		if err := runspec.Storable("metadata", k+v); err != nil {
			return err
		}
	}
	return nil
}

// input reads input: a text (one user message), or a list of input
// items, of which agentd takes messages (of text, images and files),
// function calls and their outputs, approval responses, and, as the
// history a client keeps, the approval requests and reasoning it was
// given. at holds the index of the item each message came from.
func (r Request) input(p *refusals) (_ []agentd.InputMessage, text bool, _ []agentd.ApprovalDecision, at []int) {
	raw := bytes.TrimSpace(r.Input)
	if len(raw) == 0 || string(raw) == "null" {
		p.add(field("input", "is required: a text or a list of input items"))
		return nil, false, nil, nil
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			p.add(field("input", "is not a valid string"))
			return nil, false, nil, nil
		}
		return []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}, true, nil, []int{0}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.add(field("input", "must be a text or a list of input items"))
		return nil, false, nil, nil
	}
	in := inputReader{r: r, p: p, msgs: make([]agentd.InputMessage, 0, len(items))}
	for i, it := range items {
		for len(in.at) < len(in.msgs) {
			in.at = append(in.at, i-1)
		}
		in.item(fmt.Sprintf("input[%d]", i), it)
	}
	in.attach()
	for len(in.at) < len(in.msgs) {
		in.at = append(in.at, len(items)-1)
	}
	return in.msgs, false, in.approvals, in.at
}

// inputReader reads a request's input items in turn.
type inputReader struct {
	r         Request
	p         *refusals
	msgs      []agentd.InputMessage
	approvals []agentd.ApprovalDecision
	at        []int
	// reasoning are the blocks of the reasoning items read since the last
	// message, which go with the assistant message they came with.
	reasoning []agentd.Part
}

// attach gives the reasoning read so far to the assistant message it came
// with: the last message, when it is the model's (a reasoning item comes
// before its message, or after it when agentd streamed the message
// first). A block with no assistant message to go with is dropped.
func (in *inputReader) attach() {
	if len(in.reasoning) == 0 {
		return
	}
	if n := len(in.msgs); n > 0 && in.msgs[n-1].Role == agentd.RoleAssistant {
		in.msgs[n-1].Reasoning = append(in.msgs[n-1].Reasoning, in.reasoning...)
	}
	in.reasoning = nil
}

// item reads input item name.
func (in *inputReader) item(name string, it json.RawMessage) {
	var probe struct {
		Type *string `json:"type"`
		ID   *string `json:"id"`
		Role *string `json:"role"`
	}
	if err := json.Unmarshal(it, &probe); err != nil {
		in.p.add(field(name, "must be an input item (an object)"))
		return
	}
	typ := ""
	if probe.Type != nil {
		typ = *probe.Type
	}
	// The reasoning read last goes with the model's message this item
	// adds to, else with the model's message before it.
	assistant := typ == ItemFunctionCall || typ == ItemCustomToolCall || (probe.Role != nil && *probe.Role == "assistant")
	if !assistant && typ != ItemReasoning {
		in.attach()
	}
	in.read(name, typ, probe.Type == nil && probe.Role == nil && probe.ID != nil, it)
	if assistant {
		in.attach()
	}
}

// read reads input item name of type typ (bare: an item with only an id,
// a reference).
func (in *inputReader) read(name, typ string, bare bool, it json.RawMessage) {
	switch {
	case typ == ItemFunctionCall:
		c, err := callItem(name, it)
		if !in.p.add(err) {
			in.msgs = addCall(in.msgs, c)
		}
	case typ == ItemCustomToolCall:
		c, err := customCallItem(name, it)
		if !in.p.add(err) {
			in.msgs = addCall(in.msgs, c)
		}
	case typ == ItemCompaction:
		m, err := CompactionItem(name, it)
		if !in.p.add(err) {
			in.msgs = append(in.msgs, m)
		}
	case typ == ItemAdditionalTools:
		// Its tools are the request's (functionTools).
	case typ == ItemMCPApprovalResponse:
		d, err := approvalItem(name, it)
		if !in.p.add(err) {
			in.approvals = append(in.approvals, d)
		}
	case typ == ItemMCPApprovalRequest:
		// The client sends back the history it keeps, up to an approval
		// request agentd issued: that history is the conversation's,
		// which continues from the request.
		if _, err := ResentApproval(name, it); !in.p.add(err) {
			in.msgs, in.at = in.msgs[:0], in.at[:0]
		}
	case typ == ItemReasoning:
		rp, ok, err := reasoningItem(name, it)
		if !in.p.add(err) && ok {
			in.reasoning = append(in.reasoning, rp)
		}
		return // the next message is the one it came with
	case typ == "item_reference" || bare:
		if in.r.probe {
			return
		}
		m, call, err := in.r.reference(name, it)
		switch {
		case in.p.add(err):
		case call != nil:
			in.msgs = addCall(in.msgs, *call)
		default:
			in.msgs = append(in.msgs, m)
		}
	default:
		m, err := inputItem(name, it)
		if !in.p.add(err) {
			in.msgs = append(in.msgs, m)
		}
	}
}

// approvalItem reads an mcp_approval_response item: a client's decision
// on an mcp_approval_request of the response the request continues.
func approvalItem(name string, raw json.RawMessage) (agentd.ApprovalDecision, error) {
	var it struct {
		Type              string  `json:"type"`
		ID                *string `json:"id"`
		ApprovalRequestID *string `json:"approval_request_id"`
		Approve           *bool   `json:"approve"`
		Reason            *string `json:"reason"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.ApprovalDecision{}, decodeItemError(name, err)
	}
	if it.ApprovalRequestID == nil || it.Approve == nil {
		return agentd.ApprovalDecision{}, field(name, "needs its approval_request_id and approve")
	}
	id, ok := ApprovalCallOf(*it.ApprovalRequestID)
	if !ok {
		return agentd.ApprovalDecision{}, field(name+".approval_request_id", "%q is not an approval request id (mcpr_ and 32 hex digits)",
			*it.ApprovalRequestID)
	}
	d := agentd.ApprovalDecision{ToolCallID: id, Approve: *it.Approve}
	if it.Reason != nil {
		d.Reason = *it.Reason
	}
	return d, nil
}

// addCall adds a function call the client sends back to msgs: to the
// assistant message it follows, or as one of its own.
func addCall(msgs []agentd.InputMessage, c agentd.InputCall) []agentd.InputMessage {
	if n := len(msgs); n > 0 && msgs[n-1].Role == agentd.RoleAssistant {
		msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, c)
		return msgs
	}
	return append(msgs, agentd.InputMessage{Role: agentd.RoleAssistant, ToolCalls: []agentd.InputCall{c}})
}

// callItem reads a function_call item: a call the model made, sent back
// with the history.
func callItem(name string, raw json.RawMessage) (agentd.InputCall, error) {
	var it struct {
		Type      string  `json:"type"`
		ID        *string `json:"id"`
		CallID    *string `json:"call_id"`
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
		Status    *string `json:"status"`
		Namespace *string `json:"namespace"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputCall{}, decodeItemError(name, err)
	}
	if it.CallID == nil || *it.CallID == "" || it.Name == nil || *it.Name == "" {
		return agentd.InputCall{}, field(name, "a function_call needs its call_id and name")
	}
	c := agentd.InputCall{ID: *it.CallID, Name: *it.Name}
	if it.Namespace != nil && *it.Namespace != "" {
		c.Name = *it.Namespace + NamespaceSep + *it.Name // as the model was given it
	}
	if it.Arguments != nil {
		c.Arguments = *it.Arguments
	}
	return c, nil
}

// reference reads an item_reference: an output item of an earlier
// response, which Resolve finds (a message, or a function call).
func (r Request) reference(name string, raw json.RawMessage) (agentd.InputMessage, *agentd.InputCall, error) {
	var it struct {
		Type *string `json:"type"`
		ID   string  `json:"id"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputMessage{}, nil, decodeItemError(name, err)
	}
	if r.Resolve == nil {
		return agentd.InputMessage{}, nil, field(name+".id", "item references cannot be resolved here")
	}
	item, err := r.Resolve(it.ID)
	if err != nil {
		return agentd.InputMessage{}, nil, err
	}
	if item == nil {
		return agentd.InputMessage{}, nil, field(name+".id", "%q is not an output item of one of this tenant's responses", it.ID)
	}
	switch item.Type {
	case ItemFunctionCall:
		c := agentd.InputCall{ID: item.CallID, Name: item.Name}
		if item.Namespace != "" {
			c.Name = item.Namespace + NamespaceSep + item.Name
		}
		if item.Arguments != nil {
			c.Arguments = *item.Arguments
		}
		return agentd.InputMessage{}, &c, nil
	case ItemMessage:
		var texts []string
		for _, c := range item.Content {
			texts = append(texts, c.Text)
		}
		return agentd.InputMessage{Role: agentd.RoleAssistant, Content: strings.Join(texts, "\n")}, nil, nil
	}
	return agentd.InputMessage{}, nil, field(name+".id", "%q is a %s item, which cannot be referenced", it.ID, item.Type)
}

// ItemRun returns the run whose response holds the output item id
// (msg_<run>_<n> or fc_<run>_<n>), and false for another id.
func ItemRun(id string) (string, bool) {
	for _, prefix := range []string{prefixMessage, prefixFunctionCall} {
		rest, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		run, _, ok := strings.Cut(rest, "_")
		if !ok {
			return "", false
		}
		return idOf(prefixResponse+run, prefixResponse)
	}
	return "", false
}

// inputItem reads one input item: a message whose content is a text or a
// list of input_text parts.
func inputItem(name string, raw json.RawMessage) (agentd.InputMessage, error) {
	var it struct {
		Type    *string         `json:"type"`
		ID      *string         `json:"id"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Status  *string         `json:"status"`
	}
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return agentd.InputMessage{}, field(name, "must be an input item (an object)")
	}
	switch probe.Type {
	case "", ItemMessage:
	case ItemFunctionCallOutput, ItemCustomToolCallOutput:
		return callOutput(name, raw)
	case "mcp_approval_response":
		return agentd.InputMessage{}, field(name+".type", "%s items are not supported by this server yet", probe.Type)
	default:
		return agentd.InputMessage{}, field(name+".type", "%q is not an input item type agentd takes (message)", probe.Type)
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputMessage{}, decodeItemError(name, err)
	}
	var role agentd.Role
	switch it.Role {
	case "user":
		role = agentd.RoleUser
	case "assistant":
		role = agentd.RoleAssistant
	case "system", "developer":
		role = agentd.RoleSystem
	default:
		return agentd.InputMessage{}, field(name+".role", "must be user, assistant, system or developer, not %q", it.Role)
	}
	text, parts, err := contentParts(name+".content", it.Content, role)
	if err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: role, Content: text, Parts: parts}, nil
}

// callOutput reads a function_call_output item: the output of a function
// call that the conversation's previous response ended at.
func callOutput(name string, raw json.RawMessage) (agentd.InputMessage, error) {
	var it struct {
		Type   string          `json:"type"`
		ID     *string         `json:"id"`
		CallID *string         `json:"call_id"`
		Output json.RawMessage `json:"output"`
		Status *string         `json:"status"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputMessage{}, decodeItemError(name, err)
	}
	if it.CallID == nil || *it.CallID == "" {
		return agentd.InputMessage{}, field(name+".call_id", "is required: the call_id of the function call")
	}
	out, err := contentText(name+".output", it.Output, agentd.RoleTool)
	if err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: agentd.RoleTool, ToolCallID: *it.CallID, Content: out}, nil
}

func decodeItemError(name string, err error) error {
	if fe, ok := decodeError(err).(*runspec.FieldError); ok && fe.Field != "" {
		fe.Field = name + "." + fe.Field
		return fe
	}
	return field(name, "is not a valid input item: %v", err)
}

// contentText reads a function call output's content: a text, or parts
// of text (input_text). Images and files are refused by name: an output
// is text.
func contentText(name string, raw json.RawMessage, role agentd.Role) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", field(name, "is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", field(name, "is not a valid string")
		}
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", field(name, "must be a text or a list of content parts")
	}
	var texts []string
	for i, p := range parts {
		pname := fmt.Sprintf("%s[%d]", name, i)
		var part struct {
			Type        string            `json:"type"`
			Text        *string           `json:"text"`
			Annotations []json.RawMessage `json:"annotations"`
			Logprobs    []json.RawMessage `json:"logprobs"`
		}
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(p, &probe); err != nil {
			return "", field(pname, "must be a content part (an object)")
		}
		switch probe.Type {
		case "input_text":
		case "output_text":
			if role != agentd.RoleAssistant {
				return "", field(pname+".type", "output_text is an assistant message's content")
			}
		case "input_image", "input_file":
			return "", field(pname+".type", "%s is not supported here: a function call's output is text (a user message takes images and files)", probe.Type)
		case "input_audio":
			return "", field(pname+".type", "%s is not supported: this server's runs take text, images and files", probe.Type)
		default:
			return "", field(pname+".type", "%q is not a content part agentd takes (input_text)", probe.Type)
		}
		if err := strict(p, &part); err != nil {
			return "", decodeItemError(pname, err)
		}
		if part.Text == nil {
			return "", field(pname+".text", "is required")
		}
		texts = append(texts, *part.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// PendingError is the error of a request whose input does not answer
// what the response it continues ended at (err, from the store): its
// function calls' outputs, and its approval requests' decisions, named by
// their ids here.
func PendingError(err *agentd.PendingCallsError) error {
	switch {
	case len(err.UnknownApprovals) > 0:
		return field("input", "no approval request of the conversation waits for a decision with id %s (or it is decided twice)",
			ApprovalRequestID(err.UnknownApprovals[0]))
	case len(err.MissingApprovals) > 0 && len(err.Missing)+len(err.Unknown) == 0:
		return field("input", "the conversation waits for a decision on approval request %s (%d in all): give each an mcp_approval_response",
			ApprovalRequestID(err.MissingApprovals[0]), len(err.MissingApprovals))
	}
	return field("input", "%s", err.Error())
}

// Param is the name, in a response request, of a field runspec names as
// POST /runs does (sampling.temperature is temperature here).
func Param(field string) string {
	for _, m := range [][2]string{{"sampling.format", "text.format"}, {"sampling.", ""}, {"client_tools", "tools"}, {"unstored", "store"},
		{"cache_key", "prompt_cache_key"}, {"agent_version", "prompt.version"}, {"agent", "prompt.id"}, {"variables", "prompt.variables"}} {
		if rest, ok := strings.CutPrefix(field, m[0]); ok {
			return m[1] + rest
		}
	}
	return field
}
