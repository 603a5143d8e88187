package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Role names who said a message.
type Role string

// Roles of the provider-neutral conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartType is the kind of one piece of a message.
type PartType string

// Part types. Which roles may hold which parts is the provider's rule, and
// its adapter's check: Chat Completions takes images and files in user
// messages only, tool calls in assistant messages, tool results in tool
// messages. A reasoning part, in an assistant message, gives back what the
// model thought before that answer; an adapter whose API takes no such
// thing leaves it out (the OpenAI adapter never sends one).
const (
	PartText       PartType = "text"
	PartImage      PartType = "image"
	PartFile       PartType = "file"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
	PartReasoning  PartType = "reasoning"
)

// Part is one piece of a message's content. Which fields it uses depends on
// its Type:
//
//   - PartText: Text.
//   - PartImage: the image by URL (http(s), or a data: URL), or inline as
//     Data of MediaType; Detail is the resolution asked for ("auto", "low",
//     "high"), "" for the provider's default.
//   - PartFile: the file inline as Data of MediaType, with its Filename, or
//     a file the provider already holds, by FileID.
//   - PartToolCall: Call.
//   - PartToolResult: ToolCallID, the result given to the model as Text, and
//     IsError when it reports a failure (for providers that mark one).
//   - PartReasoning: Reasoning, a block of the model's own thinking, sent
//     back as the model gave it (Response.Reasoning).
type Part struct {
	Type       PartType
	Text       string
	URL        string
	Data       []byte
	MediaType  string
	Filename   string
	FileID     string
	Detail     string
	Call       ToolCall
	ToolCallID string
	IsError    bool
	Reasoning  ReasoningBlock
}

// Text returns a text part.
func Text(s string) Part { return Part{Type: PartText, Text: s} }

// ToolResult returns the result part answering the call id.
func ToolResult(id, content string) Part {
	return Part{Type: PartToolResult, ToolCallID: id, Text: content}
}

// Reasoning returns the part that gives block back to the model.
func Reasoning(block ReasoningBlock) Part {
	return Part{Type: PartReasoning, Reasoning: block}
}

// ReasoningBlock is one block of what a model thought before it answered
// (Anthropic's extended thinking): the thinking as Text with the
// provider's Signature of it, or, of Type ReasoningRedacted, the opaque
// Data the provider gives in place of a thinking it encrypted. It is never
// answer text. The provider checks what is sent back against its
// signature, so a block is kept and returned byte for byte.
type ReasoningBlock struct {
	Type      string // ReasoningThinking or ReasoningRedacted
	Text      string
	Signature string
	Data      string
}

// Types of a ReasoningBlock.
const (
	ReasoningThinking = "thinking"
	ReasoningRedacted = "redacted_thinking"
)

// Message is one entry of the conversation sent to the model: who said it
// and what, as parts. An assistant message holds its text and its tool
// calls; a tool message holds tool results.
type Message struct {
	Role  Role
	Parts []Part
}

// TextMessage returns a message of role holding text alone.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Parts: []Part{Text(text)}}
}

// ToolCall is one function call the model asked for. Arguments is the raw JSON
// text the model produced (it may be invalid JSON; the engine validates it).
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// ToolSpec describes a function offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema of the arguments
}

// Request is one completion request.
type Request struct {
	Model    string
	Messages []Message
	Tools    []ToolSpec
	// IdleTimeout, when positive, overrides the adapter's idle timeout for
	// this request: the longest wait for the next chunk of the stream.
	IdleTimeout time.Duration
	// CacheKey, when set, groups requests that share a prefix for the
	// provider's prompt cache (OpenAI's prompt_cache_key); an adapter may
	// leave it out where the API does not take it.
	CacheKey string
	// Sampling is how the model is asked to sample its answer; its zero
	// value leaves the provider's defaults.
	Sampling Sampling
	// CacheBreakpoints are indexes of Messages, in increasing order, after
	// which the conversation's prefix is known not to change on the next
	// requests (the message holding a compaction's summary, say): an
	// adapter whose provider caches prompts at marked places (Anthropic)
	// marks them, within its limit, the latest first; the others ignore
	// them.
	CacheBreakpoints []int
	// Thinking, when positive, asks for extended thinking with a budget of
	// that many tokens (an adapter whose API has no such budget ignores
	// it); 0 asks for none. What the model thought comes back in
	// Response.Reasoning.
	Thinking int
}

// Sampling is how the model is asked to sample an answer; a zero field
// leaves the provider's default.
type Sampling struct {
	// MaxOutputTokens, when positive, caps the tokens of the answer: one
	// cut at it ends with FinishLength.
	MaxOutputTokens int
	Temperature     *float64
	TopP            *float64
	Format          *OutputFormat // nil: plain text
	// ToolChoice is whether the model may, must or must not call tools,
	// or which one it must call; nil: the provider's default (auto). Sent
	// only with tools.
	ToolChoice *ToolChoice
	// ParallelToolCalls, when set, says whether the model may ask for
	// more than one call at a time; sent only with tools.
	ParallelToolCalls *bool
	// ReasoningEffort asks a reasoning model for that much thinking
	// (none, minimal, low, medium, high, xhigh): OpenAI's reasoning_effort,
	// a thinking budget for Anthropic (ThinkingBudget) when the request
	// asks for none of its own; "": the provider's default.
	ReasoningEffort string
}

// ThinkingBudget is the extended thinking budget, in tokens, that stands
// for a reasoning effort (0: none).
func ThinkingBudget(effort string) int {
	switch effort {
	case "low":
		return 2048
	case "medium":
		return 8192
	case "high":
		return 16384
	case "xhigh":
		return 32768
	}
	return 0 // none, minimal (below Anthropic's least budget of 1024), or the default
}

// ToolChoice is Mode ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired,
// or ToolChoiceTool with the Name of the tool the model must call.
type ToolChoice struct {
	Mode string
	Name string
}

// Modes of a ToolChoice.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
	ToolChoiceTool     = "tool"
)

// OutputFormat asks the model for structured output: JSON, or JSON that a
// schema describes.
type OutputFormat struct {
	Type        string          // FormatText, FormatJSONObject or FormatJSONSchema
	Name        string          // FormatJSONSchema: the schema's name
	Description string          // FormatJSONSchema: what the answer is for
	Schema      json.RawMessage // FormatJSONSchema: the JSON Schema of the answer, a JSON object
	Strict      *bool           // FormatJSONSchema: whether the answer must follow the schema exactly
}

// Output format types.
const (
	FormatText       = "text"        // plain text, the default
	FormatJSONObject = "json_object" // any JSON object
	FormatJSONSchema = "json_schema" // JSON that Schema describes
)

// Usage is the token accounting of one completion.
// InputTokens is every token of the prompt, those read from the cache and
// those written to it included (Anthropic reports them apart; its adapter
// adds them up).
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64 // of InputTokens, those read from the provider's prompt cache
	CacheWriteTokens  int64 // of InputTokens, those written to the provider's prompt cache
	ReasoningTokens   int64 // of OutputTokens, those spent on reasoning
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + v.InputTokens,
		OutputTokens:      u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens,
		CacheWriteTokens:  u.CacheWriteTokens + v.CacheWriteTokens,
		ReasoningTokens:   u.ReasoningTokens + v.ReasoningTokens,
	}
}

// FinishReason is why the model ended its answer.
type FinishReason string

// Finish reasons. An adapter maps its provider's values onto these; a value
// it does not know (a compatible server's own, such as "eos" or "error")
// becomes FinishUnknown, and the answer is taken as it stands: its tool
// calls if it has any, else its text as a final answer.
const (
	FinishUnknown       FinishReason = ""
	FinishStop          FinishReason = "stop"           // a final answer
	FinishToolCalls     FinishReason = "tool_calls"     // it asks for tool calls
	FinishLength        FinishReason = "length"         // cut at the output limit
	FinishContentFilter FinishReason = "content_filter" // stopped by the provider's filter
)

// Response is the complete output of one streamed completion. Reasoning
// holds the blocks of the model's thinking, in order, when it gave them
// (never in Text, never passed to onDelta); an assistant message that
// answers with the same tool calls should carry them back as
// PartReasoning parts, as Anthropic requires across a tool call.
type Response struct {
	Text         string
	ToolCalls    []ToolCall
	Reasoning    []ReasoningBlock
	FinishReason FinishReason
	Usage        Usage
}

// Model is a chat model that streams its answer.
//
// Stream sends req and calls onDelta with each piece of assistant text as it
// arrives (onDelta may be nil). It returns the assembled response once the
// stream ends. Errors are *Error values, so callers can tell a retryable
// failure from a final one with IsRetryable; a cancelled ctx returns an error
// that wraps ctx's cause.
type Model interface {
	Stream(ctx context.Context, req Request, onDelta func(text string)) (Response, error)
}

// ErrorKind classifies a model failure.
type ErrorKind string

// Kinds of model failure. Retryable kinds may succeed if the same request is
// sent again; the others will not.
const (
	KindRateLimited     ErrorKind = "rate_limited"     // 429; RetryAfter may be set
	KindServer          ErrorKind = "server_error"     // 5xx
	KindConnection      ErrorKind = "connection"       // reset, refused, truncated stream
	KindIdle            ErrorKind = "idle_timeout"     // no chunk within the idle timeout
	KindBadRequest      ErrorKind = "bad_request"      // 400 and other 4xx
	KindAuth            ErrorKind = "auth"             // 401, 403, or the provider says the key is invalid
	KindContextOverflow ErrorKind = "context_overflow" // the prompt is too long for the model
	KindCancelled       ErrorKind = "cancelled"        // the caller's context ended
)

// Error is a classified model failure. Code, Type and Message are what the
// provider said about it, when it said anything: the fields of an error
// body ({"error":{"message","type","code"}}, the shape OpenAI's and
// Anthropic's APIs share), of an error event inside a stream, or, for a
// body that is not one (an HTML or plain 404 page), an excerpt of the body
// as Message. They are capped in size and never hold the adapter's API key
// (it is replaced by "[redacted]", as is any bearer token), so they may be
// shown and stored; so may Error's text.
type Error struct {
	Kind       ErrorKind
	Status     int           // HTTP status, 0 when there was none (200 for an error inside a stream)
	Code       string        // the provider's error code, e.g. invalid_api_key
	Type       string        // the provider's error type, e.g. invalid_request_error
	Message    string        // the provider's message, at most MaxMessageBytes
	RetryAfter time.Duration // from a Retry-After header, 0 when absent
	Err        error
}

// MaxMessageBytes caps Error.Message: a provider's message is cut to it, on
// a rune boundary; MaxExcerptBytes caps the excerpt of an error body that is
// not an error object (most of an HTML page is markup).
const (
	MaxMessageBytes = 500
	MaxExcerptBytes = 200
)

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("model ")
	b.WriteString(string(e.Kind))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (status %d)", e.Status)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	switch {
	case e.Code != "" && e.Type != "":
		fmt.Fprintf(&b, " [%s, %s]", e.Code, e.Type)
	case e.Code != "" || e.Type != "":
		fmt.Fprintf(&b, " [%s]", e.Code+e.Type)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether sending the same request again may succeed.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindConnection, KindIdle:
		return true
	}
	return false
}

// IsRetryable reports whether err is a model error that a retry may mend.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}
