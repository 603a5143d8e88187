package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

var _ Model = (*Anthropic)(nil)

// AnthropicConfig configures an Anthropic adapter.
type AnthropicConfig struct {
	// BaseURL is the API root, without /v1: "" is Anthropic's own,
	// https://api.anthropic.com.
	BaseURL string
	// APIKey is sent as the SDK sends it (an Authorization bearer
	// header); "" sends none. It is scrubbed from every error the adapter
	// returns.
	APIKey string
	// IdleTimeout ends a request when no event arrives for that long
	// (including the wait for the response headers); 0 disables it. A
	// request's own IdleTimeout overrides it.
	IdleTimeout time.Duration
	// HTTPClient sends the requests; nil means a client of the adapter's
	// own, as OpenAIConfig's.
	HTTPClient *http.Client
	// MaxTokens is the answer's cap (max_tokens, which the API requires)
	// when a request sets no Sampling.MaxOutputTokens; 0 is
	// DefaultAnthropicMaxTokens.
	MaxTokens int
}

// DefaultAnthropicMaxTokens is the answer's cap when neither the request
// nor the configuration gives one.
const DefaultAnthropicMaxTokens = 4096

// anthropicRoot is the API root of Anthropic's own endpoint.
const anthropicRoot = "https://api.anthropic.com"

// Anthropic is a Model that speaks to Anthropic's Messages API through the
// official anthropic-sdk-go, always streaming. It takes nothing from the
// environment (no ANTHROPIC_* variable): its configuration is all it
// sends. The SDK's own retries are off: every retry is the caller's
// decision.
//
// What a Request becomes: its opening system messages are the system
// prompt; its messages are user and assistant turns that alternate, tool
// results in the user turn right after their tool use (merged when several
// tool messages follow one another), reasoning parts first in their
// assistant turn; images and files go in user turns (a PDF or a text file
// as a document). Prompt caching is placed as placeBreakpoints says.
// Thinking asks for extended thinking with that budget, which max_tokens
// then includes on top of the answer's cap. Sampling: max_tokens,
// temperature and top_p, tool_choice (required is "any"),
// ParallelToolCalls false as disable_parallel_tool_use, and a JSON schema
// format as output_config.format.
type Anthropic struct {
	client    anthropic.Client
	http      *http.Client
	idle      time.Duration
	scrub     scrubber
	maxTokens int
}

// NewAnthropic returns an adapter configured by cfg.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = DefaultIdleConns
		tr.MaxIdleConnsPerHost = DefaultIdleConns
		hc = &http.Client{Transport: tr}
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(cmp.Or(cfg.BaseURL, anthropicRoot)),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Anthropic{client: anthropic.NewClient(opts...), http: hc, idle: cfg.IdleTimeout,
		scrub: scrubber{key: cfg.APIKey}, maxTokens: cmp.Or(cfg.MaxTokens, DefaultAnthropicMaxTokens)}
}

// CloseIdleConnections closes the connections the adapter's HTTP client
// keeps for reuse (for a shutdown).
func (m *Anthropic) CloseIdleConnections() {
	m.http.CloseIdleConnections()
}

// errNoStop reports a stream that ended without message_stop.
var errNoStop = errors.New("stream ended without message_stop")

// Stream implements Model. It returns *Error values as the OpenAI adapter
// does: KindCancelled when ctx ends, KindIdle when no event arrives within
// the idle timeout, KindConnection for a broken or truncated stream,
// KindBadRequest for a request it cannot write, and the kinds of
// classifyStatus for an HTTP error status (429 rate limited with its
// retry-after, 529 overloaded and other 5xx server errors, 401 and 403
// auth, "prompt is too long" context overflow, other 4xx bad request).
// The thinking the model gave is in Response.Reasoning, never in Text nor
// passed to onDelta.
func (m *Anthropic) Stream(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	ar, err := anthropicParams(req, m.maxTokens)
	if err != nil {
		return Response{}, &Error{Kind: KindBadRequest, Err: err}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idleFor := idleTimeout(m.idle, req.IdleTimeout)
	idle := startIdle(cancel, idleFor)
	defer idle.pause()
	// The middleware keeps the last response, for the status and headers
	// of a failure the SDK does not describe, and has its body read to its
	// end before it closes, so that its connection is reused.
	var res *http.Response
	capture := func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil && resp.Body != nil && resp.StatusCode < 300 {
			resp.Body = &drainingBody{ReadCloser: resp.Body, cancel: cancel}
		}
		res = resp
		return resp, err
	}
	stream := m.client.Messages.NewStreaming(sctx, ar.params, append(ar.opts, option.WithMiddleware(capture))...)
	defer func() { _ = stream.Close() }()

	var acc anthropicAssembler
	for !acc.stopped && stream.Next() {
		idle.pause()
		acc.add(stream.Current(), onDelta)
		idle.resume()
	}
	if err := stream.Err(); err != nil && !acc.stopped {
		return Response{}, m.classify(ctx, sctx, err, res, idleFor)
	}
	if !acc.stopped {
		return Response{}, m.classify(ctx, sctx, errNoStop, res, idleFor)
	}
	return acc.response(), nil
}

// anthropicBlock is one content block of a streamed answer.
type anthropicBlock struct {
	typ       string
	text      strings.Builder // text, or thinking
	input     strings.Builder // a tool use's input JSON, in pieces
	id, name  string
	signature string
	data      string // redacted thinking's
}

// anthropicAssembler builds a Response from the events of a stream.
type anthropicAssembler struct {
	blocks  map[int64]*anthropicBlock
	text    strings.Builder
	stop    string
	usage   anthropicUsage
	stopped bool // message_stop came
}

// anthropicUsage is the usage as Anthropic reports it: input_tokens
// without the tokens read from or written to the cache.
type anthropicUsage struct {
	input, cacheRead, cacheWrite, output, thinking int64
}

// add takes one event of the stream.
func (a *anthropicAssembler) add(ev anthropic.MessageStreamEventUnion, onDelta func(string)) {
	switch ev.Type {
	case "message_start":
		u := ev.Message.Usage
		a.usage = anthropicUsage{input: u.InputTokens, cacheRead: u.CacheReadInputTokens,
			cacheWrite: u.CacheCreationInputTokens, output: u.OutputTokens, thinking: u.OutputTokensDetails.ThinkingTokens}
	case "content_block_start":
		cb := ev.ContentBlock
		b := &anthropicBlock{typ: cb.Type, id: cb.ID, name: cb.Name, signature: cb.Signature, data: cb.Data}
		b.text.WriteString(cb.Text + cb.Thinking)
		if a.blocks == nil {
			a.blocks = make(map[int64]*anthropicBlock)
		}
		a.blocks[ev.Index] = b
		if cb.Type == "text" && cb.Text != "" {
			a.say(cb.Text, onDelta)
		}
	case "content_block_delta":
		a.delta(ev, onDelta)
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.stop = string(ev.Delta.StopReason)
		}
		a.deltaUsage(ev.Usage)
	case "message_stop":
		a.stopped = true
	}
}

// delta takes a content_block_delta event.
func (a *anthropicAssembler) delta(ev anthropic.MessageStreamEventUnion, onDelta func(string)) {
	b := a.blocks[ev.Index]
	if b == nil {
		return // a delta of no block started: nothing to add it to
	}
	d := ev.Delta
	switch d.Type {
	case "text_delta":
		b.text.WriteString(d.Text)
		a.say(d.Text, onDelta)
	case "input_json_delta":
		b.input.WriteString(d.PartialJSON)
	case "thinking_delta":
		b.text.WriteString(d.Thinking)
	case "signature_delta":
		b.signature += d.Signature
	}
}

func (a *anthropicAssembler) say(text string, onDelta func(string)) {
	a.text.WriteString(text)
	if onDelta != nil && text != "" {
		onDelta(text)
	}
}

// deltaUsage takes the usage of message_delta, cumulative: its counts
// replace those of message_start that it gives.
func (a *anthropicAssembler) deltaUsage(u anthropic.MessageDeltaUsage) {
	if u.JSON.OutputTokens.Valid() {
		a.usage.output = u.OutputTokens
	}
	if u.JSON.InputTokens.Valid() {
		a.usage.input = u.InputTokens
	}
	if u.JSON.CacheReadInputTokens.Valid() {
		a.usage.cacheRead = u.CacheReadInputTokens
	}
	if u.JSON.CacheCreationInputTokens.Valid() {
		a.usage.cacheWrite = u.CacheCreationInputTokens
	}
	if u.OutputTokensDetails.JSON.ThinkingTokens.Valid() {
		a.usage.thinking = u.OutputTokensDetails.ThinkingTokens
	}
}

// response assembles the answer: text blocks as Text, tool uses as tool
// calls, thinking blocks as Reasoning, in the order of their indexes.
func (a *anthropicAssembler) response() Response {
	u := a.usage
	r := Response{Text: a.text.String(), FinishReason: stopReason(a.stop), Usage: Usage{
		InputTokens:       u.input + u.cacheRead + u.cacheWrite,
		CachedInputTokens: u.cacheRead,
		CacheWriteTokens:  u.cacheWrite,
		OutputTokens:      u.output,
		ReasoningTokens:   u.thinking,
	}}
	idx := make([]int64, 0, len(a.blocks))
	for i := range a.blocks {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		b := a.blocks[i]
		switch b.typ {
		case "tool_use":
			args := b.input.String()
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: b.id, Name: b.name, Arguments: args})
		case "thinking":
			r.Reasoning = append(r.Reasoning, ReasoningBlock{Type: ReasoningThinking, Text: b.text.String(), Signature: b.signature})
		case "redacted_thinking":
			r.Reasoning = append(r.Reasoning, ReasoningBlock{Type: ReasoningRedacted, Data: b.data})
		}
	}
	return r
}

// stopReason maps Anthropic's stop_reason onto FinishReason: end_turn and
// stop_sequence are a final answer, tool_use tool calls, max_tokens (and
// model_context_window_exceeded, an answer cut by the window) length,
// refusal the content filter; pause_turn (a server tool's turn paused) and
// anything else are FinishUnknown.
func stopReason(s string) FinishReason {
	switch s {
	case "end_turn", "stop_sequence":
		return FinishStop
	case "tool_use":
		return FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return FinishLength
	case "refusal":
		return FinishContentFilter
	}
	return FinishUnknown
}

// classify turns a failed request into an *Error through the shared
// classifier. An error event inside a stream comes from the SDK as an
// *anthropic.Error of the stream's status (200): what it said is its raw
// JSON, as the body of an error status is.
func (m *Anthropic) classify(ctx, sctx context.Context, err error, res *http.Response, idleFor time.Duration) *Error {
	f := failure{err: err, status: statusOf(res)}
	if res != nil {
		f.header = res.Header
	}
	var apiErr *anthropic.Error
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case ctx.Err() != nil || errors.Is(context.Cause(sctx), errIdle):
	case errors.As(err, &apiErr) && apiErr.StatusCode < 400:
		f.event, f.said = true, m.scrub.said([]byte(apiErr.RawJSON()))
	case errors.As(err, &apiErr):
		f.status = apiErr.StatusCode
		if r := apiErr.Response; r != nil {
			f.header = r.Header
		}
		if f.said = m.scrub.said([]byte(apiErr.RawJSON())); f.said == (said{}) {
			f.said = m.scrub.body(apiErr.Response)
		}
	case strings.HasPrefix(err.Error(), "received error while streaming"):
		// An error event whose data is not JSON.
		f.event, f.said = true, said{msg: m.scrub.clip(strings.TrimPrefix(err.Error(), "received error while streaming: "), MaxMessageBytes)}
	case errors.As(err, &syntaxErr) || errors.As(err, &typeErr):
		f.malformed = true
	}
	return m.scrub.classify(ctx, sctx, f, idleFor)
}
