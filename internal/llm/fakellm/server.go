package fakellm

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// created is the fixed "created" timestamp of every response.
const created = 1700000000

// maxBody caps the size of a request body.
const maxBody = 32 << 20

// Usage is the token accounting the fake reported for one response, in the
// terms of the Chat Completions wire format.
type Usage struct {
	PromptTokens     int64 // prompt_tokens
	CompletionTokens int64 // completion_tokens
	CachedTokens     int64 // prompt_tokens_details.cached_tokens
	ReasoningTokens  int64 // completion_tokens_details.reasoning_tokens
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		CachedTokens:     u.CachedTokens + v.CachedTokens,
		ReasoningTokens:  u.ReasoningTokens + v.ReasoningTokens,
	}
}

// ToolOffered is a function tool a request offered: its name and
// description.
type ToolOffered struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Request is the record of one request the fake handled.
type Request struct {
	Seq      int    // 1-based order of arrival
	Model    string // as sent
	Messages int    // number of messages sent
	// Sent is the messages as sent, each as its JSON text.
	Sent      []json.RawMessage
	Step      int    // the step answered (see the package doc)
	Stream    bool   // the client asked for a stream
	CacheKey  string // the request's prompt_cache_key, if any
	Status    int    // HTTP status sent
	Error     string // the message of the error body sent, "" for an answer
	Fault     string // the fault injected ("429", "500", "hang", "truncate"), or ""
	ToolCalls int    // tool calls in the answer; 0 for a final text
	Text      string // the final text answered; "" for tool calls
	// Usage is what the response reported; zero when it reported none (a
	// fault, a stream without include_usage, or a response cut short).
	Usage         Usage
	UsageReported bool
	// Completed is true when the whole response was written.
	Completed bool
	// Cancelled is true when the request's context ended (the client went
	// away) before the response was complete.
	Cancelled bool

	// The request's sampling parameters, as sent: max_completion_tokens (0
	// when absent), temperature and top_p (nil when absent), and
	// response_format (its JSON text, compacted; nil when absent).
	MaxCompletionTokens int64
	Temperature, TopP   *float64
	ResponseFormat      json.RawMessage
	// tool_choice (compacted) and parallel_tool_calls, nil when absent.
	ToolChoice        json.RawMessage
	ParallelToolCalls *bool
	// ReasoningEffort is reasoning_effort ("" when absent).
	ReasoningEffort string
	// Tools are the function tools offered, in order.
	Tools []ToolOffered
	// Media are the images and files of the request's messages, in order.
	Media []Media
}

// Option configures a Server.
type Option func(*Server)

// WithOnDone registers f, called (from the request's goroutine, after the
// request is recorded) when each request is done.
func WithOnDone(f func(Request)) Option {
	return func(s *Server) { s.onDone = f }
}

// WithLogger makes the server log one debug line per request to l.
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) { s.log = l }
}

// WithMaxHistory keeps only the last n request records (n <= 0: all of
// them, the default). Calls, Cancelled and UsageTotal still count every
// request.
func WithMaxHistory(n int) Option {
	return func(s *Server) { s.maxHistory = n }
}

// WithV1Only makes the server answer only POST /v1/chat/completions, as
// OpenAI's API does: POST /chat/completions gets a 404, as a client whose
// base URL lacks its /v1 gets from OpenAI.
func WithV1Only() Option {
	return func(s *Server) { s.v1Only = true }
}

// Server is the fake OpenAI-compatible server. It is an http.Handler, safe
// for concurrent use.
type Server struct {
	onDone     func(Request)
	log        *slog.Logger
	maxHistory int
	v1Only     bool

	mu        sync.Mutex
	fired     map[[sha256.Size]byte]int // by request, how many times its fault fired
	history   []Request
	calls     int
	cancelled int
	usage     Usage
	maxPrompt map[string]int64 // the largest prompt_tokens seen, per model
}

// New returns a Server.
func New(opts ...Option) *Server {
	s := &Server{fired: make(map[[sha256.Size]byte]int), maxPrompt: make(map[string]int64)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Calls returns the number of chat completion requests received so far,
// including those still running and those that failed.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Requests returns the records of the requests that are done, in the order
// they finished.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.history))
	copy(out, s.history)
	return out
}

// UsageTotal returns the sum of the usage reported by completed responses.
func (s *Server) UsageTotal() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// Cancelled returns the number of requests whose client went away before the
// response was complete.
func (s *Server) Cancelled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// MaxPromptTokens returns the largest prompt_tokens (counted as in the
// package doc) of the requests for model the server has read so far,
// including those it refused for exceeding the model's context window; 0
// when it has seen none.
func (s *Server) MaxPromptTokens(model string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxPrompt[model]
}

// Reset forgets every record and every fault already fired.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fired = make(map[[sha256.Size]byte]int)
	s.maxPrompt = make(map[string]int64)
	s.history = nil
	s.calls, s.cancelled, s.usage = 0, 0, Usage{}
}

// ServeHTTP serves POST /v1/chat/completions and POST /v1/embeddings and,
// unless WithV1Only, the same without /v1.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/embeddings" || (!s.v1Only && r.URL.Path == "/embeddings") {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			invalid(http.StatusMethodNotAllowed, "method not allowed").write(w)
			return
		}
		s.serveEmbeddings(w, r)
		return
	}
	if r.URL.Path != "/v1/chat/completions" && (s.v1Only || r.URL.Path != "/chat/completions") {
		// OpenAI's words for a path it does not serve.
		invalid(http.StatusNotFound, "Invalid URL ("+r.Method+" "+r.URL.Path+")").write(w)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		invalid(http.StatusMethodNotAllowed, "method not allowed").write(w)
		return
	}

	s.mu.Lock()
	s.calls++
	rec := Request{Seq: s.calls}
	s.mu.Unlock()
	defer s.done(r.Context(), &rec)

	req, a, no := s.accept(w, r, &rec)
	if no == nil {
		no = s.fire(&a, &rec)
	}
	if no != nil {
		rec.Status, rec.Error = no.status, no.msg
		no.write(w)
		return
	}
	if !Pause(r.Context(), a.delay) {
		return // the client went away
	}
	rec.Status = http.StatusOK
	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		rec.Completed = s.stream(r.Context(), w, a, includeUsage)
		if rec.Completed && includeUsage {
			rec.Usage, rec.UsageReported = a.usage, true
		}
		return
	}
	rec.Completed = s.complete(r.Context(), w, a)
	if rec.Completed {
		rec.Usage, rec.UsageReported = a.usage, true
	}
}

// accept reads the request and plans its answer, or says why it is
// refused: a body that is not a request, a malformed directive, messages
// out of the order OpenAI requires, a prompt past the model's window.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, rec *Request) (chatRequest, answer, *refusal) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return chatRequest{}, answer{}, invalid(http.StatusBadRequest, "read body: "+err.Error())
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, answer{}, invalid(http.StatusBadRequest, "invalid JSON body: "+err.Error())
	}
	rec.Model, rec.Messages, rec.Sent, rec.Stream, rec.CacheKey = req.Model, len(req.Messages), req.Messages, req.Stream, req.CacheKey
	rec.Temperature, rec.TopP, rec.ResponseFormat = req.Temperature, req.TopP, compacted(req.ResponseFormat)
	rec.ToolChoice, rec.ParallelToolCalls, rec.ReasoningEffort = compacted(req.ToolChoice), req.ParallelToolCalls, req.ReasoningEffort
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Function)
	}
	if req.MaxCompletionTokens != nil {
		rec.MaxCompletionTokens = *req.MaxCompletionTokens
	}
	if no := samplingRefusal(req); no != nil {
		return req, answer{}, no
	}

	msgs, hash, err := decodeMessages(req)
	if err != nil {
		return req, answer{}, invalid(http.StatusBadRequest, err.Error())
	}
	a, err := plan(req, msgs, hash)
	if err != nil {
		return req, a, invalid(http.StatusBadRequest, err.Error())
	}
	rec.Step, rec.Media = a.step, a.media
	s.mu.Lock()
	s.maxPrompt[req.Model] = max(s.maxPrompt[req.Model], a.usage.PromptTokens)
	s.mu.Unlock()
	// The order and the window are checked before any fault, as a
	// provider validates a request before it serves it: a refused request
	// does not use up its fault.
	if no := orderRefusal(msgs); no != nil {
		return req, a, no
	}
	if win := ContextWindow(req.Model); win > 0 && a.usage.PromptTokens > win {
		return req, a, contextLengthExceeded(win, a.usage.PromptTokens)
	}
	return req, a, nil
}

// fire decides a's fault: it fires the first a.times times the request is
// seen (a retry past them is answered; -1: every time), a 429 or 500 is a
// refusal, and an invalid one answers text that is no JSON.
func (s *Server) fire(a *answer, rec *Request) *refusal {
	if a.fault != "" {
		s.mu.Lock()
		if n := s.fired[a.hash]; a.times >= 0 && n >= a.times {
			a.fault = ""
		} else {
			s.fired[a.hash] = n + 1
		}
		s.mu.Unlock()
	}
	rec.Fault = a.fault
	if a.fault == FaultInvalid {
		a.pieces, a.fault = []string{invalidAnswer}, ""
		a.usage.CompletionTokens = int64(len(invalidAnswer))/4 + 1
		a.usage.ReasoningTokens = a.usage.CompletionTokens / 2
	}
	if len(a.calls) > 0 {
		rec.ToolCalls = len(a.calls)
	} else {
		rec.Text = a.text()
	}
	switch a.fault {
	case FaultRateLimit:
		return &refusal{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded",
			msg: "fake rate limit, retry after 1s", retryAfter: "1"}
	case FaultServer:
		return &refusal{status: http.StatusInternalServerError, typ: "server_error", msg: "fake server error"}
	}
	return nil
}

// done records rec once the request is over.
func (s *Server) done(ctx context.Context, rec *Request) {
	rec.Cancelled = !rec.Completed && ctx.Err() != nil
	s.mu.Lock()
	if rec.Cancelled {
		s.cancelled++
	}
	if rec.UsageReported {
		s.usage = s.usage.Add(rec.Usage)
	}
	s.history = append(s.history, *rec)
	if s.maxHistory > 0 && len(s.history) > s.maxHistory {
		s.history = append(s.history[:0], s.history[len(s.history)-s.maxHistory:]...)
	}
	s.mu.Unlock()
	if s.log != nil {
		s.log.DebugContext(ctx, "fakellm request",
			"seq", rec.Seq, "model", rec.Model, "step", rec.Step, "stream", rec.Stream,
			"status", rec.Status, "fault", rec.Fault, "tool_calls", rec.ToolCalls,
			"completed", rec.Completed, "cancelled", rec.Cancelled)
	}
	if s.onDone != nil {
		s.onDone(*rec)
	}
}

// answer is what the fake will send for one request.
type answer struct {
	id     string
	model  string
	hash   [sha256.Size]byte
	step   int
	calls  []call   // the tool calls of this step, or nil for the final text
	pieces []string // content chunks of the final text
	gap    time.Duration
	fault  string
	times  int           // the fault fires the first times the request is seen (-1: every time)
	delay  time.Duration // the wait before the answer (/extract-delay)
	finish string        // the final text's finish_reason; "" means stop
	usage  Usage
	media  []Media // the request's images and files
}

func (a answer) text() string { return strings.Join(a.pieces, "") }

// decodeMessages decodes the messages of req, and hashes the request: its
// model and its messages, decoded and encoded again, which sorts object
// keys and drops spacing, so that the hash names the request, not its
// formatting.
func decodeMessages(req chatRequest) ([]wireMessage, [sha256.Size]byte, error) {
	var hash [sha256.Size]byte
	msgs := make([]wireMessage, len(req.Messages))
	canon := make([]any, len(req.Messages))
	for i, raw := range req.Messages {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return nil, hash, fmt.Errorf("message %d: %w", i, err)
		}
		if err := json.Unmarshal(raw, &canon[i]); err != nil {
			return nil, hash, fmt.Errorf("message %d: %w", i, err)
		}
	}
	canonJSON, err := json.Marshal(canon)
	if err != nil {
		return nil, hash, fmt.Errorf("encode messages: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(req.Model))
	h.Write([]byte{0})
	h.Write(canonJSON)
	h.Sum(hash[:0])
	return msgs, hash, nil
}

// plan decides the answer to req, whose messages are msgs and whose hash
// is hash; it is a pure function of them.
func plan(req chatRequest, msgs []wireMessage, hash [sha256.Size]byte) (answer, error) {
	a := answer{hash: hash, id: "chatcmpl-" + hex.EncodeToString(hash[:12]), model: req.Model}
	lastUser := -1
	var promptBytes int64
	for i, m := range msgs {
		if m.Role == "user" {
			lastUser = i
		}
		promptBytes += int64(len(m.text()))
		for _, md := range m.media() {
			promptBytes += md.PromptBytes()
			a.media = append(a.media, md)
		}
		for _, tc := range m.ToolCalls {
			promptBytes += int64(len(tc.Function.Name) + len(tc.Function.Arguments))
		}
	}
	sc, err := scriptFor(req, msgs, lastUser, a.media)
	if err != nil {
		return answer{}, err
	}
	since := msgs[lastUser+1:]
	for _, m := range since {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			a.step++
		}
	}
	a.fault, a.times = sc.faultAt(a.step), 1
	if sc.extract != nil {
		a.fault, a.times, a.delay = sc.extract.fail, sc.extract.times, sc.extract.delay
	}
	a.gap = sc.streamGap
	a.finish = sc.finishAfter(since)

	var completionBytes int64
	if a.step < len(sc.groups) {
		a.calls = sc.groups[a.step]
		for _, c := range a.calls {
			completionBytes += int64(len(c.name) + len(c.args))
		}
	} else {
		a.pieces = sc.finalPieces()
		if req.MaxCompletionTokens != nil {
			// The longest text of at most max tokens, counted as usage
			// counts them: C/4+1 <= max.
			var cut bool
			if a.pieces, cut = cutPieces(a.pieces, 4*min(*req.MaxCompletionTokens, 1<<40)-1); cut {
				a.finish = "length"
			}
		}
		completionBytes = int64(len(a.text()))
	}

	a.usage.PromptTokens = promptBytes/4 + 1
	a.usage.CompletionTokens = completionBytes/4 + 1
	if len(msgs) > 1 {
		a.usage.CachedTokens = a.usage.PromptTokens / 2
	}
	a.usage.ReasoningTokens = a.usage.CompletionTokens / 2
	return a, nil
}

// scriptFor is what req, whose messages are msgs (the last user message at
// lastUser, -1 for none) and whose images and files are media, asks: the
// directives of its last user message, or, for an extraction request, the
// extractor's answer.
func scriptFor(req chatRequest, msgs []wireMessage, lastUser int, media []Media) (script, error) {
	var sc script
	if isExtraction(msgs) {
		// The run's turn it quotes holds the run's own directives, which
		// were the run's model's: the extractor answers alone.
		x, err := parseExtraction(msgs)
		sc.say, sc.extract = []string{x.answer()}, &x
		return sc, err
	}
	if lastUser >= 0 {
		var err error
		if sc, err = parseScript(msgs[lastUser].text()); err != nil {
			return sc, err
		}
	}
	if sc.sampling {
		sc.say = []string{samplingText(req)}
	}
	if sc.media {
		sc.say = []string{MediaAnswer(media)}
	}
	if sc.system {
		sc.say = []string{""}
		if len(msgs) > 0 && msgs[0].Role == "system" {
			sc.say = []string{msgs[0].text()}
		}
	}
	if len(msgs) > 0 && msgs[0].Role == "system" && sc.empty() {
		if t := templateAnswer(msgs[0].text(), msgs[len(msgs)-1].text()); t != "" {
			sc.say = []string{t}
		}
	}
	return sc, nil
}

// cutPieces returns the first n bytes of the text of pieces, cut on a rune
// boundary, as the pieces they fill (at least one), and whether the text
// was longer.
func cutPieces(pieces []string, n int64) ([]string, bool) {
	left := n
	for i, p := range pieces {
		if int64(len(p)) <= left {
			left -= int64(len(p))
			continue
		}
		end := int(max(left, 0))
		for end > 0 && !utf8.RuneStart(p[end]) {
			end--
		}
		out := pieces[:i:i]
		if end > 0 || i == 0 {
			out = append(out, p[:end])
		}
		return out, true
	}
	return pieces, false
}

// samplingText is the answer of /sampling: the request's sampling
// parameters (and its tool_choice and parallel_tool_calls), as sent, in a
// JSON object (those not sent left out).
func samplingText(req chatRequest) string {
	b, err := json.Marshal(struct {
		MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
		Temperature         *float64        `json:"temperature,omitempty"`
		TopP                *float64        `json:"top_p,omitempty"`
		ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
		ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
		ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	}{req.MaxCompletionTokens, req.Temperature, req.TopP, compacted(req.ResponseFormat), compacted(req.ToolChoice), req.ParallelToolCalls})
	if err != nil {
		panic(err) // decoded JSON always encodes
	}
	return string(b)
}

// compacted returns raw compacted, nil for nothing or JSON null.
func compacted(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if len(raw) == 0 || string(raw) == "null" || json.Compact(&buf, raw) != nil {
		return nil
	}
	return buf.Bytes()
}

func callID(step, i int) string {
	return "call_" + strconv.Itoa(step) + "_" + strconv.Itoa(i)
}

// chunks returns the stream of a's response, without the usage chunk. With
// cut, it returns the chunks a truncated stream sends before it breaks.
func (a answer) chunks(cut bool) []chunk {
	mk := func(d delta, finish string) chunk {
		c := chunk{ID: a.id, Object: "chat.completion.chunk", Created: created, Model: a.model,
			Choices: []chunkChoice{{Delta: d}}}
		if finish != "" {
			c.Choices[0].FinishReason = &finish
		}
		return c
	}
	var out []chunk
	if len(a.calls) > 0 {
		for i, c := range a.calls {
			out = append(out, mk(delta{ToolCalls: []deltaToolCall{{
				Index: i, ID: callID(a.step, i), Type: "function",
				Function: deltaFunction{Name: c.name},
			}}}, ""))
			half := halfRunes(c.args)
			out = append(out, mk(delta{ToolCalls: []deltaToolCall{{
				Index: i, Function: deltaFunction{Arguments: c.args[:half]},
			}}}, ""))
			if cut {
				break
			}
			out = append(out, mk(delta{ToolCalls: []deltaToolCall{{
				Index: i, Function: deltaFunction{Arguments: c.args[half:]},
			}}}, ""))
		}
		out[0].Choices[0].Delta.Role = "assistant"
		if !cut {
			out = append(out, mk(delta{}, "tool_calls"))
		}
		return out
	}
	for _, p := range a.pieces {
		if cut {
			p = p[:halfRunes(p)]
		}
		out = append(out, mk(delta{Content: &p}, ""))
		if cut {
			break
		}
	}
	out[0].Choices[0].Delta.Role = "assistant"
	if !cut {
		out = append(out, mk(delta{}, cmp.Or(a.finish, "stop")))
	}
	return out
}

// halfRunes returns the byte offset of the middle rune of s.
func halfRunes(s string) int {
	half, n := utf8.RuneCountInString(s)/2, 0
	for i := range s {
		if n == half {
			return i
		}
		n++
	}
	return len(s)
}

// stream writes a's response as Server-Sent Events. It reports whether the
// whole response was written.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, a answer, includeUsage bool) bool {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return false
	}
	if a.fault == FaultHang {
		<-ctx.Done()
		return false
	}
	chunks := a.chunks(a.fault == FaultTruncate)
	for i, c := range chunks {
		if i > 0 && !Pause(ctx, a.gap) {
			return false
		}
		if !writeEvent(w, rc, c) {
			return false
		}
	}
	if a.fault == FaultTruncate {
		// Close the connection without the end of the chunked body: the
		// client sees an unexpected EOF, as when a proxy or the network cuts
		// a stream.
		panic(http.ErrAbortHandler)
	}
	if includeUsage {
		u := chunk{ID: a.id, Object: "chat.completion.chunk", Created: created, Model: a.model,
			Choices: []chunkChoice{}, Usage: toWireUsage(a.usage)}
		if !writeEvent(w, rc, u) {
			return false
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return false
	}
	// The client may hang up as soon as it has read [DONE], so the request's
	// context ending now does not make the response incomplete.
	return rc.Flush() == nil
}

func writeEvent(w http.ResponseWriter, rc *http.ResponseController, c chunk) bool {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // our own types always encode
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// complete writes a's response as one chat.completion object. It reports
// whether the whole response was written.
func (s *Server) complete(ctx context.Context, w http.ResponseWriter, a answer) bool {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	if a.fault == FaultHang {
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		<-ctx.Done()
		return false
	}
	n := max(len(a.pieces), 1)
	if !Pause(ctx, time.Duration(n-1)*a.gap) {
		return false
	}
	msg := completionMessage{Role: "assistant"}
	finish := cmp.Or(a.finish, "stop")
	if len(a.calls) > 0 {
		finish = "tool_calls"
		for i, c := range a.calls {
			msg.ToolCalls = append(msg.ToolCalls, completionToolCall{
				ID: callID(a.step, i), Type: "function",
				Function: deltaFunction{Name: c.name, Arguments: c.args},
			})
		}
	} else {
		text := a.text()
		msg.Content = &text
	}
	b, err := json.Marshal(completion{
		ID: a.id, Object: "chat.completion", Created: created, Model: a.model,
		Choices: []completionChoice{{Message: msg, FinishReason: finish}},
		Usage:   toWireUsage(a.usage),
	})
	if err != nil {
		panic(err)
	}
	if a.fault == FaultTruncate {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		_ = rc.Flush()
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err == nil
}

// Pause waits for d, or until ctx ends; it reports whether ctx is still
// live (the pauses of /stream, for a fake of another wire format).
func Pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// maxWindowK is the largest N of a fake-<N>k model name: windows of up to
// 1Gi tokens, far past any real model's, and far from overflowing.
const maxWindowK = 1 << 20

// ContextWindow returns the context window, in tokens, the fake enforces for
// model: N*1024 for "fake-<N>k" (N a decimal integer from 1 to 1048576,
// without leading zeros), 0 (no limit) for any other name.
func ContextWindow(model string) int64 {
	n, ok := strings.CutPrefix(model, "fake-")
	if !ok {
		return 0
	}
	n, ok = strings.CutSuffix(n, "k")
	if !ok || n == "" || n[0] == '0' || len(n) > 7 {
		return 0
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return 0
		}
	}
	k, err := strconv.ParseInt(n, 10, 64)
	if err != nil || k > maxWindowK {
		return 0
	}
	return k * 1024
}
