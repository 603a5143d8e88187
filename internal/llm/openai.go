package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

var _ Model = (*OpenAI)(nil)

// OpenAIConfig configures an OpenAI adapter.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. "https://api.openai.com/v1" or
	// "http://127.0.0.1:8090/v1". Empty means the SDK's default (or
	// OPENAI_BASE_URL).
	BaseURL string
	// APIKey is sent as a bearer token. Empty means the SDK's default
	// (OPENAI_API_KEY). It is scrubbed from every error the adapter returns,
	// in case a provider echoes it.
	APIKey string
	// IdleTimeout ends a request when no chunk arrives for that long
	// (including the wait for the response headers); 0 disables it.
	IdleTimeout time.Duration
	// HTTPClient sends the requests; nil means a new client without a
	// timeout (a stream lasts as long as the model writes; IdleTimeout and
	// the caller's context bound it) whose transport keeps up to
	// DefaultIdleConns connections open for reuse.
	HTTPClient *http.Client
	// PromptCacheKey sends a request's CacheKey as "prompt_cache_key"
	// (OpenAI's API takes it; other OpenAI-compatible servers may refuse a
	// field they do not know).
	PromptCacheKey bool
}

// DefaultIdleConns is how many idle connections to the model's host the
// adapter's own HTTP client keeps for reuse. net/http's default, 2, is far
// below the model calls a server makes at once: every call beyond two then
// opened a connection of its own (a TLS handshake, against a real
// provider), and closed it after.
const DefaultIdleConns = 256

// OpenAI is a Model that speaks to an OpenAI-compatible Chat Completions
// endpoint through the openai-go SDK, always streaming. The SDK's own retries
// are off: every retry is the caller's decision.
type OpenAI struct {
	client openai.Client
	http   *http.Client
	idle   time.Duration
	key    string // the API key sent, scrubbed from errors
	cache  bool   // send prompt_cache_key
}

// NewOpenAI returns an adapter configured by cfg.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = DefaultIdleConns
		tr.MaxIdleConnsPerHost = DefaultIdleConns
		hc = &http.Client{Transport: tr}
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	// The SDK reads OPENAI_API_KEY when no key is given; that is the key
	// to keep out of errors then.
	key := cmp.Or(cfg.APIKey, os.Getenv("OPENAI_API_KEY"))
	return &OpenAI{client: openai.NewClient(opts...), http: hc, idle: cfg.IdleTimeout, key: key, cache: cfg.PromptCacheKey}
}

// CloseIdleConnections closes the connections the adapter's HTTP client
// keeps for reuse (for a shutdown); calls after it open new ones.
func (m *OpenAI) CloseIdleConnections() {
	m.http.CloseIdleConnections()
}

// errIdle is the cancel cause set when the idle timer fires.
var errIdle = errors.New("no chunk within the idle timeout")

// errTruncated reports a stream that ended without a finish_reason.
var errTruncated = errors.New("stream ended without a finish_reason")

// Stream implements Model. It returns *Error values: KindCancelled (wrapping
// context.Cause(ctx)) when ctx ends, KindIdle when no chunk arrives within
// the idle timeout, KindConnection for a broken or truncated stream, and the
// kinds of classifyStatus for an HTTP error status.
func (m *OpenAI) Stream(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	if !m.cache {
		req.CacheKey = ""
	}
	body, err := requestBody(req)
	if err != nil {
		return Response{}, &Error{Kind: KindBadRequest, Err: err}
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idleFor := m.idle
	if req.IdleTimeout > 0 {
		idleFor = req.IdleTimeout
	}
	var idle *time.Timer
	if idleFor > 0 {
		idle = time.AfterFunc(idleFor, func() { cancel(errIdle) })
		defer idle.Stop()
	}

	// The SDK turns an error status into *openai.Error only when it can
	// parse the body; the middleware keeps the status and headers for the
	// other cases (a proxy's HTML 502, an empty 429).
	var res *http.Response
	capture := func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		// The SDK wraps the body in a type of its own, which net/http
		// cannot tell is in memory: it then sends the headers and the body
		// in two writes (two packets). A copy of the same bytes goes in one.
		if r.GetBody != nil {
			if copied, err := r.GetBody(); err == nil {
				r.Body = copied
			}
		}
		resp, err := next(r)
		res = resp
		return resp, err
	}
	// This is what Chat.Completions.NewStreaming does, but the chunks are
	// decoded into chunk, which holds only what the adapter reads: the SDK's
	// ChatCompletionChunk keeps every field's raw JSON and took three
	// quarters of a streamed call's CPU.
	var raw *http.Response
	err = m.client.Post(sctx, "chat/completions", body, &raw, option.WithMiddleware(capture))
	if raw != nil && raw.Body != nil {
		// The stream closes the body at [DONE], which often comes before
		// the body's own end; net/http then closes the connection instead
		// of reusing it (a new TLS handshake for the next call). So the
		// body is read to its end first, for at most drainWait.
		raw.Body = &drainingBody{ReadCloser: raw.Body, cancel: cancel}
	}
	stream := &chunkStream{dec: ssestream.NewDecoder(raw), err: err}
	defer stream.close()

	var acc assembler
	for stream.next() {
		// The idle timer measures the wait for chunks, not the time the
		// caller spends in onDelta.
		if idle != nil {
			idle.Stop()
		}
		acc.add(&stream.cur, onDelta)
		if idle != nil {
			idle.Reset(idleFor)
		}
	}
	if err := stream.err; err != nil {
		return Response{}, m.classify(ctx, sctx, err, res, idleFor)
	}
	if acc.finish == "" {
		// A clean EOF without finish_reason is a cut stream too, e.g. a
		// proxy that closed it; a partial tool call must never pass as an
		// answer.
		if ctx.Err() != nil || errors.Is(context.Cause(sctx), errIdle) {
			return Response{}, m.classify(ctx, sctx, errTruncated, res, idleFor)
		}
		return Response{}, &Error{Kind: KindConnection, Status: statusOf(res), Err: errTruncated}
	}
	return acc.response(), nil
}

// drainWait and drainMax bound the read of what follows the end of a
// stream: the body's end normally comes with [DONE] or just after it.
const (
	drainWait = 100 * time.Millisecond
	drainMax  = 64 << 10
)

// errDrain is the cancel cause when the end of a body did not come within
// drainWait.
var errDrain = errors.New("the response did not end after the stream")

// drainingBody reads a response body to its end, within limits, before
// closing it, so that its connection can serve the next request.
type drainingBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc // the request's
	once   sync.Once
}

func (b *drainingBody) Close() error {
	b.once.Do(func() {
		t := time.AfterFunc(drainWait, func() { b.cancel(errDrain) })
		_, _ = io.CopyN(io.Discard, b.ReadCloser, drainMax)
		t.Stop()
	})
	return b.ReadCloser.Close()
}

// requestBody writes req as a streaming Chat Completions request body: the
// JSON that the SDK's ChatCompletionNewParams writes, with "stream" set, as
// Chat.Completions.NewStreaming sends it (TestRequestBodyMatchesTheSDK holds
// it to that). It is written here, by hand, because the SDK's reflective
// encoder, and its re-encoding of the body to set "stream", took a tenth of
// a step's CPU, and encoding/json's a twentieth.
func requestBody(req Request) ([]byte, error) {
	b := make([]byte, 0, 1024)
	b = append(b, `{"messages":[`...)
	for i, msg := range req.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendMessage(b, msg); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	b = append(b, `],"model":`...)
	b = appendString(b, req.Model)
	if req.CacheKey != "" {
		b = append(b, `,"prompt_cache_key":`...)
		b = appendString(b, req.CacheKey)
	}
	b = append(b, `,"stream_options":{"include_usage":true}`...)
	for i, t := range req.Tools {
		if i == 0 {
			b = append(b, `,"tools":[`...)
		} else {
			b = append(b, ',')
		}
		b = append(b, `{"type":"function","function":{"name":`...)
		b = appendString(b, t.Name)
		if t.Description != "" {
			b = append(b, `,"description":`...)
			b = appendString(b, t.Description)
		}
		// The schema is sent compacted, rather than decoded into the SDK's
		// map and encoded again.
		if len(t.Parameters) > 0 {
			buf := bytes.NewBuffer(append(b, `,"parameters":`...))
			if err := json.Compact(buf, t.Parameters); err != nil {
				return nil, fmt.Errorf("tool %s: parameters are not valid JSON: %w", t.Name, err)
			}
			b = buf.Bytes()
		}
		b = append(b, "}}"...)
	}
	if len(req.Tools) > 0 {
		b = append(b, ']')
	}
	return append(b, `,"stream":true}`...), nil
}

// appendMessage appends msg as the Chat Completions API takes it: an
// assistant message with tool calls and no text has no content, and a tool
// message names the call it answers.
func appendMessage(b []byte, msg Message) ([]byte, error) {
	switch msg.Role {
	case RoleSystem, RoleUser, RoleTool, RoleAssistant:
	default:
		return b, fmt.Errorf("unknown role %q", msg.Role)
	}
	b = append(b, `{"role":`...)
	b = appendString(b, string(msg.Role))
	calls := msg.Role == RoleAssistant && len(msg.ToolCalls) > 0
	if msg.Content != "" || !calls {
		b = append(b, `,"content":`...)
		b = appendString(b, msg.Content)
	}
	if calls {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range msg.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, tc.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if msg.Role == RoleTool {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, msg.ToolCallID)
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			// Escapes, HTML's characters and anything not ASCII (invalid
			// UTF-8, U+2028) are left to encoding/json.
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// chunk is the part of a Chat Completions stream chunk that the assembler
// reads. A chunk that does not decode into it (a field of another JSON type
// than the API's) is decoded by the SDK's ChatCompletionChunk, which is
// lenient about types, as it was before chunk.
type chunk struct {
	Choices []chunkChoice   `json:"choices"`
	Usage   *chunkUsage     `json:"usage"`
	Error   json.RawMessage `json:"error"` // an error event's
}

type chunkChoice struct {
	Index int64 `json:"index"`
	Delta struct {
		Content   string          `json:"content"`
		ToolCalls []chunkToolCall `json:"tool_calls"`
	} `json:"delta"`
	FinishReason string `json:"finish_reason"`
}

type chunkToolCall struct {
	Index    int64  `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chunkUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// chunkStream reads the chunks of a Chat Completions stream as the SDK's
// ssestream.Stream does, ending at [DONE] or at an error event, but decodes
// each chunk's JSON once: the SDK's Stream validates it, scans it for an
// error, then decodes it (and chunk's own decoder would validate it again).
type chunkStream struct {
	dec  ssestream.Decoder // nil when the request failed
	cur  chunk
	err  error
	done bool
}

func (s *chunkStream) next() bool {
	if s.err != nil || s.done || s.dec == nil {
		return false
	}
	if !s.dec.Next() {
		s.err, s.done = s.dec.Err(), true
		return false
	}
	ev := s.dec.Event()
	if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
		s.done = true
		return false
	}
	s.cur = chunk{}
	err := json.Unmarshal(ev.Data, &s.cur)
	if len(s.cur.Error) > 0 && string(s.cur.Error) != "null" { // "error": null is no error
		// What the event says goes on the *Error, scrubbed and capped, by
		// classify; the raw text may hold what must not be shown.
		s.err = &ssestream.StreamError{Message: "the stream carried an error event", Event: ev}
		return false
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		// A field of another JSON type than the API's: the SDK's chunk is
		// lenient about types, as the adapter was before chunk.
		var sdk openai.ChatCompletionChunk
		if err = json.Unmarshal(ev.Data, &sdk); err == nil {
			s.cur = chunkOf(sdk)
		}
	}
	if err != nil {
		s.err = err
		return false
	}
	return true
}

func (s *chunkStream) close() {
	if s.dec != nil {
		_ = s.dec.Close()
	}
}

// chunkOf copies what chunk holds out of the SDK's chunk.
func chunkOf(sdk openai.ChatCompletionChunk) chunk {
	var c chunk
	for _, ch := range sdk.Choices {
		cc := chunkChoice{Index: ch.Index, FinishReason: ch.FinishReason}
		cc.Delta.Content = ch.Delta.Content
		for _, tc := range ch.Delta.ToolCalls {
			t := chunkToolCall{Index: tc.Index, ID: tc.ID}
			t.Function.Name = tc.Function.Name
			t.Function.Arguments = tc.Function.Arguments
			cc.Delta.ToolCalls = append(cc.Delta.ToolCalls, t)
		}
		c.Choices = append(c.Choices, cc)
	}
	if sdk.JSON.Usage.Valid() {
		u := sdk.Usage
		c.Usage = &chunkUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
		c.Usage.PromptTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
		c.Usage.CompletionTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return c
}

// assembler builds a Response from stream chunks. Tool calls are keyed by
// their index: the id and name come in a call's first chunk, the arguments
// in pieces after it.
type assembler struct {
	text   strings.Builder
	calls  map[int64]*ToolCall
	finish string
	usage  Usage
}

func (a *assembler) add(c *chunk, onDelta func(string)) {
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // we never ask for n > 1
		}
		if d := ch.Delta.Content; d != "" {
			a.text.WriteString(d)
			if onDelta != nil {
				onDelta(d)
			}
		}
		for _, tc := range ch.Delta.ToolCalls {
			if a.calls == nil {
				a.calls = make(map[int64]*ToolCall)
			}
			call := a.calls[tc.Index]
			if call == nil {
				call = &ToolCall{}
				a.calls[tc.Index] = call
			}
			if call.ID == "" {
				call.ID = tc.ID
			}
			if call.Name == "" {
				call.Name = tc.Function.Name
			}
			call.Arguments += tc.Function.Arguments
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
	}
	if u := c.Usage; u != nil {
		a.usage = Usage{
			InputTokens:       u.PromptTokens,
			OutputTokens:      u.CompletionTokens,
			CachedInputTokens: u.PromptTokensDetails.CachedTokens,
			ReasoningTokens:   u.CompletionTokensDetails.ReasoningTokens,
		}
	}
}

func (a *assembler) response() Response {
	r := Response{Text: a.text.String(), FinishReason: a.finish, Usage: a.usage}
	idx := make([]int64, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		r.ToolCalls = append(r.ToolCalls, *a.calls[i])
	}
	return r
}

// classify turns a failed request into an *Error. ctx is the caller's
// context, sctx the request's (ctx plus the idle timer), res the last HTTP
// response seen, if any. What the provider said about the failure (an
// error body, an error event) is kept on the *Error; no text of it holds
// the API key.
func (m *OpenAI) classify(ctx, sctx context.Context, err error, res *http.Response, idleFor time.Duration) *Error {
	e := m.classifyErr(ctx, sctx, err, res, idleFor)
	e.Err = m.scrubErr(e.Err)
	return e
}

func (m *OpenAI) classifyErr(ctx, sctx context.Context, err error, res *http.Response, idleFor time.Duration) *Error {
	if ctx.Err() != nil {
		return &Error{Kind: KindCancelled, Err: context.Cause(ctx)}
	}
	if errors.Is(context.Cause(sctx), errIdle) {
		return &Error{Kind: KindIdle, Status: statusOf(res), Err: fmt.Errorf("%w (%s)", errIdle, idleFor)}
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		r := cmp.Or(apiErr.Response, res)
		s := m.errorBody(r)
		if s == (said{}) {
			s = said{code: m.clip(apiErr.Code, maxCodeBytes), typ: m.clip(apiErr.Type, maxCodeBytes),
				msg: m.clip(apiErr.Message, MaxMessageBytes)}
		}
		var h http.Header
		if r != nil {
			h = r.Header
		}
		return classifyStatus(apiErr.StatusCode, h, s, err)
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error event inside a 200 stream: the provider failed mid-way.
		s := m.providerSaid(streamErr.Event.Data)
		e := &Error{Status: statusOf(res), Err: err}
		switch {
		case isOverflow(s.code, s.msg):
			e.Kind = KindContextOverflow
		case isAuth(s):
			// A key refused mid-stream (a proxy checks it upstream) is
			// refused again on a retry.
			e.Kind = KindAuth
		case strings.Contains(s.code, "rate_limit") || strings.Contains(s.typ, "rate_limit"):
			e.Kind = KindRateLimited
		default:
			e.Kind = KindServer
		}
		return e.with(s)
	}
	if res != nil && res.StatusCode >= 400 {
		// An error status whose body the SDK could not read as OpenAI's
		// error (an HTML or plain page, {"detail": ...}).
		return classifyStatus(res.StatusCode, res.Header, m.errorBody(res),
			fmt.Errorf("%d %s (the SDK did not read its body: %w)", res.StatusCode, http.StatusText(res.StatusCode), err))
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		// A 200 stream whose chunks are not what the API promises.
		return &Error{Kind: KindServer, Status: statusOf(res), Err: err}
	}
	// Everything else is the transport: refused, reset, EOF, unexpected EOF,
	// DNS, TLS. All of them may mend on a retry.
	return &Error{Kind: KindConnection, Status: statusOf(res), Err: err}
}

// classifyStatus classifies an HTTP error status; s is what its body said.
func classifyStatus(status int, h http.Header, s said, err error) *Error {
	e := &Error{Status: status, Err: err, RetryAfter: retryAfter(h, time.Now())}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = KindAuth
	case isAuth(s):
		// A proxy's 400 or 5xx that says the key is wrong: no retry mends it.
		e.Kind = KindAuth
	case status == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
	case status == http.StatusRequestTimeout:
		// The server gave up waiting for our request: a retry may mend it.
		e.Kind = KindConnection
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && isOverflow(s.code, s.msg):
		e.Kind = KindContextOverflow
	case status >= 500:
		e.Kind = KindServer
	default:
		e.Kind = KindBadRequest
	}
	return e.with(s)
}

// isOverflow reports whether an error body says the prompt is longer than
// the model's context window. OpenAI says so with the code
// context_length_exceeded; compatible servers often only in the message.
func isOverflow(code, msg string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	msg = strings.ToLower(msg)
	for _, s := range []string{"context_length_exceeded", "context length", "context window", "maximum context"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// maxRetryAfter caps a server's Retry-After, so that a bogus value cannot
// overflow a time.Duration.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads retry-after-ms (milliseconds, OpenAI's) or Retry-After
// (seconds or an HTTP date); 0 when neither is present and valid.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return clampDuration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return clampDuration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampDuration(float64(t.Sub(now)))
	}
	return 0
}

func clampDuration(d float64) time.Duration {
	switch {
	case math.IsNaN(d) || d <= 0:
		return 0
	case d >= float64(maxRetryAfter):
		return maxRetryAfter
	}
	return time.Duration(d)
}

func statusOf(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}
