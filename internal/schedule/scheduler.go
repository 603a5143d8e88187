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

// Composer composes the run of a schedule's slot (*compose.Composer
// implements it).
type Composer interface {
	// Slot composes the run of a slot of sc from its run template, as
	// POST /runs composes one, for the schedule's tenant and the actor
	// who created it. An error says why the template no longer builds a
	// run (an agent or a tool is gone): the slot fails. It may wait on the
	// network (a tenant's new MCP server connecting); the scheduler calls
	// it outside any transaction, under Config.ComposeTimeout.
	Slot(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error)
}

// ComposerFunc is a function as a Composer.
type ComposerFunc func(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error)

// Slot calls f.
func (f ComposerFunc) Slot(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error) {
	return f(ctx, sc)
}

// Store is what the scheduler needs of the database (*persist.Store).
type Store interface {
	ScheduleClaim(ctx context.Context, p persist.ScheduleClaimParams) ([]persist.DueSchedule, error)
	ScheduleFire(ctx context.Context, p persist.ScheduleFireParams) (persist.FireResult, error)
	ScheduleExtend(ctx context.Context, claims []string, lease time.Duration) error
	ScheduleRelease(ctx context.Context, d persist.DueSchedule) error
	ScheduleSettle(ctx context.Context, p persist.ScheduleSettleParams) ([]agentd.Schedule, error)
}

// Defaults of Config.
const (
	DefaultTick           = 250 * time.Millisecond
	DefaultBatch          = 32
	DefaultWorkers        = 8
	DefaultComposeTimeout = 15 * time.Second
	DefaultLease          = 5 * time.Second
)

// Config configures New. Store and Composer are required.
type Config struct {
	Store    Store
	Composer Composer
	// Tick is how often the loop looks for due schedules (DefaultTick).
	Tick time.Duration
	// Batch caps the schedules one transaction settles or claims
	// (DefaultBatch).
	Batch int
	// Workers caps the slots this instance has under way at once, each
	// in a goroutine of its own (DefaultWorkers): a due schedule is only
	// claimed for a free one, and is left to the other instances
	// meanwhile.
	Workers int
	// ComposeTimeout caps the making of one slot's run spec
	// (DefaultComposeTimeout).
	ComposeTimeout time.Duration
	// Lease is how long a claim on a due schedule holds (DefaultLease);
	// the scheduler extends its claims every third of it while it works
	// on their slots, so it is how long a dead instance's claims keep
	// their schedules from the others. Past it, another instance may
	// claim the schedule, and this instance's claim is void.
	Lease time.Duration
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
	busy    int            // slots under way
	claims  map[string]int // their claims, with the slots of each under way
	working sync.WaitGroup // their goroutines
}

// New returns a scheduler, not yet started.
func New(cfg Config) *Scheduler {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.ComposeTimeout <= 0 {
		cfg.ComposeTimeout = DefaultComposeTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
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
	return &Scheduler{cfg: cfg, claims: map[string]int{},
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
		var extender sync.WaitGroup
		extender.Go(func() { s.extend(ctx) })
		s.loop(ctx)
		s.working.Wait()
		extender.Wait()
	}()
	return nil
}

// errStopped is why the loop's context ends.
var errStopped = errors.New("scheduler stopped")

// Stop stops the loop and waits for it, within ctx: a slot whose run spec
// is being made gives its claim up, so that another instance fires it at
// once; a slot being fired finishes (or is rolled back). Stopping twice is
// safe.
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

// extend extends the leases of the claims under way every third of the
// lease, until ctx ends. An extension that fails leaves the claims to
// lapse: their firings then find them lost, and write nothing.
func (s *Scheduler) extend(ctx context.Context) {
	t := time.NewTicker(s.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		claims := make([]string, 0, len(s.claims))
		for c := range s.claims {
			claims = append(claims, c)
		}
		s.mu.Unlock()
		if len(claims) == 0 {
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, s.cfg.Lease/3)
		err := s.cfg.Store.ScheduleExtend(ectx, claims, s.cfg.Lease)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
			s.cfg.Logger.WarnContext(ctx, "extend schedule claims", slog.String("error", err.Error()))
		}
	}
}

// txTimeout caps each transaction: a settling, a claim, a firing.
const txTimeout = 10 * time.Second

// Tick counts the ends of runs, then claims what is due, once, as many
// schedules as there are free workers; the loop calls it every
// Config.Tick. Each claimed slot is planned, its run spec made and fired
// in a goroutine of its own (Stop waits for them), so that a slot whose
// spec is slow to make holds back no other. Errors are logged, not
// returned: the next tick tries again.
func (s *Scheduler) Tick(ctx context.Context) {
	log := s.cfg.Logger
	sctx, cancel := context.WithTimeout(ctx, txTimeout)
	paused, err := s.cfg.Store.ScheduleSettle(sctx, persist.ScheduleSettleParams{Limit: s.cfg.Batch, MaxFailures: s.cfg.MaxFailures})
	cancel()
	if err != nil && ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
		log.WarnContext(ctx, "settle schedules", slog.String("error", err.Error()))
	}
	s.tellPaused(ctx, paused)
	s.mu.Lock()
	free := s.cfg.Workers - s.busy
	s.mu.Unlock()
	if free <= 0 || ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, txTimeout)
	due, err := s.cfg.Store.ScheduleClaim(cctx, persist.ScheduleClaimParams{Limit: min(free, s.cfg.Batch), Lease: s.cfg.Lease})
	cancel()
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
			log.WarnContext(ctx, "claim schedules", slog.String("error", err.Error()))
		}
		return
	}
	for _, d := range due {
		s.hold(d.Claim, 1)
		s.working.Go(func() {
			defer s.hold(d.Claim, -1)
			s.fire(ctx, d)
		})
	}
}

// hold counts n slots more (or fewer) under way, under claim.
func (s *Scheduler) hold(claim string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy += n
	if s.claims[claim] += n; s.claims[claim] <= 0 {
		delete(s.claims, claim)
	}
}

// fire plans claimed schedule d's slot, making its run spec (outside any
// transaction, under ComposeTimeout), then fires it: the run and the
// schedule's advance commit together, if the claim still holds. A slot
// that could not be planned (the database, or a stop) gives its claim up,
// and is due again at once.
func (s *Scheduler) fire(ctx context.Context, d persist.DueSchedule) {
	log := s.cfg.Logger.With(slog.String("schedule_id", d.ID), slog.String("tenant_id", d.TenantID))
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ComposeTimeout)
	p, err := s.plan(pctx, d)
	cancel()
	if err != nil || ctx.Err() != nil {
		if err != nil && ctx.Err() == nil && !errors.Is(err, agentd.ErrUnavailable) {
			log.WarnContext(ctx, "plan a schedule's slot", slog.String("error", err.Error()))
		}
		s.release(ctx, d)
		return
	}
	// A firing under way is not cut by Stop: it is short, and it either
	// commits the slot or leaves it due.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txTimeout)
	res, err := s.cfg.Store.ScheduleFire(fctx, persist.ScheduleFireParams{Due: d, Plan: p.SlotPlan, MaxFailures: s.cfg.MaxFailures})
	cancel()
	switch {
	case errors.Is(err, persist.ErrClaimLost):
		log.DebugContext(ctx, "schedule claim lost")
		return
	case err != nil:
		if !errors.Is(err, agentd.ErrUnavailable) {
			log.WarnContext(ctx, "fire a schedule's slot", slog.String("error", err.Error()))
		}
		s.release(ctx, d)
		return
	case res.Run != nil:
		log.DebugContext(ctx, "schedule fired", slog.String("run_id", res.Run.ID))
		s.slots.WithLabelValues("started").Inc()
	case res.Failed:
		s.slots.WithLabelValues("failed").Inc()
	case p.outcome != "":
		s.slots.WithLabelValues(p.outcome).Inc()
	}
	if res.Paused != nil {
		s.tellPaused(ctx, []agentd.Schedule{*res.Paused})
	}
}

// release gives d's claim up.
func (s *Scheduler) release(ctx context.Context, d persist.DueSchedule) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.ScheduleRelease(rctx, d); err != nil && !errors.Is(err, agentd.ErrUnavailable) {
		s.cfg.Logger.WarnContext(ctx, "release a schedule's claim", slog.String("schedule_id", d.ID), slog.String("error", err.Error()))
	}
}

// tellPaused logs and counts the schedules that paused themselves.
func (s *Scheduler) tellPaused(ctx context.Context, paused []agentd.Schedule) {
	for _, sc := range paused {
		s.paused.Inc()
		s.cfg.Logger.WarnContext(ctx, "schedule paused itself", slog.String("schedule_id", sc.ID),
			slog.String("tenant_id", sc.TenantID), slog.String("name", sc.Name), slog.String("reason", sc.PausedReason))
	}
}

// slotPlan is what a slot does, with the outcome it counts once fired
// when it starts no run and does not fail ("skipped", "missed"; "" for
// none, a slot that waits).
type slotPlan struct {
	persist.SlotPlan
	outcome string
}

// plan says what the slot of claimed schedule d does (outside any
// transaction: the spec may take seconds to make):
//   - when the slot after it has passed too (no instance ran meanwhile),
//     catch_up skip starts no run and one starts the latest missed slot's,
//     unless the slot waited, with overlap enqueue, for a run that ended
//     after it (it starts then, the slots passed meanwhile folded into it);
//   - while the previous run has not ended, overlap skip starts no run and
//     enqueue waits;
//   - otherwise the slot starts its run, whose spec is built now (a spec
//     that no longer builds fails the slot; an unavailable database or the
//     end of ctx is an error, which leaves the slot due).
//
// The schedule's next slot is always after now.
func (s *Scheduler) plan(ctx context.Context, d persist.DueSchedule) (slotPlan, error) {
	t, err := agentd.ParseTiming(d.Cron, d.Timezone)
	if err != nil {
		// Checked when stored: a time zone the build no longer knows.
		return slotPlan{SlotPlan: persist.SlotPlan{NextAt: d.Now.Add(time.Hour), Error: err.Error()}}, nil
	}
	slot, next := d.NextAt, t.Next(d.NextAt)
	if !next.IsZero() && !next.After(d.Now) {
		var latest time.Time
		latest, next = t.Latest(d.NextAt, d.Now)
		waited := d.Overlap == agentd.OverlapEnqueue && d.PrevFinishedAt != nil && d.PrevFinishedAt.After(slot)
		if !waited {
			if d.CatchUp == agentd.CatchUpSkip {
				return slotPlan{SlotPlan: persist.SlotPlan{NextAt: orLater(next, d.Now)}, outcome: "missed"}, nil
			}
			slot = latest
		}
	}
	next = orLater(next, d.Now)
	if d.PrevOpen {
		switch d.Overlap {
		case agentd.OverlapSkip:
			return slotPlan{SlotPlan: persist.SlotPlan{NextAt: next}, outcome: "skipped"}, nil
		case agentd.OverlapEnqueue:
			return slotPlan{}, nil
		}
	}
	rc, err := s.cfg.Composer.Slot(ctx, d.Schedule)
	if err != nil {
		if errors.Is(err, agentd.ErrUnavailable) || ctx.Err() != nil {
			return slotPlan{}, err
		}
		return slotPlan{SlotPlan: persist.SlotPlan{NextAt: next, Error: "the run template no longer builds a run: " + err.Error()}}, nil
	}
	// A slot's run is always its schedule's tenant's, in its creator's name.
	rc.TenantID, rc.Actor = d.TenantID, d.CreatedBy
	rc.Spec.Params.Schedule = &agentd.ScheduleRef{ID: d.ID, Slot: slot}
	run := persist.CreateOf(rc)
	return slotPlan{SlotPlan: persist.SlotPlan{NextAt: next, Run: &run}}, nil
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
