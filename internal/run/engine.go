package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"
)

// Store is what the engine needs of persistence.
type Store interface {
	RunCreateState(ctx context.Context, p persist.RunCreateParams) (agentd.RunState, bool, error)
	RunClaimStart(ctx context.Context, worker string, ttl time.Duration) (persist.Claim, error)
	RunClaimStartID(ctx context.Context, worker string, ttl time.Duration, id string) (persist.Claim, error)
	ClaimNext(id, worker string, ttl time.Duration) *persist.ClaimNext
	LeaseExtend(ctx context.Context, f persist.Fence, ttl time.Duration) (persist.LeaseState, error)
	LeaseRelease(ctx context.Context, f persist.Fence) error
	Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error)
	ExecDeferred(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error)
	DeferTicks() time.Duration
	FlushDeferred()
	RunStateLoad(ctx context.Context, runID string) (agentd.RunState, error)
	ArtifactsLoad(ctx context.Context, runID string, ids []string) (map[string][]byte, error)
	Listen(ctx context.Context, channels []string, onConnect func(), fn func(channel, payload string)) error
	RunsSweep(ctx context.Context, limit int) (int, error)
	ChildrenSweep(ctx context.Context, limit int) (answered, cancelled int, err error)
	AnswerParent(ctx context.Context, parentID string) error
	UnstoredPurge(ctx context.Context, grace time.Duration, limit int) ([]string, error)
	BudgetGet(ctx context.Context, tenant string) (*float64, error)
	BudgetHold(ctx context.Context, p persist.BudgetHoldParams) (persist.BudgetHeld, error)
	InputsPending(ctx context.Context, runID string) ([]agentd.RunInput, error)
	InputAccept(ctx context.Context, p agentd.InputCreate) (agentd.RunInput, bool, error)
	InputsCount(ctx context.Context, runID string, source agentd.InputSource) (int, error)
	ChildrenUnreported(ctx context.Context, parentID string, limit int) ([]agentd.Run, error)
	ChildReport(ctx context.Context, childID string, p agentd.InputCreate) (agentd.RunInput, bool, error)
	ChildReportDropped(ctx context.Context, childID string) error
	RunOfConversation(ctx context.Context, tenantID, conversationID string) (agentd.Run, error)

	// The commands of the Service; see persist.Store for their errors.
	RunCancel(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)
	RunResume(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)
	RunCancelledBy(ctx context.Context, runID string) (string, error)
	ToolCallRepeats(ctx context.Context, runID string, keys []persist.CallKey) ([]persist.CallRepeats, error)
	RunResolveAction(ctx context.Context, p agentd.ActionParams) (agentd.Run, error)
	RunInterrupt(ctx context.Context, id string) (agentd.Run, error)
}

// Causes of a run's context ending; the executor branches on them.
var (
	ErrCancelRequested    = errors.New("run cancelled by request")
	ErrInterruptRequested = errors.New("run interrupted: its client went away")
	ErrRunDeadline        = errors.New("run deadline exceeded")
	ErrStepDeadline       = errors.New("step deadline exceeded")
	ErrShutdown           = errors.New("instance shutting down")
	// ErrStorage: the database refused one of the run's writes as data
	// (persist.ErrInvalidValue, persist.ErrConstraint): the run fails
	// (storage_error) rather than try the same write again.
	ErrStorage   = errors.New("the database refused a write of the run")
	errAbandoned = errors.New("engine abandoned")
)

// Config configures an Engine. Zero values take the documented defaults.
type Config struct {
	Store Store
	Model llm.Model
	Tools *tools.Registry
	// ToolsFor, when set, gives the registry of a tenant's runs (the
	// operator's tools and the tenant's own: internal/tenanttools), made
	// again when it lacks a tool of need; nil: Tools for every tenant.
	ToolsFor func(ctx context.Context, tenant string, need ...string) (*tools.Registry, error)
	Logger   *slog.Logger
	Metrics  *Metrics
	// Hooks are the hooks at the loop's boundaries (the tools file's
	// "hooks"); the engine calls on_answer. nil: none.
	Hooks *tools.LoopHooks

	Workers      int           // runs executed at once on this instance; default DefaultWorkers
	LeaseTTL     time.Duration // default 15s; the lease is extended every TTL/3
	PollInterval time.Duration // fallback claim poll when no NOTIFY arrives; default 2s
	// SweepInterval is how often runs waiting for a client past their
	// deadline are timed out; default 10s.
	SweepInterval time.Duration
	WorkerID      string // default host:pid:random

	ModelAttempts int           // attempts of one model call before the step fails; default 4
	ModelBackoff  time.Duration // wait before the second model attempt, doubling; default 500ms
	ToolTimeout   time.Duration // per-attempt default when neither tool nor run says; default 60s
	// ToolCallsPerStep caps the tool calls of one step that are planned and
	// run; the model is told that the calls beyond it were not run. Default
	// DefaultToolCallsPerStep.
	ToolCallsPerStep int
	// ToolCallsPerRun caps the tool calls of a run: the calls of the step
	// that reaches it beyond it are not run (the model is told), and a
	// later step that asks for more ends the run (tool_limit). Default
	// DefaultToolCallsPerRun.
	ToolCallsPerRun int
	// ToolConcurrency caps the tool attempts this instance makes at once,
	// across its runs; default DefaultToolConcurrency.
	ToolConcurrency int
	// Profiles give each model its context window: a request past its
	// threshold is compacted first (internal/compact). Nil: never compacted.
	Profiles *compact.Profiles
	// MaxInputFilesBytes caps the bytes of the images and files one model
	// request of a run is sent (AGENTD_MAX_INPUT_FILES_BYTES): the newest
	// of its conversation's, the older ones past it sent as a note that
	// names them. It bounds what an execution holds in memory. Default
	// DefaultMaxInputFilesBytes.
	MaxInputFilesBytes int64
	// MonthlyBudget is what a tenant's model calls may cost in a month
	// when an admin set it no budget of its own (AGENTD_TENANT_MONTHLY_BUDGET);
	// 0: none. A run past a budget ends failed (budget_exceeded) before its
	// next model call.
	MonthlyBudget float64
	// TraceContent puts messages, tool arguments and results on the spans
	// of model calls and tool attempts (AGENTD_TRACE_CONTENT); off, spans
	// carry names, ids, counts and outcomes only.
	TraceContent bool
	// MaxStallClaims is how many times a run may be taken over (its worker
	// died or lost its lease) without starting a new step; the claim after
	// fails it (no_progress). Default DefaultMaxStallClaims.
	MaxStallClaims int
	DeltaWindow    time.Duration // text deltas are coalesced over this window; default 50ms
	DeltaMaxBytes  int           // and flushed at this size; default 2048

	// Composer, when set, composes the child run a call of a sub-agent
	// starts; nil: such calls fail (the model is told).
	Composer Composer
	// AgentDepth caps how deep sub-agents nest (AGENTD_AGENT_DEPTH): a
	// call that would start a run deeper fails. Default
	// agentd.DefaultAgentDepth.
	AgentDepth int
	// AgentTreeRuns caps the runs one run tree makes, its root included
	// (AGENTD_AGENT_TREE_RUNS), and AgentChildren the children one run has
	// open at once (AGENTD_AGENT_CHILDREN): a call of a sub-agent past
	// either fails. Defaults agentd.DefaultAgentTreeRuns and
	// agentd.DefaultAgentChildren.
	AgentTreeRuns, AgentChildren int

	// OnLeftFunc, when set, is called when an execution on this engine
	// has committed its run's stop (a terminal status, interrupted or
	// requires_action) and is about to free its worker; it must not
	// block. It is no record of ends: a run another instance executes,
	// or one a cancel ends where it waits, never passes here; the outbox
	// holds every stop, whoever wrote it. Benchmarks use it to keep their
	// runs in flight at the engine's capacity.
	OnLeftFunc func(runID string, status agentd.RunStatus)
}

// Engine claims and executes runs. Start it once; Stop it once (further
// Stops are no-ops).
type Engine struct {
	cfg Config
	log *slog.Logger
	m   *Metrics
	d   *deps // what executions get

	wake chan struct{} // search for claimable runs
	kick chan struct{} // a run was added to the queue: look at it only
	sem  chan struct{}

	mu     sync.Mutex
	active map[string]*execution
	// The runs this instance created queued (queue.go), by tenant, and
	// how many there are; and its executions by tenant.
	queues    map[string]*tenantQueue
	queued    int
	handoffs  uint64
	parked    map[string][]queuedRun // by conversation: queued behind its run
	handed    map[string]queuedRun   // by id: claimed in the stop of the run before (takeNext)
	nparked   int
	executing map[string]int

	ctx        context.Context // parent of every run's context
	cancel     context.CancelCauseFunc
	claiming   context.Context // ends when intake stops
	stopIn     context.CancelFunc
	wg         sync.WaitGroup // dispatcher, listener, sweeper
	runs       sync.WaitGroup // executions
	dispatched chan struct{}  // closed when the dispatcher returned: no claim is under way
	stopOnce   sync.Once
}

// Defaults of Config's bounds on tool calls.
const (
	DefaultToolCallsPerStep = 64
	DefaultToolCallsPerRun  = 1000
	DefaultToolConcurrency  = 64
	DefaultMaxStallClaims   = 5
)

// DefaultWorkers is how many runs an instance executes at once unless told
// otherwise. More runs in flight than this on a small machine only add
// contention: they wait queued, in order, instead.
const DefaultWorkers = 16

// New returns an engine; it does nothing until Start.
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg: cfg,
		log: cfg.Logger,
		m:   cfg.Metrics,
		d: &deps{store: cfg.Store, model: cfg.Model, tools: cfg.Tools, toolsFor: cfg.ToolsFor, m: cfg.Metrics, log: cfg.Logger, onLeft: cfg.OnLeftFunc,
			profiles: cfg.Profiles, traceContent: cfg.TraceContent, composer: cfg.Composer,
			budgets: newBudgets(cfg.Store, cfg.MonthlyBudget), priceVersion: cfg.Profiles.PriceVersion(), hooks: cfg.Hooks,
			toolSlots: make(chan struct{}, cfg.ToolConcurrency),
			limits: limits{leaseTTL: cfg.LeaseTTL, modelAttempts: cfg.ModelAttempts, modelBackoff: cfg.ModelBackoff,
				toolTimeout: cfg.ToolTimeout, deltaWindow: cfg.DeltaWindow, deltaMaxBytes: cfg.DeltaMaxBytes,
				callsPerStep: cfg.ToolCallsPerStep, callsPerRun: cfg.ToolCallsPerRun, maxStallClaims: cfg.MaxStallClaims,
				agentDepth: cfg.AgentDepth, treeRuns: cfg.AgentTreeRuns, children: cfg.AgentChildren,
				inputFilesBytes: cfg.MaxInputFilesBytes}},
		wake:   make(chan struct{}, 1),
		kick:   make(chan struct{}, 1),
		sem:    make(chan struct{}, cfg.Workers),
		active: map[string]*execution{}, queues: map[string]*tenantQueue{}, executing: map[string]int{},
		parked: map[string][]queuedRun{}, handed: map[string]queuedRun{},
	}
	e.d.spawn = e.create
	return e
}

// withDefaults is cfg with its zero fields at their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.WorkerID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.WorkerID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if cfg.ModelAttempts <= 0 {
		cfg.ModelAttempts = 4
	}
	if cfg.ModelBackoff <= 0 {
		cfg.ModelBackoff = 500 * time.Millisecond
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = 60 * time.Second
	}
	if cfg.ToolCallsPerStep <= 0 {
		cfg.ToolCallsPerStep = DefaultToolCallsPerStep
	}
	if cfg.ToolCallsPerRun <= 0 {
		cfg.ToolCallsPerRun = DefaultToolCallsPerRun
	}
	if cfg.ToolConcurrency <= 0 {
		cfg.ToolConcurrency = DefaultToolConcurrency
	}
	if cfg.MaxStallClaims <= 0 {
		cfg.MaxStallClaims = DefaultMaxStallClaims
	}
	if cfg.DeltaWindow <= 0 {
		cfg.DeltaWindow = 50 * time.Millisecond
	}
	if cfg.DeltaMaxBytes <= 0 {
		cfg.DeltaMaxBytes = 2048
	}
	if cfg.AgentDepth <= 0 {
		cfg.AgentDepth = agentd.DefaultAgentDepth
	}
	if cfg.AgentTreeRuns <= 0 {
		cfg.AgentTreeRuns = agentd.DefaultAgentTreeRuns
	}
	if cfg.AgentChildren <= 0 {
		cfg.AgentChildren = agentd.DefaultAgentChildren
	}
	if cfg.MaxInputFilesBytes <= 0 {
		cfg.MaxInputFilesBytes = DefaultMaxInputFilesBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return cfg
}

// WorkerID names this engine in leases and attempts.
func (e *Engine) WorkerID() string { return e.cfg.WorkerID }

// Start begins listening for work and claiming runs. The engine's goroutines
// run until Stop (or Abandon); ctx only bounds start-up.
func (e *Engine) Start(ctx context.Context) error {
	e.ctx, e.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	e.claiming, e.stopIn = context.WithCancel(e.ctx)
	e.dispatched = make(chan struct{})
	e.wg.Add(3)
	go func() {
		defer e.wg.Done()
		_ = e.cfg.Store.Listen(e.ctx, []string{persist.ChannelRuns, persist.ChannelCancel}, e.Wake, e.onNotify)
	}()
	go func() {
		defer e.wg.Done()
		e.sweep()
	}()
	go func() {
		defer e.wg.Done()
		defer close(e.dispatched)
		e.dispatch()
	}()
	return nil
}

// Wake makes the dispatcher look for claimable runs now.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) onNotify(channel, payload string) {
	switch channel {
	case persist.ChannelRuns:
		// A run this instance queued is claimed by its queue, not found by
		// a search.
		if _, by, _ := strings.Cut(payload, " "); by != e.cfg.WorkerID {
			e.Wake()
		}
	case persist.ChannelCancel:
		id, interrupt := strings.CutSuffix(payload, persist.InterruptPayload)
		id, input := strings.CutSuffix(id, persist.InputPayload)
		id, inputNow := strings.CutSuffix(id, persist.InputNowPayload)
		e.mu.Lock()
		x := e.active[id]
		e.mu.Unlock()
		switch {
		case x == nil:
		case input || inputNow:
			x.steer(inputNow)
		case interrupt:
			x.interrupt()
		default:
			x.cancel(ErrCancelRequested)
		}
	}
}

// dispatch claims runs while workers are free: the runs of the engine's
// queue first, in the order it accepted them; then, after a wake-up or the
// poll interval, any claimable run, searched for until none is left.
func (e *Engine) dispatch() {
	poll := time.NewTicker(e.cfg.PollInterval)
	defer poll.Stop()
	search := true
	for {
		// Wait for a free worker slot.
		select {
		case e.sem <- struct{}{}:
		case <-e.claiming.Done():
			return
		}
		if e.claimQueued() {
			continue
		}
		if search {
			if e.claimOne() {
				continue // look for more at once
			}
			search = false
		}
		<-e.sem
		select {
		case <-e.claiming.Done():
			return
		case <-e.wake:
			search = true
		case <-e.kick:
		case <-poll.C:
			search = true
		}
	}
}

// kickQueue makes the dispatcher look at the engine's queue now.
func (e *Engine) kickQueue() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// unstoredGrace is how long an ended run that is not to be kept
// (RunParams.Unstored) may wait for its door to delete it, as it does once
// it has answered, before the sweeper does.
const unstoredGrace = time.Minute

// sweep times out, now and then, the runs that wait for a client past their
// deadline, so that every accepted run ends; finishes what a dead
// instance left undone of sub-agents (persist.ChildrenSweep); and deletes
// the ended runs that are not to be kept.
func (e *Engine) sweep() {
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-e.claiming.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(e.claiming, 10*time.Second)
		n, err := e.cfg.Store.RunsSweep(ctx, 100)
		cancel()
		switch {
		case err != nil && e.claiming.Err() == nil:
			e.log.Warn("sweep runs waiting past their deadline", "error", err)
		case n > 0:
			e.m.RunsEnded.WithLabelValues(string(agentd.StatusTimedOut), string(agentd.ReasonTimedOutTotal)).Add(float64(n))
			e.log.Info("timed out runs that waited for a client past their deadline", "runs", n)
		}
		ctx, cancel = context.WithTimeout(e.claiming, 10*time.Second)
		answered, cancelled, err := e.cfg.Store.ChildrenSweep(ctx, 100)
		cancel()
		switch {
		case err != nil && e.claiming.Err() == nil:
			e.log.Warn("sweep the runs of sub-agents", "error", err)
		case answered+cancelled > 0:
			e.log.Info("swept the runs of sub-agents", "calls_answered", answered, "children_cancelled", cancelled)
		}
		ctx, cancel = context.WithTimeout(e.claiming, 10*time.Second)
		if n, err := e.reportChildren(ctx, ""); err != nil && e.claiming.Err() == nil {
			e.log.Warn("report the ends of detached sub-agents", "error", err)
		} else if n > 0 {
			e.log.Info("reported the ends of detached sub-agents", "runs", n)
		}
		cancel()
		ctx, cancel = context.WithTimeout(e.claiming, 10*time.Second)
		ids, err := e.cfg.Store.UnstoredPurge(ctx, unstoredGrace, 100)
		cancel()
		switch {
		case err != nil && e.claiming.Err() == nil:
			e.log.Warn("delete ended runs that are not kept", "error", err)
		case len(ids) > 0:
			e.log.Info("deleted ended runs that are not kept", "runs", len(ids))
		}
	}
}

// claimOne claims one run and starts executing it; it holds a slot of e.sem
// and hands it to the execution when it claims something.
func (e *Engine) claimOne() bool {
	ctx, cancel := context.WithTimeout(e.claiming, 5*time.Second)
	defer cancel()
	c, err := e.cfg.Store.RunClaimStart(ctx, e.cfg.WorkerID, e.cfg.LeaseTTL)
	switch {
	case errors.Is(err, agentd.ErrNotFound):
		e.m.claim(claimEmpty)
		return false
	case errors.Is(err, agentd.ErrConflict):
		// Two workers raced for runs of one conversation; the other won.
		e.m.claim(claimConflict)
		e.Wake()
		return false
	case err != nil:
		if e.claiming.Err() == nil {
			e.m.claim(claimError)
			if !errors.Is(err, agentd.ErrUnavailable) {
				// The store logs an outage of the database once, not
				// once per claim.
				e.log.Error("claim run", "error", err)
			}
		}
		return false
	}
	e.m.claim(claimClaimed)
	if c.PrevStatus == agentd.StatusRunning {
		e.m.RunsRecovered.Inc()
	}
	e.launch(c, nil, false)
	return true
}

// launch executes claim c, from state st when it is known, in the worker
// slot of e.sem its caller holds, which the execution releases when it ends. With unlessStopping it launches
// nothing once the engine stops claiming, and reports false (the slot is
// still the caller's); the dispatcher's own claims are always launched, since
// Stop waits for the dispatcher before it waits for the runs.
func (e *Engine) launch(c persist.Claim, st *agentd.RunState, unlessStopping bool) bool {
	x := newExecution(e.ctx, e.d, c, e.cfg.WorkerID)
	x.next = st // nil: the execution reads the run's state
	x.takeNext = func() *persist.ClaimNext { return e.takeNext(c) }
	e.mu.Lock()
	if unlessStopping && e.claiming.Err() != nil {
		e.mu.Unlock()
		return false
	}
	e.active[c.ID] = x
	e.executing[c.TenantID]++
	e.runs.Add(1) // under e.mu: Stop waits for e.runs only after it stopped claiming
	e.mu.Unlock()
	e.m.RunsActive.Inc()
	go func() {
		defer e.runs.Done()
		defer func() {
			// The slot goes to the next run this instance queued, if any:
			// the one the run's stop claimed, else the next of the queue,
			// first those that waited for this run's conversation.
			e.unpark(c.ConversationID)
			if x.handed != nil && e.launchHanded(x.handed) {
				return
			}
			if !e.claimQueued() {
				<-e.sem
			}
		}()
		defer e.m.RunsActive.Dec()
		defer func() {
			if x.answer != "" {
				e.answerParent(x.answer)
			}
		}()
		defer func() {
			e.mu.Lock()
			delete(e.active, c.ID)
			if e.executing[c.TenantID]--; e.executing[c.TenantID] == 0 {
				delete(e.executing, c.TenantID)
			}
			e.mu.Unlock()
		}()
		x.execute()
	}()
	return true
}

// Stop stops claiming, lets executing runs reach a step boundary until ctx
// ends, then interrupts the rest and hands their leases back so that a peer
// takes them over at once. It returns an error naming the runs handed back.
func (e *Engine) Stop(ctx context.Context) error {
	var err error
	e.stopOnce.Do(func() {
		if e.cancel == nil {
			return
		}
		e.stopIn()
		<-e.dispatched // every run claimed so far is in e.active and e.runs
		e.mu.Lock()
		for _, x := range e.active {
			x.draining.Store(true)
		}
		e.mu.Unlock()
		done := make(chan struct{})
		go func() { e.runs.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			e.mu.Lock()
			n := len(e.active)
			for _, x := range e.active {
				x.cancel(ErrShutdown)
			}
			e.mu.Unlock()
			<-done
			err = fmt.Errorf("handed back %d runs at shutdown", n)
		}
		e.cancel(ErrShutdown)
		e.wg.Wait()
	})
	return err
}

// Abandon stops the engine the way a crash would: every goroutine stops and
// nothing more is written, leases are not released. Tests use it to stand in
// for a killed process.
func (e *Engine) Abandon() {
	e.stopOnce.Do(func() {
		e.stopIn()
		<-e.dispatched
		e.mu.Lock()
		for _, x := range e.active {
			x.abandoned.Store(true)
			x.cancel(errAbandoned)
		}
		e.mu.Unlock()
		e.runs.Wait()
		e.cancel(errAbandoned)
		e.wg.Wait()
	})
}
