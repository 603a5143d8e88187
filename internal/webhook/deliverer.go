package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/tools"
)

// Store is what a Deliverer needs of the database.
type Store interface {
	OutboxDispatch(ctx context.Context, limit int, payload agentd.PayloadFunc) (int, error)
	DeliveryClaim(ctx context.Context, p agentd.DeliveryClaim) ([]agentd.Delivery, error)
	// DeliveryRecord records an attempt; disabled: it disabled the
	// delivery's subscription (r.DisableAfter).
	DeliveryRecord(ctx context.Context, r agentd.DeliveryResult) (disabled bool, err error)
}

// Defaults of a Config.
const (
	DefaultBackoff  = 5 * time.Second
	DefaultHorizon  = 24 * time.Hour
	DefaultDisable  = 24 * time.Hour
	DefaultTimeout  = 10 * time.Second
	DefaultWorkers  = 8
	DefaultPerURL   = 2
	DefaultTick     = 250 * time.Millisecond
	maxBackoff      = time.Hour
	dispatchBatch   = 100
	maxResponseRead = 64 << 10
)

// Config configures a Deliverer.
type Config struct {
	Store Store
	Box   *secrets.Box // opens the signing secrets
	// Payload is the body of an outbox row's deliveries (nil: Payload).
	Payload agentd.PayloadFunc
	// Client makes the POSTs: one held to the egress rule of the URLs
	// tenants give (tools.GuardedClient), which follows no redirect.
	Client *http.Client
	// Backoff is the delay before the first retry; each next one doubles
	// it (at most an hour), less up to a quarter of jitter. Horizon is how
	// long after its creation (or redelivery) a delivery is retried before
	// it is marked failed.
	Backoff, Horizon time.Duration
	// DisableAfter disables a subscription every attempt to which has
	// failed for that long (since the first failed one after the last
	// delivered one).
	DisableAfter time.Duration
	Timeout      time.Duration // of one attempt
	Workers      int           // attempts under way at once on this instance
	PerURL       int           // of which to one URL at most
	PerTenant    int           // of which of one tenant's deliveries at most (0: Workers/2, at least 1)
	Tick         time.Duration // how often the outbox and the due deliveries are looked at
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Deliverer dispatches the outbox and makes the due deliveries' attempts,
// in goroutines it owns between Start and Stop.
type Deliverer struct {
	cfg Config
	// ctx is the attempts' (and the dispatcher's calls'): cancelled when
	// Stop cuts what did not drain. intake is the loops': cancelled when
	// Stop begins, so that nothing new is claimed.
	ctx       context.Context
	cancel    context.CancelFunc
	intake    context.Context
	endIntake context.CancelFunc
	wg        sync.WaitGroup // the dispatcher and the claimer
	state     sync.Mutex     // over started, stopped and stopErr
	started   bool
	stopped   bool
	stopErr   error

	mu       sync.Mutex
	busy     map[string]int // attempts under way by URL
	tenants  map[string]int // attempts under way by tenant
	inFlight int            // attempts under way
	freed    chan struct{}  // an attempt ended: the claimer may take more
	attempts sync.WaitGroup // the attempts' goroutines

	delivered *prometheus.CounterVec
	latency   prometheus.Histogram
	disabled  prometheus.Counter
}

// New returns a Deliverer of cfg, its zero fields at their defaults.
func New(cfg Config) *Deliverer {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Backoff, DefaultBackoff)
	def(&cfg.Horizon, DefaultHorizon)
	def(&cfg.DisableAfter, DefaultDisable)
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.Tick, DefaultTick)
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.PerURL <= 0 {
		cfg.PerURL = DefaultPerURL
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = max(1, cfg.Workers/2)
	}
	cfg.PerTenant = min(cfg.PerTenant, cfg.Workers)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Payload == nil {
		cfg.Payload = Payload
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Deliverer{cfg: cfg, busy: map[string]int{}, tenants: map[string]int{}, freed: make(chan struct{}, 1),
		delivered: metrics.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_webhook_attempts_total",
			Help: "Webhook delivery attempts, by outcome: delivered, retried (to be tried again) or failed (given up).",
		}, []string{"outcome"})),
		latency: metrics.Register(cfg.Registerer, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_webhook_attempt_seconds", Help: "Duration of webhook delivery attempts.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10),
		})),
		disabled: metrics.Register(cfg.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_webhooks_disabled_total",
			Help: "Webhook subscriptions disabled because every attempt to them failed for AGENTD_WEBHOOK_DISABLE_AFTER.",
		})),
	}
}

// Start starts the dispatcher and the claimer, which starts a goroutine
// for each attempt, at most Workers at once. They run until Stop; ctx
// bounds nothing. Starting twice, or after Stop, does nothing.
func (d *Deliverer) Start(ctx context.Context) error {
	d.state.Lock()
	defer d.state.Unlock()
	if d.started || d.stopped {
		return nil
	}
	d.started = true
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	d.intake, d.endIntake = context.WithCancel(d.ctx)
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		d.loop(d.dispatch, nil)
	}()
	go func() {
		defer d.wg.Done()
		d.loop(d.claim, d.freed)
	}()
	return nil
}

// Stop stops dispatching and claiming at once, and lets the attempts under
// way finish (and be recorded) until ctx ends: an endpoint that got a
// delivery is not sent it again by the instance that takes over. What is
// still under way then is cut, and made again (by any instance) once its
// claim's lease is over; Stop says how many were. Stopping twice, or a
// Deliverer never started, is safe; the second call returns what the
// first did.
func (d *Deliverer) Stop(ctx context.Context) error {
	d.state.Lock()
	defer d.state.Unlock()
	if d.stopped || !d.started {
		d.stopped = true
		return d.stopErr
	}
	d.stopped = true
	d.endIntake()
	d.wg.Wait() // a claim under way hands its deliveries to attempts first
	if !d.drain(ctx) {
		d.mu.Lock()
		n := d.inFlight
		d.mu.Unlock()
		d.cancel()
		d.attempts.Wait()
		if n > 0 {
			d.stopErr = fmt.Errorf("cut %d delivery attempts under way: %w", n, ctx.Err())
		}
	}
	d.cancel()
	d.cfg.Client.CloseIdleConnections() // no connection outlives the Deliverer
	return d.stopErr
}

// drain waits for the attempts under way until ctx ends; false: some are
// still under way.
func (d *Deliverer) drain(ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		d.attempts.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done: // both ready: it drained
			return true
		default:
			return false
		}
	}
}

// loop calls step until Stop, pausing a tick (or until wake) whenever it
// found nothing to do (or failed).
func (d *Deliverer) loop(step func() bool, wake <-chan struct{}) {
	t := time.NewTicker(d.cfg.Tick)
	defer t.Stop()
	for d.intake.Err() == nil {
		if step() {
			continue
		}
		select {
		case <-t.C:
		case <-wake:
		case <-d.intake.Done():
		}
	}
}

// dispatch dispatches a batch of outbox rows; true: there may be more.
func (d *Deliverer) dispatch() bool {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	n, err := d.cfg.Store.OutboxDispatch(ctx, dispatchBatch, d.cfg.Payload)
	if err != nil && d.ctx.Err() == nil {
		d.cfg.Logger.Warn("webhooks: dispatch the outbox", "err", err)
	}
	return err == nil && n == dispatchBatch
}

// claim takes as many due deliveries as there are free workers, in one
// transaction, and starts their attempts; true: it took some, and there
// may be more (those it left for the cap of their URL make room for
// others at once).
func (d *Deliverer) claim() bool {
	d.mu.Lock()
	free, busy, tenants := d.cfg.Workers-d.inFlight, maps.Clone(d.busy), maps.Clone(d.tenants)
	d.mu.Unlock()
	if free <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(d.intake, 10*time.Second)
	claimed, err := d.cfg.Store.DeliveryClaim(ctx, agentd.DeliveryClaim{Max: free, PerURL: d.cfg.PerURL, Busy: busy,
		PerTenant: d.cfg.PerTenant, TenantBusy: tenants, Lease: d.cfg.Timeout + 5*time.Second})
	cancel()
	if err != nil {
		if d.intake.Err() == nil {
			d.cfg.Logger.Warn("webhooks: claim deliveries", "err", err)
		}
		return false
	}
	for _, dl := range claimed {
		d.hold(dl, 1)
		d.attempts.Add(1)
		go func() {
			defer d.attempts.Done()
			defer d.hold(dl, -1)
			d.work(dl)
		}()
	}
	return len(claimed) > 0
}

// work makes a claimed delivery's attempt, and records it.
func (d *Deliverer) work(dl agentd.Delivery) {
	res := d.attempt(dl)
	if d.ctx.Err() != nil {
		return // cut by Stop: the claim's lease brings it back
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 10*time.Second)
	defer cancel()
	disabled, err := d.cfg.Store.DeliveryRecord(rctx, res)
	if err != nil {
		d.cfg.Logger.Warn("webhooks: record an attempt", "delivery_id", dl.ID, "err", err)
	}
	if disabled {
		d.disabled.Inc()
		d.cfg.Logger.Warn("webhooks: webhook disabled", "webhook_id", dl.WebhookID, "tenant_id", dl.TenantID,
			"url", dl.URL, "reason", res.DisableReason)
	}
}

// hold counts n attempts more (or fewer) under way of dl's (to its URL,
// of its tenant); an attempt's end wakes the claimer.
func (d *Deliverer) hold(dl agentd.Delivery, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight += n
	if d.busy[dl.URL] += n; d.busy[dl.URL] <= 0 {
		delete(d.busy, dl.URL)
	}
	if d.tenants[dl.TenantID] += n; d.tenants[dl.TenantID] <= 0 {
		delete(d.tenants, dl.TenantID)
	}
	if n < 0 {
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}
}

// attempt POSTs dl once, and says where that leaves it.
func (d *Deliverer) attempt(dl agentd.Delivery) agentd.DeliveryResult {
	start := time.Now()
	res := agentd.DeliveryResult{ID: dl.ID, Attempt: agentd.DeliveryAttempt{N: dl.Attempts, StartedAt: start}}
	code, err := d.post(dl, start)
	res.Attempt.Latency, res.Attempt.StatusCode = time.Since(start), code
	d.latency.Observe(res.Attempt.Latency.Seconds())
	switch {
	case err == nil && code >= 200 && code < 300:
		res.Delivered = true
		d.delivered.WithLabelValues("delivered").Inc()
		return res
	case err != nil:
		res.Attempt.Error = tools.Describe(err) // the tenant reads it: nothing of the instance's network
	default:
		res.Attempt.Error = fmt.Sprintf("the endpoint answered %d", code)
	}
	res.DisableAfter = d.cfg.DisableAfter
	res.DisableReason = fmt.Sprintf("every delivery attempt failed for %v; the last: %s", d.cfg.DisableAfter, res.Attempt.Error)
	if next := start.Add(d.backoff(dl.Attempts)); !errors.Is(err, errFinal) && next.Before(dl.HorizonFrom.Add(d.cfg.Horizon)) {
		res.RetryAt = next
		d.delivered.WithLabelValues("retried").Inc()
	} else {
		d.delivered.WithLabelValues("failed").Inc()
		d.cfg.Logger.Warn("webhooks: delivery failed", "delivery_id", dl.ID, "run_id", dl.RunID, "url", dl.URL,
			"attempts", dl.Attempts, "err", res.Attempt.Error)
	}
	return res
}

// errFinal marks an attempt's failure that no retry can mend.
var errFinal = errors.New("final")

// post makes the request of dl's attempt at time at: its status code, or
// an error without one.
func (d *Deliverer) post(dl agentd.Delivery, at time.Time) (int, error) {
	secret, err := open(d.cfg.Box, dl.TenantID, dl.SealedSecret)
	if err != nil {
		return 0, fmt.Errorf("%w: the signing secret cannot be opened: %v", errFinal, err)
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errFinal, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentd-webhooks")
	if err := Sign(req.Header, secret, dl.ID, at, dl.Payload); err != nil {
		return 0, fmt.Errorf("%w: %v", errFinal, err)
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseRead))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// backoff is the delay after the nth attempt failed: Backoff doubled n-1
// times, at most an hour, less up to a quarter of it at random (so that
// the retries of many deliveries spread out).
func (d *Deliverer) backoff(n int) time.Duration {
	delay := d.cfg.Backoff
	for i := 1; i < n && delay < maxBackoff; i++ {
		delay *= 2
	}
	delay = min(delay, maxBackoff)
	return delay - time.Duration(rand.Int64N(int64(delay/4)+1))
}
