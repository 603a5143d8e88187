package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// An Agent is one immutable version of a tenant's named run definition: the
// fields of a new run (model, instructions, tools, sampling, limits,
// policies) that a run naming the agent starts from. Versions count from 1;
// a change is a new version, and a run records the version it ran
// (RunParams.Agent), so that a run in flight finishes on the version it
// started with whatever is changed meanwhile.
type Agent struct {
	TenantID    string
	Name        string
	Version     int
	Description string
	// Definition is the agent's run fields as a JSON object, checked when
	// the version was made: the body of POST /runs without its input,
	// conversation and stream (docs/agents.md).
	Definition json.RawMessage
	// Actor is the credential that made the version.
	Actor     string
	CreatedAt time.Time
	// LatestVersion is the agent's latest version when the row was read;
	// DeletedAt is set once the agent was deleted (its versions stay, for
	// the runs that ran them).
	LatestVersion int
	DeletedAt     *time.Time
}

// AgentDefine is a new version of an agent, as a store is asked to keep it.
type AgentDefine struct {
	TenantID, Name, Description string
	Definition                  json.RawMessage // a JSON object, checked
	Actor                       string
}

// AgentCheck checks a new version of an agent as it is saved, against the
// tenant's agents as they then are: get reads one at its latest version
// in the saving transaction (ErrAgentNotFound when there is none), after
// every other save of the tenant's agents has committed or waits. Its
// error refuses the save. The composer's checks that need to see the
// others' versions (a cycle of sub-agents) are these, so that two saves at
// once cannot store what neither would have alone.
type AgentCheck func(ctx context.Context, get func(ctx context.Context, name string) (Agent, error)) error

// AgentRef names the version of an agent a run was started from.
type AgentRef struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Agents' bounds.
const (
	// MaxAgentDescriptionBytes caps an agent's description, which a
	// model sees when the agent is offered as a tool.
	MaxAgentDescriptionBytes = 4096
	// MaxAgentDefinitionBytes caps an agent's definition, compacted.
	MaxAgentDefinitionBytes = 256 << 10
)

// Errors of agents.
var (
	// ErrAgentNotFound is the ErrNotFound of an agent: the tenant has no
	// agent of that name (or it was deleted), or not that version.
	ErrAgentNotFound = fmt.Errorf("agent %w", ErrNotFound)
	// ErrAgentExists is the ErrConflict of creating an agent whose name the
	// tenant uses already.
	ErrAgentExists = fmt.Errorf("agent exists: %w", ErrConflict)
)

// AgentVersionError says that a run asked for a version of an agent that it
// does not have.
type AgentVersionError struct {
	Name            string
	Version, Latest int
}

func (e *AgentVersionError) Error() string {
	return fmt.Sprintf("agent %s has no version %d (its latest is %d)", e.Name, e.Version, e.Latest)
}

// Is makes errors.Is(err, ErrAgentNotFound) true for an AgentVersionError.
func (e *AgentVersionError) Is(target error) bool {
	return target == ErrAgentNotFound || errors.Is(ErrAgentNotFound, target)
}

// AgentView is an agent's version as the API shows it (POST, PUT and GET
// /agents...): its own keys, then its definition's (model, instructions,
// tools, ...), in one object, so that what GET gives can be sent back with
// PUT as it is.
type AgentView struct {
	Object        string    `json:"object"` // ObjectAgent
	Name          string    `json:"name"`
	Version       int       `json:"version"`
	LatestVersion int       `json:"latest_version"`
	Description   string    `json:"description"`
	CreatedBy     string    `json:"created_by"`
	CreatedAt     time.Time `json:"created_at"`
	// Definition is the version's run fields, as defined: a JSON object
	// whose keys are none of the view's own.
	Definition json.RawMessage `json:"-"`
}

// ObjectAgent is the object type of an AgentView.
const ObjectAgent = "agent"

// agentViewKeys are the keys of an AgentView's own.
type agentViewKeys AgentView

// MarshalJSON writes v's own keys, then its definition's.
func (v AgentView) MarshalJSON() ([]byte, error) {
	own, err := json.Marshal(agentViewKeys(v))
	if err != nil {
		return nil, err
	}
	def := bytes.TrimSpace(v.Definition)
	if len(def) < 2 || def[0] != '{' || len(bytes.TrimSpace(def[1:len(def)-1])) == 0 {
		return own, nil
	}
	out := append(own[:len(own)-1:len(own)-1], ',')
	return append(out, def[1:]...), nil
}

// UnmarshalJSON reads v's own keys, and the others into its Definition.
func (v *AgentView) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, (*agentViewKeys)(v)); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	for _, k := range []string{"object", "name", "version", "latest_version", "description", "created_by", "created_at"} {
		delete(all, k)
	}
	def, err := json.Marshal(all)
	v.Definition = def
	return err
}

// View is a's view.
func (a Agent) View() AgentView {
	return AgentView{Object: ObjectAgent, Name: a.Name, Version: a.Version, LatestVersion: a.LatestVersion,
		Description: a.Description, CreatedBy: a.Actor, CreatedAt: a.CreatedAt.UTC(), Definition: a.Definition}
}
