package eval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/lifecycle"
)

// The driver makes and scores evaluations' runs (docs/evals.md). Every
// instance runs one. A pass takes a running evaluation for a lease
// (EvalClaim), scores the rows whose runs stopped (once each:
// EvalScore), makes the next rows' runs up to its concurrency (each in
// the transaction that records it: EvalStart) unless the tenant has live
// runs waiting in its queue, and ends the evaluation when every row is
// scored. Whatever instance dies, the next pass of any instance goes on
// from what was committed: no run is made twice, no row scored twice.

// DriverStore is what the driver reads and writes of evaluations.
type DriverStore interface {
	Store
	EvalClaim(ctx context.Context, owner string, lease time.Duration, skip []string) (agentd.Evaluation, bool, error)
	EvalRelease(ctx context.Context, id, owner string) error
	EvalInFlight(ctx context.Context, evalID string) ([]agentd.EvalRun, error)
	EvalPending(ctx context.Context, evalID string, limit int) ([]agentd.EvalRun, error)
	EvalStart(ctx context.Context, owner string, row agentd.EvalRun, rc agentd.RunCreate) (made bool, refusedWhy string, err error)
	EvalScore(ctx context.Context, row agentd.EvalRun) (bool, error)
	EvalFinish(ctx context.Context, id string, status agentd.EvalStatus, why string) error
	LiveQueued(ctx context.Context, tenantID string) (bool, error)
	DatasetCases(ctx context.Context, tenantID, name string, version, after, limit int) ([]agentd.StoredCase, error)
}

// Composer composes the run of a case of an evaluation under a version
// (*compose.Composer implements it).
type Composer interface {
	Case(ctx context.Context, e agentd.Evaluation, c agentd.DatasetCase, label string) (agentd.RunCreate, error)
}

// Runs cancels runs (*run.Service implements it).
type Runs interface {
	Cancel(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)
}

// DriverConfig configures a Driver.
type DriverConfig struct {
	Store    DriverStore
	Composer Composer
	Runs     Runs
	// Judge grades rubric checks, with JudgeModel unless a check names
	// its own model; nil: they are not scored.
	Judge      Model
	JudgeModel string
	// Hooks calls the endpoints of webhook checks: a client held to the
	// egress rule of the URLs tenants give; nil: they are not scored.
	Hooks *http.Client
	// Owner names this instance on the leases it takes.
	Owner string
	// Interval is the time between passes (default 250ms); Poll the time
	// between the drives of an evaluation a pass holds (default 50ms),
	// which it holds for half its lease. Lease is how long a pass holds
	// an evaluation (default 5s; a pass that runs longer is safe: what it
	// makes and scores is checked against the rows).
	Interval, Poll, Lease time.Duration
	Log                   *slog.Logger
}

// Driver is the service that drives evaluations.
type Driver struct {
	cfg  DriverConfig
	loop *lifecycle.Periodic

	progress atomic.Int64 // runs made and scored by this driver

	mu    sync.Mutex
	cases map[string]map[int]agentd.DatasetCase // by evaluation, by case seq: an evaluation's cases never change
}

// NewDriver returns the driver, not started.
func NewDriver(cfg DriverConfig) *Driver {
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	d := &Driver{cfg: cfg, cases: map[string]map[int]agentd.DatasetCase{}}
	d.loop = lifecycle.NewPeriodic("evaluation driver", cfg.Interval, d.Pass)
	return d
}

// Start starts the passes.
func (d *Driver) Start(ctx context.Context) error { return d.loop.Start(ctx) }

// Stop stops them, waiting within ctx for a pass under way.
func (d *Driver) Stop(ctx context.Context) error { return d.loop.Stop(ctx) }

// Pass drives the running evaluations whose leases it can take, each
// for up to half its lease in turn, round after round while they move (or
// until ctx ends): an evaluation's next runs are made as soon as its runs
// in flight stop, with no wait for the next pass.
func (d *Driver) Pass(ctx context.Context) {
	for ctx.Err() == nil {
		before := d.progress.Load()
		if d.round(ctx) == 0 || d.progress.Load() == before {
			return // nothing held, or nothing moved: the next pass looks again
		}
	}
}

// round holds each running evaluation whose lease it can take once, and
// returns how many it held.
func (d *Driver) round(ctx context.Context) int {
	var held []string
	for range 100 { // a bound: the evaluations of one round
		e, ok, err := d.cfg.Store.EvalClaim(ctx, d.cfg.Owner, d.cfg.Lease, held)
		if err != nil || !ok {
			if err != nil && ctx.Err() == nil {
				d.cfg.Log.Warn("evaluation claim failed", "err", err)
			}
			break
		}
		held = append(held, e.ID)
		d.hold(ctx, e)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = d.cfg.Store.EvalRelease(rctx, e.ID, d.cfg.Owner)
		cancel()
	}
	return len(held)
}

// errEnded says that a drive ended its evaluation.
var errEnded = errors.New("the evaluation ended")

// hold drives evaluation e every Poll for up to half its lease while it
// has runs in flight: its next runs are made as soon as they stop.
func (d *Driver) hold(ctx context.Context, e agentd.Evaluation) {
	until := time.Now().Add(d.cfg.Lease / 2)
	for {
		running, err := d.drive(ctx, e)
		if err != nil && !errors.Is(err, errEnded) && ctx.Err() == nil {
			d.cfg.Log.Warn("evaluation pass failed", "evaluation_id", e.ID, "err", err)
		}
		if err != nil || running == 0 || time.Now().After(until) {
			return // ended, or waiting behind live runs, or its turn is over
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.cfg.Poll):
		}
	}
}

// drive makes one pass over evaluation e and returns how many of its runs
// are in flight after it; errEnded when it ended it.
func (d *Driver) drive(ctx context.Context, e agentd.Evaluation) (int, error) {
	cases, err := d.casesOf(ctx, e)
	if errors.Is(err, agentd.ErrDatasetNotFound) {
		return 0, d.fail(ctx, e, fmt.Sprintf("dataset %s was deleted", e.Dataset))
	}
	if err != nil {
		return 0, err
	}
	running, err := d.scoreStopped(ctx, e, cases)
	if err != nil {
		return running, err
	}
	room := e.Concurrency - running
	pending, err := d.cfg.Store.EvalPending(ctx, e.ID, max(room, 1))
	if err != nil {
		return running, err
	}
	if len(pending) == 0 && running == 0 {
		return 0, ended(d.cfg.Store.EvalFinish(ctx, e.ID, agentd.EvalCompleted, ""))
	}
	if room <= 0 || len(pending) == 0 {
		return running, nil
	}
	if live, err := d.cfg.Store.LiveQueued(ctx, e.TenantID); err != nil || live {
		return running, err // live runs wait: the evaluation's go behind them
	}
	pending = pending[:min(len(pending), room)]
	for _, r := range pending {
		if _, ok := cases[r.CaseSeq]; !ok {
			return running, d.fail(ctx, e, fmt.Sprintf("case %s of dataset %s version %d is gone (the dataset was deleted)",
				r.CaseID, e.Dataset, e.DatasetVersion))
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(driveAtOnce)
	for _, r := range pending {
		g.Go(func() error { return d.start(gctx, e, cases[r.CaseSeq], r) })
	}
	return running + len(pending), g.Wait()
}

// driveAtOnce bounds the runs a drive makes, or scores, at once.
const driveAtOnce = 16

// scoreStopped scores the rows of e whose runs stopped, and returns how
// many of its runs are still in flight.
func (d *Driver) scoreStopped(ctx context.Context, e agentd.Evaluation, cases map[int]agentd.DatasetCase) (int, error) {
	inFlight, err := d.cfg.Store.EvalInFlight(ctx, e.ID)
	if err != nil {
		return 0, err
	}
	var running atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(driveAtOnce)
	for _, r := range inFlight {
		g.Go(func() error {
			done, err := d.score(gctx, e, cases[r.CaseSeq], r)
			if err == nil && !done {
				running.Add(1)
			}
			return err
		})
	}
	err = g.Wait()
	return int(running.Load()), err
}

// fail ends evaluation e failed, saying why.
func (d *Driver) fail(ctx context.Context, e agentd.Evaluation, why string) error {
	d.cfg.Log.Warn("evaluation failed", "evaluation_id", e.ID, "why", why)
	return ended(d.cfg.Store.EvalFinish(ctx, e.ID, agentd.EvalFailed, why))
}

// ended is errEnded, or err when the end was not written.
func ended(err error) error {
	if err != nil {
		return err
	}
	return errEnded
}

// start makes the run of row r of evaluation e. A version that no longer
// builds a run fails the evaluation, saying why.
func (d *Driver) start(ctx context.Context, e agentd.Evaluation, c agentd.DatasetCase, r agentd.EvalRun) error {
	rc, err := d.cfg.Composer.Case(ctx, e, c, r.Version)
	if err == nil {
		var why string
		var made bool
		if made, why, err = d.cfg.Store.EvalStart(ctx, d.cfg.Owner, r, rc); made {
			d.progress.Add(1)
		}
		if err == nil && why != "" {
			err = errors.New(why)
		} else if err != nil {
			return err
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return d.fail(ctx, e, fmt.Sprintf("case %s under version %s does not start a run: %v", c.ID, r.Version, err))
}

// score scores row r when its run stopped (or waits for a client: it is
// scored there, and cancelled), and reports whether it is done with it.
func (d *Driver) score(ctx context.Context, e agentd.Evaluation, c agentd.DatasetCase, r agentd.EvalRun) (bool, error) {
	switch {
	case r.RunStatus == "":
		r.Scores = []agentd.Score{{Type: agentd.CheckStatus, Outcome: agentd.ScoreFailed, Reason: "the run is gone",
			Evidence: []agentd.ScoreEvidence{}}}
	case r.RunStatus.Stopped() || r.RunStatus == agentd.StatusRequiresAction:
		ev, err := Load(ctx, d.cfg.Store, e.TenantID, r.RunID)
		if err != nil {
			return false, err
		}
		r.Scores = d.scoreRun(ctx, e, r, c, ev)
	default:
		return false, nil
	}
	passed := Passed(r.Scores)
	r.Passed = &passed
	if scored, err := d.cfg.Store.EvalScore(ctx, r); err != nil {
		return false, err
	} else if scored {
		d.progress.Add(1)
	}
	if r.RunStatus == agentd.StatusRequiresAction {
		// Nobody will decide: the run is over for the evaluation.
		if _, err := d.cfg.Runs.Cancel(ctx, e.TenantID, r.RunID, "evaluation:"+e.ID); err != nil && !errors.Is(err, agentd.ErrRunNotFound) {
			d.cfg.Log.Warn("cancel an evaluation's run", "run_id", r.RunID, "err", err)
		}
	}
	return true, nil
}

// scoreRun is ScoreRun with the rubric checks graded by the judge and
// the webhook checks scored by their endpoints, when the driver has them.
func (d *Driver) scoreRun(ctx context.Context, e agentd.Evaluation, r agentd.EvalRun, c agentd.DatasetCase, ev Evidence) []agentd.Score {
	out := ScoreRun(c.Checks, ev)
	first := len(out) - len(c.Checks) // a refused score comes first
	for i, ch := range c.Checks {
		var s agentd.Score
		switch {
		case ch.Type == agentd.CheckRubric && d.cfg.Judge != nil:
			s = grade(ctx, d.cfg.Judge, d.cfg.JudgeModel, ch, c, ev)
		case ch.Type == agentd.CheckWebhook && d.cfg.Hooks != nil:
			s = hookScore(ctx, d.cfg.Hooks, e, r, ch, c, ev)
		default:
			continue
		}
		s.Type, s.Name = ch.Type, ch.Name
		if s.Evidence == nil {
			s.Evidence = []agentd.ScoreEvidence{}
		}
		out[first+i] = s
	}
	return out
}

// ScoreRun scores checks on the evidence of an evaluation's run: each
// check, and first, when the run ended at a call that might have had a
// side effect, a failed score that names it (the case needs a stub).
func ScoreRun(checks []agentd.Check, ev Evidence) []agentd.Score {
	out := ScoreAll(checks, ev)
	if e := ev.Run.Error; e != nil && strings.HasPrefix(e.Message, agentd.EvalRefusedPrefix) {
		out = append([]agentd.Score{{Type: agentd.CheckRefused, Outcome: agentd.ScoreFailed, Reason: e.Message,
			Evidence: []agentd.ScoreEvidence{field("error", e)}}}, out...)
	}
	return out
}

// Passed reports whether scores pass a case: none failed (a check not
// scored neither passes nor fails it).
func Passed(scores []agentd.Score) bool {
	for _, s := range scores {
		if s.Outcome == agentd.ScoreFailed {
			return false
		}
	}
	return true
}

// casesOf returns the cases of e's dataset version, by seq.
func (d *Driver) casesOf(ctx context.Context, e agentd.Evaluation) (map[int]agentd.DatasetCase, error) {
	d.mu.Lock()
	cs, ok := d.cases[e.ID]
	d.mu.Unlock()
	if ok {
		return cs, nil
	}
	cs = map[int]agentd.DatasetCase{}
	for after := 0; ; {
		page, err := d.cfg.Store.DatasetCases(ctx, e.TenantID, e.Dataset, e.DatasetVersion, after, 100)
		if err != nil {
			return nil, fmt.Errorf("read the cases of dataset %s version %d: %w", e.Dataset, e.DatasetVersion, err)
		}
		for _, c := range page {
			cs[c.Seq] = c.Case
			after = c.Seq
		}
		if len(page) < 100 {
			break
		}
	}
	d.mu.Lock()
	if len(d.cases) > 1000 {
		clear(d.cases)
	}
	d.cases[e.ID] = cs
	d.mu.Unlock()
	return cs, nil
}
