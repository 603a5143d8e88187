package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Namespace is where a memory item lives: a path of 1 to
// MaxNamespaceSegments segments, such as ["users", "u-42", "profile"].
// Its path form joins the segments with '/', which no segment holds.
type Namespace []string

// Bounds of namespaces and keys.
const (
	MaxNamespaceSegments = 8
	MaxSegmentLen        = 128
	MaxMemoryKeyBytes    = 256
)

// NamespaceRule says what a namespace segment may be, for error messages.
const NamespaceRule = "1 to 128 characters among A-Z a-z 0-9 . _ : @ -"

// String is the namespace's path form: its segments joined with '/'.
func (n Namespace) String() string { return strings.Join(n, "/") }

// ParseNamespace reads a namespace's path form ("users/u-42/profile");
// the empty string is the empty namespace, which only a prefix may be.
func ParseNamespace(path string) Namespace {
	if path == "" {
		return Namespace{}
	}
	return Namespace(strings.Split(path, "/"))
}

// Validate reports what is wrong with n as an item's namespace (1 to 8
// valid segments), nil when nothing is.
func (n Namespace) Validate() error {
	if len(n) == 0 {
		return errors.New("must have at least one segment")
	}
	return n.ValidatePrefix()
}

// ValidatePrefix is Validate for a namespace prefix, which may be empty
// (every namespace).
func (n Namespace) ValidatePrefix() error {
	if len(n) > MaxNamespaceSegments {
		return fmt.Errorf("has %d segments; at most %d", len(n), MaxNamespaceSegments)
	}
	for i, s := range n {
		if !validSegment(s) {
			return fmt.Errorf("segment %d (%q) must be %s", i, clipText(s, 64), NamespaceRule)
		}
	}
	return nil
}

// HasPrefix reports whether n is p or lies under it.
func (n Namespace) HasPrefix(p Namespace) bool {
	if len(p) > len(n) {
		return false
	}
	for i := range p {
		if n[i] != p[i] {
			return false
		}
	}
	return true
}

func validSegment(s string) bool {
	if s == "" || len(s) > MaxSegmentLen {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidateMemoryKey reports what is wrong with a memory item's key: 1 to
// 256 bytes of valid UTF-8 without NUL.
func ValidateMemoryKey(key string) error {
	switch {
	case key == "":
		return errors.New("must not be empty")
	case len(key) > MaxMemoryKeyBytes:
		return fmt.Errorf("has %d bytes; at most %d", len(key), MaxMemoryKeyBytes)
	case strings.ContainsRune(key, 0) || !utf8.ValidString(key):
		return errors.New("must be valid UTF-8 without NUL characters")
	}
	return nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// MemorySource is who wrote a version of a memory item.
type MemorySource string

// Memory sources.
const (
	MemoryFromAPI        MemorySource = "api"        // a client, through /memory
	MemoryFromAgent      MemorySource = "agent"      // a run's tool call
	MemoryFromExtraction MemorySource = "extraction" // the extractor, after a run
)

// MemorySources lists every memory source.
func MemorySources() []MemorySource {
	return []MemorySource{MemoryFromAPI, MemoryFromAgent, MemoryFromExtraction}
}

// MemoryItem is one version of a memory item: the current one, or the one
// an as-of read or the versions list found. Its shape is LangGraph's
// Store item's (namespace as a list, key, value, created_at, updated_at)
// with agentd's version and provenance.
type MemoryItem struct {
	Namespace Namespace `json:"namespace"`
	Key       string    `json:"key"`
	// Value is the item's text ("" in a tombstone).
	Value string `json:"value"`
	// Data is optional JSON kept with the value; search filters on it.
	Data json.RawMessage `json:"data,omitempty"`
	// Version counts the item's writes, from 1; a tombstone is a version.
	Version int `json:"version"`
	// Deleted: this version is a tombstone.
	Deleted bool         `json:"deleted,omitempty"`
	Source  MemorySource `json:"source"`
	// Actor is who wrote the version ("key:<prefix>", "oidc:<subject>",
	// "local", or a run's agent).
	Actor string `json:"actor,omitempty"`
	// RunID, Step and ToolCallID say which tool call of which run wrote
	// the version (source agent).
	RunID      string `json:"run_id,omitempty"`
	Step       int    `json:"step,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ExtractedFrom is the run whose turn the extractor read (source
	// extraction).
	ExtractedFrom string `json:"extracted_from,omitempty"`
	// Overlay is the fork's overlay that holds the version; "": real
	// memory.
	Overlay string `json:"overlay,omitempty"`
	// CreatedAt is when the item's first version was written; UpdatedAt
	// when this one was.
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Bytes is the version's size as limits count it: key, value and data.
	Bytes int `json:"bytes"`
	// Embedding is the value's vector (search's), not shown.
	Embedding []float32 `json:"-"`
}

// MemoryView bounds what a call on memory sees and where it writes.
type MemoryView struct {
	// Allowed are the namespace prefixes the caller may reach; nil:
	// every namespace of the tenant. A non-nil empty list reaches nothing.
	Allowed []Namespace
	// Overlay, when set (a fork's or an evaluation's id), makes reads see
	// real memory as of Base with the overlay's own versions over it, and
	// writes go to the overlay only.
	Overlay string
	// Base is the time real memory is read as of under an overlay (the
	// forked step's commit); zero: now.
	Base time.Time
}

// Reaches reports whether ns lies under one of v's allowed prefixes.
func (v MemoryView) Reaches(ns Namespace) bool {
	if v.Allowed == nil {
		return true
	}
	for _, p := range v.Allowed {
		if ns.HasPrefix(p) {
			return true
		}
	}
	return false
}

// MemoryWrite is a put of a memory item: a new version of it.
type MemoryWrite struct {
	MemoryView
	Namespace Namespace
	Key       string
	Value     string
	Data      json.RawMessage
	ExpiresAt *time.Time
	// IfVersion, when set, writes only when the item's current version is
	// this one (0: the item must not exist, or be deleted); otherwise
	// ErrMemoryConflict.
	IfVersion *int
	Source    MemorySource
	Actor     string
	RunID     string
	Step      int
	// ToolCallID is the writing tool call's id; ExtractedFrom the run the
	// extractor read.
	ToolCallID    string
	ExtractedFrom string
	// Embedding and EmbeddingModel are the value's vector and the model
	// that made it; nil: none.
	Embedding      []float32
	EmbeddingModel string
}

// Bytes is what the write counts against the limits of bytes.
func (w MemoryWrite) Bytes() int { return len(w.Key) + len(w.Value) + len(w.Data) }

// MemoryDeleteParams is a delete of a memory item: a tombstone version.
type MemoryDeleteParams struct {
	MemoryView
	Namespace  Namespace
	Key        string
	IfVersion  *int
	Source     MemorySource
	Actor      string
	RunID      string
	Step       int
	ToolCallID string
}

// MemoryRead is how an item, or its versions, are read.
type MemoryRead struct {
	MemoryView
	// AsOf, when set, reads the item as it was then.
	AsOf *time.Time
	// Before and Limit page the versions list: versions below Before
	// (0: from the latest), at most Limit (0: 100).
	Before int
	Limit  int
}

// MemoryListParams pages the live items under a namespace prefix, by
// namespace then key.
type MemoryListParams struct {
	MemoryView
	Prefix Namespace
	// After is the cursor: the path and key of the last item of the
	// previous page; zero: from the start.
	AfterNamespace Namespace
	AfterKey       string
	Limit          int
}

// MemorySearchParams is a search of live items under a namespace prefix.
type MemorySearchParams struct {
	MemoryView
	Prefix Namespace
	// Query is the text searched (full text); "": every item matches, the
	// latest first.
	Query string
	// Filter keeps the items whose data contains it (JSON containment).
	Filter json.RawMessage
	// Vector, when set, also ranks items by cosine similarity of their
	// embeddings made by EmbeddingModel.
	Vector         []float32
	EmbeddingModel string
	// Limit caps each ranked list (full-text, vector): candidates for
	// fusion.
	Limit int
}

// MemoryHit is an item a search found, with its place in each ranked
// list (0: not in it).
type MemoryHit struct {
	Item MemoryItem
	// TextRank is the item's place (from 1) by full-text relevance;
	// TextScore PostgreSQL's ts_rank_cd.
	TextRank  int
	TextScore float64
	// VectorRank is the item's place (from 1) by cosine similarity;
	// Similarity the cosine.
	VectorRank int
	Similarity float64
	// Score is the fused score (reciprocal rank fusion) that orders the
	// results.
	Score float64
}

// MemoryPurgeParams is a purge: every version of every item under a
// namespace prefix (of real memory and every overlay) is removed.
type MemoryPurgeParams struct {
	Prefix Namespace
	Actor  string
	// Allowed bound the prefix as MemoryView's do; nil: any.
	Allowed []Namespace
}

// MemoryPurged says what a purge removed; its audit row says the same.
type MemoryPurged struct {
	ID       string    `json:"id"`
	Items    int       `json:"items"`
	Versions int       `json:"versions"`
	Bytes    int64     `json:"bytes"`
	At       time.Time `json:"at"`
}

// MemoryUsage is what a tenant's memory holds: its live items and the
// bytes of every version it keeps.
type MemoryUsage struct {
	Tenant string `json:"tenant"`
	Items  int64  `json:"items"`
	Bytes  int64  `json:"bytes"`
}

// MemoryLimits bound what memory a tenant may keep; zero fields are
// unbounded.
type MemoryLimits struct {
	ItemsPerNamespace int
	BytesPerItem      int
	BytesPerTenant    int64
}

// MemoryRetention says which old versions a retention pass removes: a
// version that is not its item's current one goes when it is past the
// item's Keep newest (0: any count) and older than MaxAge (0: any age);
// so a version is kept while it is among the Keep newest or younger than
// MaxAge. With neither set, versions are kept.
type MemoryRetention struct {
	Keep   int
	MaxAge time.Duration
}

// MemoryLimit names a limit of MemoryLimits.
type MemoryLimit string

// Memory limits.
const (
	LimitItemsPerNamespace MemoryLimit = "items_per_namespace"
	LimitBytesPerItem      MemoryLimit = "bytes_per_item"
	LimitBytesPerTenant    MemoryLimit = "bytes_per_tenant"
)

// MemoryLimitNames lists every memory limit.
func MemoryLimitNames() []MemoryLimit {
	return []MemoryLimit{LimitItemsPerNamespace, LimitBytesPerItem, LimitBytesPerTenant}
}

// MemoryLimitError says that a write was refused because it would pass a
// limit: the limit's name, its value, and what the write would have made.
type MemoryLimitError struct {
	Limit MemoryLimit
	Max   int64
	Would int64
}

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("memory limit %s is %d; the write would make %d", e.Limit, e.Max, e.Would)
}

// Errors of memory.
var (
	// ErrMemoryNotFound: no live item at this namespace and key (or none
	// the caller may reach, or none then for an as-of read).
	ErrMemoryNotFound = fmt.Errorf("memory item %w", ErrNotFound)
	// ErrMemoryConflict: the item's version is not the write's
	// if_version.
	ErrMemoryConflict = fmt.Errorf("memory item version changed: %w", ErrConflict)
	// ErrMemoryOutOfReach: a write to a namespace the caller may not
	// write (a run's memory allows it no such namespace).
	ErrMemoryOutOfReach = errors.New("memory namespace out of reach")
	// ErrMemoryEmbeddings: the embedding model did not answer a write's
	// embedding; nothing was written.
	ErrMemoryEmbeddings = errors.New("the embedding model did not answer")
)
