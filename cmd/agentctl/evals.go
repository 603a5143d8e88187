package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// versionsFlag is a repeatable -version: "-version 3 -version 4", or
// "-version 3,4".
type versionsFlag []int

func (v *versionsFlag) String() string {
	var s []string
	for _, n := range *v {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

func (v *versionsFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a version number (1 or more)", part)
		}
		*v = append(*v, n)
	}
	return nil
}

// evalRunFlags are the flags of agentctl eval run.
type evalRunFlags struct {
	f                *cmdFlags
	agent, dataset   *string
	versions         versionsFlag
	baseline         *int
	datasetVersion   *int
	repeat, conc     *int
	candidate        *string
	failUnder        *float64
	allowRegressions *bool
	poll             *time.Duration
}

func newEvalRunFlags(a *app) *evalRunFlags {
	f := a.newFlags("eval run", "-agent NAME -version N [-version M] [-baseline B] -dataset NAME [flags]",
		"Evaluate versions of an agent (and/or an unsaved -candidate) on a dataset's cases against a\n"+
			"baseline version, wait for the evaluation to end (its progress on stderr), print its report,\n"+
			"and gate on it: the exit status is 1 when a version other than the baseline passes fewer of\n"+
			"its runs than -fail-under, or regresses on a case the baseline passed (unless\n"+
			"-allow-regressions), or the evaluation failed; 3 when it was cancelled.")
	ef := &evalRunFlags{f: f,
		agent:            f.String("agent", "", "the agent `NAME` whose versions are evaluated (required)"),
		dataset:          f.String("dataset", "", "the dataset `NAME` whose cases are run (required)"),
		baseline:         f.Int("baseline", 0, "the agent `version` the others are compared with (default: the first -version)"),
		datasetVersion:   f.Int("dataset-version", 0, "the dataset's `version` (default: its latest)"),
		repeat:           f.Int("repeat", 0, "runs of each case and version: `K` (pass@k; default 1)"),
		conc:             f.Int("concurrency", 0, "runs at once: `C` (default: the server's)"),
		candidate:        f.String("candidate", "", "also evaluate an unsaved definition of the agent: a JSON `file`, as PUT /agents/{name} takes it"),
		failUnder:        f.Float64("fail-under", 0, "fail when a version's pass rate is under this `fraction`, 0 to 1 (default 0: no threshold)"),
		allowRegressions: f.Bool("allow-regressions", false, "do not fail on regressions"),
		poll:             f.Duration("poll", time.Second, "how often to read the evaluation while it runs"),
	}
	f.Var(&ef.versions, "version", "an agent `version` to evaluate; repeat it, or give N,M")
	return ef
}

// request is the evaluation the flags ask for, or a usage error's exit
// status.
func (ef *evalRunFlags) request(args []string) (client.NewEval, int, bool) {
	f := ef.f
	if _, code, ok := f.parse(args, 0, 0); !ok {
		return client.NewEval{}, code, false
	}
	switch {
	case *ef.agent == "" || *ef.dataset == "":
		return client.NewEval{}, f.usageError("-agent and -dataset are required"), false
	case len(ef.versions) == 0 && *ef.candidate == "":
		return client.NewEval{}, f.usageError("give -version (or -candidate)"), false
	case *ef.failUnder < 0 || *ef.failUnder > 1:
		return client.NewEval{}, f.usageError("-fail-under is a fraction of runs passed, from 0 to 1"), false
	case *ef.baseline < 0 || *ef.datasetVersion < 0 || *ef.repeat < 0 || *ef.conc < 0 || *ef.poll <= 0:
		return client.NewEval{}, f.usageError("-baseline, -dataset-version, -repeat, -concurrency and -poll must be positive"), false
	}
	ne := client.NewEval{Agent: *ef.agent, Versions: ef.versions, Baseline: *ef.baseline, Dataset: *ef.dataset,
		DatasetVersion: *ef.datasetVersion, Repeat: *ef.repeat, Concurrency: *ef.conc}
	if *ef.candidate != "" {
		raw, err := os.ReadFile(*ef.candidate)
		if err != nil {
			fmt.Fprintf(f.a.stderr, "agentctl eval run: %v\n", err)
			return client.NewEval{}, exitError, false
		}
		if !json.Valid(raw) {
			return client.NewEval{}, f.usageError(*ef.candidate + " is not JSON: want an agent definition"), false
		}
		ne.Candidate = raw
	}
	return ne, exitOK, true
}

// evalRun: agentctl eval run [flags].
func evalRun(ctx context.Context, a *app, args []string) int {
	ef := newEvalRunFlags(a)
	ne, code, ok := ef.request(args)
	if !ok {
		return code
	}
	e, err := a.c.Evals().Create(ctx, ne)
	if err != nil {
		return a.fail(ctx, err)
	}
	cases := e.Runs / max(1, len(e.Versions)*e.Repeat)
	fmt.Fprintf(a.stderr, "evaluation %s: %d runs (%d case%s × %d version%s × %d), versions %s, baseline %s\n", e.ID, e.Runs,
		cases, plural(cases), len(e.Versions), plural(len(e.Versions)), e.Repeat, strings.Join(e.Versions, ", "), e.Baseline)
	id, scored := e.ID, -1
	e, err = a.c.Evals().Wait(ctx, id, *ef.poll, func(p *client.Eval) {
		if p.Scored != scored && !p.Ended() {
			scored = p.Scored
			fmt.Fprintf(a.stderr, "evaluation %s: %d of %d runs scored\n", p.ID, p.Scored, p.Runs)
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(a.stderr, "agentctl: the evaluation goes on: agentctl eval show %s; agentctl eval cancel %s stops it\n",
				id, id)
		}
		return a.fail(ctx, err)
	}
	if code := a.printEval(e); code != exitOK {
		return code
	}
	return a.gate(e, *ef.failUnder, *ef.allowRegressions)
}

// gate prints whether evaluation e passes the gate on stderr, and returns
// the exit status: exitOK when it passes, exitFailed when it does not (or
// the evaluation failed), exitCancelled when it was cancelled.
func (a *app) gate(e *client.Eval, failUnder float64, allowRegressions bool) int {
	switch e.Status {
	case agentd.EvalCancelled:
		fmt.Fprintf(a.stderr, "gate: evaluation %s was cancelled\n", e.ID)
		return exitCancelled
	case agentd.EvalFailed:
		fmt.Fprintf(a.stderr, "gate failed: evaluation %s failed: %s\n", e.ID, deref(e.Error))
		return exitFailed
	}
	failures := gateFailures(e, failUnder, allowRegressions)
	if len(failures) > 0 {
		fmt.Fprintf(a.stderr, "gate failed: %s\n", strings.Join(failures, "; "))
		return exitFailed
	}
	fmt.Fprintln(a.stderr, "gate passed")
	return exitOK
}

// gateFailures says why evaluation e fails the gate: each version but the
// baseline (the baseline itself when it is the only one) whose pass rate
// is under failUnder, and the regressions unless allowed.
func gateFailures(e *client.Eval, failUnder float64, allowRegressions bool) []string {
	var out []string
	if e.Report == nil {
		return []string{"the evaluation has no report"}
	}
	gated := 0
	for _, v := range e.Report.Versions {
		if v.Version == e.Baseline && len(e.Report.Versions) > 1 {
			continue
		}
		gated++
		if v.PassRate < failUnder {
			out = append(out, fmt.Sprintf("version %s passed %s of its runs, under %s", v.Version, percent(v.PassRate), percent(failUnder)))
		}
	}
	if gated == 0 && failUnder > 0 {
		out = append(out, "no version was scored")
	}
	if n := len(e.Report.Regressions); n > 0 && !allowRegressions {
		out = append(out, fmt.Sprintf("%d regression%s (-allow-regressions to allow them)", n, plural(n)))
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// evalShow: agentctl eval show ID.
func evalShow(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("eval show", "ID", "Show an evaluation and its report (so far, while it runs).")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	e, err := a.c.Evals().Get(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printEval(e)
}

// evalCancel: agentctl eval cancel ID.
func evalCancel(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("eval cancel", "ID", "Cancel a running evaluation, and its runs in flight.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	e, err := a.c.Evals().Cancel(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printEval(e)
}

// evalList: agentctl eval ls [-limit N] [-cursor C].
func evalList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("eval ls", "[-limit N] [-cursor C]", "List the tenant's evaluations, newest first.")
	pg := f.pages("evaluations")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.Evals().List(ctx, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "AGENT", "VERSIONS", "BASELINE", "DATASET", "STATUS", "SCORED", "CREATED")
	for _, e := range p.Data {
		row(tw, e.ID, e.Agent, strings.Join(e.Versions, ","), e.Baseline, e.Dataset+" v"+itoa(e.DatasetVersion),
			string(e.Status), fmt.Sprintf("%d/%d", e.Scored, e.Runs), when(&e.CreatedAt))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}
