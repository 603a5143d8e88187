package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/eval"
)

// Evaluations (docs/evals.md): POST /evals makes one, whose runs the
// driver of every instance makes and scores; GET /evals/{id} reports on
// it, regressions first.

// Codes of evaluations' routes.
const (
	CodeEvalNotFound = "evaluation_not_found" // 404: no such evaluation for this tenant
	CodeEvalEnded    = "evaluation_ended"     // 409: the evaluation already ended
)

var errEvalNotFound = newError(http.StatusNotFound, CodeEvalNotFound, "Evaluation not found",
	"the tenant has no evaluation of this id")

const cursorEvals = "evals:"

// evalRoutes routes evaluations: r the reads, changes the writes.
func (s *server) evalRoutes(r, changes chi.Router) {
	changes.With(s.idempotent).Post("/evals", s.handle(s.evalCreate))
	r.Get("/evals", s.handle(s.evalList))
	r.Get("/evals/{id}", s.handle(s.evalGet))
	changes.Post("/evals/{id}/cancel", s.handle(s.evalCancel))
}

// evalRequest is the body of POST /evals.
type evalRequest struct {
	Agent          *string         `json:"agent"`
	Versions       []int           `json:"versions"`
	Candidate      json.RawMessage `json:"candidate"`
	Baseline       *int            `json:"baseline"`
	Dataset        *string         `json:"dataset"`
	DatasetVersion *int            `json:"dataset_version"`
	Repeat         *int            `json:"repeat"`
	Concurrency    *int            `json:"concurrency"`
	Metadata       json.RawMessage `json:"metadata"`
}

// EvalView is an evaluation as the API shows it; Report is GET
// /evals/{id}'s.
type EvalView struct {
	Object         string            `json:"object"`
	ID             string            `json:"id"`
	Agent          string            `json:"agent"`
	Versions       []string          `json:"versions"`
	Baseline       string            `json:"baseline"`
	Dataset        string            `json:"dataset"`
	DatasetVersion int               `json:"dataset_version"`
	Repeat         int               `json:"repeat"`
	Concurrency    int               `json:"concurrency"`
	Status         agentd.EvalStatus `json:"status"`
	Error          *string           `json:"error"`
	Runs           int               `json:"runs"`
	Scored         int               `json:"scored"`
	Metadata       json.RawMessage   `json:"metadata"`
	CreatedBy      string            `json:"created_by"`
	CreatedAt      time.Time         `json:"created_at"`
	FinishedAt     *time.Time        `json:"finished_at"`
	Report         *eval.Report      `json:"report,omitempty"`
}

func evalView(e agentd.Evaluation) EvalView {
	v := EvalView{Object: "evaluation", ID: e.ID, Agent: e.Agent, Versions: e.Versions, Baseline: e.Baseline, Dataset: e.Dataset,
		DatasetVersion: e.DatasetVersion, Repeat: e.Repeat, Concurrency: e.Concurrency, Status: e.Status, Runs: e.Runs,
		Scored: e.Scored, Metadata: e.Metadata, CreatedBy: e.Actor, CreatedAt: e.CreatedAt.UTC(), FinishedAt: e.FinishedAt}
	if e.Error != "" {
		v.Error = &e.Error
	}
	if len(v.Metadata) == 0 {
		v.Metadata = json.RawMessage("null")
	}
	if v.FinishedAt != nil {
		t := v.FinishedAt.UTC()
		v.FinishedAt = &t
	}
	return v
}

// evalCreate answers POST /evals: 201 and the evaluation, running.
func (s *server) evalCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req evalRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	e := agentd.Evaluation{ID: agentd.NewID(), TenantID: TenantFromContext(ctx), Actor: ActorFromContext(ctx),
		CreatedAt: time.Now().UTC()}
	if err := s.evalAgent(r, req, &e); err != nil {
		return err
	}
	cases, err := s.evalDataset(r, req, &e)
	if err != nil {
		return err
	}
	if e.Metadata, err = parseMetadata(req.Metadata); err != nil {
		return err
	}
	out, err := s.store.EvalCreate(ctx, agentd.EvalCreate{Eval: e, Cases: cases})
	if errors.Is(err, agentd.ErrEvalsRunning) {
		return newError(http.StatusTooManyRequests, CodeQuotaExceeded, "Quota exceeded", err.Error())
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/evals/"+out.ID)
	s.writeJSON(w, r, http.StatusCreated, evalView(out))
	return nil
}

// evalAgent reads the agent, versions, candidate and baseline of req onto e.
func (s *server) evalAgent(r *http.Request, req evalRequest, e *agentd.Evaluation) error {
	ctx := r.Context()
	if req.Agent == nil || *req.Agent == "" {
		return fieldError("agent", "is required: the agent whose versions are evaluated")
	}
	e.Agent = *req.Agent
	if len(req.Versions) == 0 && isNull(req.Candidate) {
		return fieldError("versions", "is required: the agent versions to run (or a candidate definition)")
	}
	for i, v := range req.Versions {
		if err := s.evalVersionExists(r, e.Agent, v, fmt.Sprintf("versions[%d]", i)); err != nil {
			return err
		}
		if label := strconv.Itoa(v); !slices.Contains(e.Versions, label) {
			e.Versions = append(e.Versions, label)
		}
	}
	if req.Baseline != nil {
		if err := s.evalVersionExists(r, e.Agent, *req.Baseline, "baseline"); err != nil {
			return err
		}
		e.Baseline = strconv.Itoa(*req.Baseline)
		if !slices.Contains(e.Versions, e.Baseline) {
			e.Versions = append([]string{e.Baseline}, e.Versions...)
		}
	} else if len(e.Versions) > 0 {
		e.Baseline = e.Versions[0]
	}
	if !isNull(req.Candidate) {
		def, err := s.compose.Candidate(ctx, e.TenantID, e.Agent, req.Candidate)
		if err != nil {
			return err
		}
		e.Candidate, e.Versions = def, append(e.Versions, agentd.CandidateLabel)
		if e.Baseline == "" {
			e.Baseline = agentd.CandidateLabel
		}
	}
	if len(e.Versions) > agentd.MaxEvalVersions {
		return fieldError("versions", "must name at most %d versions, the candidate and baseline included", agentd.MaxEvalVersions)
	}
	return nil
}

// evalVersionExists checks that version v of the tenant's agent exists.
func (s *server) evalVersionExists(r *http.Request, agent string, v int, field string) error {
	if v < 1 {
		return fieldError(field, "must be a version number, 1 or more")
	}
	_, err := s.store.AgentGet(r.Context(), TenantFromContext(r.Context()), agent, v)
	var version *agentd.AgentVersionError
	switch { // an *AgentVersionError is also ErrAgentNotFound: first
	case errors.As(err, &version):
		return fieldError(field, "%s", version.Error())
	case errors.Is(err, agentd.ErrAgentNotFound):
		return fieldError("agent", "the tenant has no agent named %q (see GET /agents)", agent)
	}
	return err
}

// evalDataset reads the dataset, its version, the repetitions and the
// concurrency of req onto e, and returns the dataset version's cases.
func (s *server) evalDataset(r *http.Request, req evalRequest, e *agentd.Evaluation) ([]agentd.StoredCase, error) {
	if req.Dataset == nil || *req.Dataset == "" {
		return nil, fieldError("dataset", "is required: the dataset whose cases are run")
	}
	e.Dataset = *req.Dataset
	version := 0
	if req.DatasetVersion != nil {
		if version = *req.DatasetVersion; version < 1 {
			return nil, fieldError("dataset_version", "must be a version number, 1 or more")
		}
	}
	e.Repeat, e.Concurrency = 1, agentd.DefaultEvalConcurrency
	if p := req.Repeat; p != nil && (*p < 1 || *p > agentd.MaxEvalRepeat) {
		return nil, fieldError("repeat", "must be from 1 to %d", agentd.MaxEvalRepeat)
	} else if p != nil {
		e.Repeat = *p
	}
	if p := req.Concurrency; p != nil && (*p < 1 || *p > agentd.MaxEvalConcurrency) {
		return nil, fieldError("concurrency", "must be from 1 to %d", agentd.MaxEvalConcurrency)
	} else if p != nil {
		e.Concurrency = *p
	}
	d, err := s.store.DatasetGet(r.Context(), e.TenantID, e.Dataset, version)
	if err != nil {
		return nil, datasetProblem(err)
	}
	e.DatasetVersion = d.Version // the latest, when none was named: the evaluation keeps it
	var cases []agentd.StoredCase
	for after := 0; ; {
		page, err := s.store.DatasetCases(r.Context(), e.TenantID, e.Dataset, d.Version, after, maxDatasetLimit)
		if err != nil {
			return nil, datasetProblem(err)
		}
		for _, c := range page {
			cases, after = append(cases, c), c.Seq
		}
		if len(page) < maxDatasetLimit {
			break
		}
	}
	switch n := len(cases) * len(e.Versions) * e.Repeat; {
	case len(cases) == 0:
		return nil, fieldError("dataset", "version %d of dataset %s has no cases", d.Version, e.Dataset)
	case n > agentd.MaxEvalRuns:
		return nil, fieldError("repeat", "the evaluation would make %d runs (cases × versions × repeat); at most %d",
			n, agentd.MaxEvalRuns)
	}
	return cases, nil
}

func evalID(r *http.Request) (string, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return "", errEvalNotFound
	}
	return id.String(), nil
}

func evalProblem(err error) error {
	switch {
	case errors.Is(err, agentd.ErrEvalNotFound):
		return errEvalNotFound
	case errors.Is(err, agentd.ErrEvalEnded):
		return newError(http.StatusConflict, CodeEvalEnded, "Evaluation ended", "the evaluation already ended")
	}
	return err
}

// evalGet answers GET /evals/{id}: the evaluation with its report.
func (s *server) evalGet(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := evalID(r)
	if err != nil {
		return err
	}
	e, err := s.store.EvalGet(ctx, TenantFromContext(ctx), id)
	if err != nil {
		return evalProblem(err)
	}
	rows, err := s.store.EvalRuns(ctx, e.ID)
	if err != nil {
		return err
	}
	var ids []string
	for _, row := range rows {
		if row.RunID != "" {
			ids = append(ids, row.RunID)
		}
	}
	costs := map[string]float64{}
	if len(ids) > 0 {
		rc, err := s.store.RunCosts(ctx, ids)
		if err != nil {
			return err
		}
		for id, c := range rc {
			costs[id] = c.Cost
		}
	}
	names, err := s.caseNames(r, e)
	if err != nil {
		return err
	}
	v := evalView(e)
	report := eval.MakeReport(e, rows, names, costs)
	v.Report = &report
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}

// caseNames are the names of e's cases that have one, by id (none when
// the dataset was deleted since).
func (s *server) caseNames(r *http.Request, e agentd.Evaluation) (map[string]string, error) {
	names := map[string]string{}
	for after := 0; ; {
		page, err := s.store.DatasetCases(r.Context(), e.TenantID, e.Dataset, e.DatasetVersion, after, maxDatasetLimit)
		if errors.Is(err, agentd.ErrDatasetNotFound) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		for _, c := range page {
			if c.Case.Name != "" {
				names[c.Case.ID] = c.Case.Name
			}
			after = c.Seq
		}
		if len(page) < maxDatasetLimit {
			return names, nil
		}
	}
}

// evalList answers GET /evals: a page of the tenant's evaluations, newest
// first, without their reports.
func (s *server) evalList(w http.ResponseWriter, r *http.Request) error {
	limit, before, err := pageParams(r.URL.Query(), cursorEvals, defaultDatasetLimit, maxDatasetLimit)
	if err != nil {
		return err
	}
	list, err := s.store.EvalList(r.Context(), TenantFromContext(r.Context()), before, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, evalView,
		func(e agentd.Evaluation) string { return encodeCursor(cursorEvals, e.ID) }))
	return nil
}

// evalCancel answers POST /evals/{id}/cancel: the evaluation, cancelled,
// and its runs in flight cancelled.
func (s *server) evalCancel(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := evalID(r)
	if err != nil {
		return err
	}
	e, runs, err := s.store.EvalCancel(ctx, TenantFromContext(ctx), id)
	if err != nil {
		return evalProblem(err)
	}
	for _, run := range runs {
		_, err := s.runs.Cancel(ctx, e.TenantID, run, ActorFromContext(ctx))
		if err != nil && !errors.Is(err, agentd.ErrRunNotFound) && !errors.Is(err, agentd.ErrRunFinished) {
			return err
		}
	}
	s.writeJSON(w, r, http.StatusOK, evalView(e))
	return nil
}
