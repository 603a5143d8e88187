package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentd/agentd"
)

// Eval is an evaluation as the server shows it (docs/evals.md): what it
// runs, where it is, and, read by Get, its report.
type Eval struct {
	Object         string            `json:"object"`
	ID             string            `json:"id"`
	Agent          string            `json:"agent"`
	Versions       []string          `json:"versions"` // labels: version numbers, and "candidate"
	Baseline       string            `json:"baseline"`
	Dataset        string            `json:"dataset"`
	DatasetVersion int               `json:"dataset_version"`
	Repeat         int               `json:"repeat"`
	Concurrency    int               `json:"concurrency"`
	Status         agentd.EvalStatus `json:"status"`
	Error          *string           `json:"error"`
	Runs           int               `json:"runs"`   // cases × versions × repeat
	Scored         int               `json:"scored"` // how many of them are made and scored
	Metadata       json.RawMessage   `json:"metadata"`
	CreatedBy      string            `json:"created_by"`
	CreatedAt      time.Time         `json:"created_at"`
	FinishedAt     *time.Time        `json:"finished_at"`
	Report         *EvalReport       `json:"report,omitempty"` // Get's; nil in a list
}

// Ended reports whether the evaluation is no longer running.
func (e *Eval) Ended() bool { return e.Status.Ended() }

// EvalReport is an evaluation's report: per version the totals, then the
// regressions (cases the baseline passed more often than a version), then
// each case's runs with their scores.
type EvalReport struct {
	Versions    []EvalVersionTotals `json:"versions"`
	Regressions []EvalRegression    `json:"regressions"`
	Cases       []EvalCase          `json:"cases"`
}

// Totals returns the totals of version label, or false.
func (r *EvalReport) Totals(label string) (EvalVersionTotals, bool) {
	for _, v := range r.Versions {
		if v.Version == label {
			return v, true
		}
	}
	return EvalVersionTotals{}, false
}

// EvalVersionTotals are a version's totals over its scored runs.
type EvalVersionTotals struct {
	Version  string  `json:"version"`
	Runs     int     `json:"runs"`   // scored
	Passed   int     `json:"passed"` // of them
	PassRate float64 `json:"pass_rate"`
	// PassAtK is the share of cases with at least one passed run among
	// their repetitions; PassAllK the share with every run passed.
	PassAtK   float64       `json:"pass_at_k"`
	PassAllK  float64       `json:"pass_all_k"`
	Flaky     []string      `json:"flaky"` // cases whose repetitions disagreed
	Cost      float64       `json:"cost"`
	LatencyMS EvalQuantiles `json:"latency_ms"`
}

// EvalQuantiles are the p50 and p95 of a measure (nil: no run measured).
type EvalQuantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
}

// EvalRegression is a case that the baseline passed more often than
// Version, with the version's failed runs of it and their scores.
type EvalRegression struct {
	CaseID   string          `json:"case_id"`
	Name     string          `json:"name,omitempty"`
	Version  string          `json:"version"`
	Baseline float64         `json:"baseline_pass_rate"`
	Now      float64         `json:"pass_rate"`
	Failed   []EvalRunResult `json:"failed"`
}

// EvalCase is a case's runs, by version label.
type EvalCase struct {
	CaseID   string                     `json:"case_id"`
	Name     string                     `json:"name,omitempty"`
	Versions map[string]EvalCaseVersion `json:"versions"`
}

// EvalCaseVersion is a case's runs under a version.
type EvalCaseVersion struct {
	Runs     int             `json:"runs"`
	Passed   int             `json:"passed"`
	PassRate float64         `json:"pass_rate"`
	Results  []EvalRunResult `json:"results"`
}

// EvalRunResult is one run of a case: its repetition, the run, how it
// stopped, and its scores once scored (Passed nil: not yet).
type EvalRunResult struct {
	Rep       int            `json:"rep"`
	RunID     string         `json:"run_id,omitempty"`
	Status    string         `json:"status,omitempty"`
	Passed    *bool          `json:"passed"`
	Cost      float64        `json:"cost"`
	LatencyMS *float64       `json:"latency_ms"`
	Scores    []agentd.Score `json:"scores"`
}

// NewEval is what POST /evals sends: an agent, its Versions to run (and
// or a Candidate, an unsaved definition as POST /agents takes it), the
// Baseline they are compared with (0: the first of Versions), a Dataset
// (at DatasetVersion; 0: its latest), Repeat runs of each case and
// version (0: 1) and Concurrency (0: the server's default).
type NewEval struct {
	Agent          string          `json:"agent"`
	Versions       []int           `json:"versions,omitempty"`
	Candidate      json.RawMessage `json:"candidate,omitempty"`
	Baseline       int             `json:"baseline,omitempty"`
	Dataset        string          `json:"dataset"`
	DatasetVersion int             `json:"dataset_version,omitempty"`
	Repeat         int             `json:"repeat,omitempty"`
	Concurrency    int             `json:"concurrency,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header; empty: the
	// client makes one (the same on each retry).
	IdempotencyKey string `json:"-"`
}

// Evals are the tenant's evaluations (the /evals routes): Client.Evals
// returns them.
type Evals struct{ c *Client }

// Evals returns the client's door to the tenant's evaluations.
func (c *Client) Evals() *Evals { return &Evals{c: c} }

func evalPath(id string) string { return "/evals/" + esc(id) }

// Create starts an evaluation (POST /evals); it returns it running,
// without a report.
func (e *Evals) Create(ctx context.Context, ne NewEval) (*Eval, error) {
	return e.send(ctx, request{method: http.MethodPost, path: "/evals", body: ne, key: ne.IdempotencyKey})
}

// Get reads an evaluation with its report (GET /evals/{id}).
func (e *Evals) Get(ctx context.Context, id string) (*Eval, error) {
	return e.send(ctx, request{method: http.MethodGet, path: evalPath(id)})
}

// Cancel cancels a running evaluation and its runs in flight (POST
// /evals/{id}/cancel); one that already ended is the error
// evaluation_ended.
func (e *Evals) Cancel(ctx context.Context, id string) (*Eval, error) {
	return e.send(ctx, request{method: http.MethodPost, path: evalPath(id) + "/cancel"})
}

func (e *Evals) send(ctx context.Context, req request) (*Eval, error) {
	var ev Eval
	if _, err := e.c.do(ctx, req, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// List reads a page of the tenant's evaluations, newest first, without
// their reports; limit 0 takes the server's default, cursor is a page's
// NextCursor.
func (e *Evals) List(ctx context.Context, limit int, cursor string) (*Page[Eval], error) {
	var page Page[Eval]
	if _, err := e.c.do(ctx, request{method: http.MethodGet, path: "/evals", query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// DefaultEvalPoll is how often Wait reads an evaluation unless told.
const DefaultEvalPoll = time.Second

// Wait reads evaluation id every interval (0: DefaultEvalPoll) until it
// is no longer running, and returns it, with its report. progress, when
// not nil, is given each reading, the last included. It returns ctx's
// error when ctx ends first; the evaluation goes on.
func (e *Evals) Wait(ctx context.Context, id string, interval time.Duration, progress func(*Eval)) (*Eval, error) {
	if interval <= 0 {
		interval = DefaultEvalPoll
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ev, err := e.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(ev)
		}
		if ev.Ended() {
			return ev, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
