package llm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

// This file turns a Request into the parameters of Anthropic's Messages
// API: the system prompt, the messages (user and assistant turns that
// alternate, tool results in the user turn after their tool use), the
// tools, sampling, thinking, and the prompt cache's breakpoints.

// MaxCacheBreakpoints is how many blocks of one request Anthropic lets
// carry cache_control.
const MaxCacheBreakpoints = 4

// anthropicRequest is what a Request becomes: the SDK's parameters, and
// the request options that set what the SDK has no field for.
type anthropicRequest struct {
	params anthropic.MessageNewParams
	opts   []option.RequestOption
}

// anthropicParams writes req as Messages API parameters; maxTokens is the
// answer's cap when req sets none.
func anthropicParams(req Request, maxTokens int) (anthropicRequest, error) {
	var out anthropicRequest
	conv, err := convertMessages(req.Messages)
	if err != nil {
		return out, err
	}
	p := anthropic.MessageNewParams{Model: req.Model, System: conv.system, Messages: conv.turns}
	smp := req.Sampling
	p.MaxTokens = int64(maxTokens)
	if smp.MaxOutputTokens > 0 {
		p.MaxTokens = int64(smp.MaxOutputTokens)
	}
	budget := req.Thinking
	if budget == 0 {
		budget = ThinkingBudget(smp.ReasoningEffort)
	}
	if budget > 0 {
		// max_tokens counts the thinking too: the budget comes on top of
		// the answer's own cap, which so keeps its meaning.
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(int64(budget))
		p.MaxTokens += int64(budget)
	}
	if len(req.Tools) > 0 {
		if p.Tools, err = anthropicTools(req.Tools); err != nil {
			return out, err
		}
		if p.ToolChoice, err = anthropicToolChoice(smp.ToolChoice, smp.ParallelToolCalls); err != nil {
			return out, err
		}
	}
	if p.OutputConfig.Format, err = anthropicFormat(smp.Format); err != nil {
		return out, err
	}
	// The SDK, for API version 2026-10-21, has no field for temperature
	// and top_p; a request that sets them sends them as the API named them,
	// and a model that no longer takes them says so with a 400.
	for _, f := range []struct {
		name string
		v    *float64
	}{{"temperature", smp.Temperature}, {"top_p", smp.TopP}} {
		if f.v != nil {
			if _, err := json.Marshal(*f.v); err != nil {
				return out, fmt.Errorf("%s is %v, not a number JSON can hold", f.name, *f.v)
			}
			out.opts = append(out.opts, option.WithJSONSet(f.name, *f.v))
		}
	}
	placeBreakpoints(&p, conv, req.CacheBreakpoints)
	out.params = p
	return out, nil
}

// converted is a conversation as Anthropic takes it: the system prompt,
// the turns, and where each of the request's messages ended, for the
// cache's breakpoints.
type converted struct {
	system []anthropic.TextBlockParam
	turns  []anthropic.MessageParam
	// ends[i] is the block that ends message i: its turn and its index
	// there; turn -1 for a message in the system prompt or one that
	// ends before any block.
	ends []blockAt
}

type blockAt struct{ turn, block int }

// convertMessages writes msgs as Anthropic's system prompt and turns. The
// system messages that open the conversation are the system prompt; a
// system message after them (a compaction's summary, an instruction to
// continue) is user text where it stands, so that the order holds.
// Messages of the same side in a row are one turn: a tool message's
// results go in the user turn after the assistant's tool use, several
// tool messages in a row in one turn, as the API requires.
func convertMessages(msgs []Message) (converted, error) {
	var c converted
	c.ends = make([]blockAt, len(msgs))
	opening := true
	for i, msg := range msgs {
		c.ends[i] = blockAt{turn: -1}
		if msg.Role == RoleSystem && opening {
			for j, p := range msg.Parts {
				if p.Type != PartText {
					return c, fmt.Errorf("message %d: part %d: a %s part in a system message (it holds text only)", i, j, p.Type)
				}
				if p.Text != "" {
					c.system = append(c.system, anthropic.TextBlockParam{Text: p.Text})
				}
			}
			continue
		}
		opening = false
		blocks, err := anthropicBlocks(msg)
		if err != nil {
			return c, fmt.Errorf("message %d: %w", i, err)
		}
		c.add(msg.Role == RoleAssistant, blocks)
		if n := len(c.turns); n > 0 {
			c.ends[i] = blockAt{turn: n - 1, block: len(turnBlocks(c.turns[n-1])) - 1}
		}
	}
	return c, nil
}

// add appends blocks to the last turn when it is of the same side, else
// as a new turn. Nothing is added for no blocks.
func (c *converted) add(assistant bool, blocks []anthropic.ContentBlockParamUnion) {
	if len(blocks) == 0 {
		return
	}
	if n := len(c.turns); n > 0 && (c.turns[n-1].OfAssistant != nil) == assistant {
		if assistant {
			c.turns[n-1].OfAssistant.Content = append(c.turns[n-1].OfAssistant.Content, blocks...)
		} else {
			c.turns[n-1].OfUser.Content = append(c.turns[n-1].OfUser.Content, blocks...)
		}
		return
	}
	if assistant {
		c.turns = append(c.turns, anthropic.NewAssistantMessage(blocks...))
	} else {
		c.turns = append(c.turns, anthropic.NewUserMessage(blocks...))
	}
}

// turnBlocks returns the content of a turn.
func turnBlocks(t anthropic.MessageParam) []anthropic.ContentBlockParamUnion {
	if t.OfAssistant != nil {
		return t.OfAssistant.Content
	}
	return t.OfUser.Content
}

// anthropicBlocks writes the parts of msg as content blocks. An assistant
// message's reasoning goes first, as the API requires of the thinking
// that led to a tool use; empty text is left out (the API refuses an
// empty text block).
func anthropicBlocks(msg Message) ([]anthropic.ContentBlockParamUnion, error) {
	var first, rest []anthropic.ContentBlockParamUnion
	for j, p := range msg.Parts {
		if err := allowedIn(msg.Role, p.Type); err != nil {
			return nil, fmt.Errorf("part %d: %w", j, err)
		}
		switch p.Type {
		case PartText:
			if p.Text != "" {
				rest = append(rest, anthropic.NewTextBlock(p.Text))
			}
		case PartReasoning:
			b, err := reasoningBlock(p.Reasoning)
			if err != nil {
				return nil, fmt.Errorf("part %d: %w", j, err)
			}
			first = append(first, b)
		case PartToolCall:
			rest = append(rest, anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{
				ID: p.Call.ID, Name: p.Call.Name, Input: toolInput(p.Call.Arguments)}})
		case PartToolResult:
			rest = append(rest, toolResultBlock(p))
		case PartImage:
			b, err := imageBlock(p)
			if err != nil {
				return nil, fmt.Errorf("part %d: %w", j, err)
			}
			rest = append(rest, b)
		case PartFile:
			b, err := documentBlock(p)
			if err != nil {
				return nil, fmt.Errorf("part %d: %w", j, err)
			}
			rest = append(rest, b)
		}
	}
	return append(first, rest...), nil
}

// allowedIn says whether a part of type t may be in a message of role.
func allowedIn(role Role, t PartType) error {
	var ok bool
	switch role {
	case RoleUser:
		ok = t == PartText || t == PartImage || t == PartFile
	case RoleSystem:
		ok = t == PartText
	case RoleAssistant:
		ok = t == PartText || t == PartToolCall || t == PartReasoning
	case RoleTool:
		ok = t == PartToolResult
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	switch {
	case ok:
		return nil
	case t != PartText && t != PartImage && t != PartFile && t != PartToolCall && t != PartToolResult && t != PartReasoning:
		return fmt.Errorf("unknown part type %q", t)
	}
	return fmt.Errorf("a %s part in a %s message", t, role)
}

// reasoningBlock writes b back as the thinking or redacted thinking block
// it came as.
func reasoningBlock(b ReasoningBlock) (anthropic.ContentBlockParamUnion, error) {
	switch b.Type {
	case ReasoningThinking:
		return anthropic.ContentBlockParamUnion{OfThinking: &anthropic.ThinkingBlockParam{Thinking: b.Text, Signature: b.Signature}}, nil
	case ReasoningRedacted:
		return anthropic.ContentBlockParamUnion{OfRedactedThinking: &anthropic.RedactedThinkingBlockParam{Data: b.Data}}, nil
	}
	return anthropic.ContentBlockParamUnion{}, fmt.Errorf("unknown reasoning type %q", b.Type)
}

// toolInput is a tool call's arguments as a tool_use block's input, which
// must be a JSON object: arguments that are none (the model wrote invalid
// JSON, which the engine answered with an error) are sent as {}.
func toolInput(args string) json.RawMessage {
	raw := bytes.TrimSpace([]byte(args))
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return json.RawMessage("{}")
	}
	return raw
}

// toolResultBlock writes a tool result, with is_error when it reports a
// failure. An empty result has no content (the API refuses empty text).
func toolResultBlock(p Part) anthropic.ContentBlockParamUnion {
	b := anthropic.ToolResultBlockParam{ToolUseID: p.ToolCallID}
	if p.Text != "" {
		b.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: p.Text}}}
	}
	if p.IsError {
		b.IsError = anthropic.Bool(true)
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &b}
}

// imageBlock writes an image: inline data as base64, a data: URL as the
// data it holds, any other URL as a URL source, a file id as a file.
func imageBlock(p Part) (anthropic.ContentBlockParamUnion, error) {
	var src anthropic.ImageBlockParamSourceUnion
	mediaType, data := p.MediaType, p.Data
	if len(data) == 0 && strings.HasPrefix(p.URL, "data:") {
		var err error
		if mediaType, data, err = parseDataURL(p.URL); err != nil {
			return anthropic.ContentBlockParamUnion{}, err
		}
	}
	switch {
	case len(data) > 0 && mediaType == "":
		return anthropic.ContentBlockParamUnion{}, errors.New("an image given as data without its media type")
	case len(data) > 0:
		src.OfBase64 = &anthropic.Base64ImageSourceParam{Data: base64.StdEncoding.EncodeToString(data),
			MediaType: anthropic.Base64ImageSourceMediaType(mediaType)}
	case p.URL != "":
		src.OfURL = &anthropic.URLImageSourceParam{URL: p.URL}
	case p.FileID != "":
		src.OfFile = &anthropic.FileImageSourceParam{FileID: p.FileID}
	default:
		return anthropic.ContentBlockParamUnion{}, errors.New("an image without a URL or data")
	}
	return anthropic.ContentBlockParamUnion{OfImage: &anthropic.ImageBlockParam{Source: src}}, nil
}

// documentBlock writes a file as a document: a PDF's data as base64, a
// text file's as plain text, a PDF by URL, a file by its id; its Filename
// is the document's title.
func documentBlock(p Part) (anthropic.ContentBlockParamUnion, error) {
	var src anthropic.DocumentBlockParamSourceUnion
	mediaType, data := p.MediaType, p.Data
	if len(data) == 0 && strings.HasPrefix(p.URL, "data:") {
		var err error
		if mediaType, data, err = parseDataURL(p.URL); err != nil {
			return anthropic.ContentBlockParamUnion{}, err
		}
	}
	base, _, _ := strings.Cut(mediaType, ";")
	switch {
	case len(data) > 0 && base == "application/pdf":
		src.OfBase64 = &anthropic.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(data)}
	case len(data) > 0 && strings.HasPrefix(base, "text/"):
		src.OfText = &anthropic.PlainTextSourceParam{Data: string(data)}
	case len(data) > 0:
		return anthropic.ContentBlockParamUnion{}, fmt.Errorf("a file of type %q (Anthropic takes PDF and text documents)", mediaType)
	case p.FileID != "":
		src.OfFile = &anthropic.FileDocumentSourceParam{FileID: p.FileID}
	case p.URL != "":
		src.OfURL = &anthropic.URLPDFSourceParam{URL: p.URL}
	default:
		return anthropic.ContentBlockParamUnion{}, errors.New("a file without data, a URL or a file id")
	}
	d := anthropic.DocumentBlockParam{Source: src}
	if p.Filename != "" {
		d.Title = anthropic.String(p.Filename)
	}
	return anthropic.ContentBlockParamUnion{OfDocument: &d}, nil
}

// parseDataURL reads a base64 data: URL.
func parseDataURL(url string) (string, []byte, error) {
	meta, payload, ok := strings.Cut(strings.TrimPrefix(url, "data:"), ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 || mediaType == "" {
		return "", nil, errors.New("a data: URL that is not base64 data of a media type")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", nil, fmt.Errorf("a data: URL whose data is not base64: %w", err)
	}
	return mediaType, data, nil
}

// anthropicTools writes tools as custom tools; a JSON Schema's properties
// and required go to the SDK's fields, its other keywords beside them.
func anthropicTools(tools []ToolSpec) ([]anthropic.ToolUnionParam, error) {
	out := make([]anthropic.ToolUnionParam, len(tools))
	for i, t := range tools {
		var schema anthropic.ToolInputSchemaParam
		if len(t.Parameters) > 0 {
			var m map[string]any
			if err := json.Unmarshal(t.Parameters, &m); err != nil {
				return nil, fmt.Errorf("tool %s: parameters are not a JSON object: %w", t.Name, err)
			}
			schema.Properties = m["properties"]
			if req, ok := m["required"].([]any); ok {
				for _, r := range req {
					if s, ok := r.(string); ok {
						schema.Required = append(schema.Required, s)
					}
				}
			}
			delete(m, "properties")
			delete(m, "required")
			delete(m, "type")
			if len(m) > 0 {
				schema.ExtraFields = m
			}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		out[i] = anthropic.ToolUnionParam{OfTool: &tp}
	}
	return out, nil
}

// anthropicToolChoice writes the tool choice: auto, any (required), none
// or one tool; parallel false is disable_parallel_tool_use, which needs a
// choice (auto when none is given) and which none does not take.
func anthropicToolChoice(c *ToolChoice, parallel *bool) (anthropic.ToolChoiceUnionParam, error) {
	var out anthropic.ToolChoiceUnionParam
	var disable param.Opt[bool]
	if parallel != nil && !*parallel {
		disable = anthropic.Bool(true)
	}
	mode := ""
	if c != nil {
		mode = c.Mode
	}
	switch mode {
	case "":
		if parallel != nil && !*parallel {
			out.OfAuto = &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: disable}
		}
	case ToolChoiceAuto:
		out.OfAuto = &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: disable}
	case ToolChoiceRequired:
		out.OfAny = &anthropic.ToolChoiceAnyParam{DisableParallelToolUse: disable}
	case ToolChoiceNone:
		out.OfNone = &anthropic.ToolChoiceNoneParam{}
	case ToolChoiceTool:
		out.OfTool = &anthropic.ToolChoiceToolParam{Name: c.Name, DisableParallelToolUse: disable}
	default:
		return out, fmt.Errorf("unknown tool choice %q", mode)
	}
	return out, nil
}

// anthropicFormat writes a structured output format as output_config's
// JSON schema format; json_object is a schema of any object.
func anthropicFormat(f *OutputFormat) (anthropic.JSONOutputFormatParam, error) {
	var out anthropic.JSONOutputFormatParam
	if f == nil {
		return out, nil
	}
	switch f.Type {
	case "", FormatText:
		return out, nil
	case FormatJSONObject:
		out.Schema = map[string]any{"type": "object"}
		return out, nil
	case FormatJSONSchema:
	default:
		return out, fmt.Errorf("unknown output format type %q", f.Type)
	}
	if err := json.Unmarshal(f.Schema, &out.Schema); err != nil || out.Schema == nil {
		return out, fmt.Errorf("output format %s: the schema is not a JSON object", f.Name)
	}
	return out, nil
}

// placeBreakpoints marks where the prompt cache may end, with cache_control
// {"type": "ephemeral"} on at most MaxCacheBreakpoints blocks. The prefix
// Anthropic caches runs in the order tools, system, messages, so:
//
//   - the last tool, whose prefix (the tools) changes only with them;
//   - the last block of the system prompt (tools and instructions);
//   - the last block of each message that breakpoints name (the request's
//     CacheBreakpoints, such as a compaction's summary: what precedes it
//     does not change until the next compaction);
//   - the last block of the last message, so that the next request, which
//     repeats this one and adds to it, reads all of it from the cache (the
//     API looks for a cached prefix at the blocks before a breakpoint too).
//
// When they are more than the limit, the oldest message breakpoints are
// dropped first: the latest prefix holds the earlier ones. A breakpoint on
// a block that cannot carry one (thinking) moves to the block before it.
func placeBreakpoints(p *anthropic.MessageNewParams, c converted, breakpoints []int) {
	budget := MaxCacheBreakpoints
	if n := len(p.Tools); n > 0 && p.Tools[n-1].OfTool != nil {
		p.Tools[n-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
		budget--
	}
	if n := len(p.System); n > 0 {
		p.System[n-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
		budget--
	}
	var marks []blockAt
	idx := append(breakpoints[:len(breakpoints):len(breakpoints)], len(c.ends)-1)
	for _, i := range idx {
		if i < 0 || i >= len(c.ends) {
			continue
		}
		at, ok := cacheable(p.Messages, c.ends[i])
		if !ok || (len(marks) > 0 && !after(at, marks[len(marks)-1])) {
			continue // none, or one at or before the last mark (out of order)
		}
		marks = append(marks, at)
	}
	if len(marks) > budget {
		marks = marks[len(marks)-budget:]
	}
	for _, at := range marks {
		*turnBlocks(p.Messages[at.turn])[at.block].GetCacheControl() = anthropic.NewCacheControlEphemeralParam()
	}
}

// cacheable returns the block at or before at that can carry
// cache_control; false when there is none.
func cacheable(turns []anthropic.MessageParam, at blockAt) (blockAt, bool) {
	for at.turn >= 0 {
		blocks := turnBlocks(turns[at.turn])
		for ; at.block >= 0; at.block-- {
			if blocks[at.block].GetCacheControl() != nil {
				return at, true
			}
		}
		at.turn--
		if at.turn >= 0 {
			at.block = len(turnBlocks(turns[at.turn])) - 1
		}
	}
	return at, false
}

// after reports whether block a comes after block b.
func after(a, b blockAt) bool {
	return a.turn > b.turn || (a.turn == b.turn && a.block > b.block)
}
