package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentd/agentd"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// namePattern is what OpenAI-compatible servers accept as a function name.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Registry is the set of tools a server offers, each with its compiled
// argument schema: the fixed ones given to NewRegistry, and those of its
// sources (an MCP server's tools), which come and go. It is safe for
// concurrent use; a lookup reads one snapshot, without a lock.
type Registry struct {
	fixed map[string]entry
	snap  atomic.Pointer[snapshot]

	mu      sync.Mutex // held while a source changes the snapshot
	sources map[string]map[string]entry
	hook    Hook // nil: every call is allowed as it is
}

// SetHook makes h decide about every call before it is planned, and see
// every result before it is stored. Set it before the registry is used.
func (r *Registry) SetHook(h Hook) { r.hook = h }

// Hooked reports whether a hook is set: without one, Before allows every
// call and After changes no result, and callers need not ask.
func (r *Registry) Hooked() bool { return r.hook != nil }

// Before is the hook's verdict on a call; allow without a hook. A hook's
// error denies the call, saying so.
func (r *Registry) Before(ctx context.Context, c HookCall) Verdict {
	if r.hook == nil {
		return Verdict{Action: PolicyAllow}
	}
	v, err := r.hook.Before(ctx, c)
	if err != nil {
		return Verdict{Action: PolicyDeny, Policy: "hook", Reason: "the operator's policy hook failed: " + err.Error()}
	}
	if v.Action == "" {
		v.Action = PolicyAllow
	}
	return v
}

// After is a call's result as the hook changes it; unchanged without one.
func (r *Registry) After(ctx context.Context, c HookCall, result json.RawMessage) (json.RawMessage, error) {
	if r.hook == nil {
		return result, nil
	}
	return r.hook.After(ctx, c, result)
}

// snapshot is the registry's tools at one moment.
type snapshot struct {
	entries map[string]entry
	names   []string // sorted
}

type entry struct {
	tool   Tool
	spec   Spec
	schema *jsonschema.Schema
}

// NewRegistry checks each tool's Spec and compiles its parameters schema. It
// fails on a duplicate or invalid name (names match ^[a-zA-Z0-9_-]{1,64}$), an
// unknown effect, a negative limit, or a schema that is not a JSON object or
// does not compile. The error lists every problem found.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{fixed: make(map[string]entry, len(tools)), sources: map[string]map[string]entry{}}
	var errs []error
	for i, t := range tools {
		if t == nil {
			errs = append(errs, fmt.Errorf("tool %d: nil", i))
			continue
		}
		spec := t.Spec()
		if err := checkSpec(spec); err != nil {
			errs = append(errs, fmt.Errorf("tool %d (%q): %w", i, spec.Name, err))
			continue
		}
		if _, dup := r.fixed[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("tool %d: duplicate name %q", i, spec.Name))
			continue
		}
		sch, err := compileSchema(spec.Name, spec.Parameters)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %d (%q): %w", i, spec.Name, err))
			continue
		}
		r.fixed[spec.Name] = entry{tool: t, spec: spec, schema: sch}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("tool registry: %w", errors.Join(errs...))
	}
	r.publishLocked()
	return r, nil
}

// SetSource replaces the tools of the source named source (all of them:
// nil removes them). A tool whose spec or schema is invalid, or whose name
// another tool already has, is left out; the error says which and why. The
// others are offered from then on.
func (r *Registry) SetSource(source string, tools []Tool) error {
	var errs []error
	entries := make(map[string]entry, len(tools))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range tools {
		spec := t.Spec()
		if err := checkSpec(spec); err != nil {
			errs = append(errs, fmt.Errorf("tool %q: %w", spec.Name, err))
			continue
		}
		if _, dup := r.fixed[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("tool %q: the name of a built-in or tools-file tool", spec.Name))
			continue
		}
		if r.takenLocked(source, spec.Name) {
			errs = append(errs, fmt.Errorf("tool %q: the name of another source's tool", spec.Name))
			continue
		}
		if _, dup := entries[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("tool %q: listed twice", spec.Name))
			continue
		}
		sch, err := compileSchema(spec.Name, spec.Parameters)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %q: %w", spec.Name, err))
			continue
		}
		entries[spec.Name] = entry{tool: t, spec: spec, schema: sch}
	}
	if len(entries) == 0 {
		delete(r.sources, source)
	} else {
		r.sources[source] = entries
	}
	r.publishLocked()
	return errors.Join(errs...)
}

// With returns a registry of r's tools as they are now (its fixed tools, its
// sources' tools, its hook) and, as the source named source, extra: a
// tenant's own tools beside the operator's. It does not follow r's sources
// afterwards; the caller makes it again to see their changes. A tool of
// extra that SetSource would leave out is left out, as the error says.
func (r *Registry) With(source string, extra []Tool) (*Registry, error) {
	r.mu.Lock()
	out := &Registry{fixed: r.fixed, sources: make(map[string]map[string]entry, len(r.sources)+1), hook: r.hook}
	for s, entries := range r.sources {
		out.sources[s] = entries
	}
	r.mu.Unlock()
	err := out.SetSource(source, extra)
	return out, err
}

// takenLocked reports whether a source other than source has a tool name.
func (r *Registry) takenLocked(source, name string) bool {
	for s, entries := range r.sources {
		if _, ok := entries[name]; ok && s != source {
			return true
		}
	}
	return false
}

// publishLocked makes the fixed tools and the sources' the snapshot.
func (r *Registry) publishLocked() {
	snap := &snapshot{entries: maps.Clone(r.fixed)}
	for _, entries := range r.sources {
		maps.Copy(snap.entries, entries)
	}
	snap.names = slices.Sorted(maps.Keys(snap.entries))
	r.snap.Store(snap)
}

// checkSpec checks the fields of spec other than its schema.
func checkSpec(spec Spec) error {
	switch {
	case !namePattern.MatchString(spec.Name):
		return fmt.Errorf("invalid name %q: want ^[a-zA-Z0-9_-]{1,64}$", spec.Name)
	case !spec.Effect.Valid():
		return fmt.Errorf("invalid effect %q: want %s, %s or %s", spec.Effect, agentd.EffectReadOnly, agentd.EffectIdempotent, agentd.EffectSideEffect)
	case spec.Timeout < 0:
		return fmt.Errorf("negative timeout %v", spec.Timeout)
	case spec.MaxAttempts < 0:
		return fmt.Errorf("negative max attempts %d", spec.MaxAttempts)
	case spec.Backoff < 0:
		return fmt.Errorf("negative backoff %v", spec.Backoff)
	case spec.MaxResultBytes < 0:
		return fmt.Errorf("negative max result bytes %d", spec.MaxResultBytes)
	}
	return nil
}

// CheckParameters checks a parameters schema as NewRegistry does: a JSON
// object schema that compiles and loads nothing from outside itself.
func CheckParameters(name string, params json.RawMessage) error {
	_, err := compileSchema(name, params)
	return err
}

// ValidateArgs checks args against a parameters schema that is not in a
// registry (a run's client tool's), as Validate does.
func ValidateArgs(name string, params, args json.RawMessage) error {
	sch, err := compileSchema(name, params)
	if err != nil {
		return &Error{Kind: KindFinal, Message: fmt.Sprintf("tool %q has no usable parameters schema: %v", name, err), Err: err}
	}
	return validate(name, sch, args)
}

// ValidName reports whether name is a tool name OpenAI-compatible servers
// accept: ^[a-zA-Z0-9_-]{1,64}$.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// compileSchema compiles a tool's parameters schema. The schema must be a
// JSON object; it may not load anything from outside itself.
func compileSchema(name string, params json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(params)) == 0 {
		return nil, errors.New("parameters schema is empty")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("parameters schema is not valid JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("parameters schema is not a JSON object")
	}
	if typ, ok := obj["type"]; ok && typ != "object" {
		return nil, fmt.Errorf("parameters schema has type %v, want \"object\"", typ)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network references
	url := "mem:///tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("parameters schema: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("parameters schema does not compile: %w", err)
	}
	return sch, nil
}

// Get returns the tool registered under name.
func (r *Registry) Get(name string) (Tool, bool) {
	e, ok := r.snap.Load().entries[name]
	return e.tool, ok
}

// List returns the specs of all tools, sorted by name.
func (r *Registry) List() []Spec {
	snap := r.snap.Load()
	specs := make([]Spec, 0, len(snap.names))
	for _, n := range snap.names {
		specs = append(specs, snap.entries[n].spec)
	}
	return specs
}

// Labelled returns the names of the tools of label, sorted: those of the
// source (an MCP server) of that name, or, for label "" , the fixed tools
// (built-ins and the tools file's). ok is false for a label that names no
// source now.
func (r *Registry) Labelled(label string) (names []string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if label == "" {
		for n := range r.fixed {
			names = append(names, n)
		}
		slices.Sort(names)
		return names, true
	}
	entries, ok := r.sources[label]
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, ok
}

// Names returns the names of all tools, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.snap.Load().names) }

// Validate checks args against the named tool's parameters schema. Empty args
// are read as {}. Every failure (unknown tool, invalid JSON, schema violation)
// is an *Error of KindFinal whose Message is written for the model, for
// example: invalid arguments for tool "calculator": argument "expression":
// missing property.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	snap := r.snap.Load()
	e, ok := snap.entries[name]
	if !ok {
		return &Error{Kind: KindFinal, Message: fmt.Sprintf("unknown tool %q; available tools: %s", name, strings.Join(snap.names, ", "))}
	}
	return validate(name, e.schema, args)
}

// validate checks args against the tool name's compiled schema.
func validate(name string, schema *jsonschema.Schema, args json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &Error{Kind: KindFinal, Message: fmt.Sprintf("invalid arguments for tool %q: not valid JSON: %v", name, err), Err: err}
	}
	err = schema.Validate(doc)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return &Error{Kind: KindFinal, Message: fmt.Sprintf("invalid arguments for tool %q: %v", name, err), Err: err}
	}
	return &Error{Kind: KindFinal, Message: fmt.Sprintf("invalid arguments for tool %q: %s", name, describe(verr)), Err: err}
}

// describe turns a validation error into short sentences, one per failed
// leaf, that a model can act on.
func describe(verr *jsonschema.ValidationError) string {
	var msgs []string
	var walk func(v *jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) > 0 {
			for _, c := range v.Causes {
				walk(c)
			}
			return
		}
		msgs = append(msgs, leafMessage(v)...)
	}
	walk(verr)
	if len(msgs) == 0 {
		msgs = []string{verr.Error()}
	}
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	return strings.Join(msgs, "; ")
}

func leafMessage(v *jsonschema.ValidationError) []string {
	loc := v.InstanceLocation
	switch k := v.ErrorKind.(type) {
	case *kind.Required:
		out := make([]string, 0, len(k.Missing))
		for _, m := range k.Missing {
			out = append(out, fmt.Sprintf("%s: missing property", argument(append(slices.Clone(loc), m))))
		}
		return out
	case *kind.AdditionalProperties:
		out := make([]string, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, fmt.Sprintf("%s: unknown property, not allowed", argument(append(slices.Clone(loc), p))))
		}
		return out
	case *kind.Type:
		return []string{fmt.Sprintf("%s: wrong type: got %s, want %s", argument(loc), k.Got, strings.Join(k.Want, " or "))}
	}
	// The library's own wording, without its location prefix.
	s := v.Error()
	if _, rest, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, "at ") {
		s = rest
	}
	return []string{fmt.Sprintf("%s: %s", argument(loc), s)}
}

// argument names a location in the arguments: "arguments" for the root,
// else the path joined with dots, quoted.
func argument(loc []string) string {
	if len(loc) == 0 {
		return "arguments"
	}
	return fmt.Sprintf("argument %q", strings.Join(loc, "."))
}
