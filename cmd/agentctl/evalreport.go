package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// printEval writes an evaluation and, when it has one, its report: the
// totals per version, the regressions, then the cases that failed a run.
func (a *app) printEval(e *client.Eval) int {
	if a.json {
		return a.printJSON(e)
	}
	k := newKV(a.stdout)
	k.line("evaluation", e.ID)
	k.line("agent", e.Agent)
	var labels []string
	for _, v := range e.Versions {
		if v == e.Baseline {
			v += " (baseline)"
		}
		labels = append(labels, v)
	}
	k.line("versions", strings.Join(labels, ", "))
	k.line("dataset", fmt.Sprintf("%s, version %d", e.Dataset, e.DatasetVersion))
	k.line("repeat", fmt.Sprintf("%d (concurrency %d)", e.Repeat, e.Concurrency))
	k.line("status", string(e.Status))
	k.line("error", deref(e.Error))
	k.line("runs", fmt.Sprintf("%d, %d scored", e.Runs, e.Scored))
	k.line("created", when(&e.CreatedAt)+" by "+e.CreatedBy)
	k.line("finished", when(e.FinishedAt))
	k.line("took", took(&e.CreatedAt, e.FinishedAt))
	k.flush()
	if e.Report == nil {
		return exitOK
	}
	fmt.Fprintln(a.stdout)
	a.printTotals(e)
	a.printRegressions(e.Report.Regressions)
	a.printFailedCases(e)
	return exitOK
}

// printTotals writes the table of the versions' totals.
func (a *app) printTotals(e *client.Eval) {
	tw := newTable(a.stdout)
	row(tw, "VERSION", "RUNS", "PASSED", "PASS RATE", "PASS@K", "ALL K", "FLAKY", "COST", "P50", "P95")
	for _, v := range e.Report.Versions {
		label := v.Version
		if label == e.Baseline {
			label += " (baseline)"
		}
		row(tw, label, itoa(v.Runs), itoa(v.Passed), percent(v.PassRate), percent(v.PassAtK), percent(v.PassAllK),
			itoa(len(v.Flaky)), agentd.FormatCost(v.Cost), millis(v.LatencyMS.P50), millis(v.LatencyMS.P95))
	}
	tw.Flush()
}

// printRegressions writes the regressions, each with the reasons of the
// scores that failed its runs.
func (a *app) printRegressions(regs []client.EvalRegression) {
	fmt.Fprintln(a.stdout)
	if len(regs) == 0 {
		fmt.Fprintln(a.stdout, "REGRESSIONS: none")
		return
	}
	fmt.Fprintf(a.stdout, "REGRESSIONS: %d (cases the baseline passed more often)\n", len(regs))
	for _, r := range regs {
		fmt.Fprintf(a.stdout, "  %s  version %s: passed %s, baseline %s\n", caseLabel(r.CaseID, r.Name), r.Version,
			percent(r.Now), percent(r.Baseline))
		for _, run := range r.Failed {
			for _, reason := range failedReasons(run) {
				fmt.Fprintf(a.stdout, "      rep %d, run %s: %s\n", run.Rep, run.RunID, reason)
			}
		}
	}
}

// printFailedCases writes each case and version with a failed run, and
// the distinct reasons of the scores that failed them.
func (a *app) printFailedCases(e *client.Eval) {
	fmt.Fprintln(a.stdout)
	tw := newTable(a.stdout)
	n := 0
	for _, c := range e.Report.Cases {
		for _, v := range e.Versions {
			cv, ok := c.Versions[v]
			if !ok || cv.Runs == 0 || cv.Passed == cv.Runs {
				continue
			}
			if n++; n == 1 {
				fmt.Fprintln(a.stdout, "FAILED CASES:")
				row(tw, "  CASE", "VERSION", "PASSED", "WHY")
			}
			var why []string
			for _, run := range cv.Results {
				for _, r := range failedReasons(run) {
					if !slices.Contains(why, r) {
						why = append(why, r)
					}
				}
			}
			row(tw, "  "+caseLabel(c.CaseID, c.Name), v, fmt.Sprintf("%d/%d", cv.Passed, cv.Runs), shorten(strings.Join(why, "; "), 120))
		}
	}
	if n == 0 {
		fmt.Fprintln(a.stdout, "FAILED CASES: none")
	}
	tw.Flush()
}

// failedReasons are "type: reason" for each score that failed run, or its
// status when it failed with none.
func failedReasons(run client.EvalRunResult) []string {
	if run.Passed == nil || *run.Passed {
		return nil
	}
	var out []string
	for _, s := range run.Scores {
		if s.Outcome == agentd.ScoreFailed {
			label := string(s.Type)
			if s.Name != "" {
				label += " (" + s.Name + ")"
			}
			out = append(out, label+": "+s.Reason)
		}
	}
	if len(out) == 0 {
		out = append(out, "the run "+run.Status)
	}
	return out
}

func caseLabel(id, name string) string {
	if name == "" {
		return id
	}
	return id + " (" + shorten(name, 40) + ")"
}

// percent writes a fraction as a percentage.
func percent(f float64) string {
	s := fmt.Sprintf("%.1f", 100*f)
	return strings.TrimSuffix(s, ".0") + "%"
}

// millis writes a latency in milliseconds as a duration, or "-".
func millis(ms *float64) string {
	if ms == nil {
		return "-"
	}
	d := time.Duration(*ms * float64(time.Millisecond))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
