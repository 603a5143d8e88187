package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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

// Instructions reads a tenant's managed instructions (*persist.Store
// implements it).
type Instructions interface {
	// InstructionsGet returns a tenant's managed instructions (Text ""
	// for none).
	InstructionsGet(ctx context.Context, tenantID string) (agentd.ManagedInstructions, error)
}

// Memory reads a tenant's memory for the pinned namespaces of a new run
// (*memory.Service implements it).
type Memory interface {
	// List returns a page of the live items under p.Prefix that p's
	// view sees.
	List(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error)
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
	// Instructions, when set, gives each tenant's managed instructions,
	// which every run of the tenant is given first (nil: none).
	Instructions Instructions
	// Memory, when set, gives a new run the items of its pinned
	// namespaces (nil: none, and no run is given pinned memory).
	Memory Memory
	// Overlays, when set, tells which conversations are forks', whose
	// every run uses the fork's memory overlay (nil: none is).
	Overlays Overlays
}

// Overlays finds the memory overlay of a fork's conversation
// (*persist.Store implements it).
type Overlays interface {
	// ConversationOverlay returns the overlay of tenant's conversation
	// and the time it reads real memory as of: those of the fork that
	// started it; "" for a conversation that no fork started.
	ConversationOverlay(ctx context.Context, tenant, conversationID string) (string, *time.Time, error)
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
	// The child runs for the parent's user, with the memory its own
	// definition names, filled for that user; none if the parent's is off.
	sr := runspec.Request{Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "task"}}, InputText: true,
		Variables: parent.Params.Variables, User: userOf(parent.Params), Memory: memoryOff(parent.Params)}
	spec, err := c.Build(ctx, parent.TenantID, sr, Agent{Name: sub.Name, Version: sub.Version})
	var fe *runspec.FieldError
	if errors.As(err, &fe) {
		return agentd.RunCreate{}, &tools.Error{Kind: agentd.ToolErrAgent, Message: fmt.Sprintf(
			"the agent %s version %d cannot start: %s", sub.Name, sub.Version, fe.Error())}
	}
	if err != nil {
		return agentd.RunCreate{}, err
	}
	if pm := parent.Params.Memory; pm != nil && pm.Overlay != "" && spec.Params.Memory != nil && !spec.Params.Memory.Off {
		// A fork's sub-agents share its overlay: nothing of the fork's
		// tree writes real memory.
		m := *spec.Params.Memory
		m.Overlay, m.Base = pm.Overlay, pm.Base
		spec.Params.Memory = &m
		if spec.Params.Pinned, err = c.pin(ctx, parent.TenantID, &m); err != nil {
			return agentd.RunCreate{}, err
		}
	}
	spec.Input = []agentd.InputMessage{{Role: agentd.RoleUser, Content: task}}
	spec.Params.Parent = &agentd.ParentRef{RunID: parent.ID, ToolCallID: call.ID, Depth: parent.Params.Depth() + 1,
		Root: parent.Params.RootRunID(parent.ID), Detached: sub.Detached}
	// No client of its own may leave it; the parent's trace goes on in it.
	spec.Params.OnDisconnect, spec.Params.TraceParent = agentd.OnDisconnectContinue, parent.Params.TraceParent
	spec.Params.Unstored = false
	// An evaluation's run's children are its runs too: no side effects.
	spec.Params.Eval = parent.Params.Eval
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
	// Base is when the forked step committed: the fork reads real memory
	// as it was then (zero: now).
	Base time.Time
	// Variables fill the agent's instructions in place of the run's (its
	// version's, or AgentVersion's): a version that adds a placeholder can
	// be forked onto. Only for a run started from an agent.
	Variables map[string]string
	// Override is the fork's own instructions and tools (as POST /runs
	// takes them), over the run's: a recorded run replayed against a
	// changed prompt without saving a version.
	Override Fields
}

// Fork composes a fork of run orig, for who: the run's parameters (or
// f.AgentVersion's definition), its model unless f names another, and
// its metadata unless f gives its own. The door names the source on it.
func (c *Composer) Fork(ctx context.Context, who Caller, orig agentd.Run, f Fork) (agentd.RunCreate, error) {
	sr, refilled, err := c.forkRequest(ctx, who, orig, f)
	if err != nil {
		return agentd.RunCreate{}, err
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
	if !refilled {
		spec.Params.Agent, spec.Params.Variables = orig.Params.Agent, orig.Params.Variables
		spec.Params.User, spec.Params.Memory = orig.Params.User, orig.Params.Memory
	}
	// The fork's memory is an overlay of its own over real memory as it
	// was at the forked point: what it writes nothing else reads.
	spec.Params.Memory = forkMemory(spec.Params.Memory, orig.Params.Memory, f.Base)
	if spec.Params.Pinned, err = c.pin(ctx, who.Tenant, spec.Params.Memory); err != nil {
		return agentd.RunCreate{}, err
	}
	return create(who, spec), nil
}

// forkRequest is the request of a fork of run orig: the run's
// parameters, or its agent's definition filled again (refilled) for
// another version or other variables, with f's instructions and tools
// over them.
func (c *Composer) forkRequest(ctx context.Context, who Caller, orig agentd.Run, f Fork) (sr runspec.Request, refilled bool, err error) {
	sr = runspec.RequestOf(orig.Model, orig.Params)
	if f.AgentVersion != nil || f.Variables != nil {
		field := "agent_version"
		if f.AgentVersion == nil {
			field = "variables"
		}
		if orig.Params.Agent == nil {
			return sr, false, fieldError(field, "the run was not started from an agent")
		}
		version := orig.Params.Agent.Version
		if f.AgentVersion != nil {
			if version = *f.AgentVersion; version < 1 {
				return sr, false, fieldError("agent_version", "must be 1 or more")
			}
		}
		vars := maps.Clone(orig.Params.Variables)
		if f.Variables != nil {
			vars = maps.Clone(f.Variables)
		}
		base := runspec.Request{Variables: vars, User: userOf(orig.Params), Memory: memoryOff(orig.Params)}
		if sr, err = c.withAgent(ctx, who.Tenant, base, Agent{Name: orig.Params.Agent.Name, Version: version}); err != nil {
			return sr, false, err
		}
		refilled = true
	}
	over, err := f.Override.Request()
	if err != nil {
		return sr, refilled, err
	}
	if over.Instructions != nil {
		sr.Instructions = over.Instructions
	}
	if over.Tools != nil {
		sr.Tools, sr.SubAgents, sr.Detached = over.Tools, over.SubAgents, over.Detached
		if over.ClientTools != nil {
			sr.ClientTools = over.ClientTools
		}
	}
	return sr, refilled, nil
}

// forkMemory is the memory of a fork of a run whose memory was orig: m
// (the run's, or its agent version's; nil: none) under an overlay of the
// fork's own, over real memory as of base, or as of the run's own base when it
// is itself a fork's (a fork of a fork reads what its source read, and
// not its source's overlay).
func forkMemory(m, orig *agentd.RunMemory, base time.Time) *agentd.RunMemory {
	// A fork without memory keeps its overlay too: a later run of its
	// conversation that asks for memory uses it (Composer.overlaid).
	out := agentd.RunMemory{}
	if m != nil {
		out = *m
	}
	out.Overlay = agentd.NewID()
	if orig != nil && orig.Base != nil && (base.IsZero() || orig.Base.Before(base)) {
		base = *orig.Base
	}
	if base.IsZero() {
		base = time.Now()
	}
	b := base.UTC()
	out.Base = &b
	return &out
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
	// Its runs' users and variables fill its memory's namespaces: here
	// only their shapes are checked.
	if err := runspec.CheckMemory(sr.Memory); err != nil {
		return nil, err
	}
	sr.Memory = nil
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
	if spec.Params.SubAgents, err = c.subAgents(ctx, tenant, sr.SubAgents, sr.Detached, spec, reg); err != nil {
		return spec, err
	}
	if spec.Params.Managed, err = c.managed(ctx, tenant); err != nil {
		return spec, err
	}
	if spec.Params.Memory, err = c.overlaid(ctx, tenant, sr.ConversationID, spec.Params.Memory); err != nil {
		return spec, err
	}
	spec.Params.Pinned, err = c.pin(ctx, tenant, spec.Params.Memory)
	return spec, err
}

// overlaid is memory m of a new run of conversation conv ("": a new one),
// under the overlay of the fork that started conv, if one did: every run
// of a fork's conversation reads and writes the fork's memory, never real
// memory, whatever door it came through. A run without memory reaches
// none, and is not looked up (the conversation's first run names the
// overlay, whatever its later runs hold).
func (c *Composer) overlaid(ctx context.Context, tenant, conv string, m *agentd.RunMemory) (*agentd.RunMemory, error) {
	if conv == "" || c.cfg.Overlays == nil || m == nil || m.Off {
		return m, nil
	}
	overlay, base, err := c.cfg.Overlays.ConversationOverlay(ctx, tenant, conv)
	if err != nil || overlay == "" {
		return m, err
	}
	out := *m
	out.Overlay, out.Base = overlay, base
	return &out, nil
}

// managed is what a new run of tenant is given of the tenant's managed
// instructions: their text and version as they are now, kept in the
// run's parameters, so that its every step sends the same system prompt
// without reading them again, and a change is for later runs only.
func (c *Composer) managed(ctx context.Context, tenant string) (*agentd.RunManaged, error) {
	if c.cfg.Instructions == nil {
		return nil, nil
	}
	m, err := c.cfg.Instructions.InstructionsGet(ctx, tenant)
	if err != nil || m.Text == "" {
		return nil, err
	}
	return &agentd.RunManaged{Version: m.Version, Text: m.Text}, nil
}

// pin is what a new run with memory m is given of its pinned namespaces:
// their live items as they are now (under a fork's overlay, as the fork
// sees them), kept in the run's parameters, so that every step sends the
// same system prompt and a crash does not change it; nil for none.
func (c *Composer) pin(ctx context.Context, tenant string, m *agentd.RunMemory) (*agentd.RunPinned, error) {
	if c.cfg.Memory == nil || m == nil || m.Off || len(m.Pinned) == 0 {
		return nil, nil
	}
	now := time.Now()
	var items []agentd.MemoryItem
	seen := map[string]bool{} // an item under two pinned namespaces (one holds the other) is given once
	for _, ns := range m.Pinned {
		page, err := c.cfg.Memory.List(ctx, tenant, agentd.MemoryListParams{MemoryView: m.View(),
			Prefix: ns, Limit: agentd.MaxPinnedMemoryItems})
		if err != nil {
			return nil, err
		}
		for _, it := range page {
			if id := it.Namespace.String() + "\x00" + it.Key; !seen[id] {
				seen[id] = true
				items = append(items, it)
			}
		}
	}
	return agentd.PinItems(items, now), nil
}

// subAgents resolves the agents a run names among its tools to the
// tenant's agents at their latest versions: each named once, and no other
// tool of the run of that name (the model tells tools apart by name only).
func (c *Composer) subAgents(ctx context.Context, tenant string, names, detached []string, spec agentd.RunSpec, reg *tools.Registry) ([]agentd.SubAgent, error) {
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
		sub := agentd.SubAgent{Name: a.Name, Version: a.Version, Description: a.Description, Detached: slices.Contains(detached, n)}
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

// Next composes the next run of the conversation of run last, for who,
// with input: last's parameters and agent, as a fork of it keeps them. A
// conversation's door starts it when a message finds no run in flight.
func (c *Composer) Next(ctx context.Context, who Caller, last agentd.Run, input []agentd.InputMessage) (agentd.RunCreate, error) {
	sr := runspec.RequestOf(last.Model, last.Params)
	if len(last.Params.Fallbacks) > 0 {
		sr.Models = &last.Params.Fallbacks
	}
	sr.Input, sr.ConversationID = input, last.ConversationID
	spec, err := c.build(ctx, who.Tenant, sr)
	if err != nil {
		return agentd.RunCreate{}, err
	}
	spec.Params.Agent, spec.Params.Variables = last.Params.Agent, last.Params.Variables
	spec.Params.User, spec.Params.Memory = last.Params.User, last.Params.Memory
	if spec.Params.Pinned, err = c.pin(ctx, who.Tenant, spec.Params.Memory); err != nil {
		return agentd.RunCreate{}, err
	}
	return create(who, spec), nil
}

// userOf is the user of a run with params p, as a request gives it.
func userOf(p agentd.RunParams) *string {
	if p.User == "" {
		return nil
	}
	return &p.User
}

// memoryOff is "memory": false for the runs that a run with params p
// makes (its forks, its sub-agents' runs) when its own memory is off;
// nil otherwise.
func memoryOff(p agentd.RunParams) *runspec.Memory {
	if p.Memory != nil && p.Memory.Off {
		return &runspec.Memory{Off: true}
	}
	return nil
}

// Steering checks input sent to run r while it works (POST
// /runs/{id}/input): user messages only, each storable, their images and
// files taken by every model of the run's chain. text says that it came
// as one text.
func (c *Composer) Steering(r agentd.Run, input []agentd.InputMessage, text bool) error {
	return c.cfg.Builder.Steering(input, text, r.Models())
}

// Report composes the run that starts the conversation of run last to
// report input (a detached sub-agent's end, which found last ended): the
// conversation's next run, for last's creator.
func (c *Composer) Report(ctx context.Context, last agentd.Run, input []agentd.InputMessage) (agentd.RunCreate, error) {
	return c.Next(ctx, Caller{Tenant: last.TenantID, Actor: last.CreatedBy}, last, input)
}
