package memory

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/persist"
)

// ExtractStore is what an Extractor needs of the database (*persist.Store
// implements it; see its methods for their errors).
type ExtractStore interface {
	MemoryExtractionClaim(ctx context.Context, p persist.ExtractionClaim) ([]agentd.MemoryExtraction, error)
	MemoryExtractionDone(ctx context.Context, p persist.ExtractionDone) (int, error)
	MemoryExtractionRetry(ctx context.Context, p persist.ExtractionRetry) error
	RunByID(ctx context.Context, id string) (agentd.Run, error)
	RunInput(ctx context.Context, runID string) ([]agentd.Message, error)
	MemoryList(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error)
	BudgetGet(ctx context.Context, tenant string) (*float64, error)
	Spend(ctx context.Context, tenant, runID string) (month, run float64, err error)
}

// Defaults of an ExtractConfig.
const (
	DefaultExtractWorkers  = 2
	DefaultExtractTimeout  = 2 * time.Minute
	DefaultExtractAttempts = 5
	DefaultExtractBackoff  = 30 * time.Second
	DefaultExtractTick     = time.Second
	maxExtractBackoff      = 30 * time.Minute
)

// ExtractConfig configures an Extractor.
type ExtractConfig struct {
	Store ExtractStore
	// Model answers the extractions' model calls (the engine's router).
	Model llm.Model
	// Profiles price the calls for the ledger and name their providers;
	// nil: the built-in profiles (no prices).
	Profiles *compact.Profiles
	// Embedder, when set, embeds the values written, as Service.Put does.
	Embedder Embedder
	// DefaultModel is the model of the runs whose memory.extract names
	// none (AGENTD_MEMORY_EXTRACT_MODEL, else the server's model).
	DefaultModel string
	// Workers is how many extractions this instance makes at once.
	Workers int
	// Timeout bounds an attempt: its model call, its embeddings and its
	// write. Its lease is half as long again (the time its end takes to
	// commit): past it, another instance begins the job's next attempt,
	// and this one's write is refused by its fence.
	Timeout time.Duration
	// Attempts caps a job's attempts: the last one's failure fails it.
	Attempts int
	// Backoff is the delay before a job's second attempt; each next one
	// doubles it (at most 30 minutes), less up to a quarter of jitter.
	Backoff time.Duration
	// Tick is how often the due jobs are looked for.
	Tick time.Duration
	// MonthlyBudget is the monthly budget of a tenant without its own (0:
	// none): a tenant whose month is spent gets no extraction.
	MonthlyBudget float64
	// Worker names this instance's holds on jobs; "": host:pid:random.
	Worker     string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Extractor makes the extraction jobs (docs/memory.md, "Extraction"): it
// claims due jobs for a lease, asks the model what of each run's turn is
// worth remembering, and writes it, in goroutines it owns between Start
// and Stop. A job is written once: its items, its end and its model call's
// ledger row commit together under the attempt's fence.
type Extractor struct {
	cfg ExtractConfig
	// ctx is the attempts' (cancelled when Stop cuts what did not
	// drain); intake is the claimer's (cancelled when Stop begins).
	ctx       context.Context
	cancel    context.CancelFunc
	intake    context.Context
	endIntake context.CancelFunc
	claimer   sync.WaitGroup
	jobs      sync.WaitGroup

	state   sync.Mutex // over started, stopped and stopErr
	started bool
	stopped bool
	stopErr error

	mu       sync.Mutex
	inFlight int
	freed    chan struct{} // an attempt ended: the claimer may take more

	outcomes *prometheus.CounterVec
	items    prometheus.Counter
}

// NewExtractor returns an Extractor of cfg, its zero fields at their
// defaults, not yet started.
func NewExtractor(cfg ExtractConfig) *Extractor {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, DefaultExtractTimeout)
	def(&cfg.Backoff, DefaultExtractBackoff)
	def(&cfg.Tick, DefaultExtractTick)
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultExtractWorkers
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultExtractAttempts
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = crand.Read(b)
		cfg.Worker = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	return &Extractor{cfg: cfg, freed: make(chan struct{}, 1),
		outcomes: metrics.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_memory_extractions_total",
			Help: "Memory extraction attempts, by outcome: done, retried (to be tried again) or failed (given up).",
		}, []string{"outcome"})),
		items: metrics.Register(cfg.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_memory_extracted_items_total",
			Help: "Memory item versions written by extractions (an item unchanged is not written again).",
		})),
	}
}

// Start starts the claimer, which starts a goroutine for each attempt, at
// most Workers at once. They run until Stop; ctx bounds nothing. Starting
// twice, or after Stop, does nothing.
func (e *Extractor) Start(ctx context.Context) error {
	e.state.Lock()
	defer e.state.Unlock()
	if e.started || e.stopped {
		return nil
	}
	e.started = true
	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.intake, e.endIntake = context.WithCancel(e.ctx)
	e.claimer.Add(1)
	go func() {
		defer e.claimer.Done()
		e.loop()
	}()
	return nil
}

// Stop stops claiming at once, and lets the attempts under way finish
// until ctx ends; what is still under way then is cut, and made again (by
// any instance) once its lease ends. Stop says how many were cut.
// Stopping twice, or an Extractor never started, is safe; the second call
// returns what the first did.
func (e *Extractor) Stop(ctx context.Context) error {
	e.state.Lock()
	defer e.state.Unlock()
	if e.stopped || !e.started {
		e.stopped = true
		return e.stopErr
	}
	e.stopped = true
	e.endIntake()
	e.claimer.Wait()
	done := make(chan struct{})
	go func() {
		e.jobs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.mu.Lock()
		n := e.inFlight
		e.mu.Unlock()
		e.cancel()
		<-done
		if n > 0 {
			e.stopErr = fmt.Errorf("cut %d memory extractions under way: %w", n, ctx.Err())
		}
	}
	e.cancel()
	return e.stopErr
}

// loop claims until Stop, pausing a tick (or until an attempt ends)
// whenever it took nothing.
func (e *Extractor) loop() {
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	for e.intake.Err() == nil {
		if e.claim() {
			continue
		}
		select {
		case <-t.C:
		case <-e.freed:
		case <-e.intake.Done():
		}
	}
}

// claim takes as many due jobs as there are free workers and starts
// their attempts; true: it took some, and there may be more.
func (e *Extractor) claim() bool {
	e.mu.Lock()
	free := e.cfg.Workers - e.inFlight
	e.mu.Unlock()
	if free <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(e.intake, 10*time.Second)
	jobs, err := e.cfg.Store.MemoryExtractionClaim(ctx, persist.ExtractionClaim{Worker: e.cfg.Worker, Max: free,
		Lease: e.cfg.Timeout * 3 / 2, Model: e.cfg.DefaultModel, MaxAttempts: e.cfg.Attempts})
	cancel()
	if err != nil {
		if e.intake.Err() == nil {
			e.cfg.Logger.Warn("memory extraction: claim jobs", "err", err)
		}
		return false
	}
	for _, job := range jobs {
		e.hold(1)
		e.jobs.Add(1)
		go func() {
			defer e.jobs.Done()
			defer e.hold(-1)
			e.work(job)
		}()
	}
	return len(jobs) > 0
}

// hold counts n attempts more (or fewer) under way; an attempt's end wakes
// the claimer.
func (e *Extractor) hold(n int) {
	e.mu.Lock()
	e.inFlight += n
	e.mu.Unlock()
	if n < 0 {
		select {
		case e.freed <- struct{}{}:
		default:
		}
	}
}

// attemptResult is what an attempt came to: the items to write (done), or
// its failure (final: no retry can mend it), with the ledger's row of its
// model call once the model answered.
type attemptResult struct {
	writes []agentd.MemoryWrite
	call   *persist.LedgerInsert
	err    error
	final  bool
}

// work makes a claimed job's attempt, and records how it ended.
func (e *Extractor) work(job agentd.MemoryExtraction) {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Timeout)
	defer cancel()
	log := e.cfg.Logger.With("extraction_id", job.ID, "run_id", job.RunID, "tenant_id", job.TenantID,
		"attempt", job.Attempts)
	res := e.attempt(ctx, job)
	if e.ctx.Err() != nil {
		return // cut by Stop: the lease brings the job back
	}
	// The end is written whatever became of ctx: the model's answer was
	// paid for.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(e.ctx), 30*time.Second)
	defer wcancel()
	if res.err == nil {
		n, err := e.cfg.Store.MemoryExtractionDone(wctx, persist.ExtractionDone{ID: job.ID, Attempt: job.Attempts,
			TenantID: job.TenantID, Writes: res.writes, Call: *res.call})
		if err == nil {
			e.outcomes.WithLabelValues("done").Inc()
			e.items.Add(float64(n))
			log.Info("memory extraction done", "items", n)
			return
		}
		var limit *agentd.MemoryLimitError
		res.err, res.final = err, errors.As(err, &limit) || errors.Is(err, persist.ErrInvalidValue)
	}
	if errors.Is(res.err, agentd.ErrExtractionLeaseLost) {
		log.Warn("memory extraction: the attempt lost its job to another", "err", res.err)
		return
	}
	e.fail(wctx, log, job, res)
}

// fail records a failed attempt: the job is due again after its backoff,
// or, when the failure is final or the attempt the last, failed.
func (e *Extractor) fail(ctx context.Context, log *slog.Logger, job agentd.MemoryExtraction, res attemptResult) {
	r := persist.ExtractionRetry{ID: job.ID, Attempt: job.Attempts, Error: res.err.Error(), Call: res.call}
	outcome := "failed"
	if !res.final && job.Attempts < e.cfg.Attempts {
		r.RetryAt, outcome = time.Now().Add(e.backoff(job.Attempts)), "retried"
	}
	if err := e.cfg.Store.MemoryExtractionRetry(ctx, r); err != nil {
		log.Warn("memory extraction: record a failed attempt", "err", err)
		return
	}
	e.outcomes.WithLabelValues(outcome).Inc()
	if outcome == "failed" {
		log.Warn("memory extraction failed", "err", res.err)
	} else {
		log.Info("memory extraction: an attempt failed; retried", "err", res.err, "retry_at", r.RetryAt)
	}
}

// backoff is the delay after the nth attempt failed: Backoff doubled n-1
// times, at most maxExtractBackoff, less up to a quarter at random.
func (e *Extractor) backoff(n int) time.Duration {
	delay := e.cfg.Backoff
	for i := 1; i < n && delay < maxExtractBackoff; i++ {
		delay *= 2
	}
	delay = min(delay, maxExtractBackoff)
	return delay - time.Duration(rand.Int64N(int64(delay/4)+1))
}

// attempt reads job's run and turn, asks the model, and reads its
// answer into the writes of the job's items.
func (e *Extractor) attempt(ctx context.Context, job agentd.MemoryExtraction) attemptResult {
	run, err := e.cfg.Store.RunByID(ctx, job.RunID)
	if errors.Is(err, agentd.ErrNotFound) || (err == nil && run.TenantID != job.TenantID) {
		return attemptResult{err: errors.New("the run is gone"), final: true}
	}
	if err != nil {
		return attemptResult{err: fmt.Errorf("read the run: %w", err)}
	}
	if err := e.budgetLeft(ctx, job.TenantID); err != nil {
		return attemptResult{err: err, final: errors.As(err, new(*agentd.BudgetError))}
	}
	t, err := e.turnOf(ctx, job, run)
	if err != nil {
		return attemptResult{err: err}
	}
	instructions := ""
	if x := run.Params.Memory; x != nil && x.Extract != nil {
		instructions = x.Extract.Instructions
	}
	resp, err := e.cfg.Model.Stream(ctx, extractionRequest(job.Model, instructions, t), nil)
	if err != nil {
		var me *llm.Error
		return attemptResult{err: err, final: errors.As(err, &me) && !me.Retryable() && me.Kind != llm.KindCancelled}
	}
	call := e.ledgerRow(job, run, resp.Usage)
	memories, err := parseMemories(resp.Text)
	if err != nil {
		return attemptResult{err: err, call: &call}
	}
	writes, err := e.writesOf(ctx, job, run, memories)
	return attemptResult{writes: writes, call: &call, err: err}
}

// turnOf reads what the extraction of job shows the model: the items its
// namespace holds, and the run's input.
func (e *Extractor) turnOf(ctx context.Context, job agentd.MemoryExtraction, run agentd.Run) (turn, error) {
	t := turn{namespace: job.Namespace}
	input, err := e.cfg.Store.RunInput(ctx, run.ID)
	if err != nil {
		return t, fmt.Errorf("read the run's input: %w", err)
	}
	t.input = input
	if len(run.Output) > 0 {
		if err := json.Unmarshal(run.Output, &t.output); err != nil {
			return t, fmt.Errorf("read the run's output: %w", err)
		}
	}
	known, err := e.cfg.Store.MemoryList(ctx, job.TenantID, agentd.MemoryListParams{Prefix: job.Namespace, Limit: 4 * maxKnown})
	if err != nil {
		return t, fmt.Errorf("read the namespace's items: %w", err)
	}
	for _, it := range known {
		if len(t.known) < maxKnown && it.Namespace.String() == job.Namespace.String() {
			t.known = append(t.known, it)
		}
	}
	return t, nil
}

// budgetLeft returns the *agentd.BudgetError of a tenant whose monthly
// budget is spent, nil when it may spend more (or has no budget).
func (e *Extractor) budgetLeft(ctx context.Context, tenant string) error {
	own, err := e.cfg.Store.BudgetGet(ctx, tenant)
	if err != nil {
		return fmt.Errorf("read the tenant's budget: %w", err)
	}
	monthly := agentd.MonthlyBudget(own, e.cfg.MonthlyBudget)
	if monthly <= 0 {
		return nil
	}
	month, _, err := e.cfg.Store.Spend(ctx, tenant, "")
	if err != nil {
		return fmt.Errorf("read the tenant's spend: %w", err)
	}
	if month >= monthly {
		return &agentd.BudgetError{Budget: agentd.BudgetTenantMonthly, Tenant: tenant, Limit: monthly, Spent: month}
	}
	return nil
}

// ledgerRow is the ledger's row of job's model call, which used u.
func (e *Extractor) ledgerRow(job agentd.MemoryExtraction, run agentd.Run, u llm.Usage) persist.LedgerInsert {
	prof := e.cfg.Profiles.For(job.Model)
	row := persist.LedgerInsert{TenantID: run.TenantID, RunID: run.ID, N: job.Attempts, Kind: agentd.ModelCallExtraction,
		Model: job.Model, Provider: prof.Provider(), UpstreamModel: prof.Route.Model,
		InputTokens: u.InputTokens, CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens,
		OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens, Cost: prof.Prices.Cost(u)}
	if prof.Prices != nil {
		row.PriceVersion = e.cfg.Profiles.PriceVersion()
	}
	if a := run.Params.Agent; a != nil {
		row.Agent = a.Name
	}
	return row
}

// writesOf are the writes of memories to job's namespace, with their
// provenance, embedded when the extractor has an embedder.
func (e *Extractor) writesOf(ctx context.Context, job agentd.MemoryExtraction, run agentd.Run,
	memories []extracted) ([]agentd.MemoryWrite, error) {
	writes := make([]agentd.MemoryWrite, len(memories))
	values := make([]string, len(memories))
	for i, m := range memories {
		writes[i] = agentd.MemoryWrite{Namespace: job.Namespace, Key: m.Key, Value: m.Value, Data: m.Data,
			Source: agentd.MemoryFromExtraction, Actor: agentd.MemoryExtractor(run), ExtractedFrom: run.ID}
		values[i] = m.Value
	}
	if e.cfg.Embedder == nil || len(values) == 0 {
		return writes, nil
	}
	vs, err := e.cfg.Embedder.Embed(ctx, values)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEmbeddings, err)
	}
	for i := range writes {
		writes[i].Embedding, writes[i].EmbeddingModel = vs[i], e.cfg.Embedder.Model()
	}
	return writes, nil
}
