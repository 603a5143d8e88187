package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// Bounds of the memory tools' calls.
const (
	// DefaultToolResults is how many items memory_search returns when its
	// call names no limit; MaxToolResults the most it may ask for.
	DefaultToolResults = 5
	MaxToolResults     = 20
)

// Tools are the memory tools a run with memory is offered (docs/memory.md,
// "Memory in a run"): memory_search over the namespaces it reads,
// memory_write and memory_delete over those it writes. Each acts within
// its call's run: its tenant, its namespaces, its fork's overlay. They go
// through the tool ledger as any tool: a write or a delete is idempotent,
// one version per call whatever its attempts (the version is keyed by the
// call), and policies and approvals apply to them by name.
func (s *Service) Tools() []tools.Tool {
	return []tools.Tool{searchTool{s}, writeTool{s}, deleteTool{s}}
}

// runOf is the memory and tenant of call's run; a call without a run, or
// of a run without memory, reaches nothing.
func runOf(call tools.Call, name string) (*agentd.RunMemory, string, error) {
	if call.Run == nil || !call.Run.Params.Memory.Offers(name) {
		return nil, "", &tools.Error{Kind: tools.KindFinal, Message: "this run has no memory that " + name + " reaches"}
	}
	return call.Run.Params.Memory, call.Run.TenantID, nil
}

// decodeArgs reads a call's arguments into v; the registry checked them
// against the tool's schema.
func decodeArgs(call tools.Call, v any) error {
	if err := json.Unmarshal(call.Arguments, v); err != nil {
		return &tools.Error{Kind: tools.KindFinal, Message: "arguments: " + err.Error()}
	}
	return nil
}

// namespaceArg reads a namespace argument (its path form, "users/u-42")
// that the run must reach with ok; "" takes the only namespace of list,
// when it has one.
func namespaceArg(path string, list [][]string, ok func([]string) bool, verb string) (agentd.Namespace, error) {
	if path == "" {
		if len(list) == 1 {
			return agentd.Namespace(slices.Clone(list[0])), nil
		}
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "namespace is required: this run may " + verb +
			" more than one"}
	}
	ns := agentd.ParseNamespace(path)
	if err := ns.Validate(); err != nil {
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "namespace " + err.Error()}
	}
	if !ok(ns) {
		return nil, &tools.Error{Kind: tools.KindFinal, Message: fmt.Sprintf("namespace %q is not one this run may %s",
			path, verb)}
	}
	return ns, nil
}

// failed is what the model is told of a store's error: a limit or a
// conflict is final (the model may change its call), anything else
// transient (the attempt is made again).
func failed(err error) error {
	var lim *agentd.MemoryLimitError
	switch {
	case errors.As(err, &lim):
		return &tools.Error{Kind: tools.KindFinal, Message: lim.Error(), Err: err}
	case errors.Is(err, agentd.ErrMemoryNotFound):
		return &tools.Error{Kind: tools.KindFinal, Message: "no such item", Err: err}
	case errors.Is(err, agentd.ErrInvalidValue), errors.Is(err, agentd.ErrMemoryOutOfReach),
		errors.Is(err, agentd.ErrMemoryConflict):
		return &tools.Error{Kind: tools.KindFinal, Message: err.Error(), Err: err}
	}
	return &tools.Error{Kind: tools.KindTransient, Message: "memory is unavailable; try again", Err: err}
}

// toolItem is an item as a memory tool's result shows it.
type toolItem struct {
	Namespace string    `json:"namespace"`
	Key       string    `json:"key"`
	Value     string    `json:"value,omitempty"`
	Version   int       `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

func itemOf(it agentd.MemoryItem) toolItem {
	return toolItem{Namespace: it.Namespace.String(), Key: it.Key, Value: it.Value, Version: it.Version,
		UpdatedAt: it.UpdatedAt.UTC()}
}

type searchTool struct{ s *Service }

func (searchTool) Spec() tools.Spec {
	return tools.Spec{Name: agentd.MemorySearchTool, Effect: agentd.EffectReadOnly,
		Description: "Search your memory: the items kept in earlier conversations that match a query, best first.",
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["query"],"properties":{
			"query":{"type":"string","description":"What to look for: words of the items' keys and values."},
			"namespace":{"type":"string","description":"Search only this namespace (and those under it); omit for every one you may search."},
			"limit":{"type":"integer","minimum":1,"maximum":20,"description":"How many items at most (default 5)."}}}`)}
}

func (t searchTool) Invoke(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	m, tenant, err := runOf(call, agentd.MemorySearchTool)
	if err != nil {
		return nil, err
	}
	var args struct {
		Query     string `json:"query"`
		Namespace string `json:"namespace"`
		Limit     int    `json:"limit"`
	}
	if err := decodeArgs(call, &args); err != nil {
		return nil, err
	}
	p := agentd.MemorySearchParams{MemoryView: m.View(), Query: args.Query}
	if args.Namespace != "" {
		if p.Prefix, err = namespaceArg(args.Namespace, nil, m.Readable, "search"); err != nil {
			return nil, err
		}
	}
	limit := args.Limit
	if limit <= 0 {
		limit = DefaultToolResults
	}
	hits, err := t.s.Search(ctx, tenant, p, min(limit, MaxToolResults))
	if err != nil {
		return nil, failed(err)
	}
	out := struct {
		Items []toolItem `json:"items"`
	}{Items: make([]toolItem, len(hits))}
	for i, h := range hits {
		out.Items[i] = itemOf(h.Item)
	}
	return json.Marshal(out)
}

type writeTool struct{ s *Service }

func (writeTool) Spec() tools.Spec {
	return tools.Spec{Name: agentd.MemoryWriteTool, Effect: agentd.EffectIdempotent,
		Description: "Remember something for later conversations: write an item (a key and its value) to your memory; " +
			"writing a key again replaces its value (its earlier versions are kept).",
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["key","value"],"properties":{
			"namespace":{"type":"string","description":"Where to write (a namespace you may write, or one under it); omit when you may write only one."},
			"key":{"type":"string","minLength":1,"maxLength":256,"description":"A short name for the item, such as favorite_color."},
			"value":{"type":"string","description":"What to remember."}}}`)}
}

func (t writeTool) Invoke(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	m, tenant, err := runOf(call, agentd.MemoryWriteTool)
	if err != nil {
		return nil, err
	}
	var args struct {
		Namespace string `json:"namespace"`
		Key       string `json:"key"`
		Value     string `json:"value"`
	}
	if err := decodeArgs(call, &args); err != nil {
		return nil, err
	}
	ns, err := namespaceArg(args.Namespace, m.Write, m.Writable, "write")
	if err != nil {
		return nil, err
	}
	if err := agentd.ValidateMemoryKey(args.Key); err != nil {
		return nil, &tools.Error{Kind: tools.KindFinal, Message: "key " + err.Error()}
	}
	it, err := t.s.Put(ctx, tenant, agentd.MemoryWrite{MemoryView: writeView(m), Namespace: ns, Key: args.Key,
		Value: args.Value, Source: agentd.MemoryFromAgent, Actor: actorOf(call.Run), RunID: call.Run.ID,
		Step: call.Step, ToolCallID: call.ToolCallID})
	if err != nil {
		return nil, failed(err)
	}
	it.Value = ""
	return json.Marshal(itemOf(it))
}

type deleteTool struct{ s *Service }

func (deleteTool) Spec() tools.Spec {
	return tools.Spec{Name: agentd.MemoryDeleteTool, Effect: agentd.EffectIdempotent,
		Description: "Forget an item of your memory (its earlier versions are kept for audit).",
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["key"],"properties":{
			"namespace":{"type":"string","description":"The item's namespace; omit when you may write only one."},
			"key":{"type":"string","minLength":1,"maxLength":256}}}`)}
}

func (t deleteTool) Invoke(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	m, tenant, err := runOf(call, agentd.MemoryDeleteTool)
	if err != nil {
		return nil, err
	}
	var args struct {
		Namespace string `json:"namespace"`
		Key       string `json:"key"`
	}
	if err := decodeArgs(call, &args); err != nil {
		return nil, err
	}
	ns, err := namespaceArg(args.Namespace, m.Write, m.Writable, "write")
	if err != nil {
		return nil, err
	}
	it, err := t.s.Delete(ctx, tenant, agentd.MemoryDeleteParams{MemoryView: writeView(m), Namespace: ns,
		Key: args.Key, Source: agentd.MemoryFromAgent, Actor: actorOf(call.Run), RunID: call.Run.ID, Step: call.Step,
		ToolCallID: call.ToolCallID})
	if err != nil {
		return nil, failed(err)
	}
	return json.Marshal(itemOf(it))
}

// writeView is where a run's writes go: its write namespaces, under its
// fork's overlay if it has one.
func writeView(m *agentd.RunMemory) agentd.MemoryView {
	v := m.View()
	v.Allowed = make([]agentd.Namespace, len(m.Write))
	for i, ns := range m.Write {
		v.Allowed[i] = ns
	}
	return v
}

// actorOf is who a run's memory writes are by: its agent, or its creator.
func actorOf(r *agentd.Run) string {
	if a := r.Params.Agent; a != nil {
		return "agent:" + a.Name
	}
	return r.CreatedBy
}
