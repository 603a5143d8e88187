package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

type extractionPage struct {
	Data       []agentd.MemoryExtractionView `json:"data"`
	NextCursor *string                       `json:"next_cursor"`
	HasMore    bool                          `json:"has_more"`
}

// TestMemoryExtractionRoutes: the tenant's extraction jobs, newest first,
// a page at a time, of one run with run_id; one by id; another tenant's
// is none; a bad run_id or cursor is refused; a server without memory
// answers 501.
func TestMemoryExtractionRoutes(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	store := persisttest.Open(t, persist.Config{URL: url})
	b := setupWith(t, store, store, func(c *api.Config) { c.Memory = memory.New(memory.Config{Store: store}) })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var runs []string
	for i, tenant := range []string{"default", "default", "default", "other"} {
		run := agentd.NewID()
		runs = append(runs, run)
		if _, err := conn.Exec(ctx, `INSERT INTO memory_extractions (id, tenant_id, run_id, namespace, model, status, error,
				created_at) VALUES ($1, $2, $3, 'users/ann', CASE WHEN $4 = 0 THEN NULL ELSE 'small' END,
				CASE WHEN $4 = 1 THEN 'failed' ELSE 'pending' END, CASE WHEN $4 = 1 THEN 'model 500' END,
				now() + make_interval(secs => $4))`, agentd.NewID(), tenant, run, i); err != nil {
			t.Fatal(err)
		}
	}
	p := want[extractionPage](t, b.do("GET", "/memory/extractions?limit=2", ""), http.StatusOK)
	if len(p.Data) != 2 || !p.HasMore || p.Data[0].RunID != runs[2] || p.Data[1].RunID != runs[1] ||
		p.Data[1].Status != agentd.ExtractionFailed || p.Data[1].Error == nil || p.Data[1].NextAttemptAt != nil ||
		p.Data[0].Object != agentd.ObjectMemoryExtraction || p.Data[0].Namespace.String() != "users/ann" {
		t.Fatalf("page 1: %+v", p)
	}
	p = want[extractionPage](t, b.do("GET", "/memory/extractions?limit=2&cursor="+*p.NextCursor, ""), http.StatusOK)
	if len(p.Data) != 1 || p.HasMore || p.Data[0].RunID != runs[0] || p.Data[0].Model != nil || p.Data[0].NextAttemptAt == nil {
		t.Fatalf("page 2: %+v", p)
	}
	one := p.Data[0]
	p = want[extractionPage](t, b.do("GET", "/memory/extractions?run_id="+runs[1], ""), http.StatusOK)
	if len(p.Data) != 1 || p.Data[0].RunID != runs[1] {
		t.Fatalf("of a run: %+v", p)
	}
	if p := want[extractionPage](t, b.do("GET", "/memory/extractions?run_id="+runs[3], ""), http.StatusOK); len(p.Data) != 0 {
		t.Fatalf("another tenant's run: %+v", p)
	}
	if got := want[agentd.MemoryExtractionView](t, b.do("GET", "/memory/extractions/"+one.ID, ""), http.StatusOK); got.ID != one.ID ||
		got.RunID != runs[0] {
		t.Fatalf("get: %+v", got)
	}
	wantProblem(t, b.do("GET", "/memory/extractions/not-a-uuid", ""), http.StatusNotFound, "memory_extraction_not_found")
	wantProblem(t, b.do("GET", "/memory/extractions/"+agentd.NewID(), ""), http.StatusNotFound, "memory_extraction_not_found")
	wantProblem(t, b.do("GET", "/memory/extractions?run_id=x", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/memory/extractions?cursor=bad", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/memory/extractions?after=x", ""), http.StatusBadRequest, "unknown_parameter")

	none := setup(t)
	wantProblem(t, none.do("GET", "/memory/extractions", ""), http.StatusNotImplemented, "memory_unavailable")
	wantProblem(t, none.do("GET", "/memory/extractions/"+one.ID, ""), http.StatusNotImplemented, "memory_unavailable")
}
