package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// DatasetLimits bound the tenants' datasets (docs/evals.md); a zero field
// takes its default. A change past one is 422 dataset_limit naming it.
type DatasetLimits struct {
	// CasesPerDataset caps the cases one version of a dataset holds
	// (cases_per_dataset); default DefaultCasesPerDataset.
	CasesPerDataset int
	// BytesPerCase caps a case's JSON, a recorded conversation's images
	// and files included (bytes_per_case); default DefaultBytesPerCase.
	BytesPerCase int
}

// Defaults of DatasetLimits.
const (
	DefaultCasesPerDataset = 1000
	DefaultBytesPerCase    = 2 << 20
)

func (l DatasetLimits) resolved() DatasetLimits {
	if l.CasesPerDataset <= 0 {
		l.CasesPerDataset = DefaultCasesPerDataset
	}
	if l.BytesPerCase <= 0 {
		l.BytesPerCase = DefaultBytesPerCase
	}
	return l
}

// Codes of datasets' routes.
const (
	CodeDatasetNotFound = "dataset_not_found"      // 404: no such dataset (or version of it) for this tenant
	CodeDatasetExists   = "dataset_exists"         // 409: POST /datasets with a name the tenant uses
	CodeCaseNotFound    = "dataset_case_not_found" // 404: the dataset's latest version has no such case
	CodeCaseExists      = "dataset_case_exists"    // 409: a case's id names a case of the dataset's latest version
	CodeDatasetLimit    = "dataset_limit"          // 422: a limit of datasets; "limit" names it
)

// Datasets' lists.
const (
	defaultDatasetLimit = 20
	maxDatasetLimit     = 100
	cursorDatasets      = "datasets:"
	cursorCases         = "dataset_cases:"
)

var errDatasetNotFound = newError(http.StatusNotFound, CodeDatasetNotFound, "Dataset not found",
	"the tenant has no dataset of this name")

// datasetRoutes routes datasets: r the reads, changes the writes.
func (s *server) datasetRoutes(r, changes chi.Router) {
	changes.With(s.idempotent).Post("/datasets", s.handle(s.datasetCreate))
	r.Get("/datasets", s.handle(s.datasetList))
	r.Get("/datasets/{name}", s.handle(s.datasetGet))
	r.With(s.checkOrigin).Delete("/datasets/{name}", s.handle(s.datasetDelete))
	r.Get("/datasets/{name}/versions/{version}", s.handle(s.datasetVersionGet))
	r.Get("/datasets/{name}/cases", s.handle(s.caseList))
	changes.With(s.idempotent).Post("/datasets/{name}/cases", s.handle(s.casesAdd))
	r.With(s.checkOrigin).Delete("/datasets/{name}/cases/{case_id}", s.handle(s.caseRemove))
}

// datasetProblem maps datasets' errors to their problems.
func datasetProblem(err error) error {
	var limit *agentd.DatasetLimitError
	var exists *agentd.CaseExistsError
	var version *agentd.DatasetVersionError
	switch {
	case errors.As(err, &limit):
		e := newError(http.StatusUnprocessableEntity, CodeDatasetLimit, "Dataset limit", limit.Error())
		e.limit = string(limit.Limit)
		return e
	case errors.As(err, &exists):
		return newError(http.StatusConflict, CodeCaseExists, "Case exists",
			exists.Error()+": remove it first, or give the new case another id")
	case errors.As(err, &version):
		return newError(http.StatusNotFound, CodeDatasetNotFound, "Dataset version not found", version.Error())
	case errors.Is(err, agentd.ErrDatasetNotFound):
		return errDatasetNotFound
	case errors.Is(err, agentd.ErrCaseNotFound):
		return newError(http.StatusNotFound, CodeCaseNotFound, "Case not found", "the dataset's latest version has no case of this id")
	}
	return err
}

// datasetRequest is the body of POST /datasets.
type datasetRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Metadata    json.RawMessage `json:"metadata"`
	Cases       json.RawMessage `json:"cases"`
}

// datasetCreate answers POST /datasets: 201 and the dataset at its first
// version, with the cases the body gives (none: an empty dataset).
func (s *server) datasetCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	var req datasetRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	in := agentd.DatasetDefine{TenantID: TenantFromContext(ctx), Actor: ActorFromContext(ctx)}
	if in.Name, err = nameOf("dataset", "", req.Name); err != nil {
		return err
	}
	if d := req.Description; d != nil {
		if len(*d) > agentd.MaxDatasetDescriptionBytes {
			return fieldError("description", "must be at most %d bytes", agentd.MaxDatasetDescriptionBytes)
		}
		if err := storable("description", *d); err != nil {
			return err
		}
		in.Description = *d
	}
	if in.Metadata, err = parseMetadata(req.Metadata); err != nil {
		return err
	}
	if !isNull(req.Cases) {
		if in.Cases, err = s.casesOf(r, req.Cases, "cases"); err != nil {
			return datasetProblem(err)
		}
	}
	d, err := s.store.DatasetCreate(ctx, in)
	if errors.Is(err, agentd.ErrDatasetExists) {
		return newError(http.StatusConflict, CodeDatasetExists, "Dataset exists",
			fmt.Sprintf("the tenant has a dataset named %q: POST /datasets/%s/cases adds cases to it", in.Name, in.Name))
	}
	if err != nil {
		return datasetProblem(err)
	}
	w.Header().Set("Location", "/datasets/"+d.Name)
	s.writeJSON(w, r, http.StatusCreated, d.View())
	return nil
}

// casesAdd answers POST /datasets/{name}/cases, whose body is a case or
// {"cases": [...]}: 201 and the dataset's new version, which holds them.
func (s *server) casesAdd(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	var batch map[string]json.RawMessage
	if err := decodeStrict(body, &batch, ""); err != nil {
		return err
	}
	p := agentd.CasesAdd{TenantID: TenantFromContext(ctx), Name: chi.URLParam(r, "name"), Actor: ActorFromContext(ctx),
		MaxCases: s.datasets.CasesPerDataset}
	if _, err := s.store.DatasetGet(ctx, p.TenantID, p.Name, 0); err != nil {
		return datasetProblem(err)
	}
	if raw, ok := batch["cases"]; ok {
		if len(batch) > 1 {
			return fieldError("cases", "is a batch of cases: the body holds nothing else")
		}
		p.Cases, err = s.casesOf(r, raw, "cases")
		if err == nil && len(p.Cases) == 0 {
			err = fieldError("cases", "must not be empty")
		}
	} else {
		var c agentd.DatasetCase
		c, err = s.caseOf(r, body, "")
		p.Cases = []agentd.DatasetCase{c}
	}
	if err != nil {
		return datasetProblem(err)
	}
	d, err := s.store.DatasetCasesAdd(ctx, p)
	if err != nil {
		return datasetProblem(err)
	}
	w.Header().Set("Location", "/datasets/"+d.Name+"/versions/"+strconv.Itoa(d.Version))
	s.writeJSON(w, r, http.StatusCreated, d.View())
	return nil
}

// caseRemove answers DELETE /datasets/{name}/cases/{case_id}: 200 and the
// dataset's new version, without the case (its versions before keep it).
func (s *server) caseRemove(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	d, err := s.store.DatasetCaseRemove(ctx, TenantFromContext(ctx), chi.URLParam(r, "name"), chi.URLParam(r, "case_id"),
		ActorFromContext(ctx))
	if err != nil {
		return datasetProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, d.View())
	return nil
}

func (s *server) datasetGet(w http.ResponseWriter, r *http.Request) error {
	d, err := s.store.DatasetGet(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), 0)
	if err != nil {
		return datasetProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, d.View())
	return nil
}

// datasetVersion reads the version a path or query parameter names: a
// version number, 1 or more.
func datasetVersion(field, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > math.MaxInt32 {
		return 0, fieldError(field, "must be a version number, 1 or more")
	}
	return n, nil
}

func (s *server) datasetVersionGet(w http.ResponseWriter, r *http.Request) error {
	n, err := datasetVersion("version", chi.URLParam(r, "version"))
	if err != nil {
		return err
	}
	d, err := s.store.DatasetGet(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), n)
	if err != nil {
		return datasetProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, d.View())
	return nil
}

func (s *server) datasetList(w http.ResponseWriter, r *http.Request) error {
	limit, after, err := pageParams(r.URL.Query(), cursorDatasets, defaultDatasetLimit, maxDatasetLimit)
	if err != nil {
		return err
	}
	list, err := s.store.DatasetList(r.Context(), TenantFromContext(r.Context()), after, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, agentd.Dataset.View,
		func(d agentd.Dataset) string { return encodeCursor(cursorDatasets, d.Name) }))
	return nil
}

// caseList answers GET /datasets/{name}/cases: a page of the cases of
// the dataset's latest version, or of ?version=N, in the order they were
// added.
func (s *server) caseList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, pos, err := pageParams(q, cursorCases, defaultDatasetLimit, maxDatasetLimit)
	if err != nil {
		return err
	}
	after := 0
	if pos != "" {
		if after, err = strconv.Atoi(pos); err != nil || after < 1 {
			return errBadCursor
		}
	}
	version := 0
	if v := q.Get("version"); v != "" {
		if version, err = datasetVersion("version", v); err != nil {
			return err
		}
	}
	cases, err := s.store.DatasetCases(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), version, after, limit+1)
	if err != nil {
		return datasetProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, page(cases, limit, agentd.StoredCase.View,
		func(c agentd.StoredCase) string { return encodeCursor(cursorCases, strconv.Itoa(c.Seq)) }))
	return nil
}

// datasetDelete answers DELETE /datasets/{name}: 204; its cases go with it.
func (s *server) datasetDelete(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := s.store.DatasetDelete(ctx, TenantFromContext(ctx), chi.URLParam(r, "name"), ActorFromContext(ctx)); err != nil {
		return datasetProblem(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// limitCases refuses a list of n cases past the cases one version may hold.
func (s *server) limitCases(n int) error {
	if n > s.datasets.CasesPerDataset {
		return &agentd.DatasetLimitError{Limit: agentd.LimitCasesPerDataset, Max: int64(s.datasets.CasesPerDataset), Would: int64(n)}
	}
	return nil
}

// splitCases splits a list of cases (field names it).
func splitCases(raw json.RawMessage, field string) ([]json.RawMessage, error) {
	items, ok := runspec.SplitArray(raw)
	if !ok {
		return nil, fieldError(field, "must be a list of cases")
	}
	return items, nil
}
