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
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/tools"
)

// Store is what the API reads from the database, and where it keeps the
// responses of idempotent requests. *persist.Store implements it (cmd/server
// checks so). Commands
// that change a run go through Runs instead.
//
// StepsList and MessagesList do not check the tenant: the handlers read the
// run or conversation first.
type Store interface {
	// RunGet returns a tenant's run, or agentd.ErrRunNotFound.
	RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error)
	RunOfToolCall(ctx context.Context, tenantID, callID string) (agentd.Run, error)
	// ChildrenOpen returns the child runs of a run (its sub-agents') that
	// have not ended for good.
	ChildrenOpen(ctx context.Context, parentID string) ([]agentd.Run, error)
	// InputAccept commits an input to a run under way (see
	// persist.Store.InputAccept).
	InputAccept(ctx context.Context, p agentd.InputCreate) (agentd.RunInput, bool, error)
	// InputList returns a run's inputs in order; with open, those pending
	// or unapplied and not carried.
	InputList(ctx context.Context, runID string, open bool) ([]agentd.RunInput, error)
	// InputByKey and RunByKey return the input, or the run, a tenant's
	// idempotency key made (agentd.ErrIdempotencyMismatch for another
	// request).
	InputByKey(ctx context.Context, tenantID, key, hash string) (agentd.RunInput, bool, error)
	RunByKey(ctx context.Context, tenantID, key, hash string) (agentd.Run, bool, error)
	// RunOfConversation returns the run a message to a conversation goes
	// to: its first run in flight, else its latest; agentd.ErrRunNotFound
	// when it has none.
	RunOfConversation(ctx context.Context, tenantID, conversationID string) (agentd.Run, error)
	// RunList returns a tenant's runs, newest first.
	RunList(ctx context.Context, p agentd.RunListParams) ([]agentd.Run, error)
	// RunInputText returns the text of what a run was asked (its input's
	// messages, before its first answer).
	RunInputText(ctx context.Context, id string) (string, error)
	// AuditEvents returns the next page of a run's audit events, after seq
	// after and up to seq through, in order, and the tool calls whose
	// attempts those events start, with their attempts; an empty page is
	// the end.
	AuditEvents(ctx context.Context, runID string, after, through int64) ([]agentd.Event, []agentd.CallDetail, error)
	// StepsList returns a run's steps with their tool calls and attempts.
	StepsList(ctx context.Context, runID string) ([]agentd.StepDetail, error)
	// ArtifactGet returns an artifact of a tenant's run, or
	// agentd.ErrArtifactNotFound.
	ArtifactGet(ctx context.Context, tenantID, runID, id string) (agentd.Artifact, error)
	// ConversationGet returns a tenant's conversation, or
	// agentd.ErrConversationNotFound.
	ConversationGet(ctx context.Context, tenantID, id string) (agentd.Conversation, error)
	// ConversationForChat returns the conversation of an AI SDK chat,
	// creating it when create is set; agentd.ErrConversationNotFound.
	ConversationForChat(ctx context.Context, tenantID, chatID string, create bool) (agentd.Conversation, error)
	// ConversationCreate stores a new, empty conversation.
	ConversationCreate(ctx context.Context, tenantID, title string, metadata json.RawMessage) (agentd.Conversation, error)
	// ConversationCreateWith stores a new conversation with its first
	// messages, in one transaction.
	ConversationCreateWith(ctx context.Context, tenantID string, metadata json.RawMessage,
		msgs []agentd.InputMessage) (agentd.Conversation, []agentd.Message, error)
	// MessagesAppend appends messages to a conversation outside any run,
	// in one transaction: agentd.ErrConversationNotFound, an
	// *agentd.BusyError, or an *agentd.PendingCallsError when it waits for
	// what its latest run ended at.
	MessagesAppend(ctx context.Context, tenantID, conversationID string, msgs []agentd.InputMessage) ([]agentd.Message, error)
	// MessageDelete removes a message of a conversation (or, as keep
	// says, part of it): agentd.ErrConversationNotFound, agentd.ErrNotFound
	// for an unknown message, an *agentd.BusyError, or keep's error.
	MessageDelete(ctx context.Context, tenantID, conversationID, messageID string,
		keep func(agentd.Message) ([]agentd.Part, error)) (agentd.Conversation, error)
	// ConversationList returns a page of a tenant's conversations, newest first.
	ConversationList(ctx context.Context, p agentd.ConversationListParams) ([]agentd.Conversation, error)
	// ConversationUpdate sets a conversation's title and metadata, each when
	// not nil; agentd.ErrConversationNotFound.
	ConversationUpdate(ctx context.Context, tenantID, id string, title *string, metadata json.RawMessage) (agentd.Conversation, error)
	// ConversationDelete removes a conversation and everything under it,
	// and returns the ids of the runs it removed;
	// agentd.ErrConversationBusy while a run of it is in progress.
	ConversationDelete(ctx context.Context, tenantID, id string) (runIDs []string, err error)
	// ContextWindow says which of a conversation's messages the model is
	// still sent: those after coversTo (0: all), and the first user message.
	ContextWindow(ctx context.Context, conversationID string) (coversTo, firstUser int, err error)
	// EventsReplay returns up to limit stored events of a run after seq, in
	// order (from a read replica when there is one and it keeps up).
	EventsReplay(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error)
	// MessagesList returns up to limit messages of a conversation after seq.
	MessagesList(ctx context.Context, conversationID string, after, limit int) ([]agentd.Message, error)
	// IdempotencyBegin claims an Idempotency-Key of a POST for a request
	// whose fingerprint is hash: fresh is true when this request claimed it
	// and must be answered; otherwise the record is the earlier request's
	// (Done when its response is stored). agentd.ErrConflict: the key was
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

	// TenantToolCreate, TenantToolReplace, TenantToolGet, TenantTools and
	// TenantToolDelete keep the tools and MCP servers tenants declare (a
	// row's Kind);
	// agentd.ErrToolExists, agentd.ErrToolNotFound.
	TenantToolCreate(ctx context.Context, t agentd.TenantTool) (agentd.TenantTool, error)
	TenantToolReplace(ctx context.Context, t agentd.TenantTool) (agentd.TenantTool, error)
	TenantToolGet(ctx context.Context, tenantID, kind, name string) (agentd.TenantTool, error)
	TenantTools(ctx context.Context, tenantID string) ([]agentd.TenantTool, error)
	TenantToolDelete(ctx context.Context, tenantID, kind, name string) error

	// AgentCreate makes an agent at version 1 (or the next of a deleted
	// one), once check (run under the lock of the tenant's agents' saves)
	// passed; its error is returned as it is. agentd.ErrAgentExists.
	AgentCreate(ctx context.Context, in agentd.AgentDefine, check agentd.AgentCheck) (agentd.Agent, error)
	// AgentUpdate makes an agent's next version, check as AgentCreate's;
	// agentd.ErrAgentNotFound.
	AgentUpdate(ctx context.Context, in agentd.AgentDefine, check agentd.AgentCheck) (agentd.Agent, error)
	// AgentGet returns a version (0: the latest) of an agent;
	// agentd.ErrAgentNotFound, or an *agentd.AgentVersionError.
	AgentGet(ctx context.Context, tenantID, name string, version int) (agentd.Agent, error)
	// AgentList returns a page of a tenant's agents by name, after after.
	AgentList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Agent, error)
	// AgentVersions returns a page of an agent's versions, newest first,
	// before version before (0: from the latest); agentd.ErrAgentNotFound.
	AgentVersions(ctx context.Context, tenantID, name string, before, limit int) ([]agentd.Agent, error)
	// AgentDelete deletes an agent; agentd.ErrAgentNotFound.
	AgentDelete(ctx context.Context, tenantID, name, actor string) error

	// ScheduleCreate stores a new schedule; agentd.ErrScheduleExists.
	ScheduleCreate(ctx context.Context, sc agentd.Schedule) (agentd.Schedule, error)
	// ScheduleGet returns a tenant's schedule; agentd.ErrScheduleNotFound.
	ScheduleGet(ctx context.Context, tenantID, id string) (agentd.Schedule, error)
	// ScheduleList returns a page of a tenant's schedules by name, after
	// after.
	ScheduleList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Schedule, error)
	// ScheduleUpdate changes a tenant's schedule as change says, with the
	// schedule locked; change's error is returned as it is.
	// agentd.ErrScheduleNotFound.
	ScheduleUpdate(ctx context.Context, tenantID, id string, change func(*agentd.Schedule) error) (agentd.Schedule, error)
	// ScheduleDelete deletes a tenant's schedule; agentd.ErrScheduleNotFound.
	ScheduleDelete(ctx context.Context, tenantID, id string) error
	// ScheduleRuns returns a page of a schedule's runs, the newest slot
	// first, before the slot before (nil: from the latest);
	// agentd.ErrScheduleNotFound.
	ScheduleRuns(ctx context.Context, tenantID, id string, before *time.Time, limit int) ([]agentd.Run, error)

	// Usage sums the cost ledger's model calls as q asks.
	Usage(ctx context.Context, q agentd.UsageQuery) ([]agentd.UsageRow, error)
	// RunCosts returns what each run's model calls cost by the ledger,
	// with its sub-agents' runs'; a run without a call has no entry.
	RunCosts(ctx context.Context, ids []string) (map[string]agentd.RunCost, error)
	// Spend returns what a tenant's model calls cost this month (UTC), and
	// a run's own ("": none).
	Spend(ctx context.Context, tenant, runID string) (month, run float64, err error)
	// BudgetGet returns a tenant's own monthly budget; nil: none is set.
	BudgetGet(ctx context.Context, tenant string) (*float64, error)
	// BudgetSet sets a tenant's own monthly budget, or with nil removes
	// it; actor is who sets it.
	BudgetSet(ctx context.Context, tenant string, monthly *float64, actor string) error

	// InstructionsGet returns a tenant's managed instructions (Text "":
	// none); InstructionsPut sets them at their next version;
	// InstructionsDelete removes them (nothing when there are none).
	InstructionsGet(ctx context.Context, tenant string) (agentd.ManagedInstructions, error)
	InstructionsPut(ctx context.Context, tenant, text, actor string) (agentd.ManagedInstructions, error)
	InstructionsDelete(ctx context.Context, tenant, actor string) error

	// DatasetCreate makes a dataset with its cases at version 1 (or the
	// next of a deleted one's); agentd.ErrDatasetExists.
	DatasetCreate(ctx context.Context, in agentd.DatasetDefine) (agentd.Dataset, error)
	// DatasetCasesAdd adds cases in a dataset's next version;
	// agentd.ErrDatasetNotFound, an *agentd.CaseExistsError, an
	// *agentd.DatasetLimitError.
	DatasetCasesAdd(ctx context.Context, p agentd.CasesAdd) (agentd.Dataset, error)
	// DatasetCaseRemove removes a case in a dataset's next version;
	// agentd.ErrDatasetNotFound, agentd.ErrCaseNotFound.
	DatasetCaseRemove(ctx context.Context, tenantID, name, caseID, actor string) (agentd.Dataset, error)
	// DatasetGet returns a version (0: the latest) of a dataset;
	// agentd.ErrDatasetNotFound, or an *agentd.DatasetVersionError.
	DatasetGet(ctx context.Context, tenantID, name string, version int) (agentd.Dataset, error)
	// DatasetList returns a page of a tenant's datasets by name, after
	// after.
	DatasetList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Dataset, error)
	// DatasetCases returns a page of the cases of a version (0: the
	// latest) of a dataset, after place after; DatasetGet's errors.
	DatasetCases(ctx context.Context, tenantID, name string, version, after, limit int) ([]agentd.StoredCase, error)
	// DatasetDelete deletes a dataset and its cases;
	// agentd.ErrDatasetNotFound.
	DatasetDelete(ctx context.Context, tenantID, name, actor string) error
	// EvalCreate keeps a new evaluation with a row per case, version and
	// repetition.
	EvalCreate(ctx context.Context, p agentd.EvalCreate) (agentd.Evaluation, error)
	// EvalGet returns a tenant's evaluation; agentd.ErrEvalNotFound.
	EvalGet(ctx context.Context, tenantID, id string) (agentd.Evaluation, error)
	// EvalList returns a page of a tenant's evaluations, newest first,
	// before the one named by before.
	EvalList(ctx context.Context, tenantID, before string, limit int) ([]agentd.Evaluation, error)
	// EvalRuns returns an evaluation's rows with their runs' statuses.
	EvalRuns(ctx context.Context, evalID string) ([]agentd.EvalRun, error)
	// EvalCancel cancels a running evaluation, returning the runs to
	// cancel; agentd.ErrEvalNotFound, agentd.ErrEvalEnded.
	EvalCancel(ctx context.Context, tenantID, id string) (agentd.Evaluation, []string, error)
}

// Runs is the engine's command door (run.Service implements it): every
// change a request asks of a run goes through it. Its errors are the
// domain's sentinels and typed errors, which problemFor maps.
type Runs interface {
	// Create commits a new run (or finds the first one of a repeated
	// idempotency key: created is false).
	Create(ctx context.Context, p agentd.RunCreate) (run agentd.Run, created bool, err error)
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
// API answers 204), agentd.ErrRunNotFound (the run was deleted meanwhile:
// 404) or stream.ErrStopped (503 shutting_down); once the stream started,
// it reports whether it ended because the client left. An Events that also
// has Forget(runIDs ...string), as *stream.Hub does, is told of the runs a
// DELETE /conversations/{id} removed, so that their open streams end.
type Events interface {
	StreamRun(w http.ResponseWriter, r *http.Request, runID string, after int64) (clientLeft bool, err error)
	// StreamRunAs is StreamRun in another wire format (the AI SDK's).
	StreamRunAs(w http.ResponseWriter, r *http.Request, runID string, after int64, enc stream.Encoder) (clientLeft bool, err error)
	// WaitStop waits, within ctx, for an event of the run after seq after
	// that stops it (it ended, or waits for a decision).
	WaitStop(ctx context.Context, runID string, after int64) (stopped bool, err error)
}

// RunDefaults fill in what a request for a new run leaves out, and bound
// what it may ask (see runspec.Defaults).
type RunDefaults = runspec.Defaults

// Config configures the handler returned by New. Store and Runs are
// required; every other field has a default.
type Config struct {
	// Store reads runs and conversations, and keeps idempotent responses.
	Store Store
	// Hooks are the hooks at the loop's boundaries (the tools file's
	// "hooks"): the API calls on_input for each user input. nil: none.
	Hooks *tools.LoopHooks
	// HostedTools maps a hosted tool type of OpenAI's Responses API
	// (web_search...) to the tool of the server's that stands for it (the
	// tools file's "hosted_tools"). nil: none.
	HostedTools map[string]string
	// Runs carries out the commands on runs.
	Runs Runs
	// Events serves GET /runs/{id}/events and POST /runs with "stream":
	// true. When it is nil, both answer 501 streaming_unavailable (and
	// nothing is created).
	Events Events
	// Tools is the registry that GET /tools lists and that the "tools" of a
	// new run are checked against. Nil means no tools.
	Tools *tools.Registry
	// TenantTools, when set, keeps the tools tenants declare (POST /tools):
	// the registry of each tenant's runs, and the sealing of their
	// headers; nil: the routes that declare them answer 501.
	TenantTools TenantTools
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
	// AuthenticatedFunc, when set, is called with the context of every
	// request whose credential the guard accepted, before its scope is
	// checked (cmd/server moves the request's connection out of the
	// budget of unauthenticated ones). Public routes never call it.
	AuthenticatedFunc func(ctx context.Context)
	// Quotas bound what each tenant may do; zero fields are unbounded.
	Quotas Quotas
	// Models are the models the server offers (GET /models).
	Models []agentd.ModelView
	// MonthlyBudget is the monthly budget of a tenant that has none of its
	// own (AGENTD_TENANT_MONTHLY_BUDGET), which GET
	// /admin/tenants/{tenant}/budget shows; 0: none. The engine checks it.
	MonthlyBudget float64
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
	// Defaults fill in what a new run's request leaves out; they make the
	// composer when Composer is nil.
	Defaults RunDefaults
	// Composer composes every run the API makes (POST /runs, the AI SDK's
	// chat, the Responses API, forks) and checks agents' definitions and
	// schedules' templates; nil: one over Defaults, Tools, TenantTools and
	// Store.
	Composer *compose.Composer
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// MaxBodyMemory bounds the memory that the bodies of the requests in
	// flight, and what is decoded from them, hold together, in bytes: a
	// request reserves its share before its body is read, and past the
	// budget is answered 503 server_busy. Default: DefaultBodyMemoryBodies
	// times the cost of the largest body a request may send.
	MaxBodyMemory int64
	// MaxWait caps the wait a request asks for (Prefer: wait=N, ?wait=N);
	// default DefaultMaxWait.
	MaxWait time.Duration
	// BodyTimeout caps the time a request's body may take to arrive
	// (default 30s); a slower one is answered 408 body_timeout.
	BodyTimeout time.Duration
	// Webhooks configures webhooks out (POST /webhooks, POST /runs
	// "webhook"); its zero value has none.
	Webhooks Webhooks
	// Memory keeps the tenants' memory (the /memory routes); nil: they
	// answer 501 memory_unavailable.
	Memory Memory
	// Datasets bound the tenants' datasets; zero fields take the
	// defaults.
	Datasets DatasetLimits
	// CORSOrigins are the web origins (scheme://host[:port], or "*") whose
	// pages may call the API from a browser: CORS is answered for them, and
	// their requests may change state. Empty: CORS off, and a request that
	// changes state with a foreign Origin is refused.
	CORSOrigins []string
}

// Default values of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultBodyTimeout  = 30 * time.Second
)

// Default values of RunDefaults (runspec's).
const (
	DefaultMaxSteps      = runspec.DefaultMaxSteps
	DefaultMaxStepsLimit = runspec.DefaultMaxStepsLimit
	DefaultTotalMS       = runspec.DefaultTotalMS
	DefaultStepMS        = runspec.DefaultStepMS
	DefaultIdleMS        = runspec.DefaultIdleMS
	DefaultToolMS        = runspec.DefaultToolMS
	DefaultMaxTotalMS    = runspec.DefaultMaxTotalMS
	DefaultMaxStepMS     = runspec.DefaultMaxStepMS
	DefaultMaxIdleMS     = runspec.DefaultMaxIdleMS
	DefaultMaxToolMS     = runspec.DefaultMaxToolMS
	DefaultActionMS      = runspec.DefaultActionMS
	DefaultMaxActionMS   = runspec.DefaultMaxActionMS
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
	compose     *compose.Composer // every run is composed here
	hooks       *tools.LoopHooks  // nil: none
	hosted      map[string]string // hosted tool types and the tools that stand for them
	corsOrigins []string
	bodyTimeout time.Duration
	maxBody     int64
	bodies      *bodyBudget // what the bodies in flight hold together
	maxWait     time.Duration
	known       knownRuns // runs found for a tenant, for event streams
	auth        auth.Authenticator
	onAuth      func(ctx context.Context) // nil: nothing to tell
	limits      *tenantLimits
	tenantTools TenantTools // nil: no tools of tenants
	webhooks    Webhooks    // Store nil: no webhooks
	memory      Memory      // nil: no memory
	datasets    DatasetLimits
	// models is Config.Models.
	models []agentd.ModelView
	// monthlyBudget is Config.MonthlyBudget.
	monthlyBudget float64
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
		store:         cfg.Store,
		runs:          cfg.Runs,
		events:        cfg.Events,
		tools:         cfg.Tools,
		tenantTools:   cfg.TenantTools,
		webhooks:      cfg.Webhooks,
		memory:        cfg.Memory,
		datasets:      cfg.Datasets.resolved(),
		log:           cfg.Logger,
		ready:         cfg.ReadyFunc,
		toolSources:   cfg.ToolSources,
		compose:       cfg.Composer,
		hooks:         cfg.Hooks,
		hosted:        cfg.HostedTools,
		maxBody:       cfg.MaxBodyBytes,
		corsOrigins:   cfg.CORSOrigins,
		bodyTimeout:   cfg.BodyTimeout,
		auth:          cfg.Auth,
		onAuth:        cfg.AuthenticatedFunc,
		limits:        newTenantLimits(cfg.Quotas),
		monthlyBudget: cfg.MonthlyBudget, models: cfg.Models,
	}
	if s.auth == nil {
		s.auth = auth.None()
	}
	if s.compose == nil {
		cc := compose.Config{Builder: runspec.New(cfg.Defaults, cfg.Tools), Agents: cfg.Store, Registry: cfg.Tools,
			Instructions: cfg.Store}
		if cfg.TenantTools != nil {
			cc.Tools = cfg.TenantTools
		}
		if cfg.Memory != nil {
			cc.Memory = cfg.Memory
			if o, ok := cfg.Store.(compose.Overlays); ok {
				cc.Overlays = o
			}
		}
		s.compose = compose.New(cc)
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
	if budget := cfg.MaxBodyMemory; budget > 0 {
		s.bodies = newBodyBudget(budget)
	} else {
		s.bodies = newBodyBudget(DefaultBodyMemoryBodies * bodyCost * s.maxInputBody())
	}
	if s.maxWait = cfg.MaxWait; s.maxWait <= 0 {
		s.maxWait = DefaultMaxWait
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	s.metrics = newHTTPMetrics(reg)
	return s
}
