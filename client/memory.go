package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentd/agentd"
)

// MemoryItem is a version of a memory item as the server shows it
// (docs/memory.md).
type MemoryItem = agentd.MemoryItem

// MemoryPurged says what a purge removed.
type MemoryPurged = agentd.MemoryPurged

// MemoryPut is what PUT /memory/items sends: the item's namespace (a list
// of segments), key and value, optional data and expiry, and, to write
// only over a known version, IfVersion (0: only when no live item is
// there).
type MemoryPut struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     string          `json:"value"`
	Data      json.RawMessage `json:"data,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	IfVersion *int            `json:"if_version,omitempty"`
}

// MemorySearch is what POST /memory/search sends.
type MemorySearch struct {
	NamespacePrefix []string        `json:"namespace_prefix,omitempty"`
	Query           string          `json:"query,omitempty"`
	Filter          json.RawMessage `json:"filter,omitempty"`
	Limit           int             `json:"limit,omitempty"`
}

// MemoryHit is an item a search found, with its fused score and its place
// in each ranked list (0: not in it).
type MemoryHit struct {
	MemoryItem
	Score      float64  `json:"score"`
	TextRank   int      `json:"text_rank,omitempty"`
	VectorRank int      `json:"vector_rank,omitempty"`
	Similarity *float64 `json:"similarity,omitempty"`
}

// Memory is the tenant's memory (the /memory routes): Client.Memory
// returns it.
type Memory struct{ c *Client }

// Memory returns the client's door to the tenant's memory.
func (c *Client) Memory() *Memory { return &Memory{c: c} }

func memoryQuery(namespace []string, key string) url.Values {
	return url.Values{"namespace": {agentd.Namespace(namespace).String()}, "key": {key}}
}

// Put writes an item's next version (PUT /memory/items).
func (m *Memory) Put(ctx context.Context, p MemoryPut) (*MemoryItem, error) {
	var it MemoryItem
	if _, err := m.c.do(ctx, request{method: http.MethodPut, path: "/memory/items", body: p}, &it); err != nil {
		return nil, err
	}
	return &it, nil
}

// Get reads an item's current version, or with asOf (non-nil) the
// version current then.
func (m *Memory) Get(ctx context.Context, namespace []string, key string, asOf *time.Time) (*MemoryItem, error) {
	q := memoryQuery(namespace, key)
	if asOf != nil {
		q.Set("as_of", asOf.UTC().Format(time.RFC3339Nano))
	}
	var it MemoryItem
	if _, err := m.c.do(ctx, request{method: http.MethodGet, path: "/memory/item", query: q}, &it); err != nil {
		return nil, err
	}
	return &it, nil
}

// Versions reads a page of an item's versions, newest first; limit
// 0 takes the server's default, cursor is a page's NextCursor.
func (m *Memory) Versions(ctx context.Context, namespace []string, key string, limit int, cursor string) (*Page[MemoryItem], error) {
	q := memoryQuery(namespace, key)
	for k, v := range pageQuery(limit, cursor) {
		q[k] = v
	}
	var page Page[MemoryItem]
	if _, err := m.c.do(ctx, request{method: http.MethodGet, path: "/memory/item/versions", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// List reads a page of the live items under a namespace prefix
// (nil: every namespace), by namespace then key.
func (m *Memory) List(ctx context.Context, prefix []string, limit int, cursor string) (*Page[MemoryItem], error) {
	q := pageQuery(limit, cursor)
	if q == nil {
		q = url.Values{}
	}
	if len(prefix) > 0 {
		q.Set("prefix", agentd.Namespace(prefix).String())
	}
	var page Page[MemoryItem]
	if _, err := m.c.do(ctx, request{method: http.MethodGet, path: "/memory/items", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Search searches the live items (POST /memory/search), best first.
func (m *Memory) Search(ctx context.Context, s MemorySearch) ([]MemoryHit, error) {
	var out agentd.List[MemoryHit]
	if _, err := m.c.do(ctx, request{method: http.MethodPost, path: "/memory/search", body: s}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Delete writes an item's tombstone and returns it; ifVersion > 0
// deletes only that version.
func (m *Memory) Delete(ctx context.Context, namespace []string, key string, ifVersion int) (*MemoryItem, error) {
	q := memoryQuery(namespace, key)
	if ifVersion > 0 {
		q.Set("if_version", strconv.Itoa(ifVersion))
	}
	var it MemoryItem
	if _, err := m.c.do(ctx, request{method: http.MethodDelete, path: "/memory/item", query: q}, &it); err != nil {
		return nil, err
	}
	return &it, nil
}

// Purge removes every version of every item under a namespace
// prefix, for good (DELETE /memory/items with purge and the prefix
// confirmed).
func (m *Memory) Purge(ctx context.Context, prefix []string) (*MemoryPurged, error) {
	p := agentd.Namespace(prefix).String()
	q := url.Values{"prefix": {p}, "purge": {"true"}, "confirm": {p}}
	var out MemoryPurged
	if _, err := m.c.do(ctx, request{method: http.MethodDelete, path: "/memory/items", query: q}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MemoryExtraction is an extraction job as the server shows it
// (docs/memory.md, "Extraction").
type MemoryExtraction = agentd.MemoryExtractionView

// Extractions reads a page of the tenant's extraction jobs, newest first
// (GET /memory/extractions); runID, when set, keeps that run's alone.
func (m *Memory) Extractions(ctx context.Context, runID string, limit int, cursor string) (*Page[MemoryExtraction], error) {
	q := pageQuery(limit, cursor)
	if q == nil {
		q = url.Values{}
	}
	if runID != "" {
		q.Set("run_id", runID)
	}
	var page Page[MemoryExtraction]
	if _, err := m.c.do(ctx, request{method: http.MethodGet, path: "/memory/extractions", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Extraction reads an extraction job (GET /memory/extractions/{id}).
func (m *Memory) Extraction(ctx context.Context, id string) (*MemoryExtraction, error) {
	var x MemoryExtraction
	if _, err := m.c.do(ctx, request{method: http.MethodGet, path: "/memory/extractions/" + url.PathEscape(id)}, &x); err != nil {
		return nil, err
	}
	return &x, nil
}
