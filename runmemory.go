package agentd

import (
	"fmt"
	"strings"
	"time"
)

// RunMemory is the memory a run may use (docs/memory.md, "Memory in a run"): the
// namespaces of its tenant's memory store it reads pinned into its
// instructions, searches, and writes, and what is extracted from it when
// it ends. Each namespace is a list of segments, filled when the run was
// created (its {{user}} and {{variables}} put in), so that nothing reads
// a template again: a run reaches exactly these namespaces.
type RunMemory struct {
	// Off: the run was asked to use no memory (POST /runs "memory":
	// false); its forks and its sub-agents' runs use none either.
	Off    bool       `json:"off"`
	Pinned [][]string `json:"pinned"`
	Search [][]string `json:"search"`
	Write  [][]string `json:"write"`
	// Extract, when set, asks that what is worth remembering of the run
	// be written to its namespace once the run ended.
	Extract *RunMemoryExtract `json:"extract"`
	// Overlay, when set, is the overlay of the fork the run belongs to:
	// it reads real memory as of Base with the overlay's versions over
	// it, and writes to the overlay alone (docs/memory.md, "Forks").
	Overlay string     `json:"overlay,omitempty"`
	Base    *time.Time `json:"base,omitempty"`
}

// Names of the memory tools a run with memory is offered: search over
// the namespaces it reads, write and delete over those it writes.
const (
	MemorySearchTool = "memory_search"
	MemoryWriteTool  = "memory_write"
	MemoryDeleteTool = "memory_delete"
)

// IsMemoryTool reports whether name is one of the memory tools.
func IsMemoryTool(name string) bool {
	return name == MemorySearchTool || name == MemoryWriteTool || name == MemoryDeleteTool
}

// Offers reports whether the run is offered memory tool name: search
// when it reads a namespace, write and delete when it writes one.
func (m *RunMemory) Offers(name string) bool {
	if m == nil || m.Off {
		return false
	}
	switch name {
	case MemorySearchTool:
		return len(m.Pinned)+len(m.Search) > 0
	case MemoryWriteTool, MemoryDeleteTool:
		return len(m.Write) > 0
	}
	return false
}

// Reach says which namespaces memory tool name reaches for the run, for
// the tool's description: those it reads for search, those it writes
// for write and delete.
func (m *RunMemory) Reach(name string) string {
	list, verb := m.Readables(), "search"
	if name != MemorySearchTool {
		list, verb = nil, "write"
		for _, ns := range m.Write {
			list = append(list, ns)
		}
	}
	paths := make([]string, len(list))
	for i, ns := range list {
		paths[i] = ns.String()
	}
	return fmt.Sprintf("The namespaces you may %s (each with those under it): %s.", verb, strings.Join(paths, ", "))
}

// Readables are the namespaces the run reads: its pinned ones, then
// those it searches.
func (m *RunMemory) Readables() []Namespace {
	if m == nil || m.Off {
		return []Namespace{}
	}
	out := make([]Namespace, 0, len(m.Pinned)+len(m.Search))
	for _, ns := range m.Pinned {
		out = append(out, ns)
	}
	for _, ns := range m.Search {
		out = append(out, ns)
	}
	return out
}

// View is what the run's reads see: the namespaces it reads, under its
// fork's overlay if it has one.
func (m *RunMemory) View() MemoryView {
	v := MemoryView{Allowed: m.Readables()}
	if m != nil && m.Overlay != "" {
		v.Overlay = m.Overlay
		if m.Base != nil {
			v.Base = *m.Base
		}
	}
	return v
}

// MaxPinnedMemoryBytes caps the pinned memory a run's system prompt is
// given (the items' namespaces, keys and values); the items past it are
// left out, and the prompt says how many.
const MaxPinnedMemoryBytes = 16 << 10

// MaxPinnedMemoryItems caps the items of one pinned namespace read.
const MaxPinnedMemoryItems = 100

// RunPinned is the pinned memory a run was given when it was created: the
// items of its pinned namespaces as they were then, which its system
// prompt holds after its instructions on every step (a stable prefix); a
// later change is for later runs.
type RunPinned struct {
	// AsOf is when they were read.
	AsOf  time.Time      `json:"as_of"`
	Items []PinnedMemory `json:"items"`
	// Omitted counts the items left out past MaxPinnedMemoryBytes.
	Omitted int `json:"omitted,omitempty"`
}

// PinnedMemory is an item a run was given pinned, at its version.
type PinnedMemory struct {
	Namespace Namespace `json:"namespace"`
	Key       string    `json:"key"`
	Version   int       `json:"version"`
	Value     string    `json:"value,omitempty"`
}

// PinItems is what a run is given of items (its pinned namespaces',
// read as of asOf): each item with its value, in order, until their
// text passes MaxPinnedMemoryBytes; nil for none.
func PinItems(items []MemoryItem, asOf time.Time) *RunPinned {
	if len(items) == 0 {
		return nil
	}
	p := &RunPinned{AsOf: asOf.UTC(), Items: []PinnedMemory{}}
	size := 0
	for _, it := range items {
		n := len(it.Namespace.String()) + len(it.Key) + len(it.Value) + 4
		if size+n > MaxPinnedMemoryBytes {
			p.Omitted++
			continue
		}
		size += n
		p.Items = append(p.Items, PinnedMemory{Namespace: it.Namespace, Key: it.Key, Version: it.Version, Value: it.Value})
	}
	return p
}

// Text is the pinned memory as the system prompt holds it: a heading,
// then one item a paragraph ("namespace key: value").
func (p *RunPinned) Text() string {
	if p == nil || len(p.Items) == 0 && p.Omitted == 0 {
		return ""
	}
	const heading = "Memory (what you were given to remember; each item is its namespace and key, then its value):"
	n := len(heading)
	for _, it := range p.Items {
		n += len(it.Key) + len(it.Value) + 8*len(it.Namespace) + 8
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(heading)
	for _, it := range p.Items {
		b.WriteString("\n\n[")
		for i, seg := range it.Namespace {
			if i > 0 {
				b.WriteByte('/')
			}
			b.WriteString(seg)
		}
		b.WriteString("] ")
		b.WriteString(it.Key)
		b.WriteString(": ")
		b.WriteString(it.Value)
	}
	if p.Omitted > 0 {
		fmt.Fprintf(&b, "\n\n(%d more items were left out for room; %s finds them.)", p.Omitted, MemorySearchTool)
	}
	return b.String()
}

// view is p as a run's view shows it: nil for none.
func (p *RunPinned) view() []PinnedView {
	if p == nil {
		return nil
	}
	out := make([]PinnedView, len(p.Items))
	for i, it := range p.Items {
		out[i] = PinnedView{Namespace: it.Namespace, Key: it.Key, Version: it.Version}
	}
	return out
}

// PinnedView is an item a run was given pinned, as its view shows it:
// where, and which version, without the value.
type PinnedView struct {
	Namespace Namespace `json:"namespace"`
	Key       string    `json:"key"`
	Version   int       `json:"version"`
}

// RunMemoryExtract is a run's memory.extract, filled.
type RunMemoryExtract struct {
	Namespace []string `json:"namespace"`
	// Model is the model that extracts; "": the server's choice.
	Model string `json:"model,omitempty"`
	// Instructions tell it what is worth remembering; "": the server's.
	Instructions string `json:"instructions,omitempty"`
}

// Readable reports whether the run may read namespace ns: a namespace
// it pins or searches is ns or holds it (is a prefix of it). A run with
// memory off reads nothing.
func (m *RunMemory) Readable(ns []string) bool {
	if m == nil || m.Off {
		return false
	}
	for _, list := range [][][]string{m.Pinned, m.Search} {
		for _, r := range list {
			if NamespaceHolds(r, ns) {
				return true
			}
		}
	}
	return false
}

// Writable reports whether the run may write namespace ns: one of its
// write namespaces is ns or holds it.
func (m *RunMemory) Writable(ns []string) bool {
	if m == nil || m.Off {
		return false
	}
	for _, w := range m.Write {
		if NamespaceHolds(w, ns) {
			return true
		}
	}
	return false
}

// NamespaceHolds reports whether namespace outer is ns or one of its
// prefixes (["users", "u1"] holds ["users", "u1", "profile"]).
func NamespaceHolds(outer, ns []string) bool {
	if len(outer) > len(ns) {
		return false
	}
	for i, s := range outer {
		if ns[i] != s {
			return false
		}
	}
	return true
}

// ObjectInstructions is the object of an InstructionsView.
const ObjectInstructions = "instructions"

// MaxManagedInstructionsBytes caps a tenant's managed instructions.
const MaxManagedInstructionsBytes = 32 << 10

// ManagedInstructions are a tenant's managed instructions (PUT
// /instructions): the text every run of the tenant is given first in its
// system prompt, above its agent's and its own instructions, which no
// agent or run can override or drop.
type ManagedInstructions struct {
	TenantID string
	// Version counts the changes of the tenant's instructions: each PUT
	// and each DELETE takes the next; 0: never set.
	Version int
	// Text is the instructions; "": none (never set, or deleted).
	Text      string
	UpdatedBy string
	UpdatedAt time.Time
}

// InstructionsView is a tenant's managed instructions as GET
// /instructions shows them.
type InstructionsView struct {
	Object    string     `json:"object"` // ObjectInstructions
	TenantID  string     `json:"tenant_id"`
	Version   int        `json:"version"`
	Text      *string    `json:"text"` // nil: none
	UpdatedBy *string    `json:"updated_by"`
	UpdatedAt *time.Time `json:"updated_at"`
}

// View is m as GET /instructions shows it.
func (m ManagedInstructions) View() InstructionsView {
	v := InstructionsView{Object: ObjectInstructions, TenantID: m.TenantID, Version: m.Version,
		Text: nullIfZero(m.Text), UpdatedBy: nullIfZero(m.UpdatedBy)}
	if !m.UpdatedAt.IsZero() {
		at := m.UpdatedAt.UTC()
		v.UpdatedAt = &at
	}
	return v
}

// RunManaged is what a run was given of its tenant's managed
// instructions when it was created: a later change is for later runs.
type RunManaged struct {
	Version int    `json:"version"`
	Text    string `json:"text"`
}

// ManagedView is the version of its tenant's managed instructions a run
// was given, as its view shows it (the text is GET /instructions', for
// an admin).
type ManagedView struct {
	Version int `json:"version"`
}

// SystemPrompt is the system prompt of the run's model requests: its
// tenant's managed instructions first, then its own instructions, then
// the memory it was given pinned, apart by blank lines; "" for none.
func (p RunParams) SystemPrompt() string {
	parts := make([]string, 0, 3)
	if p.Managed != nil && p.Managed.Text != "" {
		parts = append(parts, p.Managed.Text)
	}
	if p.Instructions != "" {
		parts = append(parts, p.Instructions)
	}
	if t := p.Pinned.Text(); t != "" {
		parts = append(parts, t)
	}
	return strings.Join(parts, "\n\n")
}

// view is m as a run's view shows it: every list, empty when it has none.
func (m *RunMemory) view() *RunMemory {
	if m == nil {
		return nil
	}
	v := *m
	v.Pinned, v.Search, v.Write = orEmpty(v.Pinned), orEmpty(v.Search), orEmpty(v.Write)
	return &v
}
