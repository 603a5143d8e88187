package agentd

import (
	"encoding/json"
	"fmt"
)

// DefaultAgentDepth is how deep sub-agents nest unless the operator says
// otherwise (AGENTD_AGENT_DEPTH): a run started by POST /runs is at depth
// 0, its sub-agents' runs at 1, theirs at 2, and so on to this depth.
const DefaultAgentDepth = 3

// Defaults of the bounds of a run tree: the runs one tree (a run that no
// agent started, and all its sub-agents' runs, however deep) may make
// (AGENTD_AGENT_TREE_RUNS), and the children one run may have open at once
// (AGENTD_AGENT_CHILDREN). Past either, a call of a sub-agent fails, and
// its model is told, as past the depth.
const (
	DefaultAgentTreeRuns = 100
	DefaultAgentChildren = 8
)

// TreeLimitError says why a sub-agent's child run was not made: its tree
// has made as many runs as it may, or its parent has as many children open.
type TreeLimitError struct {
	Runs, MaxRuns         int // the runs the tree has made, and its bound
	Children, MaxChildren int // the parent's open children, and their bound
}

func (e *TreeLimitError) Error() string {
	if e.MaxRuns > 0 && e.Runs >= e.MaxRuns {
		return fmt.Sprintf("a run tree makes at most %d runs, and this one has made %d", e.MaxRuns, e.Runs)
	}
	return fmt.Sprintf("a run has at most %d sub-agents' runs open at once, and this one has %d", e.MaxChildren, e.Children)
}

// SubAgent is an agent a run may hand work to: offered to its model as a
// tool of the agent's name, whose call starts a child run of the agent's
// version, pinned when the run was created (DESIGN: sub-agents).
type SubAgent struct {
	Name        string `json:"name"`
	Version     int    `json:"version"`
	Description string `json:"description,omitempty"`
	// Parameters is the input schema the agent declares (its definition's
	// input_schema), whose arguments, as JSON text, are its child's input;
	// nil: SubAgentParameters, whose task is.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Detached: a call of it does not wait for its child run ("wait":
	// false). Its result is at once a handle to the child, and the child's
	// answer comes back to the run as input when it ends (or starts its
	// conversation's next run, once the run has ended).
	Detached bool `json:"detached,omitempty"`
}

// Schema is the input schema a's tool is offered with.
func (a SubAgent) Schema() json.RawMessage {
	if len(a.Parameters) == 0 {
		return SubAgentParameters
	}
	return a.Parameters
}

// Input is the input of the child run that a call of a with args starts:
// the task, or, for an agent that declares its own schema, the arguments
// as they are.
func (a SubAgent) Input(args json.RawMessage) (string, error) {
	if len(a.Parameters) == 0 {
		return SubAgentTask(args)
	}
	return string(args), nil
}

// SubAgentParameters is the input schema of an agent offered as a tool:
// one task, in words.
var SubAgentParameters = json.RawMessage(`{"type":"object","properties":{"task":{"type":"string",` +
	`"description":"What the agent is to do, with everything it needs to know"}},"required":["task"],"additionalProperties":false}`)

// SubAgentTask reads the task of a call of an agent offered as a tool.
func SubAgentTask(args json.RawMessage) (string, error) {
	var in struct {
		Task *string `json:"task"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Task == nil || *in.Task == "" {
		return "", fmt.Errorf(`the arguments must be {"task": "<what the agent is to do>"}`)
	}
	return *in.Task, nil
}

// ParentRef is the run, and the tool call of it, whose call started a
// child run, the child's depth (1 under a run that no agent started), and
// the run at the root of its tree (the run that no agent started).
type ParentRef struct {
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	Depth      int    `json:"depth"`
	// Root is the root of the child's tree; empty in a run made before
	// trees were bounded (RootRunID then takes the parent's).
	Root string `json:"root_run_id,omitempty"`
	// Detached: the parent does not wait for the child; the child's end
	// reports back to it as input (SubAgent.Detached).
	Detached bool `json:"detached,omitempty"`
}

// RootRunID is the run at the root of run id's tree, whose parameters are
// p: the run itself when no agent started it.
func (p RunParams) RootRunID(id string) string {
	switch {
	case p.Parent == nil:
		return id
	case p.Parent.Root != "":
		return p.Parent.Root
	}
	return p.Parent.RunID
}

// SubAgent returns the sub-agent of the run named name, if any.
func (p RunParams) SubAgent(name string) (SubAgent, bool) {
	for _, a := range p.SubAgents {
		if a.Name == name {
			return a, true
		}
	}
	return SubAgent{}, false
}

// Depth is how deep the run is among sub-agents: 0 for a run that no
// agent's call started.
func (p RunParams) Depth() int {
	if p.Parent == nil {
		return 0
	}
	return p.Parent.Depth
}

// AgentCall is a call of a sub-agent that a run waits for (required
// action agent_runs): the child run it started. The child's own required
// action, when it waits for a client, is shown with it in the parent's
// view (not kept in the parent's row).
type AgentCall struct {
	Agent  string `json:"agent"`
	CallID string `json:"call_id"`
	// InputsPending counts the inputs sent to the child that it has yet to
	// apply, shown with it in the parent's view.
	InputsPending  int             `json:"inputs_pending,omitempty"`
	RequiredAction *RequiredAction `json:"required_action,omitempty"`
	RunID          string          `json:"run_id"`
	ToolCallID     string          `json:"tool_call_id"`
}

// AgentStartedData is the data of agent.started, in the parent's log: a
// call of a sub-agent started its child run.
type AgentStartedData struct {
	Agent  string `json:"agent"`
	CallID string `json:"call_id"`
	// Detached: the parent goes on; the child's answer comes back as its
	// input.
	Detached   bool   `json:"detached,omitempty"`
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	Version    int    `json:"version"`
}

func (AgentStartedData) EventType() EventType { return EventAgentStarted }

// ResolvedByAgent is the resolved_by of a sub-agent's call answered by
// the end of its child run.
const ResolvedByAgent = "agent"
