package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
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
	scrub  scrubber // the API key sent, kept out of errors
	cache  bool     // send prompt_cache_key
}

// NewOpenAI returns an adapter configured by cfg. What cfg leaves empty the
// SDK takes from the environment (OPENAI_API_KEY, OPENAI_BASE_URL and the
// SDK's other OPENAI_* variables): it is the zero-configuration endpoint.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	return newOpenAI(cfg, true)
}

// openAIRoot is the API root of OpenAI's own endpoint.
const openAIRoot = "https://api.openai.com/v1"

// newOpenAI returns an adapter configured by cfg; with ambient false, it
// takes nothing from the OPENAI_* environment, which belongs to the
// default endpoint: an empty BaseURL is OpenAI's own API root, an empty
// APIKey sends no key, and the organization, project and custom headers
// the SDK would read from the environment are not sent. A routed endpoint
// so never gets the default endpoint's credentials.
func newOpenAI(cfg OpenAIConfig, ambient bool) *OpenAI {
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
	key := cfg.APIKey
	if ambient {
		if cfg.BaseURL != "" {
			opts = append(opts, option.WithBaseURL(cfg.BaseURL))
		}
		if cfg.APIKey != "" {
			opts = append(opts, option.WithAPIKey(cfg.APIKey))
		}
		// The SDK reads OPENAI_API_KEY when no key is given; that is the
		// key to keep out of errors then.
		key = cmp.Or(cfg.APIKey, os.Getenv("OPENAI_API_KEY"))
	} else {
		opts = append(opts, option.WithBaseURL(cmp.Or(cfg.BaseURL, openAIRoot)),
			option.WithAPIKey(cfg.APIKey), option.WithAdminAPIKey(""))
		for _, h := range ambientHeaders() {
			opts = append(opts, option.WithHeaderDel(h))
		}
	}
	return &OpenAI{client: openai.NewClient(opts...), http: hc, idle: cfg.IdleTimeout, scrub: scrubber{key: key}, cache: cfg.PromptCacheKey}
}

// ambientHeaders names the headers the SDK sets from the environment:
// OpenAI-Organization and OpenAI-Project, and those of
// OPENAI_CUSTOM_HEADERS (one "Name: value" a line), which may hold a
// proxy's credentials.
func ambientHeaders() []string {
	names := []string{"OpenAI-Organization", "OpenAI-Project"}
	for line := range strings.Lines(os.Getenv("OPENAI_CUSTOM_HEADERS")) {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) != "" {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

// CloseIdleConnections closes the connections the adapter's HTTP client
// keeps for reuse (for a shutdown); calls after it open new ones.
func (m *OpenAI) CloseIdleConnections() {
	m.http.CloseIdleConnections()
}

// errTruncated reports a stream that ended without a finish_reason.
var errTruncated = errors.New("stream ended without a finish_reason")

// Stream implements Model. It returns *Error values: KindCancelled (wrapping
// context.Cause(ctx)) when ctx ends, KindIdle when no chunk arrives within
// the idle timeout, KindConnection for a broken or truncated stream, and the
// kinds of classifyStatus for an HTTP error status (KindBadRequest too for a
// request it cannot write, such as an image in a system message).
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
	idleFor := idleTimeout(m.idle, req.IdleTimeout)
	idle := startIdle(cancel, idleFor)
	defer idle.pause()

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
		idle.pause() // the wait for chunks, not the time spent in onDelta
		acc.add(&stream.cur, onDelta)
		idle.resume()
	}
	if err := stream.err; err != nil {
		return Response{}, m.classify(ctx, sctx, err, res, idleFor)
	}
	if acc.finish == "" {
		// A clean EOF without finish_reason is a cut stream too, e.g. a
		// proxy that closed it; a partial tool call must never pass as an
		// answer.
		return Response{}, m.classify(ctx, sctx, errTruncated, res, idleFor)
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
	smp := req.Sampling
	b := make([]byte, 0, 1024)
	b = append(b, '{')
	if smp.MaxOutputTokens > 0 {
		b = append(b, `"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(smp.MaxOutputTokens), 10)
		b = append(b, ',')
	}
	b = append(b, `"messages":[`...)
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
	if smp.ParallelToolCalls != nil && len(req.Tools) > 0 {
		b = append(b, `,"parallel_tool_calls":`...)
		b = strconv.AppendBool(b, *smp.ParallelToolCalls)
	}
	if req.CacheKey != "" {
		b = append(b, `,"prompt_cache_key":`...)
		b = appendString(b, req.CacheKey)
	}
	if smp.ReasoningEffort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = appendString(b, smp.ReasoningEffort)
	}
	var err error
	if b, err = appendResponseFormat(b, smp.Format); err != nil {
		return nil, err
	}
	b = append(b, `,"stream_options":{"include_usage":true}`...)
	if b, err = appendNumber(b, "temperature", smp.Temperature); err != nil {
		return nil, err
	}
	if len(req.Tools) > 0 {
		if b, err = appendToolChoice(b, smp.ToolChoice); err != nil {
			return nil, err
		}
		if b, err = appendTools(b, req.Tools); err != nil {
			return nil, err
		}
	}
	if b, err = appendNumber(b, "top_p", smp.TopP); err != nil {
		return nil, err
	}
	return append(b, `,"stream":true}`...), nil
}

// appendToolChoice writes the request's tool_choice, if it has one.
func appendToolChoice(b []byte, c *ToolChoice) ([]byte, error) {
	if c == nil {
		return b, nil
	}
	switch c.Mode {
	case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
		b = append(b, `,"tool_choice":`...)
		b = appendString(b, c.Mode)
	case ToolChoiceTool:
		b = append(b, `,"tool_choice":{"function":{"name":`...)
		b = appendString(b, c.Name)
		b = append(b, `},"type":"function"}`...)
	default:
		return nil, fmt.Errorf("unknown tool choice %q", c.Mode)
	}
	return b, nil
}

// appendTools writes the request's tools as functions.
func appendTools(b []byte, tools []ToolSpec) ([]byte, error) {
	b = append(b, `,"tools":[`...)
	for i, t := range tools {
		if i > 0 {
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
	return append(b, ']'), nil
}

// appendResponseFormat appends f as "response_format": nothing for plain
// text (the API's default), {"type":"json_object"}, or {"type":
// "json_schema","json_schema":{"name","description","schema","strict"}}
// with the schema compacted.
func appendResponseFormat(b []byte, f *OutputFormat) ([]byte, error) {
	if f == nil {
		return b, nil
	}
	switch f.Type {
	case "", FormatText:
		return b, nil
	case FormatJSONObject:
		return append(b, `,"response_format":{"type":"json_object"}`...), nil
	case FormatJSONSchema:
	default:
		return b, fmt.Errorf("unknown output format type %q", f.Type)
	}
	b = append(b, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
	b = appendString(b, f.Name)
	if f.Description != "" {
		b = append(b, `,"description":`...)
		b = appendString(b, f.Description)
	}
	if len(f.Schema) > 0 {
		buf := bytes.NewBuffer(append(b, `,"schema":`...))
		if err := json.Compact(buf, f.Schema); err != nil {
			return nil, fmt.Errorf("output format %s: the schema is not valid JSON: %w", f.Name, err)
		}
		b = buf.Bytes()
	}
	if f.Strict != nil {
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, *f.Strict)
	}
	return append(b, "}}"...), nil
}

// appendNumber appends ,"name":v as encoding/json writes v; nothing when v
// is nil. A NaN or an infinity is an error, as it is to encoding/json.
func appendNumber(b []byte, name string, v *float64) ([]byte, error) {
	if v == nil {
		return b, nil
	}
	f := *v
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("%s is %v, not a number JSON can hold", name, f)
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	// encoding/json's formatting of a float64: like ES6, exponents only
	// for the very small and the very large, written without a leading 0.
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendMessage appends msg as the Chat Completions API takes it: a
// message of text alone has its text as its content string, an assistant
// message with tool calls and no text has no content, a user message with
// images or files has a list of content parts, and each tool result is a
// tool message of its own that names the call it answers.
//
// Reasoning parts are left out: Chat Completions takes no thinking back.
func appendMessage(b []byte, msg Message) ([]byte, error) {
	msg.Parts = withoutReasoning(msg.Parts)
	switch msg.Role {
	case RoleTool:
		return appendToolResults(b, msg.Parts)
	case RoleSystem, RoleUser, RoleAssistant:
	default:
		return b, fmt.Errorf("unknown role %q", msg.Role)
	}
	var texts, calls int
	var said, media bool // some text is not empty; an image or a file
	for i, p := range msg.Parts {
		switch p.Type {
		case PartText:
			texts++
			said = said || p.Text != ""
		case PartToolCall:
			if msg.Role != RoleAssistant {
				return b, fmt.Errorf("part %d: a tool call in a %s message (only the assistant calls tools)", i, msg.Role)
			}
			calls++
		case PartImage, PartFile:
			if msg.Role != RoleUser {
				return b, fmt.Errorf("part %d: a %s part in a %s message (Chat Completions takes images and files from the user only)", i, p.Type, msg.Role)
			}
			media = true
		case PartToolResult:
			return b, fmt.Errorf("part %d: a tool result in a %s message (it belongs in a tool message)", i, msg.Role)
		default:
			return b, fmt.Errorf("part %d: unknown part type %q", i, p.Type)
		}
	}
	b = append(b, `{"role":`...)
	b = appendString(b, string(msg.Role))
	switch {
	case media:
		var err error
		if b, err = appendContentParts(append(b, `,"content":[`...), msg.Parts); err != nil {
			return b, err
		}
		b = append(b, ']')
	case said || calls == 0:
		b = appendText(append(b, `,"content":`...), msg.Parts, texts)
	}
	if calls > 0 {
		b = append(b, `,"tool_calls":[`...)
		n := 0
		for _, p := range msg.Parts {
			if p.Type != PartToolCall {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = append(b, `{"id":`...)
			b = appendString(b, p.Call.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, p.Call.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, p.Call.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// withoutReasoning returns parts without their reasoning parts; parts
// itself when it has none, as most messages.
func withoutReasoning(parts []Part) []Part {
	if !slices.ContainsFunc(parts, func(p Part) bool { return p.Type == PartReasoning }) {
		return parts
	}
	return slices.DeleteFunc(slices.Clone(parts), func(p Part) bool { return p.Type == PartReasoning })
}

// appendText appends the text of parts, which hold texts text parts, as one
// JSON string: the texts one after the other.
func appendText(b []byte, parts []Part, texts int) []byte {
	if texts <= 1 {
		for _, p := range parts {
			if p.Type == PartText {
				return appendString(b, p.Text)
			}
		}
		return append(b, `""`...)
	}
	var t strings.Builder
	for _, p := range parts {
		if p.Type == PartText {
			t.WriteString(p.Text)
		}
	}
	return appendString(b, t.String())
}

// appendContentParts appends parts as Chat Completions content parts: text,
// image_url, and file (by its data or its file id; the API takes no file
// URL).
func appendContentParts(b []byte, parts []Part) ([]byte, error) {
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		switch p.Type {
		case PartText:
			b = append(b, `{"type":"text","text":`...)
			b = appendString(b, p.Text)
		case PartImage:
			url := p.URL
			if len(p.Data) > 0 {
				if p.MediaType == "" {
					return b, fmt.Errorf("part %d: an image given as data without its media type", i)
				}
				url = dataURL(p.MediaType, p.Data)
			}
			if url == "" {
				return b, fmt.Errorf("part %d: an image without a URL or data", i)
			}
			b = append(b, `{"type":"image_url","image_url":{"url":`...)
			b = appendString(b, url)
			if p.Detail != "" {
				b = append(b, `,"detail":`...)
				b = appendString(b, p.Detail)
			}
			b = append(b, '}')
		case PartFile:
			var err error
			if b, err = appendFile(b, i, p); err != nil {
				return b, err
			}
		}
		b = append(b, '}')
	}
	return b, nil
}

// appendFile appends file part p (the i-th) as a Chat Completions file
// content part, without its closing brace.
func appendFile(b []byte, i int, p Part) ([]byte, error) {
	switch {
	case len(p.Data) > 0 && p.MediaType == "":
		return b, fmt.Errorf("part %d: a file given as data without its media type", i)
	case len(p.Data) == 0 && p.FileID == "" && p.URL != "":
		return b, fmt.Errorf("part %d: a file by URL (Chat Completions takes a file's data or its file id)", i)
	case len(p.Data) == 0 && p.FileID == "":
		return b, fmt.Errorf("part %d: a file without data or a file id", i)
	}
	b = append(b, `{"type":"file","file":{`...)
	sep := ""
	field := func(name, value string) {
		if value != "" {
			b = append(b, sep...)
			b = append(b, name...)
			b = appendString(b, value)
			sep = ","
		}
	}
	if len(p.Data) > 0 {
		field(`"file_data":`, dataURL(p.MediaType, p.Data))
	}
	field(`"file_id":`, p.FileID)
	field(`"filename":`, p.Filename)
	return append(b, '}'), nil
}

// dataURL is data of mediaType as a base64 data: URL, the form in which
// Chat Completions takes inline images and files.
func dataURL(mediaType string, data []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// appendToolResults appends the tool results of a tool message, each as a
// tool message of its own.
func appendToolResults(b []byte, parts []Part) ([]byte, error) {
	if len(parts) == 0 {
		return b, errors.New("a tool message without a tool result")
	}
	for i, p := range parts {
		if p.Type != PartToolResult {
			return b, fmt.Errorf("part %d: a %s part in a tool message (it holds tool results only)", i, p.Type)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":"tool","content":`...)
		b = appendString(b, p.Text)
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, p.ToolCallID)
		b = append(b, '}')
	}
	return b, nil
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
	if decodeTextChunk(ev.Data, &s.cur) {
		return true
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
	r := Response{Text: a.text.String(), FinishReason: finishReason(a.finish), Usage: a.usage}
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

// finishReason maps a Chat Completions finish_reason onto FinishReason:
// "function_call", the deprecated form of tool calls, is FinishToolCalls;
// a value the API does not document is FinishUnknown.
func finishReason(s string) FinishReason {
	switch s {
	case "stop":
		return FinishStop
	case "tool_calls", "function_call":
		return FinishToolCalls
	case "length":
		return FinishLength
	case "content_filter":
		return FinishContentFilter
	}
	return FinishUnknown
}

// classify turns a failed request into an *Error through the shared
// classifier: it says what the SDK and the response showed. ctx is the
// caller's context, sctx the request's, res the last HTTP response seen, if
// any.
func (m *OpenAI) classify(ctx, sctx context.Context, err error, res *http.Response, idleFor time.Duration) *Error {
	f := failure{err: err, status: statusOf(res)}
	if res != nil {
		f.header = res.Header
	}
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case ctx.Err() != nil || errors.Is(context.Cause(sctx), errIdle):
		// Nothing the provider said matters then.
	case errors.As(err, &apiErr):
		r := cmp.Or(apiErr.Response, res)
		f.status = apiErr.StatusCode
		if r != nil {
			f.header = r.Header
		}
		if f.said = m.scrub.body(r); f.said == (said{}) {
			f.said = said{code: m.scrub.clip(apiErr.Code, maxCodeBytes), typ: m.scrub.clip(apiErr.Type, maxCodeBytes),
				msg: m.scrub.clip(apiErr.Message, MaxMessageBytes)}
		}
	case errors.As(err, &streamErr):
		f.event, f.said = true, m.scrub.said(streamErr.Event.Data)
	case f.status >= 400:
		// An error status whose body the SDK could not read as OpenAI's
		// error (an HTML or plain page, {"detail": ...}).
		f.said = m.scrub.body(res)
		f.err = fmt.Errorf("%d %s (the SDK did not read its body: %w)", res.StatusCode, http.StatusText(res.StatusCode), err)
	case errors.As(err, &syntaxErr) || errors.As(err, &typeErr):
		f.malformed = true
	}
	return m.scrub.classify(ctx, sctx, f, idleFor)
}

func statusOf(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}
