package eval

import (
	"math"
	"slices"
	"time"

	"github.com/agentd/agentd"
)

// Report is an evaluation's report (GET /evals/{id}): per version the
// totals, then the regressions (cases the baseline passed more often than
// a version), then each case's runs with their scores.
type Report struct {
	Versions    []VersionTotals `json:"versions"`
	Regressions []Regression    `json:"regressions"`
	Cases       []CaseReport    `json:"cases"`
}

// VersionTotals are a version's totals over the scored runs.
type VersionTotals struct {
	Version string `json:"version"`
	// Runs is how many of its runs are scored, Passed how many passed.
	Runs     int     `json:"runs"`
	Passed   int     `json:"passed"`
	PassRate float64 `json:"pass_rate"`
	// PassAtK is the share of cases with at least one passed run among
	// their repetitions; PassAllK the share with every run passed.
	PassAtK  float64 `json:"pass_at_k"`
	PassAllK float64 `json:"pass_all_k"`
	// Flaky lists the cases whose repetitions disagreed.
	Flaky     []string  `json:"flaky"`
	Cost      float64   `json:"cost"`
	LatencyMS Quantiles `json:"latency_ms"`
}

// Quantiles are the p50 and p95 of a measure (nil: no run measured).
type Quantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
}

// Regression is a case that the baseline passed more often than version.
type Regression struct {
	CaseID   string  `json:"case_id"`
	Name     string  `json:"name,omitempty"`
	Version  string  `json:"version"`
	Baseline float64 `json:"baseline_pass_rate"`
	Now      float64 `json:"pass_rate"`
	// Failed are the version's failed runs of the case, with the scores
	// that failed them.
	Failed []RunReport `json:"failed"`
}

// CaseReport is a case's runs, by version.
type CaseReport struct {
	CaseID   string                   `json:"case_id"`
	Name     string                   `json:"name,omitempty"`
	Versions map[string]CaseOfVersion `json:"versions"`
}

// CaseOfVersion is a case's runs under a version.
type CaseOfVersion struct {
	Runs     int         `json:"runs"`
	Passed   int         `json:"passed"`
	PassRate float64     `json:"pass_rate"`
	Results  []RunReport `json:"results"`
}

// RunReport is one run of a case: its repetition, the run, how it
// stopped, and its scores once scored.
type RunReport struct {
	Rep       int            `json:"rep"`
	RunID     string         `json:"run_id,omitempty"`
	Status    string         `json:"status,omitempty"`
	Passed    *bool          `json:"passed"`
	Cost      float64        `json:"cost"`
	LatencyMS *float64       `json:"latency_ms"`
	Scores    []agentd.Score `json:"scores"`
}

// MakeReport makes the report of evaluation e from its rows, the names of
// its cases (by id) and its runs' costs (by run id).
func MakeReport(e agentd.Evaluation, rows []agentd.EvalRun, names map[string]string, costs map[string]float64) Report {
	rep := Report{Versions: []VersionTotals{}, Regressions: []Regression{}, Cases: []CaseReport{}}
	byCase := map[string]*CaseReport{}
	for _, r := range rows {
		cr, ok := byCase[r.CaseID]
		if !ok {
			cr = &CaseReport{CaseID: r.CaseID, Name: names[r.CaseID], Versions: map[string]CaseOfVersion{}}
			byCase[r.CaseID] = cr
			rep.Cases = append(rep.Cases, CaseReport{CaseID: r.CaseID})
		}
		cv := cr.Versions[r.Version]
		rr := RunReport{Rep: r.Rep, RunID: r.RunID, Status: string(r.RunStatus), Passed: r.Passed, Cost: costs[r.RunID], Scores: r.Scores}
		if rr.Scores == nil {
			rr.Scores = []agentd.Score{}
		}
		if r.RunFinishedAt != nil {
			ms := float64(r.RunFinishedAt.Sub(r.RunCreatedAt)) / float64(time.Millisecond)
			rr.LatencyMS = &ms
		}
		if r.Passed != nil {
			cv.Runs++
			if *r.Passed {
				cv.Passed++
			}
			cv.PassRate = float64(cv.Passed) / float64(cv.Runs)
		}
		cv.Results = append(cv.Results, rr)
		cr.Versions[r.Version] = cv
	}
	for i := range rep.Cases {
		rep.Cases[i] = *byCase[rep.Cases[i].CaseID]
	}
	for _, v := range e.Versions {
		rep.Versions = append(rep.Versions, totals(v, rep.Cases))
	}
	rep.Regressions = regressions(e, rep.Cases)
	return rep
}

// totals are version v's totals over cases.
func totals(v string, cases []CaseReport) VersionTotals {
	t := VersionTotals{Version: v, Flaky: []string{}}
	var lat []float64
	var scoredCases, atK, allK int
	for _, c := range cases {
		cv := c.Versions[v]
		t.Runs, t.Passed = t.Runs+cv.Runs, t.Passed+cv.Passed
		for _, r := range cv.Results {
			t.Cost += r.Cost
			if r.LatencyMS != nil {
				lat = append(lat, *r.LatencyMS)
			}
		}
		if cv.Runs == 0 {
			continue
		}
		scoredCases++
		if cv.Passed > 0 {
			atK++
		}
		if cv.Passed == cv.Runs {
			allK++
		}
		if cv.Passed > 0 && cv.Passed < cv.Runs {
			t.Flaky = append(t.Flaky, c.CaseID)
		}
	}
	if t.Runs > 0 {
		t.PassRate = float64(t.Passed) / float64(t.Runs)
	}
	if scoredCases > 0 {
		t.PassAtK, t.PassAllK = float64(atK)/float64(scoredCases), float64(allK)/float64(scoredCases)
	}
	t.LatencyMS = quantiles(lat)
	return t
}

// regressions are the cases that the baseline passed more often than
// another version of e, both scored: by version, in the cases' order.
func regressions(e agentd.Evaluation, cases []CaseReport) []Regression {
	out := []Regression{}
	for _, v := range e.Versions {
		if v == e.Baseline {
			continue
		}
		for _, c := range cases {
			base, now := c.Versions[e.Baseline], c.Versions[v]
			if base.Runs == 0 || now.Runs == 0 || base.Passed == 0 || now.PassRate >= base.PassRate {
				continue
			}
			r := Regression{CaseID: c.CaseID, Name: c.Name, Version: v, Baseline: base.PassRate, Now: now.PassRate, Failed: []RunReport{}}
			for _, rr := range now.Results {
				if rr.Passed != nil && !*rr.Passed {
					r.Failed = append(r.Failed, rr)
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// quantiles are the p50 and p95 of xs (nearest rank).
func quantiles(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	slices.Sort(xs)
	at := func(q float64) *float64 {
		i := int(math.Ceil(q*float64(len(xs)))) - 1
		v := xs[max(0, min(i, len(xs)-1))]
		return &v
	}
	return Quantiles{P50: at(0.50), P95: at(0.95)}
}
