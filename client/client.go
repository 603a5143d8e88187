package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
)

// Client calls one agentd server. It is safe for concurrent use.
type Client struct {
	base     string
	key      string
	tenant   string
	header   http.Header
	hc       *http.Client
	attempts int
	backoff  time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends key as the bearer token of every request.
func WithAPIKey(key string) Option { return func(c *Client) { c.key = key } }

// WithHTTPClient makes requests with hc (default: a client without an
// overall timeout, since event streams last as long as their runs).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTenant acts for another tenant (X-Tenant-ID), with an admin key.
func WithTenant(tenant string) Option { return func(c *Client) { c.tenant = tenant } }

// WithHeader sends the header key: value with every request, event
// streams included, as the client's own headers (Authorization,
// X-Tenant-ID, Idempotency-Key) are sent beside it: such as a traceparent
// (W3C Trace Context) that makes the server's spans children of the
// caller's, or a header a proxy in front of agentd wants. Given again for
// the same key, the values add up.
func WithHeader(key, value string) Option {
	return func(c *Client) {
		if c.header == nil {
			c.header = http.Header{}
		}
		c.header.Add(key, value)
	}
}

// WithRetries makes each call at most attempts times (default 3) when the
// server cannot be reached or answers 429, 502, 503 or 504, waiting backoff
// (default 200ms, doubling; or the server's Retry-After) in between. A POST
// is sent again with the same Idempotency-Key.
func WithRetries(attempts int, backoff time.Duration) Option {
	return func(c *Client) { c.attempts, c.backoff = max(attempts, 1), backoff }
}

// New returns a client of the server at baseURL (such as
// "http://localhost:8080").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), hc: &http.Client{}, attempts: 3, backoff: 200 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is an error answer of the server: its problem+json fields.
type Error struct {
	Status     int    `json:"status"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Detail     string `json:"detail"`
	Code       string `json:"code"` // such as run_not_found, invalid_field, conversation_busy
	Instance   string `json:"instance"`
	RequestID  string `json:"request_id"`
	Field      string `json:"field,omitempty"`       // invalid_field, unknown_parameter
	Tool       string `json:"tool,omitempty"`        // unknown_tool
	BusyRunID  string `json:"busy_run_id,omitempty"` // conversation_busy
	RetryAfter time.Duration

	// ConversationID names the conversation of a run that ended
	// (run_ended): its SendMessage takes the message instead.
	ConversationID string `json:"conversation_id,omitempty"`
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))
	}
	s := fmt.Sprintf("agentd: %d %s", e.Status, code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// IsCode reports whether err is an *Error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// newKey makes an Idempotency-Key.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "agentd-go-" + hex.EncodeToString(b[:])
}

// request is one call: its method, path, query, JSON body and key.
type request struct {
	method, path string
	query        url.Values
	body         any
	key          string // for a POST; "" makes one
	accept       string
}

// do sends req, retrying as WithRetries says, and decodes a 2xx JSON answer
// into out (when not nil). It returns the response's status.
func (c *Client) do(ctx context.Context, req request, out any) (int, error) {
	resp, err := c.send(ctx, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("agentd: decode %s %s: %w", req.method, req.path, err)
		}
	}
	return resp.StatusCode, nil
}

// send sends req and returns a 2xx response, whose body the caller closes,
// or an error (an *Error for an answer of the server).
func (c *Client) send(ctx context.Context, req request) (*http.Response, error) {
	var body []byte
	if req.body != nil {
		var err error
		if body, err = json.Marshal(req.body); err != nil {
			return nil, fmt.Errorf("agentd: encode %s %s: %w", req.method, req.path, err)
		}
	}
	if req.method == http.MethodPost && req.key == "" {
		req.key = newKey()
	}
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	wait := c.backoff
	for attempt := 1; ; attempt++ {
		hr, err := http.NewRequestWithContext(ctx, req.method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if body != nil {
			hr.Header.Set("Content-Type", "application/json")
		}
		if req.accept != "" {
			hr.Header.Set("Accept", req.accept)
		}
		if req.key != "" {
			hr.Header.Set("Idempotency-Key", req.key)
		}
		c.authorize(hr)
		resp, err := c.hc.Do(hr)
		var apiErr *Error
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			err = fmt.Errorf("agentd: %s %s: %w", req.method, req.path, err)
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return resp, nil
		default:
			apiErr = readError(resp)
			resp.Body.Close()
			err = apiErr
		}
		retryable := apiErr == nil || apiErr.Status == http.StatusTooManyRequests || apiErr.Status == http.StatusBadGateway ||
			apiErr.Status == http.StatusServiceUnavailable || apiErr.Status == http.StatusGatewayTimeout
		if !retryable || attempt >= c.attempts {
			return nil, err
		}
		d := wait
		if apiErr != nil && apiErr.RetryAfter > 0 {
			d = apiErr.RetryAfter
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait *= 2
	}
}

func (c *Client) authorize(r *http.Request) {
	for k, vs := range c.header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if c.key != "" {
		r.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.tenant != "" {
		r.Header.Set("X-Tenant-ID", c.tenant)
	}
}

// readError reads an error answer: problem+json, or whatever the body is.
func readError(resp *http.Response) *Error {
	e := &Error{}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e.Detail = strings.TrimSpace(string(b))
	}
	e.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func esc(s string) string { return url.PathEscape(s) }

// createRunBody is the body of POST /runs for r.
type createRunBody struct {
	createRunFields
	Input      any                `json:"input"`
	Tools      any                `json:"tools,omitempty"`       // in place of createRunFields'
	LoopLimits *loopLimitsRequest `json:"loop_limits,omitempty"` // in place of createRunFields'
}

// createRunFields is CreateRun without its method set, for its own fields.
type createRunFields CreateRun

func bodyOf(r CreateRun) createRunBody {
	b := createRunBody{createRunFields: createRunFields(r), Input: r.Input, Tools: toolsOf(r.Tools, r.SubAgents), LoopLimits: loopLimitsOf(r.LoopLimits)}
	if r.InputMessages != nil {
		b.Input = r.InputMessages
	}
	return b
}

// CreateRun starts a run (POST /runs).
func (c *Client) CreateRun(ctx context.Context, r CreateRun) (*Run, error) {
	req := request{method: http.MethodPost, path: "/runs", body: bodyOf(r), key: r.IdempotencyKey, query: waitQuery(r.Wait)}
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var run Run
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil {
		return nil, fmt.Errorf("agentd: decode POST /runs: %w", err)
	}
	if s := resp.Header.Get(headerWebhookSecret); s != "" && r.Webhook != nil && r.Webhook.Secret == "" {
		r.Webhook.Secret = s
	}
	return &run, nil
}

// headerWebhookSecret carries the signing secret the server made for a
// run's own webhook, in the answer to the POST /runs that created it.
const headerWebhookSecret = "Webhook-Secret"

// GetRun reads a run.
func (c *Client) GetRun(ctx context.Context, id string) (*Run, error) {
	var run Run
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + esc(id)}, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// WaitRun waits until run id has settled (RunView.Settled: it stopped, or
// waits for a decision), asking the server to hold each read up to wait
// (GET /runs/{id}?wait=N; the server caps it, and WaitRun asks again), and
// returns it then. ctx bounds the whole wait.
func (c *Client) WaitRun(ctx context.Context, id string, wait time.Duration) (*Run, error) {
	q := waitQuery(max(wait, time.Second))
	for {
		asked := time.Now()
		var run Run
		if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + esc(id), query: q}, &run); err != nil {
			return nil, err
		}
		if run.Settled() {
			return &run, nil
		}
		if time.Since(asked) < minWaitRound {
			// A server that does not wait: ask again a little later.
			select {
			case <-time.After(minWaitRound):
			case <-ctx.Done():
				return &run, ctx.Err()
			}
		}
	}
}

// minWaitRound is the least time between two reads of WaitRun.
const minWaitRound = 200 * time.Millisecond

// waitQuery is ?wait=N for a wait of d, in whole seconds (nil: none).
func waitQuery(d time.Duration) url.Values {
	if d <= 0 {
		return nil
	}
	return url.Values{"wait": {strconv.Itoa(max(1, int(d.Seconds())))}}
}

// ListRuns selects a page of runs, newest first.
type ListRuns struct {
	Status         agentd.RunStatus
	ConversationID string
	Agent          string // only the runs of this agent
	AgentVersion   int    // with Agent: only those of this version
	ParentRunID    string // only the child runs of this run's sub-agents
	ScheduleID     string // only the runs of this schedule's slots
	Text           string // only the runs whose input contains this text, in any case
	Limit          int
	Cursor         string // a page's NextCursor
}

// ListRuns reads a page of the tenant's runs.
func (c *Client) ListRuns(ctx context.Context, p ListRuns) (*Page[Run], error) {
	q := url.Values{}
	set(q, "status", string(p.Status))
	set(q, "conversation_id", p.ConversationID)
	set(q, "agent", p.Agent)
	set(q, "parent_run_id", p.ParentRunID)
	set(q, "schedule_id", p.ScheduleID)
	set(q, "q", p.Text)
	if p.AgentVersion > 0 {
		q.Set("agent_version", strconv.Itoa(p.AgentVersion))
	}
	set(q, "cursor", p.Cursor)
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page Page[Run]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// Steps reads a run's steps, with their tool calls and attempts.
func (c *Client) Steps(ctx context.Context, runID string) ([]Step, error) {
	var out struct{ Data []Step }
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + esc(runID) + "/steps"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// CancelRun cancels a run.
func (c *Client) CancelRun(ctx context.Context, id string) (*Run, error) {
	var run Run
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + esc(id) + "/cancel"}, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// ResumeRun queues an interrupted, failed or cancelled run again.
func (c *Client) ResumeRun(ctx context.Context, id string) (*Run, error) {
	var run Run
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + esc(id) + "/resume"}, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// Act answers what a run in requires_action waits for.
func (c *Client) Act(ctx context.Context, runID string, a Action) (*Run, error) {
	var run Run
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + esc(runID) + "/actions", body: a, key: a.IdempotencyKey}, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// Artifact reads a tool result kept whole: its content and media type.
func (c *Client) Artifact(ctx context.Context, runID, artifactID string) ([]byte, string, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/runs/" + esc(runID) + "/artifacts/" + esc(artifactID)})
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.Header.Get("Content-Type"), err
}

// ListConversations selects a page of conversations, newest first.
type ListConversations struct {
	Metadata map[string]string // each key must have this value
	ChatID   string
	Limit    int
	Cursor   string
}

// ListConversations reads a page of the tenant's conversations.
func (c *Client) ListConversations(ctx context.Context, p ListConversations) (*Page[Conversation], error) {
	q := url.Values{}
	for k, v := range p.Metadata {
		q.Set("metadata."+k, v)
	}
	set(q, "chat_id", p.ChatID)
	set(q, "cursor", p.Cursor)
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page Page[Conversation]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/conversations", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// CreateConversation makes an empty conversation.
func (c *Client) CreateConversation(ctx context.Context, title string, metadata json.RawMessage) (*Conversation, error) {
	var conv Conversation
	body := map[string]any{"title": title}
	if metadata != nil {
		body["metadata"] = metadata
	}
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/conversations", body: body}, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// GetConversation reads a conversation.
func (c *Client) GetConversation(ctx context.Context, id string) (*Conversation, error) {
	var conv Conversation
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/conversations/" + esc(id)}, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// UpdateConversation sets a conversation's title and metadata, each when
// not nil.
func (c *Client) UpdateConversation(ctx context.Context, id string, title *string, metadata json.RawMessage) (*Conversation, error) {
	body := map[string]any{}
	if title != nil {
		body["title"] = *title
	}
	if metadata != nil {
		body["metadata"] = metadata
	}
	var conv Conversation
	if _, err := c.do(ctx, request{method: http.MethodPatch, path: "/conversations/" + esc(id), body: body}, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// DeleteConversation removes a conversation and everything under it.
func (c *Client) DeleteConversation(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/conversations/" + esc(id)}, nil)
	return err
}

// Messages reads a page of a conversation's messages, oldest first.
func (c *Client) Messages(ctx context.Context, conversationID string, limit int, cursor string) (*Page[Message], error) {
	q := url.Values{}
	set(q, "cursor", cursor)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page Page[Message]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/conversations/" + esc(conversationID) + "/messages", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Tools lists the tools runs may call.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	var out struct{ Data []Tool }
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/tools"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Ready reports whether the server is ready (GET /readyz): nil, or why not.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/readyz"}, nil)
	return err
}

// Readiness is what a ready server says of itself (GET /readyz).
type Readiness struct {
	Status string `json:"status"` // ready
	// MCPServers are the MCP servers of the tools file, each connected or
	// not: a server that is down leaves the others' tools offered, and
	// agentd ready.
	MCPServers []MCPServerStatus `json:"mcp_servers"`
}

// MCPServerStatus is how one MCP server of the tools file is.
type MCPServerStatus struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Tools     int    `json:"tools"`           // the tools it offers
	Error     string `json:"error,omitempty"` // why it is not connected
}

// Readiness reads the server's readiness (GET /readyz); a server that is
// not ready answers an *Error, as Ready returns it.
func (c *Client) Readiness(ctx context.Context) (*Readiness, error) {
	var out Readiness
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/readyz"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
