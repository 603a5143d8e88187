package mcptools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// Backoff bounds between two connection attempts to a server.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Manager keeps agentd connected to its MCP servers and their tools in the
// registry. Start starts one goroutine per server, which Stop ends.
type Manager struct {
	reg     *tools.Registry
	log     *slog.Logger
	servers []*server

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when every server's goroutine returned
}

// Status is a server's state, for /readyz.
type Status struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Tools     int    `json:"tools"`
	Error     string `json:"error,omitempty"`
}

// New returns a manager of the servers cfgs, whose tools go into reg.
func New(reg *tools.Registry, cfgs []ServerConfig, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{reg: reg, log: log}
	for _, c := range cfgs {
		m.servers = append(m.servers, &server{cfg: c, reg: reg, log: log.With("mcp_server", c.Name),
			relist: make(chan struct{}, 1), up: make(chan struct{})})
	}
	return m
}

// Start connects to every server in the background: a server that is down
// does not hold agentd up; it is tried again, with backoff, until Stop.
// ctx bounds nothing. Starting twice, or after Stop, does nothing.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.stopped {
		return nil
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.done = make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(func() { s.run(ctx) })
	}
	go func() {
		wg.Wait()
		close(m.done)
	}()
	return nil
}

// Stop closes the connections and waits for their goroutines, within ctx.
// Stopping twice, or before Start, is safe.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.stopped = true
	started := m.started
	m.mu.Unlock()
	if !started {
		return nil
	}
	m.cancel()
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mcp servers: %w", ctx.Err())
	}
}

// Statuses says, per server, whether it is connected and how many tools it
// offers.
func (m *Manager) Statuses() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// WaitConnected waits, within ctx, until every server is connected (and
// its tools listed), or until ctx ends.
func (m *Manager) WaitConnected(ctx context.Context) {
	for _, s := range m.servers {
		s.mu.Lock()
		up := s.up
		s.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			return
		}
	}
}

// server is one MCP server's connection and tools.
type server struct {
	cfg    ServerConfig
	reg    *tools.Registry
	log    *slog.Logger
	relist chan struct{} // the server said its tools changed

	mu      sync.Mutex
	session *mcp.ClientSession // nil while disconnected
	up      chan struct{}      // closed when session is set; a new one when it is lost
	tools   int
	lastErr string
}

// connectWait is how long a call waits for a server that is reconnecting.
const connectWait = 10 * time.Second

// waitSession returns the connected session, waiting up to connectWait
// (within ctx) for one; nil if none came.
func (s *server) waitSession(ctx context.Context) *mcp.ClientSession {
	s.mu.Lock()
	session, up := s.session, s.up
	s.mu.Unlock()
	if session != nil {
		return session
	}
	t := time.NewTimer(connectWait)
	defer t.Stop()
	select {
	case <-up:
		return s.current()
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Name: s.cfg.Name, Connected: s.session != nil, Tools: s.tools, Error: s.lastErr}
}

func (s *server) current() *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

// run connects, lists the tools, and waits for the connection to end, again
// and again, until ctx ends.
func (s *server) run(ctx context.Context) {
	wait := minBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := s.serve(ctx)
		s.mu.Lock()
		if s.session != nil {
			s.up = make(chan struct{}) // open until the next connection
		}
		s.session, s.tools = nil, 0
		if err != nil && ctx.Err() == nil {
			s.lastErr = tools.Describe(err) // a tenant may read it: nothing of the instance's network
		}
		s.mu.Unlock()
		if err := s.reg.SetSource(s.cfg.Name, nil); err != nil {
			s.log.Warn("mcp: remove tools", "error", err)
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > maxBackoff {
			wait = minBackoff // it was up for a while: try again soon
		}
		s.log.Warn("mcp: server unavailable; trying again", "error", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(wait*2, maxBackoff)
	}
}

// serve holds one connection: it returns when it ends.
func (s *server) serve(ctx context.Context) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentd", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
	})
	stderr := &stderrLog{log: s.log}
	defer stderr.flush()
	timeout := s.cfg.ConnectTimeout()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	session, err := client.Connect(cctx, s.transport(stderr), nil)
	timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
	cancel()
	if err != nil && timedOut && ctx.Err() == nil {
		return fmt.Errorf("connect: no answer within %v (connect_timeout_ms): %w", timeout, err)
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer session.Close()
	closed := make(chan error, 1)
	go func() { closed <- session.Wait() }()
	if err := s.list(ctx, session); err != nil {
		return err
	}
	s.mu.Lock()
	s.session, s.lastErr = session, ""
	close(s.up)
	s.mu.Unlock()
	s.log.Info("mcp: connected", "tools", s.status().Tools)
	for {
		select {
		case err := <-closed:
			if err == nil {
				err = errors.New("the connection closed")
			}
			return err
		case <-s.relist:
			if err := s.list(ctx, session); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// transport is how to reach the server; a command's stderr goes to
// stderr.
func (s *server) transport(stderr io.Writer) mcp.Transport {
	if s.cfg.URL != "" {
		base := s.cfg.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc := &http.Client{Transport: headers{base: base, h: s.cfg.Headers}}
		return &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc, MaxRetries: -1}
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Env = os.Environ()
	for k, v := range s.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = stderr
	// A child of the command (npx's node) may hold stderr open after the
	// command exits: Wait stops copying it then.
	cmd.WaitDelay = 2 * time.Second
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
}

// maxStderrLine is the longest line of a server's stderr logged as one
// record; a longer one is logged in parts of this size.
const maxStderrLine = 4 << 10

// stderrLog is the stderr of a server's command: each line it writes is one
// log record ("mcp: stderr", the line as "line"), with the server's name as
// mcp_server, so that a server's output reads like agentd's own logs.
type stderrLog struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte // the start of a line not yet ended
}

// Write logs each line p ends and keeps the start of the next one.
func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	rest := w.buf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		w.emit(rest[:i])
		rest = rest[i+1:]
	}
	for len(rest) >= maxStderrLine {
		w.emit(rest[:maxStderrLine])
		rest = rest[maxStderrLine:]
	}
	w.buf = append(w.buf[:0], rest...)
	return len(p), nil
}

// flush logs a last line that no newline ended.
func (w *stderrLog) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
}

// emit logs one line, without its CR; an empty line is left out.
func (w *stderrLog) emit(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > 0 {
		w.log.Info("mcp: stderr", "line", string(line))
	}
}

// headers adds a server's configured headers to each request.
type headers struct {
	base http.RoundTripper
	h    map[string]string
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(r)
}

// list reads the server's tools and puts those it offers into the
// registry.
func (s *server) list(ctx context.Context, session *mcp.ClientSession) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var list []tools.Tool
	for t, err := range session.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		if len(s.cfg.Tools) > 0 && !slices.Contains(s.cfg.Tools, t.Name) {
			continue
		}
		tool, err := s.adapt(t)
		if err != nil {
			s.log.Warn("mcp: tool left out", "tool", t.Name, "error", err)
			continue
		}
		list = append(list, tool)
	}
	if err := s.reg.SetSource(s.cfg.Name, list); err != nil {
		s.log.Warn("mcp: tools left out", "error", err)
	}
	s.mu.Lock()
	s.tools = len(list)
	s.mu.Unlock()
	return nil
}

// adapt makes an MCP tool an agentd tool.
func (s *server) adapt(t *mcp.Tool) (*tool, error) {
	params, err := json.Marshal(t.InputSchema)
	if err != nil || string(params) == "null" {
		params = []byte(`{"type":"object","properties":{}}`)
	}
	name := s.cfg.Name + Separator + strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, t.Name)
	if len(name) > 64 {
		return nil, fmt.Errorf("the name %q is longer than the 64 characters a model accepts", name)
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	spec := tools.Spec{Name: name, Description: desc, Parameters: params, Effect: effectOf(t.Annotations)}
	if o, ok := s.cfg.Overrides[t.Name]; ok {
		if o.Effect != "" {
			spec.Effect = o.Effect
		}
		spec.Timeout = time.Duration(o.TimeoutMS) * time.Millisecond
		if o.NeedsApproval != nil {
			spec.NeedsApproval = *o.NeedsApproval
		}
		spec.MaxResultBytes = o.MaxResultBytes
	}
	return &tool{srv: s, name: t.Name, spec: spec}, nil
}

// effectOf is the effect class an MCP tool's annotations say: read-only,
// idempotent (and not read-only), else a side effect, which is never
// retried blindly. No annotations is a side effect.
func effectOf(a *mcp.ToolAnnotations) agentd.Effect {
	switch {
	case a == nil:
		return agentd.EffectSideEffect
	case a.ReadOnlyHint:
		return agentd.EffectReadOnly
	case a.IdempotentHint:
		return agentd.EffectIdempotent
	}
	return agentd.EffectSideEffect
}

// tool is an MCP server's tool, as agentd offers it.
type tool struct {
	srv  *server
	name string // as the server names it
	spec tools.Spec
}

func (t *tool) Spec() tools.Spec { return t.spec }

// Invoke calls the tool with the call's idempotency key in _meta. A call
// cancelled or timed out is cancelled on the server too
// (notifications/cancelled).
func (t *tool) Invoke(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	session := t.srv.waitSession(ctx)
	if session == nil {
		// Nothing was sent: the call may be made again, whatever its effect.
		return nil, &tools.Error{Kind: tools.KindTransient, Message: fmt.Sprintf("the MCP server %s is not connected", t.srv.cfg.Name)}
	}
	args := json.RawMessage(call.Arguments)
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: t.name, Arguments: args,
		Meta: mcp.Meta{MetaIdempotencyKey: call.IdempotencyKey}})
	if err != nil {
		return nil, classify(ctx, err)
	}
	out := result(res)
	if res.IsError {
		msg := textOf(res)
		if msg == "" {
			msg = string(out)
		}
		return nil, &tools.Error{Kind: tools.KindFinal, Message: msg}
	}
	return out, nil
}

// classify says what a failed tools/call means for the call.
func classify(ctx context.Context, err error) error {
	var rpc *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return &tools.Error{Kind: tools.KindTimeout, Message: "the MCP call was cancelled or timed out", Err: err}
	case errors.Is(err, mcp.ErrConnectionClosed):
		return &tools.Error{Kind: tools.KindConnection, Message: "the connection to the MCP server was lost during the call", Err: err}
	case errors.As(err, &rpc):
		// The server refused the request (unknown tool, invalid params).
		return &tools.Error{Kind: tools.KindFinal, Message: rpc.Message, Err: err}
	}
	return &tools.Error{Kind: tools.KindConnection, Message: "the MCP call failed: " + err.Error(), Err: err}
}

// result maps a tool's result: a lone text as a JSON string; otherwise
// {"content": [...], "structured_content": ...}, the content items in
// their MCP form (text, image, audio, resource_link, resource).
func result(res *mcp.CallToolResult) json.RawMessage {
	if res.StructuredContent == nil && len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			b, _ := json.Marshal(tc.Text)
			return b
		}
	}
	out := struct {
		Content    []mcp.Content `json:"content"`
		Structured any           `json:"structured_content,omitempty"`
	}{res.Content, res.StructuredContent}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	b, err := json.Marshal(out)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": "the result could not be encoded: " + err.Error()})
	}
	return b
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
