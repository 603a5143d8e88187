package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// Agents reads a tenant's agents (*persist.Store implements it).
type Agents interface {
	// AgentGet returns a tenant's agent at version (0: its latest).
	// Errors: agentd.ErrAgentNotFound, *agentd.AgentVersionError.
	AgentGet(ctx context.Context, tenantID, name string, version int) (agentd.Agent, error)
}

// Tools gives the tools of a tenant's runs (*tenanttools.Catalog
// implements it).
type Tools interface {
	// For returns the registry of a tenant's runs: the server's tools and
	// the tenant's own, made again when it lacks a tool of need.
	For(ctx context.Context, tenant string, need ...string) (*tools.Registry, error)
}

// Config configures New. Builder and Agents are required.
type Config struct {
	// Builder applies the server's defaults and ceilings; its registry is
	// the server's tools.
	Builder *runspec.Builder
	Agents  Agents
	// Tools, when set, gives each tenant's registry, which a run's tools
	// are checked against in place of the builder's.
	Tools Tools
	// Registry is the server's tools when Tools is nil (nil: none).
	Registry *tools.Registry
}

// Composer turns what was asked into runs. It is safe for concurrent use.
type Composer struct {
	cfg Config
}

// New returns a Composer.
func New(cfg Config) *Composer {
	if cfg.Builder == nil || cfg.Agents == nil {
		panic("compose: Config.Builder and Config.Agents are required")
	}
	return &Composer{cfg: cfg}
}

// Defaults returns the builder's defaults and ceilings, resolved.
func (c *Composer) Defaults() runspec.Defaults { return c.cfg.Builder.Defaults() }

// Caller is who a run is made for: its tenant, and the actor recorded as
// its creator (a credential's, a schedule's creator, a parent run's).
type Caller struct {
	Tenant, Actor string
}

// create is the run create of spec for who.
func create(who Caller, spec agentd.RunSpec) agentd.RunCreate {
	return agentd.RunCreate{TenantID: who.Tenant, Actor: who.Actor, Spec: spec}
}

// Build builds the spec of a run that a door asked with sr, over the
// definition of agent a (none when its Name is empty), for tenant: its
// tools are checked against the tenant's, its sub-agents pinned at their
// latest versions. Its errors are *runspec.FieldError (and
// *runspec.UnknownToolError), which each door names in its own terms, or
// a store's error.
func (c *Composer) Build(ctx context.Context, tenant string, sr runspec.Request, a Agent) (agentd.RunSpec, error) {
	sr, err := c.withAgent(ctx, tenant, sr, a)
	if err != nil {
		return agentd.RunSpec{}, err
	}
	return c.build(ctx, tenant, sr)
}

// Template composes the run that template t asks for, for who: POST
// /runs' body, or a schedule's template.
func (c *Composer) Template(ctx context.Context, who Caller, t Template) (agentd.RunCreate, error) {
	sr, a, err := t.Request()
	if err != nil {
		return agentd.RunCreate{}, err
	}
	spec, err := c.Build(ctx, who.Tenant, sr, a)
	return create(who, spec), err
}

// Slot composes the run of a slot of schedule sc from its stored run
// template, as POST /runs composes one, for the schedule's tenant and the
// actor who created it. The scheduler names the schedule and the slot on
// it. A template that no longer builds a run (an agent or a tool is gone)
// is an error naming its field under "run.".
func (c *Composer) Slot(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error) {
	var t storedTemplate
	if err := decodeField(sc.Run, &t, "run"); err != nil {
		return agentd.RunCreate{}, err
	}
	rc, err := c.Template(ctx, Caller{Tenant: sc.TenantID, Actor: sc.CreatedBy}, t.Template)
	var fe *runspec.FieldError
	if errors.As(err, &fe) && fe.Field != "run" && !strings.HasPrefix(fe.Field, "run.") {
		err = &runspec.FieldError{Field: "run." + fe.Field, Message: fe.Message}
	}
	return rc, err
}

// Child composes the child run that call of sub-agent sub by run parent
// starts: the agent's definition at its pinned version, for the parent's
// tenant and actor, with the parent's variables, its input the call's
// task (or arguments), keyed by the call's idempotency key so that one
// call makes one child whatever crashes. It never asks to be refused over
// the tenant's quota: it is part of work already admitted. What the
// definition no longer builds (the agent was deleted, a tool it names is
// gone) is a *tools.Error of kind agent, which fails the call and which
// the model is told.
func (c *Composer) Child(ctx context.Context, parent agentd.Run, sub agentd.SubAgent, call agentd.ToolCall) (agentd.RunCreate, error) {
	task, err := sub.Input(call.Arguments)
	if err != nil {
		return agentd.RunCreate{}, &tools.Error{Kind: agentd.ToolErrFinal, Message: err.Error()}
	}
	sr := runspec.Request{Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "task"}}, InputText: true,
		Variables: parent.Params.Variables}
	spec, err := c.Build(ctx, parent.TenantID, sr, Agent{Name: sub.Name, Version: sub.Version})
	var fe *runspec.FieldError
	if errors.As(err, &fe) {
		return agentd.RunCreate{}, &tools.Error{Kind: agentd.ToolErrAgent, Message: fmt.Sprintf(
			"the agent %s version %d cannot start: %s", sub.Name, sub.Version, fe.Error())}
	}
	if err != nil {
		return agentd.RunCreate{}, err
	}
	spec.Input = []agentd.InputMessage{{Role: agentd.RoleUser, Content: task}}
	spec.Params.Parent = &agentd.ParentRef{RunID: parent.ID, ToolCallID: call.ID, Depth: parent.Params.Depth() + 1,
		Root: parent.Params.RootRunID(parent.ID)}
	// No client of its own may leave it; the parent's trace goes on in it.
	spec.Params.OnDisconnect, spec.Params.TraceParent = agentd.OnDisconnectContinue, parent.Params.TraceParent
	spec.Params.Unstored = false
	spec.OnQuota = agentd.OnQuotaQueue
	rc := create(Caller{Tenant: parent.TenantID, Actor: parent.CreatedBy}, spec)
	rc.IdempotencyKey, rc.RequestHash = "agent:"+call.IdempotencyKey, "agent:"+call.ID
	return rc, nil
}

// Fork is what a fork of a recorded run changes of it.
type Fork struct {
	// AgentVersion, when set, takes that version of the run's agent's
	// definition, filled with the run's variables, in place of the run's
	// parameters.
	AgentVersion *int
	Model        *string         // nil: the run's
	Metadata     json.RawMessage // nothing: the run's
	// Input is the fork's input; PartField names its parts in errors
	// (runspec.Request.PartField).
	Input     []agentd.InputMessage
	PartField func(i, j int) string
}

// Fork composes a fork of run orig, for who: the run's parameters (or
// f.AgentVersion's definition), its model unless f names another, and
// its metadata unless f gives its own. The door names the source on it.
func (c *Composer) Fork(ctx context.Context, who Caller, orig agentd.Run, f Fork) (agentd.RunCreate, error) {
	sr := runspec.RequestOf(orig.Model, orig.Params)
	if f.AgentVersion != nil {
		if orig.Params.Agent == nil {
			return agentd.RunCreate{}, fieldError("agent_version", "the run was not started from an agent")
		}
		if *f.AgentVersion < 1 {
			return agentd.RunCreate{}, fieldError("agent_version", "must be 1 or more")
		}
		var err error
		if sr, err = c.withAgent(ctx, who.Tenant, runspec.Request{Variables: orig.Params.Variables},
			Agent{Name: orig.Params.Agent.Name, Version: *f.AgentVersion}); err != nil {
			return agentd.RunCreate{}, err
		}
	}
	if f.Model != nil {
		sr.Model = f.Model
	}
	if !runspec.IsNull(f.Metadata) {
		sr.Metadata = f.Metadata
	}
	sr.Input, sr.PartField = f.Input, f.PartField
	spec, err := c.build(ctx, who.Tenant, sr)
	if err != nil {
		return agentd.RunCreate{}, err
	}
	if f.AgentVersion == nil {
		spec.Params.Agent, spec.Params.Variables = orig.Params.Agent, orig.Params.Variables
	}
	return create(who, spec), nil
}

// Define checks the definition d of tenant's agent name as it is to be
// stored: it must build a run with the server's tools and ceilings of
// today, and its input schema must be an object's. It returns the check
// the store runs as it saves the version, under the lock of the tenant's
// agents' saves: the agent may not hand work back to itself, however far
// down, through the agents as they then are, so that two saves at once
// cannot store a cycle that neither makes alone.
func (c *Composer) Define(ctx context.Context, tenant, name string, d AgentDefinition) (agentd.AgentCheck, error) {
	sr, err := d.Request()
	if err != nil {
		return nil, err
	}
	sr.Input, sr.InputText = []agentd.InputMessage{{Role: agentd.RoleUser, Content: "definition"}}, true
	spec, err := c.build(ctx, tenant, sr)
	if err != nil {
		return nil, err
	}
	if !runspec.IsNull(d.InputSchema) {
		if err := tools.CheckParameters(name, d.InputSchema); err != nil {
			return nil, fieldError("input_schema", "must be a JSON Schema of an object: %v", err)
		}
	}
	subs := spec.Params.SubAgents
	return func(ctx context.Context, get func(ctx context.Context, name string) (agentd.Agent, error)) error {
		chain, err := agentCycle(ctx, get, name, subs)
		if err != nil {
			return err
		}
		if chain != "" {
			return fieldError("tools", "would hand work back to the agent itself (%s): an agent may not be its own sub-agent, "+
				"however far down", chain)
		}
		return nil
	}, nil
}

// withAgent returns a new run's request over the definition of agent a
// (sr itself when a names none).
func (c *Composer) withAgent(ctx context.Context, tenant string, sr runspec.Request, a Agent) (runspec.Request, error) {
	if a.Name == "" {
		return sr, nil
	}
	ag, err := c.cfg.Agents.AgentGet(ctx, tenant, a.Name, a.Version)
	var noVersion *agentd.AgentVersionError
	switch {
	case errors.As(err, &noVersion):
		return sr, fieldError("agent_version", "%s", noVersion.Error())
	case errors.Is(err, agentd.ErrAgentNotFound):
		return sr, fieldError("agent", "the tenant has no agent named %q (see GET /agents)", a.Name)
	case err != nil:
		return sr, err
	}
	def, err := storedDefinition(ag)
	if err != nil {
		return sr, err
	}
	base, err := def.Request()
	if err != nil {
		return sr, fmt.Errorf("agent %s version %d: its stored definition: %w", ag.Name, ag.Version, err)
	}
	out := runspec.Over(base, sr)
	out.Agent = &agentd.AgentRef{Name: ag.Name, Version: ag.Version}
	return out, nil
}

// storedDefinition reads the definition agent a was stored with.
func storedDefinition(a agentd.Agent) (AgentDefinition, error) {
	var def AgentDefinition
	if err := decodeField(a.Definition, &def, "definition"); err != nil {
		return def, fmt.Errorf("agent %s version %d: its stored definition: %w", a.Name, a.Version, err)
	}
	return def, nil
}

// registry is the registry of tenant's runs, made again when it lacks a
// tool of need; nil without a Tools port (the builder's registry serves).
func (c *Composer) registry(ctx context.Context, tenant string, need []string) (*tools.Registry, error) {
	if c.cfg.Tools == nil {
		return nil, nil
	}
	return c.cfg.Tools.For(ctx, tenant, need...)
}

// build builds a run's spec, its tools checked against its tenant's, its
// sub-agents pinned at their latest versions.
func (c *Composer) build(ctx context.Context, tenant string, sr runspec.Request) (agentd.RunSpec, error) {
	var need []string
	if sr.Tools != nil {
		need = *sr.Tools
	}
	reg, err := c.registry(ctx, tenant, need)
	if err != nil {
		return agentd.RunSpec{}, err
	}
	if reg != nil {
		sr.Registry = reg
	} else if reg = c.cfg.Registry; reg == nil {
		reg, _ = tools.NewRegistry()
	}
	spec, err := c.cfg.Builder.Build(sr)
	if err != nil {
		return spec, err
	}
	spec.Params.SubAgents, err = c.subAgents(ctx, tenant, sr.SubAgents, spec, reg)
	return spec, err
}

// subAgents resolves the agents a run names among its tools to the
// tenant's agents at their latest versions: each named once, and no other
// tool of the run of that name (the model tells tools apart by name only).
func (c *Composer) subAgents(ctx context.Context, tenant string, names []string, spec agentd.RunSpec, reg *tools.Registry) ([]agentd.SubAgent, error) {
	if len(names) == 0 {
		return nil, nil
	}
	out := make([]agentd.SubAgent, 0, len(names))
	for i, n := range names {
		_, client := spec.Params.ClientTool(n)
		_, server := reg.Get(n)
		switch {
		case slices.Contains(names[:i], n):
			return nil, fieldError("tools", "names the agent %q twice", n)
		case client || (server && (spec.Params.Tools == nil || slices.Contains(spec.Params.Tools, n))):
			return nil, fieldError("tools", "names the agent %q and a tool of the same name; the model tells "+
				"tools apart by name only, so leave one out", n)
		}
		a, err := c.cfg.Agents.AgentGet(ctx, tenant, n, 0)
		if errors.Is(err, agentd.ErrAgentNotFound) {
			return nil, fieldError("tools", "the tenant has no agent named %q (see GET /agents)", n)
		}
		if err != nil {
			return nil, err
		}
		sub := agentd.SubAgent{Name: a.Name, Version: a.Version, Description: a.Description}
		if def, err := storedDefinition(a); err == nil && !runspec.IsNull(def.InputSchema) {
			sub.Parameters = def.InputSchema
		}
		out = append(out, sub)
	}
	return out, nil
}

// maxCycleSearch bounds the agents a cycle search reads.
const maxCycleSearch = 1000

// agentCycle returns the chain of agents by which agent name, handing work
// to subs, would come back to itself, following each agent's latest
// version as get reads it ("": none).
func agentCycle(ctx context.Context, get func(ctx context.Context, name string) (agentd.Agent, error), name string,
	subs []agentd.SubAgent) (string, error) {
	type path []string
	var queue []path
	for _, a := range subs {
		queue = append(queue, path{name, a.Name})
	}
	seen := map[string]bool{}
	for len(queue) > 0 && len(seen) < maxCycleSearch {
		p := queue[0]
		queue = queue[1:]
		last := p[len(p)-1]
		if last == name {
			return strings.Join(p, " → "), nil
		}
		if seen[last] {
			continue
		}
		seen[last] = true
		a, err := get(ctx, last)
		if errors.Is(err, agentd.ErrAgentNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		def, err := storedDefinition(a)
		if err != nil {
			continue
		}
		req, err := def.Request()
		if err != nil {
			continue
		}
		for _, n := range req.SubAgents {
			queue = append(queue, append(slices.Clone(p), n))
		}
	}
	return "", nil
}
