package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"agentd/internal/persist"
	"agentd/internal/tools"
)

// Store is what the API needs of the database. *persist.Store implements it.
//
// Methods that take a tenant return persist.ErrNotFound for a row that does
// not exist or belongs to another tenant. StepsList and MessagesList do not
// check the tenant: the handlers read the run or conversation first.
type Store interface {
	// RunCreate commits a run and its input; see persist.Store.RunCreate. It
	// returns a *persist.BusyError for a busy conversation,
	// persist.ErrIdempotencyMismatch for a reused key, and persist.ErrNotFound
	// for an unknown conversation.
	RunCreate(ctx context.Context, p persist.RunCreateParams) (run persist.Run, created bool, err error)
	// RunGet returns a tenant's run, or persist.ErrNotFound.
	RunGet(ctx context.Context, tenantID, id string) (persist.Run, error)
	// RunList returns a tenant's runs, newest first.
	RunList(ctx context.Context, p persist.RunListParams) ([]persist.Run, error)
	// RunCancel cancels a run: persist.ErrNotFound, or persist.ErrConflict
	// when the run already ended otherwise than cancelled.
	RunCancel(ctx context.Context, tenantID, id string) (persist.Run, error)
	// RunResume re-queues a run: persist.ErrNotFound, or persist.ErrConflict
	// when the run is completed.
	RunResume(ctx context.Context, tenantID, id string) (persist.Run, error)
	RunResolveAction(ctx context.Context, p persist.ActionParams) (persist.Run, error)
	IdempotencyBegin(ctx context.Context, tenantID, key, hash string) (persist.IdempotencyRecord, bool, error)
	IdempotencyFinish(ctx context.Context, tenantID, key string, status int, contentType string, body []byte) error
	IdempotencyAbandon(ctx context.Context, tenantID, key string) error
	// StepsList returns a run's steps with their tool calls and attempts.
	StepsList(ctx context.Context, runID string) ([]persist.StepDetail, error)
	// ConversationGet returns a tenant's conversation, or persist.ErrNotFound.
	ConversationGet(ctx context.Context, tenantID, id string) (persist.Conversation, error)
	// MessagesList returns up to limit messages of a conversation after seq.
	MessagesList(ctx context.Context, conversationID string, after, limit int) ([]persist.Message, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
}

var _ Store = (*persist.Store)(nil)

// RunDefaults fill in what a POST /runs body leaves out.
type RunDefaults struct {
	// Model is used when the request names none. When it is empty too, a
	// request without a model is refused.
	Model string
	// MaxSteps is the default step budget (default 16).
	MaxSteps int
	// MaxStepsLimit is the largest max_steps a client may ask for (default 100).
	MaxStepsLimit int
	// Timeouts are the defaults of the timeouts a request does not give, in
	// milliseconds (defaults: total 600000, step 120000, idle 60000, tool
	// 60000). A zero field takes its default; there is no way to default a
	// timeout to "none", but a client may ask for 0.
	Timeouts persist.Timeouts
}

// Config configures the handler returned by New. Store is required; every
// other field has a default.
type Config struct {
	// Store reads and writes runs and conversations.
	Store Store
	// Tools is the registry that GET /tools lists and that the "tools" of a
	// new run are checked against. Nil means no tools.
	Tools *tools.Registry
	// Logger receives access logs (at debug level) and internal errors. Nil
	// discards them.
	Logger *slog.Logger
	// Metrics serves GET /metrics; nil means promhttp.Handler().
	Metrics http.Handler
	// Registerer receives the API's own request metrics; nil means
	// prometheus.DefaultRegisterer. Collectors already registered there (by an
	// earlier New) are reused.
	Registerer prometheus.Registerer
	// ReadyFunc answers GET /readyz: nil error means ready. Nil means
	// Store.Ping.
	ReadyFunc func(ctx context.Context) error
	// Events, when set, serves GET /runs/{id}/events. The API checks the
	// tenant and that the run exists before calling it; the handler finds the
	// run's id with RunIDFromContext.
	Events http.Handler
	// StreamFunc, when set, answers a POST /runs with "stream": true once the
	// run is committed (or found again by its idempotency key), by streaming
	// the run's events into w. When it is nil, such requests get 501
	// streaming_unavailable and nothing is created.
	StreamFunc func(w http.ResponseWriter, r *http.Request, run persist.Run)
	// Defaults fill in what a new run's request leaves out.
	Defaults RunDefaults
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// CreateFunc commits the run of a POST /runs; nil means Store.RunCreate.
	// The server passes its engine's Create, which starts the run on a free
	// worker of this instance in the same transaction.
	CreateFunc func(ctx context.Context, p persist.RunCreateParams) (persist.Run, bool, error)
}

// Default values of Config and RunDefaults.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultMaxSteps      = 16
	DefaultMaxStepsLimit = 100
	DefaultTotalMS       = 600_000
	DefaultStepMS        = 120_000
	DefaultIdleMS        = 60_000
	DefaultToolMS        = 60_000
)

// server holds the handlers' dependencies.
type server struct {
	store    Store
	tools    *tools.Registry
	log      *slog.Logger
	metrics  *httpMetrics
	ready    func(ctx context.Context) error
	stream   func(w http.ResponseWriter, r *http.Request, run persist.Run)
	create   func(ctx context.Context, p persist.RunCreateParams) (persist.Run, bool, error)
	defaults RunDefaults
	maxBody  int64
	known    knownRuns // runs found for a tenant, for event streams
}

// New returns the API's http.Handler. It panics when cfg.Store is nil, which
// is a wiring mistake.
func New(cfg Config) http.Handler {
	s := newServer(cfg)
	return s.routes(cfg)
}

func newServer(cfg Config) *server {
	if cfg.Store == nil {
		panic("api: Config.Store is nil")
	}
	s := &server{
		store:    cfg.Store,
		tools:    cfg.Tools,
		log:      cfg.Logger,
		ready:    cfg.ReadyFunc,
		stream:   cfg.StreamFunc,
		create:   cfg.CreateFunc,
		defaults: cfg.Defaults,
		maxBody:  cfg.MaxBodyBytes,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.create == nil {
		s.create = s.store.RunCreate
	}
	if s.ready == nil {
		s.ready = cfg.Store.Ping
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	d := &s.defaults
	if d.MaxStepsLimit <= 0 {
		d.MaxStepsLimit = DefaultMaxStepsLimit
	}
	if d.MaxSteps <= 0 {
		d.MaxSteps = min(DefaultMaxSteps, d.MaxStepsLimit)
	}
	setDefault(&d.Timeouts.TotalMS, DefaultTotalMS)
	setDefault(&d.Timeouts.StepMS, DefaultStepMS)
	setDefault(&d.Timeouts.IdleMS, DefaultIdleMS)
	setDefault(&d.Timeouts.ToolMS, DefaultToolMS)
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	s.metrics = newHTTPMetrics(reg)
	return s
}

func setDefault(v *int64, def int64) {
	if *v <= 0 {
		*v = def
	}
}

// routes builds the router. Every route here is in openapi.yaml, and
// openapi_test.go checks it.
func (s *server) routes(cfg Config) *chi.Mux {
	r := chi.NewRouter()
	r.Use(requestID, s.accessLog, s.recoverer)
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed(r))

	r.Get("/livez", s.livez)
	r.Get("/readyz", s.readyz)
	metrics := cfg.Metrics
	if metrics == nil {
		metrics = promhttp.Handler()
	}
	r.Method(http.MethodGet, "/metrics", metrics)

	r.Group(func(r chi.Router) {
		r.Use(s.tenant)
		r.With(s.requireJSON).Post("/runs", s.handle(s.runCreate))
		r.Get("/runs", s.handle(s.runList))
		r.Get("/runs/{id}", s.handle(s.runGet))
		r.Get("/runs/{id}/steps", s.handle(s.stepsList))
		r.With(s.requireJSON, s.idempotent).Post("/runs/{id}/cancel", s.handle(s.runCancel))
		r.With(s.requireJSON, s.idempotent).Post("/runs/{id}/resume", s.handle(s.runResume))
		r.With(s.requireJSON, s.idempotent).Post("/runs/{id}/actions", s.handle(s.runAction))
		if cfg.Events != nil {
			r.With(s.findRun).Method(http.MethodGet, "/runs/{id}/events", cfg.Events)
		}
		r.Get("/conversations/{id}", s.handle(s.conversationGet))
		r.Get("/conversations/{id}/messages", s.handle(s.messagesList))
		r.Get("/tools", s.handle(s.toolsList))
	})
	return r
}
