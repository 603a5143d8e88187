package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/tools"
)

// Store is what the API reads from the database, and where it keeps the
// responses of idempotent requests. *persist.Store implements it. Commands
// that change a run go through Runs instead.
//
// StepsList and MessagesList do not check the tenant: the handlers read the
// run or conversation first.
type Store interface {
	// RunGet returns a tenant's run, or persist.ErrRunNotFound.
	RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error)
	// RunList returns a tenant's runs, newest first.
	RunList(ctx context.Context, p agentd.RunListParams) ([]agentd.Run, error)
	// StepsList returns a run's steps with their tool calls and attempts.
	StepsList(ctx context.Context, runID string) ([]agentd.StepDetail, error)
	// ArtifactGet returns an artifact of a tenant's run, or
	// persist.ErrArtifactNotFound.
	ArtifactGet(ctx context.Context, tenantID, runID, id string) (agentd.Artifact, error)
	// ConversationGet returns a tenant's conversation, or
	// persist.ErrConversationNotFound.
	ConversationGet(ctx context.Context, tenantID, id string) (agentd.Conversation, error)
	// ConversationForChat returns the conversation of an AI SDK chat,
	// creating it when create is set; persist.ErrConversationNotFound.
	ConversationForChat(ctx context.Context, tenantID, chatID string, create bool) (agentd.Conversation, error)
	// ConversationCreate stores a new, empty conversation.
	ConversationCreate(ctx context.Context, tenantID, title string, metadata json.RawMessage) (agentd.Conversation, error)
	// ConversationList returns a page of a tenant's conversations, newest first.
	ConversationList(ctx context.Context, p agentd.ConversationListParams) ([]agentd.Conversation, error)
	// ConversationUpdate sets a conversation's title and metadata, each when
	// not nil; persist.ErrConversationNotFound.
	ConversationUpdate(ctx context.Context, tenantID, id string, title *string, metadata json.RawMessage) (agentd.Conversation, error)
	// ConversationDelete removes a conversation and everything under it;
	// persist.ErrConversationBusy while a run of it is in progress.
	ConversationDelete(ctx context.Context, tenantID, id string) error
	// ContextWindow says which of a conversation's messages the model is
	// still sent: those after coversTo (0: all), and the first user message.
	ContextWindow(ctx context.Context, conversationID string) (coversTo, firstUser int, err error)
	// MessagesList returns up to limit messages of a conversation after seq.
	MessagesList(ctx context.Context, conversationID string, after, limit int) ([]agentd.Message, error)
	// IdempotencyBegin claims an Idempotency-Key of a POST for a request
	// whose fingerprint is hash: fresh is true when this request claimed it
	// and must be answered; otherwise the record is the earlier request's
	// (Done when its response is stored). persist.ErrConflict: the key was
	// claimed meanwhile, try again.
	IdempotencyBegin(ctx context.Context, tenantID, key, hash string) (rec agentd.IdempotencyRecord, fresh bool, err error)
	// IdempotencyFinish stores the response of the request that claimed its
	// key.
	IdempotencyFinish(ctx context.Context, r agentd.IdempotencyResponse) error
	// IdempotencyAbandon frees a key whose request failed with a server
	// error, so that a retry runs it again.
	IdempotencyAbandon(ctx context.Context, tenantID, key string) error
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
}

var _ Store = (*persist.Store)(nil)

// Runs is the engine's command door (run.Service implements it): every
// change a request asks of a run goes through it. Its errors are persist's
// sentinels and typed errors, which problemFor maps.
type Runs interface {
	// Create commits a new run (or finds the first one of a repeated
	// idempotency key: created is false).
	Create(ctx context.Context, p persist.RunCreateParams) (run agentd.Run, created bool, err error)
	// Cancel asks a run to stop; actor is who asks.
	Cancel(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)
	// Resume queues a run again; actor is who asks.
	Resume(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)
	// ResolveAction records a decision on what a waiting run asks.
	ResolveAction(ctx context.Context, p agentd.ActionParams) (agentd.Run, error)
	// ClientLeft applies the run's on_disconnect policy after the client of
	// its stream from POST /runs went away.
	ClientLeft(ctx context.Context, run agentd.Run) error
}

// Events streams a run's events as Server-Sent Events (*stream.Hub
// implements it). runID is canonical (lowercase) and the API has checked
// the tenant. Before writing anything it may return stream.ErrEnded (the
// API answers 204) or stream.ErrStopped (503 shutting_down); once the
// stream started, it reports whether it ended because the client left.
type Events interface {
	StreamRun(w http.ResponseWriter, r *http.Request, runID string, after int64) (clientLeft bool, err error)
	// StreamRunAs is StreamRun in another wire format (the AI SDK's).
	StreamRunAs(w http.ResponseWriter, r *http.Request, runID string, after int64, enc stream.Encoder) (clientLeft bool, err error)
}

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
	// 60000, action 86400000). A zero field takes its default.
	Timeouts agentd.Timeouts
	// MaxTimeouts are the ceilings of the timeouts a client may ask for, in
	// milliseconds (defaults: total 86400000 (24 h), step 3600000 (1 h),
	// idle 600000 (10 min), tool 3600000 (1 h), action 604800000 (7 days)). A client's 0 asks for the
	// ceiling, so that no run is unbounded. A zero field takes its default;
	// a default above its ceiling is lowered to it.
	MaxTimeouts agentd.Timeouts
}

// Config configures the handler returned by New. Store and Runs are
// required; every other field has a default.
type Config struct {
	// Store reads runs and conversations, and keeps idempotent responses.
	Store Store
	// Runs carries out the commands on runs.
	Runs Runs
	// Events serves GET /runs/{id}/events and POST /runs with "stream":
	// true. When it is nil, both answer 501 streaming_unavailable (and
	// nothing is created).
	Events Events
	// Tools is the registry that GET /tools lists and that the "tools" of a
	// new run are checked against. Nil means no tools.
	Tools *tools.Registry
	// Logger receives access logs (at debug level) and internal errors. Nil
	// discards them.
	Logger *slog.Logger
	// Metrics serves GET /metrics; nil means promhttp.Handler().
	Metrics http.Handler
	// HideMetrics leaves GET /metrics out of the API (it is served on a
	// listener of its own, or not at all).
	HideMetrics bool
	// Auth says who a request comes from; nil means auth.None() (every
	// request is local and holds every scope).
	Auth auth.Authenticator
	// Quotas bound what each tenant may do; zero fields are unbounded.
	Quotas Quotas
	// Registerer receives the API's own request metrics; nil means
	// prometheus.DefaultRegisterer. Collectors already registered there (by an
	// earlier New) are reused.
	Registerer prometheus.Registerer
	// ReadyFunc answers GET /readyz: nil error means ready, and ErrDraining
	// says that the instance is shutting down. Nil means Store.Ping.
	ReadyFunc func(ctx context.Context) error
	// ToolSources, when set, says how the tool sources (MCP servers) are,
	// in GET /readyz's body: a server that is down does not make the
	// instance unready, its tools are just absent.
	ToolSources func() any
	// Defaults fill in what a new run's request leaves out.
	Defaults RunDefaults
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// BodyTimeout caps the time a request's body may take to arrive
	// (default 30s); a slower one is answered 408 body_timeout.
	BodyTimeout time.Duration
	// CORSOrigins are the web origins (scheme://host[:port], or "*") whose
	// pages may call the API from a browser: CORS is answered for them, and
	// their requests may change state. Empty: CORS off, and a request that
	// changes state with a foreign Origin is refused.
	CORSOrigins []string
}

// Default values of Config and RunDefaults.
const (
	DefaultMaxBodyBytes  = 1 << 20
	DefaultBodyTimeout   = 30 * time.Second
	DefaultMaxSteps      = 16
	DefaultMaxStepsLimit = 100
	DefaultTotalMS       = 600_000
	DefaultStepMS        = 120_000
	DefaultIdleMS        = 60_000
	DefaultToolMS        = 60_000
	DefaultMaxTotalMS    = 24 * 60 * 60 * 1000
	DefaultMaxStepMS     = 60 * 60 * 1000
	DefaultMaxIdleMS     = 10 * 60 * 1000
	DefaultMaxToolMS     = 60 * 60 * 1000
	DefaultActionMS      = agentd.DefaultActionMS
	DefaultMaxActionMS   = 7 * 24 * 60 * 60 * 1000
)

// server holds the handlers' dependencies.
type server struct {
	store       Store
	runs        Runs
	events      Events // nil: no streaming
	tools       *tools.Registry
	log         *slog.Logger
	metrics     *httpMetrics
	ready       func(ctx context.Context) error
	toolSources func() any
	defaults    RunDefaults
	corsOrigins []string
	bodyTimeout time.Duration
	maxBody     int64
	known       knownRuns // runs found for a tenant, for event streams
	auth        auth.Authenticator
	limits      *tenantLimits
}

// New returns the API's http.Handler. It panics when cfg.Store or cfg.Runs
// is nil, which is a wiring mistake.
func New(cfg Config) http.Handler {
	s := newServer(cfg)
	return s.routes(cfg)
}

func newServer(cfg Config) *server {
	if cfg.Store == nil || cfg.Runs == nil {
		panic("api: Config.Store and Config.Runs are required")
	}
	s := &server{
		store:       cfg.Store,
		runs:        cfg.Runs,
		events:      cfg.Events,
		tools:       cfg.Tools,
		log:         cfg.Logger,
		ready:       cfg.ReadyFunc,
		toolSources: cfg.ToolSources,
		defaults:    cfg.Defaults,
		maxBody:     cfg.MaxBodyBytes,
		corsOrigins: cfg.CORSOrigins,
		bodyTimeout: cfg.BodyTimeout,
		auth:        cfg.Auth,
		limits:      newTenantLimits(cfg.Quotas),
	}
	if s.auth == nil {
		s.auth = auth.None()
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultBodyTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
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
	setDefault(&d.Timeouts.ActionMS, DefaultActionMS)
	setDefault(&d.MaxTimeouts.TotalMS, DefaultMaxTotalMS)
	setDefault(&d.MaxTimeouts.StepMS, DefaultMaxStepMS)
	setDefault(&d.MaxTimeouts.IdleMS, DefaultMaxIdleMS)
	setDefault(&d.MaxTimeouts.ToolMS, DefaultMaxToolMS)
	setDefault(&d.MaxTimeouts.ActionMS, DefaultMaxActionMS)
	d.Timeouts.TotalMS = min(d.Timeouts.TotalMS, d.MaxTimeouts.TotalMS)
	d.Timeouts.StepMS = min(d.Timeouts.StepMS, d.MaxTimeouts.StepMS)
	d.Timeouts.IdleMS = min(d.Timeouts.IdleMS, d.MaxTimeouts.IdleMS)
	d.Timeouts.ToolMS = min(d.Timeouts.ToolMS, d.MaxTimeouts.ToolMS)
	d.Timeouts.ActionMS = min(d.Timeouts.ActionMS, d.MaxTimeouts.ActionMS)
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
