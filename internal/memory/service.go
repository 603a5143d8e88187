package memory

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/agentd/agentd"
)

// Store is the memory store (*persist.Store implements it; see its
// methods for the errors each returns).
type Store interface {
	MemoryPut(ctx context.Context, tenant string, w agentd.MemoryWrite) (agentd.MemoryItem, error)
	MemoryGet(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) (agentd.MemoryItem, error)
	MemoryVersions(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) ([]agentd.MemoryItem, error)
	MemoryList(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error)
	MemorySearch(ctx context.Context, tenant string, p agentd.MemorySearchParams) ([]agentd.MemoryHit, error)
	MemoryDelete(ctx context.Context, tenant string, d agentd.MemoryDeleteParams) (agentd.MemoryItem, error)
	MemoryPurge(ctx context.Context, tenant string, p agentd.MemoryPurgeParams) (agentd.MemoryPurged, error)
	MemoryUsage(ctx context.Context, tenant string) ([]agentd.MemoryUsage, error)
	MemoryExtractionList(ctx context.Context, p agentd.MemoryExtractionList) ([]agentd.MemoryExtraction, error)
	MemoryExtractionGet(ctx context.Context, tenant, id string) (agentd.MemoryExtraction, error)
}

// ErrEmbeddings: the embedding model did not answer a write's embedding;
// nothing was written.
var ErrEmbeddings = agentd.ErrMemoryEmbeddings

// Config configures a Service.
type Config struct {
	Store Store
	// Embedder, when set, embeds every value written and every query
	// searched; nil: search is full text alone.
	Embedder Embedder
	// Logger is told when a search falls back to full text; nil: discard.
	Logger *slog.Logger
}

// Service is memory's door: the store's reads as they are, writes with
// their embeddings, and search ranked by fusion.
type Service struct {
	store Store
	emb   Embedder
	log   *slog.Logger
}

// New returns a Service; cfg.Store is required.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: cfg.Store, emb: cfg.Embedder, log: cfg.Logger}
}

// Put writes a version of an item, with its value's embedding when the
// service has an embedder (ErrEmbeddings when it does not answer).
func (s *Service) Put(ctx context.Context, tenant string, w agentd.MemoryWrite) (agentd.MemoryItem, error) {
	if s.emb != nil && w.Embedding == nil && w.Value != "" {
		vs, err := s.emb.Embed(ctx, []string{w.Value})
		if err != nil {
			return agentd.MemoryItem{}, fmt.Errorf("%w: %w", ErrEmbeddings, err)
		}
		w.Embedding, w.EmbeddingModel = vs[0], s.emb.Model()
	}
	return s.store.MemoryPut(ctx, tenant, w)
}

// Get returns an item's version (see persist's MemoryGet).
func (s *Service) Get(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) (agentd.MemoryItem, error) {
	return s.store.MemoryGet(ctx, tenant, ns, key, o)
}

// Versions returns a page of an item's versions, newest first.
func (s *Service) Versions(ctx context.Context, tenant string, ns agentd.Namespace, key string, o agentd.MemoryRead) ([]agentd.MemoryItem, error) {
	return s.store.MemoryVersions(ctx, tenant, ns, key, o)
}

// List returns a page of live items under a prefix.
func (s *Service) List(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error) {
	return s.store.MemoryList(ctx, tenant, p)
}

// Delete writes an item's tombstone.
func (s *Service) Delete(ctx context.Context, tenant string, d agentd.MemoryDeleteParams) (agentd.MemoryItem, error) {
	return s.store.MemoryDelete(ctx, tenant, d)
}

// Purge removes every version of every item under a prefix.
func (s *Service) Purge(ctx context.Context, tenant string, p agentd.MemoryPurgeParams) (agentd.MemoryPurged, error) {
	return s.store.MemoryPurge(ctx, tenant, p)
}

// Usage returns a tenant's counters ("": every tenant's).
func (s *Service) Usage(ctx context.Context, tenant string) ([]agentd.MemoryUsage, error) {
	return s.store.MemoryUsage(ctx, tenant)
}

// Extractions returns a page of a tenant's extraction jobs, newest first.
func (s *Service) Extractions(ctx context.Context, p agentd.MemoryExtractionList) ([]agentd.MemoryExtraction, error) {
	return s.store.MemoryExtractionList(ctx, p)
}

// Extraction returns a tenant's extraction job;
// agentd.ErrMemoryExtractionNotFound when it has none of that id.
func (s *Service) Extraction(ctx context.Context, tenant, id string) (agentd.MemoryExtraction, error) {
	return s.store.MemoryExtractionGet(ctx, tenant, id)
}

// candidates is how many hits each ranked list brings to fusion, for a
// search that returns limit.
func candidates(limit int) int { return max(3*limit, 30) }

// Search returns up to limit live items under p.Prefix, ranked by
// reciprocal rank fusion of full-text relevance and, with an embedder,
// vector similarity to the query (Fuse). When the embedder fails, the
// search is full text alone (and logged).
func (s *Service) Search(ctx context.Context, tenant string, p agentd.MemorySearchParams, limit int) ([]agentd.MemoryHit, error) {
	p.Limit = candidates(limit)
	if s.emb != nil && p.Query != "" {
		vs, err := s.emb.Embed(ctx, []string{p.Query})
		if err != nil {
			s.log.WarnContext(ctx, "memory search: embedding the query failed; full text alone",
				slog.String("tenant_id", tenant), slog.String("error", err.Error()))
		} else {
			p.Vector, p.EmbeddingModel = vs[0], s.emb.Model()
		}
	}
	hits, err := s.store.MemorySearch(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	return Fuse(hits, limit), nil
}
