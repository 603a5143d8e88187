package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/persist"
)

// SpecFunc builds the run spec of a schedule's slot from its run template,
// as POST /runs builds one, for the schedule's tenant and the actor who
// created it (compose.Composer.Slot). An error says why the template no
// longer builds a run (an agent or a tool is gone): the slot fails.
type SpecFunc func(ctx context.Context, s agentd.Schedule) (agentd.RunSpec, error)

// Store is what the scheduler needs of the database (*persist.Store).
type Store interface {
	ScheduleFire(ctx context.Context, p persist.ScheduleFireParams) (persist.FireResult, error)
	ScheduleSettle(ctx context.Context, p persist.ScheduleSettleParams) ([]agentd.Schedule, error)
}

var _ Store = (*persist.Store)(nil)

// Defaults of Config.
const (
	DefaultTick  = 250 * time.Millisecond
	DefaultBatch = 32
)

// Config configures New. Store and Spec are required.
type Config struct {
	Store Store
	Spec  SpecFunc
	// Tick is how often the loop looks for due schedules (DefaultTick).
	Tick time.Duration
	// Batch caps the schedules one transaction fires (DefaultBatch).
	Batch int
	// MaxFailures is how many runs in a row may fail before a schedule
	// pauses itself; 0 takes agentd.DefaultScheduleMaxFailures, and a
	// negative value never pauses.
	MaxFailures int
	Logger      *slog.Logger
	// Registerer receives the scheduler's metrics; nil: unregistered.
	Registerer prometheus.Registerer
}

// Scheduler is one instance's share of the firing of schedules.
type Scheduler struct {
	cfg     Config
	slots   *prometheus.CounterVec
	paused  prometheus.Counter
	mu      sync.Mutex
	cancel  context.CancelCauseFunc // nil: not running
	stopped chan struct{}
}

// New returns a scheduler, not yet started.
func New(cfg Config) *Scheduler {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	switch {
	case cfg.MaxFailures == 0:
		cfg.MaxFailures = agentd.DefaultScheduleMaxFailures
	case cfg.MaxFailures < 0:
		cfg.MaxFailures = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg,
		slots: metrics.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_schedule_slots_total",
			Help: "Slots of schedules this instance handled, by outcome: started (a run), skipped (overlap), missed (catch_up), failed (no run could be created).",
		}, []string{"outcome"})),
		paused: metrics.Register(cfg.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_schedules_paused_total",
			Help: "Schedules that paused themselves after too many failed runs in a row.",
		})),
	}
}

// Start starts the loop; it runs until Stop. Starting a running scheduler
// does nothing.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil
	}
	ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		s.loop(ctx)
	}()
	return nil
}

// errStopped is why the loop's context ends.
var errStopped = errors.New("scheduler stopped")

// Stop stops the loop and waits for it, within ctx: a tick under way
// finishes (or is rolled back). Stopping twice is safe.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel(errStopped)
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop scheduler: %w", ctx.Err())
	}
}

func (s *Scheduler) loop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for {
		s.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tickTimeout caps each transaction of a tick.
const tickTimeout = 10 * time.Second

// Tick counts the ends of runs, then fires what is due, once; the loop
// calls it every Config.Tick. Errors are logged, not returned: the next
// tick tries again.
func (s *Scheduler) Tick(ctx context.Context) {
	log := s.cfg.Logger
	sctx, cancel := context.WithTimeout(ctx, tickTimeout)
	paused, err := s.cfg.Store.ScheduleSettle(sctx, persist.ScheduleSettleParams{Limit: s.cfg.Batch, MaxFailures: s.cfg.MaxFailures})
	cancel()
	if err != nil && ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
		log.WarnContext(ctx, "settle schedules", slog.String("error", err.Error()))
	}
	s.tellPaused(ctx, paused)
	fctx, cancel := context.WithTimeout(ctx, tickTimeout)
	res, err := s.cfg.Store.ScheduleFire(fctx, persist.ScheduleFireParams{Limit: s.cfg.Batch, MaxFailures: s.cfg.MaxFailures,
		Plan: s.plan})
	cancel()
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
			log.WarnContext(ctx, "fire schedules", slog.String("error", err.Error()))
		}
		return
	}
	for id, r := range res.Runs {
		log.DebugContext(ctx, "schedule fired", slog.String("schedule_id", id), slog.String("run_id", r.ID))
	}
	s.slots.WithLabelValues("started").Add(float64(len(res.Runs)))
	s.slots.WithLabelValues("failed").Add(float64(res.Failed))
	s.tellPaused(ctx, res.Paused)
}

// tellPaused logs and counts the schedules that paused themselves.
func (s *Scheduler) tellPaused(ctx context.Context, paused []agentd.Schedule) {
	for _, sc := range paused {
		s.paused.Inc()
		s.cfg.Logger.WarnContext(ctx, "schedule paused itself", slog.String("schedule_id", sc.ID),
			slog.String("tenant_id", sc.TenantID), slog.String("name", sc.Name), slog.String("reason", sc.PausedReason))
	}
}

// plan says what the slot of due schedule d does (persist.ScheduleFire
// calls it with the schedule locked):
//   - when the slot after it has passed too (no instance ran meanwhile),
//     catch_up skip starts no run and one starts the latest missed slot's,
//     unless the slot waited, with overlap enqueue, for a run that ended
//     after it (it starts then, the slots passed meanwhile folded into it);
//   - while the previous run has not ended, overlap skip starts no run and
//     enqueue waits;
//   - otherwise the slot starts its run, whose spec is built now (a spec
//     that no longer builds fails the slot).
//
// The schedule's next slot is always after now.
func (s *Scheduler) plan(ctx context.Context, d persist.DueSchedule) (persist.SlotPlan, error) {
	t, err := agentd.ParseTiming(d.Cron, d.Timezone)
	if err != nil {
		// Checked when stored: a time zone the build no longer knows.
		return persist.SlotPlan{NextAt: d.Now.Add(time.Hour), Error: err.Error()}, nil
	}
	slot, next := d.NextAt, t.Next(d.NextAt)
	if !next.IsZero() && !next.After(d.Now) {
		var latest time.Time
		latest, next = t.Latest(d.NextAt, d.Now)
		waited := d.Overlap == agentd.OverlapEnqueue && d.PrevFinishedAt != nil && d.PrevFinishedAt.After(slot)
		if !waited {
			if d.CatchUp == agentd.CatchUpSkip {
				s.slots.WithLabelValues("missed").Inc()
				return persist.SlotPlan{NextAt: orLater(next, d.Now)}, nil
			}
			slot = latest
		}
	}
	next = orLater(next, d.Now)
	if d.PrevOpen {
		switch d.Overlap {
		case agentd.OverlapSkip:
			s.slots.WithLabelValues("skipped").Inc()
			return persist.SlotPlan{NextAt: next}, nil
		case agentd.OverlapEnqueue:
			return persist.SlotPlan{}, nil
		}
	}
	spec, err := s.cfg.Spec(ctx, d.Schedule)
	if err != nil {
		if errors.Is(err, agentd.ErrUnavailable) || ctx.Err() != nil {
			return persist.SlotPlan{}, err
		}
		return persist.SlotPlan{NextAt: next, Error: "the run template no longer builds a run: " + err.Error()}, nil
	}
	spec.Params.Schedule = &agentd.ScheduleRef{ID: d.ID, Slot: slot}
	return persist.SlotPlan{NextAt: next, Run: &persist.RunCreateParams{TenantID: d.TenantID,
		ConversationID: spec.ConversationID, Model: spec.Model, Params: spec.Params, Input: spec.Input, Actor: d.CreatedBy}}, nil
}

// farFuture is the next slot of an expression that has none (0 0 30 2 *):
// the schedule stays, and never fires.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// orLater is next, or farFuture when there is no next slot.
func orLater(next, now time.Time) time.Time {
	if next.IsZero() || !next.After(now) {
		return farFuture
	}
	return next
}
