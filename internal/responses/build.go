package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"

	"github.com/agentd/agentd"
)

// Echo is what a response repeats of its request beyond the run's own
// parameters; it is kept with the run (agentd.RunParams.Echo), so that
// the response object is the same whenever it is built.
type Echo struct {
	Background         bool              `json:"background,omitempty"`
	PreviousResponseID string            `json:"previous_response_id,omitempty"`
	Conversation       bool              `json:"conversation,omitempty"` // the request named its conversation
	User               string            `json:"user,omitempty"`
	SafetyIdentifier   string            `json:"safety_identifier,omitempty"`
	PromptCacheKey     string            `json:"prompt_cache_key,omitempty"`
	Truncation         string            `json:"truncation,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	// ClientMetadata is the request's client_metadata, kept as it came.
	ClientMetadata json.RawMessage `json:"client_metadata,omitempty"`
	// Tools are the request's function tools as the response shows them;
	// ToolChoice its tool_choice.
	Tools      []json.RawMessage `json:"tools,omitempty"`
	ToolChoice json.RawMessage   `json:"tool_choice,omitempty"`
	// MCP maps each of the operator's tools an mcp tool of the request
	// offered to its server_label.
	MCP map[string]string `json:"mcp,omitempty"`
	// Namespaces maps the model's name of each function of a namespace
	// tool of the request to its namespace and name.
	Namespaces map[string][2]string `json:"namespaces,omitempty"`
	// ReasoningSummary is the request's reasoning.summary, Verbosity its
	// text.verbosity.
	ReasoningSummary string `json:"reasoning_summary,omitempty"`
	// EncryptedReasoning: include asked for reasoning.encrypted_content.
	EncryptedReasoning bool   `json:"encrypted_reasoning,omitempty"`
	Verbosity          string `json:"verbosity,omitempty"`
	// Custom are the model's names of the request's custom tools.
	Custom map[string]bool `json:"custom,omitempty"`
	// Warnings say what the response does otherwise than asked.
	Warnings []Warning `json:"warnings,omitempty"`
}

// EchoOf returns the echo kept with run (the zero Echo for a run not
// created through the Responses API).
func EchoOf(run agentd.Run) Echo {
	var e Echo
	if len(run.Params.Echo) > 0 {
		_ = json.Unmarshal(run.Params.Echo, &e) // written by Request.Spec
	}
	return e
}

// base is the response object of run as created: its fields that never
// change, with status queued (background) or in_progress, and no output.
func base(run agentd.Run, createdAt int64) Response {
	e := EchoOf(run)
	s := run.Params.Sampling
	r := Response{
		ID: ResponseID(run.ID), Object: "response", CreatedAt: createdAt, Status: StatusInProgress,
		Background: e.Background, Model: run.Model, Output: []Item{}, ParallelToolCalls: s.ParallelToolCalls == nil || *s.ParallelToolCalls,
		Reasoning: Reasoning{}, ServiceTier: "default", Store: !run.Params.Unstored, Temperature: 1, TopP: 1,
		Text: TextConfig{Format: formatJSON(s.Format), Verbosity: "medium"}, ToolChoice: json.RawMessage(`"auto"`),
		Tools: []json.RawMessage{}, Truncation: "auto", Metadata: map[string]string{},
	}
	if e.Background {
		r.Status = StatusQueued
	}
	if a := run.Params.Agent; a != nil {
		vars := run.Params.Variables
		if vars == nil {
			vars = map[string]string{}
		}
		r.Prompt = &Prompt{ID: a.Name, Version: strconv.Itoa(a.Version), Variables: vars}
	}
	if run.Params.Instructions != "" {
		r.Instructions = &run.Params.Instructions
	}
	if s.MaxOutputTokens > 0 {
		n := s.MaxOutputTokens
		r.MaxOutputTokens = &n
	}
	if s.Temperature != nil {
		r.Temperature = *s.Temperature
	}
	if s.TopP != nil {
		r.TopP = *s.TopP
	}
	if e.PreviousResponseID != "" {
		r.PreviousResponseID = &e.PreviousResponseID
	}
	if e.Conversation {
		r.Conversation = &ConversationRef{ID: ConversationID(run.ConversationID)}
	}
	if e.Truncation != "" {
		r.Truncation = e.Truncation
	}
	r.Reasoning = Reasoning{Effort: strOrNil(s.ReasoningEffort), Summary: strOrNil(e.ReasoningSummary)}
	if e.Verbosity != "" {
		r.Text.Verbosity = e.Verbosity
	}
	r.Warnings = e.Warnings
	r.User = strOrNil(e.User)
	r.SafetyIdentifier = strOrNil(e.SafetyIdentifier)
	r.PromptCacheKey = strOrNil(e.PromptCacheKey)
	maps.Copy(r.Metadata, e.Metadata)
	if len(e.Tools) > 0 {
		r.Tools = e.Tools
	}
	if len(e.ToolChoice) > 0 {
		r.ToolChoice = e.ToolChoice
	}
	return r
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// formatJSON is text.format of a response: {"type": "text"} unless the
// run asked for structured output.
func formatJSON(f *agentd.OutputFormat) json.RawMessage {
	if f == nil || f.Type == "" || f.Type == agentd.OutputText {
		return json.RawMessage(`{"type":"text"}`)
	}
	v := map[string]any{"type": f.Type}
	if f.Type == agentd.OutputJSONSchema {
		v["name"] = f.Name
		v["schema"] = f.Schema
		if f.Description != "" {
			v["description"] = f.Description
		}
		if f.Strict != nil {
			v["strict"] = *f.Strict
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{"type":"text"}`)
	}
	return b
}

// Builder derives a response and its stream from a run's events, in
// order. Its zero value is not usable: see NewBuilder.
type Builder struct {
	run     agentd.Run
	resp    Response
	created bool // run.created was read
	started bool // the first run.started was read
	ended   bool // the terminal event was read
	usage   agentd.Usage
	open    *openItem // the message being streamed
	items   int       // output items begun so far, for their ids
	seq     int       // the next event's sequence number
	emit    func(typ string, v map[string]any)
	mcp     map[string]string   // the operator's tools offered, by name: their server_label
	calls   map[string]*mcpCall // the operator's tool calls in flight, by agentd's tool call id
	// namespaces are the request's namespace tools' functions (Echo's).
	namespaces map[string][2]string
	// summary: the request asked for the reasoning's summary; encrypted:
	// for its encrypted_content (Echo's).
	summary, encrypted bool
	custom             map[string]bool // the custom tools (Echo's)
}

// mcpCall is a call of one of the operator's tools, in flight: an mcp_call
// item.
type mcpCall struct {
	index int
	item  Item
}

// openItem is a message item whose text is streaming.
type openItem struct {
	index int
	id    string
	text  bytes.Buffer
}

// NewBuilder returns the builder of run's response. emit, when set, is
// given each stream event (without its sequence_number, which the builder
// adds, and type) as it is derived.
func NewBuilder(run agentd.Run, emit func(typ string, v map[string]any)) *Builder {
	e := EchoOf(run)
	b := &Builder{run: run, emit: emit, mcp: e.MCP, namespaces: e.Namespaces, custom: e.Custom, calls: map[string]*mcpCall{},
		summary: e.ReasoningSummary != "", encrypted: e.EncryptedReasoning}
	b.resp = base(run, run.CreatedAt.Unix())
	return b
}

// Response returns the response as the events read so far make it, with
// the run's status where no terminal event was read yet.
func (b *Builder) Response() Response {
	r := b.snapshot()
	if !b.ended {
		switch {
		case b.run.Status == agentd.StatusQueued && !b.started:
			r.Status = StatusQueued
		case !b.run.Status.Terminal():
			r.Status = StatusInProgress
		}
		if b.open != nil {
			r.Output = append(r.Output, Item{ID: b.open.id, Type: ItemMessage, Status: StatusInProgress, Role: "assistant",
				Content: []Content{outputText(b.open.text.String())}})
		}
	}
	return r
}

// StatusOf is the status of run's response while it has not ended.
func StatusOf(run agentd.Run) string {
	switch run.Status {
	case agentd.StatusQueued:
		return StatusQueued
	case agentd.StatusRunning, agentd.StatusRequiresAction:
		return StatusInProgress
	}
	return string(run.Status)
}

// Ended reports whether the run's terminal event was read.
func (b *Builder) Ended() bool { return b.ended }

// Add reads the next event of the run.
func (b *Builder) Add(ev agentd.Event) {
	env, err := ev.Decode()
	if err != nil {
		return // not an event of agentd's
	}
	p, err := env.Payload()
	if err != nil {
		return // a type this build does not know adds nothing
	}
	switch d := p.(type) {
	case agentd.RunCreatedData:
		if b.created {
			return
		}
		b.created = true
		b.resp = base(b.run, env.At.Unix())
		b.event("response.created", map[string]any{"response": b.resp})
		if b.resp.Background {
			b.event("response.queued", map[string]any{"response": b.resp})
		}
	case agentd.RunStartedData:
		if b.started {
			return
		}
		b.started = true
		b.resp.Status = StatusInProgress
		b.event("response.in_progress", map[string]any{"response": b.snapshot()})
	case agentd.MessageDeltaData:
		if d.Text == "" {
			return
		}
		o := b.openMessage()
		o.text.WriteString(d.Text)
		b.textDelta(o, d.Text)
	case agentd.MessageCompletedData:
		b.messageCompleted(d)
	case agentd.StepRetractedData:
		if b.open != nil {
			// What streamed of a step that was asked again is not part of
			// the answer: its item ends incomplete and leaves the output.
			o := b.open
			b.open = nil
			b.event("response.output_item.done", map[string]any{"output_index": o.index,
				"item": Item{ID: o.id, Type: ItemMessage, Status: StatusIncomplete, Role: "assistant",
					Content: []Content{outputText(o.text.String())}}})
		}
	case agentd.ToolCallCreatedData:
		b.toolCallCreated(d)
	case agentd.ToolCallCompletedData:
		c := b.calls[d.ToolCallID]
		if c == nil {
			return
		}
		delete(b.calls, d.ToolCallID)
		b.finishCall(c, d)
	case agentd.RunEndedData:
		b.end(env, d)
	}
}

func (b *Builder) textDelta(o *openItem, text string) {
	b.event("response.output_text.delta", map[string]any{"item_id": o.id, "output_index": o.index,
		"content_index": 0, "delta": text, "logprobs": []any{}})
}

// messageCompleted closes the assistant's message item and adds an item for
// each call of a client's function.
func (b *Builder) messageCompleted(d agentd.MessageCompletedData) {
	if d.Role != agentd.RoleAssistant {
		return
	}
	b.usage = b.usage.Add(d.Usage)
	for _, p := range d.Content {
		if p.Type == agentd.PartReasoning {
			b.reasoning(p)
		}
	}
	text := agentd.TextOf(d.Content)
	if text != "" || b.open != nil {
		o := b.openMessage()
		if o.text.Len() == 0 && text != "" {
			// An answer that was not streamed still reaches a client
			// that reads only deltas.
			b.textDelta(o, text)
		}
		b.closeMessage(text, StatusCompleted)
	}
	for _, p := range d.Content {
		if p.Type == agentd.PartToolCall && b.clientTool(p.Name) {
			b.functionCall(p)
		}
	}
}

// toolCallCreated opens the item of a call of an mcp tool: an approval
// request when the call waits for one, an mcp_call otherwise.
func (b *Builder) toolCallCreated(d agentd.ToolCallCreatedData) {
	label, ok := b.mcp[d.Name]
	if !ok || b.calls[d.ToolCallID] != nil {
		return
	}
	if d.Status == agentd.CallAwaitingApproval {
		// The response ends at it (the run's ClientToolsEnd); the next
		// request decides it with an mcp_approval_response item.
		it := Item{ID: ApprovalRequestID(d.ToolCallID), Type: ItemMCPApprovalRequest, ServerLabel: label, Name: d.Name,
			Arguments: ptr(string(d.Arguments))}
		index := b.items
		b.items++
		b.event("response.output_item.added", map[string]any{"output_index": index, "item": it})
		b.resp.Output = append(b.resp.Output, it)
		b.event("response.output_item.done", map[string]any{"output_index": index, "item": it})
		return
	}
	c := &mcpCall{index: b.items, item: Item{ID: mcpCallItemID(b.run.ID, b.items), Type: ItemMCPCall,
		Status: StatusInProgress, ServerLabel: label, Name: d.Name, Arguments: ptr(string(d.Arguments))}}
	b.items++
	b.calls[d.ToolCallID] = c
	b.event("response.output_item.added", map[string]any{"output_index": c.index, "item": c.item})
	b.event("response.mcp_call.in_progress", map[string]any{"item_id": c.item.ID, "output_index": c.index})
	b.event("response.mcp_call_arguments.done", map[string]any{"item_id": c.item.ID, "output_index": c.index,
		"arguments": *c.item.Arguments})
}

// finishCall ends the mcp_call item of a call of the operator's tools with
// its outcome.
func (b *Builder) finishCall(c *mcpCall, d agentd.ToolCallCompletedData) {
	it := c.item
	typ := "response.mcp_call.completed"
	if d.Status == agentd.CallSucceeded {
		it.Status, it.Output = StatusCompleted, ptr(string(d.Result))
	} else {
		typ = "response.mcp_call.failed"
		msg := "the call " + string(d.Status)
		if d.Error != nil && d.Error.Message != "" {
			msg = d.Error.Message
		}
		it.Status = StatusFailed
		it.Error, _ = json.Marshal(map[string]any{"type": "mcp_tool_execution_error", "content": msg})
	}
	b.event(typ, map[string]any{"item_id": it.ID, "output_index": c.index})
	b.resp.Output = append(b.resp.Output, it)
	b.event("response.output_item.done", map[string]any{"output_index": c.index, "item": it})
}

// clientTool reports whether name is a function tool of the response.
func (b *Builder) clientTool(name string) bool {
	_, ok := b.run.Params.ClientTool(name)
	return ok
}

// functionCall adds the output item of a call of a function tool, with its
// events: agentd has the call's arguments whole, in one delta.
func (b *Builder) functionCall(p agentd.Part) {
	index := b.items
	id := functionCallItemID(b.run.ID, b.items)
	b.items++
	ns, name := SplitNamespace(b.namespaces, p.Name)
	if b.custom[p.Name] {
		b.customCall(p, index, ns, name)
		return
	}
	b.event("response.output_item.added", map[string]any{"output_index": index,
		"item": Item{ID: id, Type: ItemFunctionCall, Status: StatusInProgress, CallID: p.ID, Name: name, Namespace: ns, Arguments: ptr("")}})
	b.event("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": index, "delta": p.Arguments})
	b.event("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": index,
		"name": name, "arguments": p.Arguments})
	item := Item{ID: id, Type: ItemFunctionCall, Status: StatusCompleted, CallID: p.ID, Name: name, Namespace: ns, Arguments: ptr(p.Arguments)}
	b.resp.Output = append(b.resp.Output, item)
	b.event("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

func ptr[T any](v T) *T { return &v }

// snapshot is the response now, for an event that carries it.
func (b *Builder) snapshot() Response {
	r := b.resp
	r.Output = append([]Item{}, b.resp.Output...)
	return r
}

func (b *Builder) openMessage() *openItem {
	if b.open != nil {
		return b.open
	}
	// output_index counts every item the stream began, a retracted one
	// too, as a client that accumulates the stream counts them.
	o := &openItem{index: b.items, id: messageItemID(b.run.ID, b.items)}
	b.items++
	b.open = o
	b.event("response.output_item.added", map[string]any{"output_index": o.index,
		"item": Item{ID: o.id, Type: ItemMessage, Status: StatusInProgress, Role: "assistant", Content: []Content{}}})
	b.event("response.content_part.added", map[string]any{"item_id": o.id, "output_index": o.index,
		"content_index": 0, "part": outputText("")})
	return o
}

// closeMessage ends the open message with its committed text.
func (b *Builder) closeMessage(text, status string) {
	o := b.open
	b.open = nil
	part := outputText(text)
	b.event("response.output_text.done", map[string]any{"item_id": o.id, "output_index": o.index,
		"content_index": 0, "text": text, "logprobs": []any{}})
	b.event("response.content_part.done", map[string]any{"item_id": o.id, "output_index": o.index,
		"content_index": 0, "part": part})
	item := Item{ID: o.id, Type: ItemMessage, Status: status, Role: "assistant", Content: []Content{part}}
	b.resp.Output = append(b.resp.Output, item)
	b.event("response.output_item.done", map[string]any{"output_index": o.index, "item": item})
}

// end reads the run's terminal event: the response's final state.
func (b *Builder) end(env agentd.Envelope, d agentd.RunEndedData) {
	if b.ended {
		return
	}
	if b.open != nil {
		b.closeMessage(b.open.text.String(), StatusIncomplete)
	}
	b.ended = true
	u := b.usage
	b.resp.Usage = &Usage{InputTokens: u.InputTokens, InputTokensDetails: InputDetail{CachedTokens: u.CachedInputTokens},
		OutputTokens: u.OutputTokens, OutputTokensDetails: OutputDetail{ReasoningTokens: u.ReasoningTokens},
		TotalTokens: u.InputTokens + u.OutputTokens}
	status, incomplete, fail := outcome(d)
	b.resp.Status, b.resp.IncompleteDetails, b.resp.Error = status, incomplete, fail
	if status == StatusCompleted { // OpenAI's completed_at is a completed response's only
		at := env.At.Unix()
		b.resp.CompletedAt = &at
	}
	switch status {
	case StatusCompleted:
		b.event("response.completed", map[string]any{"response": b.snapshot()})
	case StatusIncomplete:
		b.event("response.incomplete", map[string]any{"response": b.snapshot()})
	default:
		// A cancelled response ends with response.failed too, its status
		// cancelled: neither OpenAI's SDKs nor the Open Responses
		// specification know a response.cancelled event.
		b.event("response.failed", map[string]any{"response": b.snapshot()})
	}
}

// outcome maps a run's end to a response's status.
func outcome(d agentd.RunEndedData) (status string, incomplete *Incomplete, fail *Error) {
	switch d.Status {
	case agentd.StatusCompleted:
		switch d.Reason {
		case agentd.ReasonMaxOutputTokens:
			return StatusIncomplete, &Incomplete{Reason: "max_output_tokens"}, nil
		case agentd.ReasonClientToolCalls:
			return StatusCompleted, nil, nil // its output ends with the function calls
		case agentd.ReasonMaxSteps:
			// The run stopped at its step limit, as OpenAI's stops at
			// max_tool_calls: the answer is incomplete.
			return StatusIncomplete, &Incomplete{Reason: "max_output_tokens"}, nil
		}
		return StatusCompleted, nil, nil
	case agentd.StatusCancelled:
		return StatusCancelled, nil, nil
	case agentd.StatusInterrupted:
		return StatusIncomplete, &Incomplete{Reason: "interrupted"}, nil
	}
	if d.Reason == agentd.ReasonContentFilter {
		return StatusIncomplete, &Incomplete{Reason: "content_filter"}, nil
	}
	msg := fmt.Sprintf("the run ended %s (%s)", d.Status, d.Reason)
	if d.Error != nil && d.Error.Message != "" {
		msg = d.Error.Message
	}
	return StatusFailed, nil, &Error{Code: errorCode(d), Message: msg}
}

// errorCode is the code of a failed response's error.
func errorCode(d agentd.RunEndedData) string {
	switch d.Reason {
	case agentd.ReasonModelError:
		if d.Error != nil && d.Error.Status == http.StatusTooManyRequests {
			return "rate_limit_exceeded"
		}
		return "server_error"
	case agentd.ReasonContextOverflow:
		return "context_length_exceeded"
	}
	return string(d.Reason)
}

// event hands one stream event to emit, numbered.
func (b *Builder) event(typ string, v map[string]any) {
	n := b.seq
	b.seq++
	if b.emit == nil {
		return
	}
	v["type"] = typ
	v["sequence_number"] = n
	b.emit(typ, v)
}

// Seq is the sequence number the next stream event gets.
func (b *Builder) Seq() int { return b.seq }

// sseEvent frames one stream event as Server-Sent Events do.
func sseEvent(buf *bytes.Buffer, typ string, v map[string]any) {
	data, err := json.Marshal(v)
	if err != nil {
		return // cannot happen: values of this package's types
	}
	buf.WriteString("event: ")
	buf.WriteString(typ)
	buf.WriteString("\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}
