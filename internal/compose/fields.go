package compose

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// The stored form of a run's fields. Agent versions keep their definition
// (agent_versions.definition) and schedules their run template
// (schedules.run) as JSON objects of these types, as they were sent;
// POST /runs and the AI SDK's chat embed them. Pointers tell an absent
// field from a zero one. A field renamed or removed here makes stored
// rows unreadable: TestPreviousRows reads rows an earlier release stored.

// Fields are the fields of a new run that every door taking agentd's own
// JSON reads alike: POST /runs, the AI SDK's chat beside its own, an
// agent's definition and a schedule's template.
type Fields struct {
	Model        *string            `json:"model"`
	Instructions *string            `json:"instructions"`
	Tools        *[]json.RawMessage `json:"tools"`
	ClientTools  *[]ClientTool      `json:"client_tools"`
	MaxSteps     *int               `json:"max_steps"`
	Timeouts     *Timeouts          `json:"timeouts"`
	IfBusy       *string            `json:"if_busy"`
	OnQuota      *string            `json:"on_quota"`
	CompactAt    *float64           `json:"compact_at"`
	LoopLimits   *LoopLimits        `json:"loop_limits"`
	Metadata     json.RawMessage    `json:"metadata"`
	Models       *[]string          `json:"models"`
	Thinking     *Thinking          `json:"thinking"`
	MaxCost      *float64           `json:"max_cost"`
	// Memory is false (no memory for the run), or the namespaces the run
	// reads and writes (memoryFields).
	Memory json.RawMessage `json:"memory"`
}

// LoopLimits are a run's loop_limits.
type LoopLimits struct {
	FailuresInARow *int `json:"failures_in_a_row"`
	IdenticalCalls *int `json:"identical_calls"`
}

// Thinking is a run's thinking: the budget of the model's extended
// thinking.
type Thinking struct {
	BudgetTokens *int `json:"budget_tokens"`
}

// ClientTool is one of a run's client_tools.
type ClientTool struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Timeouts are a run's timeouts, in milliseconds.
type Timeouts struct {
	TotalMS  *int64 `json:"total_ms"`
	StepMS   *int64 `json:"step_ms"`
	IdleMS   *int64 `json:"idle_ms"`
	ToolMS   *int64 `json:"tool_ms"`
	ActionMS *int64 `json:"action_ms"`
}

// Sampling is a run's sampling.
type Sampling struct {
	MaxOutputTokens *int          `json:"max_output_tokens"`
	Temperature     *float64      `json:"temperature"`
	TopP            *float64      `json:"top_p"`
	Format          *OutputFormat `json:"format"`
	// ToolChoice is auto, none, required, or {"type": "function", "name"}.
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	// ReasoningEffort is how much a reasoning model thinks: none,
	// minimal, low, medium, high or xhigh.
	ReasoningEffort *string `json:"reasoning_effort"`
}

// OutputFormat is a run's sampling.format.
type OutputFormat struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// AgentFields name the agent a new run starts from, and the end user it
// runs for: POST /runs, a schedule's template and the AI SDK's chat take
// them.
type AgentFields struct {
	// User is the run's end user, as the client names them: the {{user}}
	// of its memory's namespaces.
	User         *string `json:"user"`
	Agent        *string `json:"agent"`
	AgentVersion *int    `json:"agent_version"`
	// Variables fill the {{name}} placeholders of the instructions: an
	// object of strings.
	Variables json.RawMessage `json:"variables"`
}

// AgentDefinition is what an agent defines of its runs: the fields of
// POST /runs but its input, conversation, stream and agent.
type AgentDefinition struct {
	OnDisconnect *string   `json:"on_disconnect"`
	Sampling     *Sampling `json:"sampling"`
	// InputSchema is the input schema of the agent as a sub-agent's tool
	// (a JSON object schema); absent: {"task": string}.
	InputSchema json.RawMessage `json:"input_schema"`
	Fields
}

// Template is a new run as agentd's own JSON asks for it: the body of
// POST /runs but how it is answered (stream, webhook), and a schedule's
// run template, which each of its slots starts.
type Template struct {
	ConversationID *string         `json:"conversation_id"`
	Input          json.RawMessage `json:"input"`
	OnDisconnect   *string         `json:"on_disconnect"`
	Sampling       *Sampling       `json:"sampling"`
	Fields
	AgentFields
}

// storedTemplate is a schedule's run template as stored: a POST /runs
// body, which may say that it does not stream and has no webhook (a
// template that streams or has one is refused when it is stored).
type storedTemplate struct {
	Template
	Stream  *bool           `json:"stream"`
	Webhook json.RawMessage `json:"webhook"`
}

// request is s as the run spec builder takes it.
func (s *Sampling) request() (*runspec.Sampling, error) {
	if s == nil {
		return nil, nil
	}
	out := &runspec.Sampling{MaxOutputTokens: s.MaxOutputTokens, Temperature: s.Temperature, TopP: s.TopP,
		ParallelToolCalls: s.ParallelToolCalls, ReasoningEffort: s.ReasoningEffort}
	if f := s.Format; f != nil {
		out.Format = &runspec.OutputFormat{Type: f.Type, Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}
	}
	if !runspec.IsNull(s.ToolChoice) {
		c, err := toolChoice(s.ToolChoice)
		if err != nil {
			return nil, err
		}
		out.ToolChoice = &c
	}
	return out, nil
}

// toolChoice reads sampling.tool_choice: "auto", "none", "required", or
// {"type": "function", "name"} for the tool the model must call.
func toolChoice(raw json.RawMessage) (agentd.ToolChoice, error) {
	const field = "sampling.tool_choice"
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		if mode == agentd.ToolChoiceTool {
			return agentd.ToolChoice{}, fieldError(field, "names its tool as {\"type\": \"function\", \"name\": ...}")
		}
		return agentd.ToolChoice{Mode: mode}, nil // the builder checks the mode
	}
	var named struct {
		Type *string `json:"type"`
		Name *string `json:"name"`
	}
	if err := decodeField(raw, &named, field); err != nil ||
		named.Type == nil || *named.Type != "function" || named.Name == nil || *named.Name == "" {
		return agentd.ToolChoice{}, fieldError(field, "must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
	}
	return agentd.ToolChoice{Mode: agentd.ToolChoiceTool, Name: *named.Name}, nil
}

// Request is f as the run spec builder takes it, without input.
func (f Fields) Request() (runspec.Request, error) {
	out := runspec.Request{Model: f.Model, Instructions: f.Instructions, MaxSteps: f.MaxSteps,
		IfBusy: f.IfBusy, OnQuota: f.OnQuota, CompactAt: f.CompactAt, Metadata: f.Metadata,
		Models: f.Models, MaxCost: f.MaxCost}
	if t := f.Thinking; t != nil {
		if t.BudgetTokens == nil {
			return out, fieldError("thinking.budget_tokens", "is required: the tokens the model may think with (0 for none)")
		}
		out.Thinking = t.BudgetTokens
	}
	if t := f.Timeouts; t != nil {
		out.Timeouts = &runspec.Timeouts{TotalMS: t.TotalMS, StepMS: t.StepMS, IdleMS: t.IdleMS, ToolMS: t.ToolMS, ActionMS: t.ActionMS}
	}
	if l := f.LoopLimits; l != nil {
		out.LoopLimits = &runspec.LoopLimits{FailuresInARow: l.FailuresInARow, IdenticalCalls: l.IdenticalCalls}
	}
	var cts []runspec.ClientTool
	if f.Tools != nil {
		names, functions, agents, detached, err := toolList(*f.Tools)
		if err != nil {
			return out, err
		}
		out.Tools, cts, out.SubAgents, out.Detached = &names, functions, agents, detached
	}
	if f.ClientTools != nil {
		for _, t := range *f.ClientTools {
			cts = append(cts, runspec.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	if f.Tools != nil || f.ClientTools != nil {
		out.ClientTools = &cts
	}
	var err error
	out.Memory, err = parseMemory(f.Memory)
	return out, err
}

// Request is d as the run spec builder takes it, without input.
func (d AgentDefinition) Request() (runspec.Request, error) {
	out, err := d.Fields.Request()
	if err != nil {
		return out, err
	}
	out.OnDisconnect = d.OnDisconnect
	out.Sampling, err = d.Sampling.request()
	return out, err
}

// Request is t as the run spec builder takes it, with its input read, and
// the agent it names (zero: none), whose definition the composer puts
// under it; its variables are on the request.
func (t Template) Request() (runspec.Request, Agent, error) {
	out, err := t.Fields.Request()
	if err != nil {
		return out, Agent{}, err
	}
	out.OnDisconnect = t.OnDisconnect
	if out.Sampling, err = t.Sampling.request(); err != nil {
		return out, Agent{}, err
	}
	if t.ConversationID != nil {
		id, err := parseUUID(*t.ConversationID)
		if err != nil {
			return out, Agent{}, fieldError("conversation_id", "must be a UUID")
		}
		out.ConversationID = id
	}
	if out.Input, out.InputText, err = ParseInput(t.Input); err != nil {
		return out, Agent{}, err
	}
	a, err := t.AgentFields.Resolve(&out)
	return out, a, err
}

// Agent names the agent version a run starts from: Name "" for none,
// Version 0 for its latest.
type Agent struct {
	Name    string
	Version int
}

// Resolve is the agent f names, with its variables and user put on sr.
func (f AgentFields) Resolve(sr *runspec.Request) (Agent, error) {
	sr.User = f.User
	if !runspec.IsNull(f.Variables) {
		if t := bytes.TrimSpace(f.Variables); t[0] != '{' || json.Unmarshal(t, &sr.Variables) != nil {
			return Agent{}, fieldError("variables", "must be an object of strings: {\"name\": \"value\"}")
		}
		if sr.Variables == nil {
			sr.Variables = map[string]string{}
		}
	}
	if f.Agent == nil {
		if f.AgentVersion != nil {
			return Agent{}, fieldError("agent_version", "is taken only with agent")
		}
		return Agent{}, nil
	}
	a := Agent{Name: *f.Agent}
	if f.AgentVersion != nil {
		if *f.AgentVersion < 1 {
			return a, fieldError("agent_version", "must be 1 or more")
		}
		a.Version = *f.AgentVersion
	}
	return a, nil
}

// toolEntry is an object of a "tools" list: a client tool (type function)
// or an agent (type agent).
type toolEntry struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Agent       *string         `json:"agent"`
	// Wait false: the run does not wait for the agent's child run, whose
	// answer comes back as input (agentd.SubAgent.Detached).
	Wait *bool `json:"wait"`
}

// toolList reads a "tools" list: the name of a server tool (an operator's
// or the tenant's) as a string, a client tool as {"type": "function",
// "name", "description", "parameters"}, which joins the client tools, or
// a sub-agent as {"type": "agent", "agent": "<name>"} (with "wait": false,
// one the run does not wait for: detached lists those).
func toolList(entries []json.RawMessage) (names []string, functions []runspec.ClientTool, agents, detached []string, err error) {
	names, agents = []string{}, []string{}
	for i, raw := range entries {
		field := fmt.Sprintf("tools[%d]", i)
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '"' {
			var name string
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, nil, nil, nil, fieldError(field, "must be a tool's name or a tool object")
			}
			names = append(names, name)
			continue
		}
		if len(raw) == 0 || raw[0] != '{' {
			return nil, nil, nil, nil, fieldError(field, "must be a tool's name (a string) or a tool object with a type")
		}
		var t toolEntry
		if err := decodeField(raw, &t, field); err != nil {
			return nil, nil, nil, nil, err
		}
		switch {
		case t.Type == nil:
			return nil, nil, nil, nil, fieldError(field+".type", "is required: function or agent")
		case *t.Type == "agent":
			if t.Agent == nil || *t.Agent == "" {
				return nil, nil, nil, nil, fieldError(field+".agent", "is required: the name of one of the tenant's agents")
			}
			if t.Name != nil || t.Description != nil || t.Parameters != nil {
				return nil, nil, nil, nil, fieldError(field, "an agent tool takes only type and agent: the agent's name and "+
					"description are its tool's, and its input a task")
			}
			agents = append(agents, *t.Agent)
			if t.Wait != nil && !*t.Wait {
				detached = append(detached, *t.Agent)
			}
			continue
		case *t.Type != "function":
			return nil, nil, nil, nil, fieldError(field+".type", "must be function or agent, not %q", *t.Type)
		case t.Agent != nil:
			return nil, nil, nil, nil, fieldError(field+".agent", "is taken only by an agent tool")
		case t.Wait != nil:
			return nil, nil, nil, nil, fieldError(field+".wait", "is taken only by an agent tool")
		}
		functions = append(functions, runspec.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return names, functions, agents, detached, nil
}
