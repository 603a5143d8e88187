package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/agentd/agentd"
)

// Agent is one version of an agent: its own fields, and its definition's
// (the run fields it defines) as JSON in Definition.
type Agent = agentd.AgentView

// AgentDefinition is what POST /agents and PUT /agents/{name} send: an
// agent's name and description, and the fields of the runs it defines,
// each as CreateRun has it. Zero fields are left out (a run naming the
// agent takes the server's defaults for them).
type AgentDefinition struct {
	Name         string    `json:"name,omitempty"`
	Description  string    `json:"description,omitempty"`
	Model        string    `json:"model,omitempty"`
	Instructions string    `json:"instructions,omitempty"` // may hold {{name}} placeholders
	Tools        *[]string `json:"tools,omitempty"`        // nil: every server tool; &[]string{}: none
	// SubAgents are agents of the tenant the runs may hand work to, each
	// offered to the model as a tool of its name (a "tools" entry of type
	// agent). They are tools: with Tools nil the runs have them and no
	// server tool, so name the server tools to keep beside them.
	SubAgents    []string            `json:"-"`
	ClientTools  []agentd.ClientTool `json:"client_tools,omitempty"`
	MaxSteps     int                 `json:"max_steps,omitempty"`
	Timeouts     *Timeouts           `json:"timeouts,omitempty"`
	OnDisconnect agentd.OnDisconnect `json:"on_disconnect,omitempty"`
	IfBusy       agentd.IfBusy       `json:"if_busy,omitempty"`
	OnQuota      agentd.OnQuota      `json:"on_quota,omitempty"`
	CompactAt    float64             `json:"compact_at,omitempty"`
	LoopLimits   *LoopLimits         `json:"-"`
	// Sampling is the runs' sampling, as POST /runs takes it
	// ({"temperature": 0.2, "tool_choice": "auto", ...}).
	Sampling json.RawMessage `json:"sampling,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Memory is the runs' memory, as POST /runs takes it
	// ({"pinned": [["users", "{{user}}"]], ...}).
	Memory json.RawMessage `json:"memory,omitempty"`
}

func (d AgentDefinition) body() any {
	type body AgentDefinition
	return struct {
		body
		Tools      any                `json:"tools,omitempty"` // in place of body's
		LoopLimits *loopLimitsRequest `json:"loop_limits,omitempty"`
	}{body(d), toolsOf(d.Tools, d.SubAgents), loopLimitsOf(d.LoopLimits)}
}

// CreateAgent makes an agent at version 1 (POST /agents).
func (c *Client) CreateAgent(ctx context.Context, d AgentDefinition) (*Agent, error) {
	var a Agent
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/agents", body: d.body()}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// UpdateAgent makes the next version of an agent (PUT /agents/{name}), with
// d as its whole definition.
func (c *Client) UpdateAgent(ctx context.Context, name string, d AgentDefinition) (*Agent, error) {
	var a Agent
	if _, err := c.do(ctx, request{method: http.MethodPut, path: "/agents/" + esc(name), body: d.body()}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// CreateAgentJSON makes an agent at version 1 from its definition as JSON
// (the body of POST /agents, or an agent as GetAgent read it).
func (c *Client) CreateAgentJSON(ctx context.Context, definition json.RawMessage) (*Agent, error) {
	var a Agent
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/agents", body: definition}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// UpdateAgentJSON makes the next version of an agent from its whole
// definition as JSON (an agent as GetAgent read it, changed).
func (c *Client) UpdateAgentJSON(ctx context.Context, name string, definition json.RawMessage) (*Agent, error) {
	var a Agent
	if _, err := c.do(ctx, request{method: http.MethodPut, path: "/agents/" + esc(name), body: definition}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// GetAgent reads version (0: the latest) of an agent.
func (c *Client) GetAgent(ctx context.Context, name string, version int) (*Agent, error) {
	path := "/agents/" + esc(name)
	if version > 0 {
		path += "/versions/" + strconv.Itoa(version)
	}
	var a Agent
	if _, err := c.do(ctx, request{method: http.MethodGet, path: path}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// ListAgents reads a page of the tenant's agents, at their latest versions,
// by name; limit 0 takes the server's default, cursor is a page's
// NextCursor.
func (c *Client) ListAgents(ctx context.Context, limit int, cursor string) (*Page[Agent], error) {
	return c.agentPage(ctx, "/agents", limit, cursor)
}

// AgentVersions reads a page of an agent's versions, newest first.
func (c *Client) AgentVersions(ctx context.Context, name string, limit int, cursor string) (*Page[Agent], error) {
	return c.agentPage(ctx, "/agents/"+esc(name)+"/versions", limit, cursor)
}

func (c *Client) agentPage(ctx context.Context, path string, limit int, cursor string) (*Page[Agent], error) {
	var page Page[Agent]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: path, query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// DeleteAgent deletes an agent: runs can no longer name it, and runs in
// flight finish on their version.
func (c *Client) DeleteAgent(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/agents/" + esc(name)}, nil)
	return err
}

// Fork is a POST /runs/{id}/fork request: the step of the run to fork
// after, and what the fork changes. Zero fields keep the run's.
type Fork struct {
	AtStep       int             `json:"at_step"`
	Input        string          `json:"-"` // a new user message after the copied ones; required after the step that answered
	Model        string          `json:"model,omitempty"`
	AgentVersion int             `json:"agent_version,omitempty"` // another version of the run's agent
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	// Variables fill the agent's instructions in place of the run's;
	// Instructions and Tools replace the run's (a prompt tried on a
	// recorded run without saving a version).
	Variables    map[string]string `json:"variables,omitempty"`
	Instructions *string           `json:"instructions,omitempty"`
	Tools        *[]string         `json:"tools,omitempty"`
	// InputMessages, when given, replaces Input: messages with parts
	// (images, files), as CreateRun's.
	InputMessages []InputMessage `json:"-"`
	// IdempotencyKey is sent as the Idempotency-Key header; empty: the
	// client makes one, and sends it again on each retry of the call.
	IdempotencyKey string `json:"-"`
}

// ForkRun starts a new run in a new conversation that holds the run's
// conversation up to the end of step f.AtStep (its tool results reused:
// no tool runs again), then f.Input; the new run's ForkedFrom names where
// it came from.
func (c *Client) ForkRun(ctx context.Context, runID string, f Fork) (*Run, error) {
	type body Fork
	payload := struct {
		body
		Input any `json:"input,omitempty"`
	}{body: body(f)}
	switch {
	case f.InputMessages != nil:
		payload.Input = f.InputMessages
	case f.Input != "":
		payload.Input = f.Input
	}
	var run Run
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + esc(runID) + "/fork", body: payload, key: f.IdempotencyKey}, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// TenantTool is a webhook tool the tenant declared (POST /tools): its
// headers' names, never their values.
type TenantTool = agentd.TenantToolView

// CreateTool declares a webhook tool of the tenant's from its JSON
// definition (POST /tools: name, description, parameters, url, effect,
// headers, ...), which only the tenant's runs may call.
func (c *Client) CreateTool(ctx context.Context, definition json.RawMessage) (*TenantTool, error) {
	var t TenantTool
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/tools", body: definition}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ReplaceTool replaces a tool of the tenant's with a whole definition.
func (c *Client) ReplaceTool(ctx context.Context, name string, definition json.RawMessage) (*TenantTool, error) {
	var t TenantTool
	if _, err := c.do(ctx, request{method: http.MethodPut, path: "/tools/" + esc(name), body: definition}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// GetTool reads a tool of the tenant's.
func (c *Client) GetTool(ctx context.Context, name string) (*TenantTool, error) {
	var t TenantTool
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/tools/" + esc(name)}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTool deletes a tool of the tenant's.
func (c *Client) DeleteTool(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/tools/" + esc(name)}, nil)
	return err
}
