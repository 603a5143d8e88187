package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
)

// MemoryExtractions are memory's extraction jobs (docs/memory.md,
// "Extraction"), read through the Memory door (*memory.Service implements
// both): a door that has none answers their routes 501
// memory_unavailable.
type MemoryExtractions interface {
	// Extractions returns a page of a tenant's jobs, newest first.
	Extractions(ctx context.Context, p agentd.MemoryExtractionList) ([]agentd.MemoryExtraction, error)
	// Extraction returns a tenant's job; agentd.ErrMemoryExtractionNotFound.
	Extraction(ctx context.Context, tenant, id string) (agentd.MemoryExtraction, error)
}

// CodeMemoryExtractionNotFound is the code of a 404 for an extraction job.
const CodeMemoryExtractionNotFound = "memory_extraction_not_found"

const (
	defaultExtractionLimit  = 20
	maxExtractionLimit      = 100
	cursorMemoryExtractions = "memory_extractions:"
)

var errMemoryExtractionNotFound = newError(http.StatusNotFound, CodeMemoryExtractionNotFound,
	"Memory extraction not found", "the tenant has no memory extraction of this id")

// memoryExtractionRoutes routes the extraction jobs' reads.
func (s *server) memoryExtractionRoutes(r chi.Router) {
	r.Get("/memory/extractions", s.handle(s.memoryExtractionList))
	r.Get("/memory/extractions/{id}", s.handle(s.memoryExtractionGet))
}

// extractions is the door to the extraction jobs, or errNoMemory.
func (s *server) extractions() (MemoryExtractions, error) {
	x, ok := s.memory.(MemoryExtractions)
	if !ok {
		return nil, errNoMemory
	}
	return x, nil
}

// memoryExtractionList answers GET /memory/extractions: a page of the
// tenant's extraction jobs, newest first, of one run with run_id.
func (s *server) memoryExtractionList(w http.ResponseWriter, r *http.Request) error {
	x, err := s.extractions()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	p := agentd.MemoryExtractionList{Tenant: TenantFromContext(r.Context())}
	if p.RunID, err = uuidParam(q, "run_id"); err != nil {
		return err
	}
	limit, before, err := pageParams(q, cursorMemoryExtractions, defaultExtractionLimit, maxExtractionLimit)
	if err != nil {
		return err
	}
	if before != "" {
		if _, err := uuid.Parse(before); err != nil {
			return errBadCursor
		}
	}
	p.Before, p.Limit = before, limit+1
	list, err := x.Extractions(r.Context(), p)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, agentd.MemoryExtraction.View,
		func(j agentd.MemoryExtraction) string { return encodeCursor(cursorMemoryExtractions, j.ID) }))
	return nil
}

// memoryExtractionGet answers GET /memory/extractions/{id}.
func (s *server) memoryExtractionGet(w http.ResponseWriter, r *http.Request) error {
	x, err := s.extractions()
	if err != nil {
		return err
	}
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return errMemoryExtractionNotFound
	}
	job, err := x.Extraction(r.Context(), TenantFromContext(r.Context()), id.String())
	if errors.Is(err, agentd.ErrMemoryExtractionNotFound) {
		return errMemoryExtractionNotFound
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, job.View())
	return nil
}
