package fakeanthropic

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// maxBody caps the size of a request body.
const maxBody = 32 << 20

// Usage is the usage the fake reported for one response, in the terms of
// the Messages API.
type Usage struct {
	InputTokens              int64 // input_tokens: neither read from nor written to the cache
	CacheReadInputTokens     int64
	CacheCreationInputTokens int64
	OutputTokens             int64
	ThinkingTokens           int64 // output_tokens_details.thinking_tokens, of OutputTokens
}

// TotalInput is every input token: InputTokens and the cache's.
func (u Usage) TotalInput() int64 {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + v.InputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + v.CacheReadInputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + v.CacheCreationInputTokens,
		OutputTokens:             u.OutputTokens + v.OutputTokens,
		ThinkingTokens:           u.ThinkingTokens + v.ThinkingTokens,
	}
}

// Request is the record of one request the fake handled.
type Request struct {
	Seq         int    // 1-based order of arrival
	Model       string // as sent
	Messages    int    // messages sent
	Stream      bool
	Thinking    bool // the request asked for thinking
	Breakpoints int  // blocks with cache_control
	Step        int
	Status      int    // HTTP status sent
	Error       string // the message of the error body sent, "" for an answer
	Fault       string // the fault injected, or ""
	ToolCalls   int    // tool uses in the answer
	Text        string // the final text answered
	Usage       Usage  // what the response reported (zero for an error)
	Completed   bool   // the whole response was written
	Cancelled   bool   // the client went away before it was
	APIKey      string // the key sent: x-api-key, or Authorization's bearer token
	// Media are the images and documents of the request's messages, in
	// order (their Kind "image" or "file").
	Media []fakellm.Media
}

// Option configures a Server.
type Option func(*Server)

// WithOnDone registers f, called when each request is done (after it is
// recorded).
func WithOnDone(f func(Request)) Option {
	return func(s *Server) { s.onDone = f }
}

// Server is the fake Anthropic endpoint. It is an http.Handler, safe for
// concurrent use.
type Server struct {
	onDone func(Request)

	mu      sync.Mutex
	seen    map[[sha256.Size]byte]bool // requests whose fault fired
	cached  map[[sha256.Size]byte]bool // prefixes in the prompt cache
	history []Request
	calls   int
	byModel map[string]int
	usage   Usage
}

// New returns a Server.
func New(opts ...Option) *Server {
	s := &Server{seen: make(map[[sha256.Size]byte]bool), cached: make(map[[sha256.Size]byte]bool), byModel: make(map[string]int)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start serves a new Server on a local port; the test server's URL is the
// base URL to give a client (without /v1). Close it when done.
func Start(opts ...Option) (*Server, *httptest.Server) {
	s := New(opts...)
	return s, httptest.NewServer(s)
}

// Calls returns the number of requests received so far, of any outcome.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// CallsFor returns the number of requests received so far for model.
func (s *Server) CallsFor(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byModel[model]
}

// Requests returns the records of the requests that are done, in the order
// they finished.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.history...)
}

// UsageTotal returns the sum of the usage of completed responses.
func (s *Server) UsageTotal() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// ServeHTTP serves POST /v1/messages.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/messages" {
		(&refusal{status: http.StatusNotFound, typ: "not_found_error", msg: "Not Found"}).write(w)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		(&refusal{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", msg: "Method Not Allowed"}).write(w)
		return
	}
	s.mu.Lock()
	s.calls++
	rec := Request{Seq: s.calls, APIKey: cmp.Or(r.Header.Get("X-Api-Key"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))}
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
	s.account(&a)
	rec.Status, rec.Usage = http.StatusOK, a.usage
	if req.Stream {
		rec.Completed = stream(r.Context(), w, a)
	} else {
		rec.Completed = complete(r.Context(), w, a)
	}
}

// accept reads the request, checks it as the real API does, and plans its
// answer; or says why it is refused.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, rec *Request) (*request, answer, *refusal) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, answer{}, invalid("read body: " + err.Error())
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, answer{}, invalid("invalid JSON body: " + err.Error())
	}
	for i := range req.Messages {
		if req.Messages[i].blocks, err = readBlocks(req.Messages[i].Content); err != nil {
			return nil, answer{}, invalid(fmt.Sprintf("messages.%d.content: %v", i, err))
		}
	}
	s.mu.Lock()
	s.byModel[req.Model]++
	s.mu.Unlock()
	rec.Model, rec.Messages, rec.Stream, rec.Thinking = req.Model, len(req.Messages), req.Stream, req.Thinking.on()
	rec.Breakpoints = countBreakpoints(&req)
	if no := refuse(&req); no != nil {
		return &req, answer{}, no
	}
	if no := mediaRefusal(&req); no != nil {
		return &req, answer{}, no
	}
	rec.Media = req.media()
	a, err := plan(&req, body)
	if err != nil {
		return &req, a, invalid(err.Error())
	}
	rec.Step = a.step
	p := prefixOf(&req)
	if win := fakellm.ContextWindow(req.Model); win > 0 && len(p.bytes) > 0 && tokens(p.bytes[len(p.bytes)-1]) > win {
		return &req, a, invalid(fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens(p.bytes[len(p.bytes)-1]), win))
	}
	a.prefix = p
	return &req, a, nil
}

// account sets a's input usage from the prompt cache, and caches a's
// prefixes: only a request that is answered uses the cache.
func (s *Server) account(a *answer) {
	s.mu.Lock()
	u := account(a.prefix, s.cached)
	s.mu.Unlock()
	a.usage.CacheReadInputTokens, a.usage.CacheCreationInputTokens = u.read, u.write
	a.usage.InputTokens = u.total - u.read - u.write
}

// fire decides a's fault: it fires the first time the request is seen (a
// retry of it is answered); a 429, 500 or 529 is a refusal.
func (s *Server) fire(a *answer, rec *Request) *refusal {
	if a.fault != "" {
		s.mu.Lock()
		if s.seen[a.hash] {
			a.fault = ""
		} else {
			s.seen[a.hash] = true
		}
		s.mu.Unlock()
	}
	rec.Fault = a.fault
	for _, b := range a.blocks {
		switch b.typ {
		case "tool_use":
			rec.ToolCalls++
		case "text":
			for _, p := range b.pieces {
				rec.Text += p
			}
		}
	}
	switch a.fault {
	case FaultRateLimit:
		return &refusal{status: http.StatusTooManyRequests, typ: "rate_limit_error", msg: "fake rate limit, retry after 1s", retryAfter: "1"}
	case FaultServer:
		return &refusal{status: http.StatusInternalServerError, typ: "api_error", msg: "Internal server error"}
	case FaultOverloaded:
		return &refusal{status: 529, typ: "overloaded_error", msg: "Overloaded"}
	}
	return nil
}

// done records rec once the request is over.
func (s *Server) done(ctx context.Context, rec *Request) {
	rec.Cancelled = !rec.Completed && ctx.Err() != nil
	if !rec.Completed {
		rec.Usage = Usage{}
	}
	s.mu.Lock()
	s.usage = s.usage.Add(rec.Usage)
	s.history = append(s.history, *rec)
	s.mu.Unlock()
	if s.onDone != nil {
		s.onDone(*rec)
	}
}
