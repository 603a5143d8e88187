package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
)

// Memory is memory's door (*memory.Service implements it): the tenant's
// versioned items, their search, and purges (docs/memory.md). Its errors
// are agentd.ErrMemoryNotFound, agentd.ErrMemoryConflict,
// *agentd.MemoryLimitError, agentd.ErrMemoryEmbeddings, and the store's.
type Memory interface {
	Put(ctx context.Context, tenant string, w agentd.MemoryWrite) (agentd.MemoryItem, error)
	Get(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) (agentd.MemoryItem, error)
	Versions(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) ([]agentd.MemoryItem, error)
	List(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error)
	Search(ctx context.Context, tenant string, p agentd.MemorySearchParams, limit int) ([]agentd.MemoryHit, error)
	Delete(ctx context.Context, tenant string, d agentd.MemoryDeleteParams) (agentd.MemoryItem, error)
	Purge(ctx context.Context, tenant string, p agentd.MemoryPurgeParams) (agentd.MemoryPurged, error)
}

// Codes of memory's routes.
const (
	CodeMemoryNotFound         = "memory_item_not_found"   // 404: no live item at this namespace and key (then)
	CodeMemoryConflict         = "memory_version_conflict" // 409: if_version is not the item's version
	CodeMemoryLimit            = "memory_limit"            // 422: a limit of memory; "limit" names it
	CodeMemoryUnavailable      = "memory_unavailable"      // 501: the server keeps no memory
	CodeEmbeddingsUnavailable  = "embeddings_unavailable"  // 503: the embedding model did not answer a write's embedding
	defaultMemoryLimit         = 50
	maxMemoryLimit             = 500
	defaultMemorySearchLimit   = 10
	maxMemorySearchLimit       = 100
	cursorMemoryItems          = "memory_items:"
	cursorMemoryVersions       = "memory_versions:"
	memoryNamespaceParamFormat = "must be a namespace's path form: its segments joined with '/', each %s"
)

var errMemoryNotFound = newError(http.StatusNotFound, CodeMemoryNotFound, "Memory item not found",
	"the tenant has no live memory item at this namespace and key")

var errNoMemory = newError(http.StatusNotImplemented, CodeMemoryUnavailable, "Memory unavailable",
	"this server keeps no memory")

// memoryRoutes routes memory: r the reads, changes the writes; and the
// extraction jobs' reads (memoryextract.go).
func (s *server) memoryRoutes(r, changes chi.Router) {
	changes.Put("/memory/items", s.handle(s.memoryPut))
	r.Get("/memory/items", s.handle(s.memoryList))
	r.With(s.checkOrigin).Delete("/memory/items", s.handle(s.memoryPurge))
	r.Get("/memory/item", s.handle(s.memoryGet))
	r.With(s.checkOrigin).Delete("/memory/item", s.handle(s.memoryDelete))
	r.Get("/memory/item/versions", s.handle(s.memoryVersions))
	changes.Post("/memory/search", s.handle(s.memorySearch))
	s.memoryExtractionRoutes(r)
}

// memoryProblem maps memory's errors to their problems.
func memoryProblem(err error) error {
	var limit *agentd.MemoryLimitError
	switch {
	case errors.As(err, &limit):
		e := newError(http.StatusUnprocessableEntity, CodeMemoryLimit, "Memory limit", limit.Error())
		e.limit = string(limit.Limit)
		return e
	case errors.Is(err, agentd.ErrMemoryNotFound), errors.Is(err, agentd.ErrMemoryOutOfReach):
		return errMemoryNotFound
	case errors.Is(err, agentd.ErrMemoryConflict):
		e := newError(http.StatusConflict, CodeMemoryConflict, "Memory version conflict",
			"if_version is not the item's current version (0: the item must not exist); read it again")
		e.field = "if_version"
		return e
	case errors.Is(err, agentd.ErrMemoryEmbeddings):
		e := newError(http.StatusServiceUnavailable, CodeEmbeddingsUnavailable, "Embeddings unavailable",
			"the embedding model did not answer; nothing was written; retry")
		e.retryAfter = unavailableRetryAfter
		return e
	}
	return err
}

// memoryItemRequest is the body of PUT /memory/items: LangGraph's Store
// item (namespace as a list, key, value) with agentd's data, expiry and
// optimistic version.
type memoryItemRequest struct {
	Namespace agentd.Namespace `json:"namespace"`
	Key       string           `json:"key"`
	Value     *string          `json:"value"`
	Data      json.RawMessage  `json:"data"`
	ExpiresAt *time.Time       `json:"expires_at"`
	IfVersion *int             `json:"if_version"`
}

// memoryPut answers PUT /memory/items: 200 and the version written.
func (s *server) memoryPut(w http.ResponseWriter, r *http.Request) error {
	var req memoryItemRequest
	if err := s.memoryBody(w, r, &req); err != nil {
		return err
	}
	if err := checkMemoryItem(req.Namespace, req.Key); err != nil {
		return err
	}
	if req.Value == nil {
		return fieldError("value", "is required: the item's text")
	}
	if err := storable("value", *req.Value); err != nil {
		return err
	}
	if string(req.Data) == "null" {
		req.Data = nil
	}
	if req.Data != nil {
		if err := storableJSON("data", req.Data); err != nil {
			return err
		}
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(time.Now()) {
		return fieldError("expires_at", "must be in the future")
	}
	if req.IfVersion != nil && *req.IfVersion < 0 {
		return fieldError("if_version", "must be 0 (the item must not exist) or a version")
	}
	ctx := r.Context()
	it, err := s.memory.Put(ctx, TenantFromContext(ctx), agentd.MemoryWrite{Namespace: req.Namespace, Key: req.Key,
		Value: *req.Value, Data: req.Data, ExpiresAt: req.ExpiresAt, IfVersion: req.IfVersion,
		Source: agentd.MemoryFromAPI, Actor: ActorFromContext(ctx)})
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, it)
	return nil
}

// checkMemoryItem refuses a namespace or key no item may have.
func checkMemoryItem(ns agentd.Namespace, key string) error {
	if ns == nil {
		return fieldError("namespace", "is required: a list of 1 to %d segments", agentd.MaxNamespaceSegments)
	}
	if err := ns.Validate(); err != nil {
		return fieldError("namespace", "%s", err.Error())
	}
	if err := agentd.ValidateMemoryKey(key); err != nil {
		return fieldError("key", "%s", err.Error())
	}
	return nil
}

// memoryParams reads the namespace and key of a route on one item.
func memoryParams(q url.Values) (agentd.Namespace, string, error) {
	if !q.Has("namespace") {
		return nil, "", fieldError("namespace", "is required: "+memoryNamespaceParamFormat, agentd.NamespaceRule)
	}
	ns := agentd.ParseNamespace(q.Get("namespace"))
	if err := ns.Validate(); err != nil {
		return nil, "", fieldError("namespace", memoryNamespaceParamFormat+"; it %s", agentd.NamespaceRule, err.Error())
	}
	key := q.Get("key")
	if err := agentd.ValidateMemoryKey(key); err != nil {
		return nil, "", fieldError("key", "%s", err.Error())
	}
	return ns, key, nil
}

// prefixParam reads a namespace prefix in its path form; "" is every
// namespace.
func prefixParam(field, v string) (agentd.Namespace, error) {
	p := agentd.ParseNamespace(v)
	if err := p.ValidatePrefix(); err != nil {
		return nil, fieldError(field, memoryNamespaceParamFormat+"; it %s", agentd.NamespaceRule, err.Error())
	}
	return p, nil
}

// memoryGet answers GET /memory/item?namespace=&key=[&as_of=]: the item's
// current version, or the one current at as_of.
func (s *server) memoryGet(w http.ResponseWriter, r *http.Request) error {
	if s.memory == nil {
		return errNoMemory
	}
	q := r.URL.Query()
	ns, key, err := memoryParams(q)
	if err != nil {
		return err
	}
	var o agentd.MemoryRead
	if v := q.Get("as_of"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fieldError("as_of", "must be an RFC 3339 time (2006-01-02T15:04:05Z), not %q", clip(v, 64))
		}
		o.AsOf = &t
	}
	ctx := r.Context()
	it, err := s.memory.Get(ctx, TenantFromContext(ctx), ns, key, o)
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, it)
	return nil
}

// memoryVersions answers GET /memory/item/versions: a page of the item's
// versions, newest first, tombstones included.
func (s *server) memoryVersions(w http.ResponseWriter, r *http.Request) error {
	if s.memory == nil {
		return errNoMemory
	}
	q := r.URL.Query()
	ns, key, err := memoryParams(q)
	if err != nil {
		return err
	}
	limit, pos, err := pageParams(q, cursorMemoryVersions, defaultMemoryLimit, maxMemoryLimit)
	if err != nil {
		return err
	}
	o := agentd.MemoryRead{Limit: limit + 1}
	if pos != "" {
		if o.Before, err = strconv.Atoi(pos); err != nil || o.Before < 1 {
			return errBadCursor
		}
	}
	ctx := r.Context()
	vs, err := s.memory.Versions(ctx, TenantFromContext(ctx), ns, key, o)
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, page(vs, limit, func(it agentd.MemoryItem) agentd.MemoryItem { return it },
		func(it agentd.MemoryItem) string { return encodeCursor(cursorMemoryVersions, strconv.Itoa(it.Version)) }))
	return nil
}

// memoryList answers GET /memory/items[?prefix=]: a page of the live
// items under the prefix, by namespace then key.
func (s *server) memoryList(w http.ResponseWriter, r *http.Request) error {
	if s.memory == nil {
		return errNoMemory
	}
	q := r.URL.Query()
	prefix, err := prefixParam("prefix", q.Get("prefix"))
	if err != nil {
		return err
	}
	limit, pos, err := pageParams(q, cursorMemoryItems, defaultMemoryLimit, maxMemoryLimit)
	if err != nil {
		return err
	}
	p := agentd.MemoryListParams{Prefix: prefix, Limit: limit + 1}
	if pos != "" {
		ns, key, ok := strings.Cut(pos, "\n")
		if !ok || agentd.ParseNamespace(ns).ValidatePrefix() != nil || agentd.ValidateMemoryKey(key) != nil {
			return errBadCursor
		}
		p.AfterNamespace, p.AfterKey = agentd.ParseNamespace(ns), key
	}
	ctx := r.Context()
	items, err := s.memory.List(ctx, TenantFromContext(ctx), p)
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, page(items, limit, func(it agentd.MemoryItem) agentd.MemoryItem { return it },
		func(it agentd.MemoryItem) string {
			return encodeCursor(cursorMemoryItems, it.Namespace.String()+"\n"+it.Key)
		}))
	return nil
}

// memorySearchRequest is the body of POST /memory/search.
type memorySearchRequest struct {
	NamespacePrefix agentd.Namespace `json:"namespace_prefix"`
	Query           string           `json:"query"`
	Filter          json.RawMessage  `json:"filter"`
	Limit           *int             `json:"limit"`
}

// memoryHitJSON is a search result: the item, its fused score, and its
// place in each ranked list (absent: not in it).
type memoryHitJSON struct {
	agentd.MemoryItem
	Score      float64  `json:"score"`
	TextRank   int      `json:"text_rank,omitempty"`
	VectorRank int      `json:"vector_rank,omitempty"`
	Similarity *float64 `json:"similarity,omitempty"`
}

// memorySearch answers POST /memory/search: the live items under the
// prefix that match the query (full text, and vector similarity when the
// server has an embedding model) and whose data contains filter, best
// first.
func (s *server) memorySearch(w http.ResponseWriter, r *http.Request) error {
	var req memorySearchRequest
	if err := s.memoryBody(w, r, &req); err != nil {
		return err
	}
	if err := req.NamespacePrefix.ValidatePrefix(); err != nil {
		return fieldError("namespace_prefix", "%s", err.Error())
	}
	if len(req.Query) > 4096 {
		return fieldError("query", "has %d bytes; at most 4096", len(req.Query))
	}
	if string(req.Filter) == "null" {
		req.Filter = nil
	}
	if req.Filter != nil && (len(req.Filter) == 0 || req.Filter[0] != '{') {
		return fieldError("filter", "must be a JSON object: the items whose data contains it match")
	}
	limit := defaultMemorySearchLimit
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > maxMemorySearchLimit {
			return fieldError("limit", "must be an integer between 1 and %d", maxMemorySearchLimit)
		}
		limit = *req.Limit
	}
	ctx := r.Context()
	hits, err := s.memory.Search(ctx, TenantFromContext(ctx), agentd.MemorySearchParams{Prefix: req.NamespacePrefix,
		Query: req.Query, Filter: req.Filter}, limit)
	if err != nil {
		return memoryProblem(err)
	}
	out := listJSON[memoryHitJSON]{Data: make([]memoryHitJSON, 0, len(hits))}
	for _, h := range hits {
		j := memoryHitJSON{MemoryItem: h.Item, Score: h.Score, TextRank: h.TextRank, VectorRank: h.VectorRank}
		if h.VectorRank > 0 {
			j.Similarity = &h.Similarity
		}
		out.Data = append(out.Data, j)
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// memoryDelete answers DELETE /memory/item?namespace=&key=[&if_version=]:
// 200 and the tombstone (the item's next version, deleted).
func (s *server) memoryDelete(w http.ResponseWriter, r *http.Request) error {
	if s.memory == nil {
		return errNoMemory
	}
	q := r.URL.Query()
	ns, key, err := memoryParams(q)
	if err != nil {
		return err
	}
	d := agentd.MemoryDeleteParams{Namespace: ns, Key: key, Source: agentd.MemoryFromAPI}
	if q.Has("if_version") {
		v, err := intParam(q, "if_version", 0, 1, 1<<31-1)
		if err != nil {
			return err
		}
		d.IfVersion = &v
	}
	ctx := r.Context()
	d.Actor = ActorFromContext(ctx)
	it, err := s.memory.Delete(ctx, TenantFromContext(ctx), d)
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, it)
	return nil
}

// memoryPurge answers DELETE /memory/items?prefix=&purge=true&confirm=:
// every version of every item under the prefix is removed, and an audit
// entry (counts, never content) is kept. purge=true and confirm (the
// prefix again) say that the caller means it.
func (s *server) memoryPurge(w http.ResponseWriter, r *http.Request) error {
	if s.memory == nil {
		return errNoMemory
	}
	q := r.URL.Query()
	if q.Get("purge") != "true" {
		return fieldError("purge", "must be true: DELETE /memory/items purges every version of every item under prefix, for good")
	}
	if q.Get("prefix") == "" {
		return fieldError("prefix", "is required: the namespace prefix to purge (its path form, such as users/u-42)")
	}
	prefix, err := prefixParam("prefix", q.Get("prefix"))
	if err != nil {
		return err
	}
	if q.Get("confirm") != prefix.String() {
		return fieldError("confirm", "must repeat prefix (%q): a purge cannot be undone", prefix.String())
	}
	ctx := r.Context()
	out, err := s.memory.Purge(ctx, TenantFromContext(ctx), agentd.MemoryPurgeParams{Prefix: prefix,
		Actor: ActorFromContext(ctx)})
	if err != nil {
		return memoryProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// memoryBody reads a memory route's JSON body into v, strictly: errNoMemory
// when the server keeps no memory.
func (s *server) memoryBody(w http.ResponseWriter, r *http.Request, v any) error {
	if s.memory == nil {
		return errNoMemory
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	return decodeStrict(body, v, "")
}
