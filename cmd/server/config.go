package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/auth"
)

//go:generate go test -run ^TestConfigurationReference$ . -args -update

// config is the server's configuration. Each group of settings is an
// embedded struct whose fields carry their own reference in tags, read by
// github.com/caarlos0/env and by the flags parseConfig defines from them:
//
//   - env: the variable; envDefault: its default (an empty value is unset);
//   - flag: its flag twin, which wins over the variable (none: no flag);
//   - desc: what it does, for -h and docs/configuration.md, where a
//     'quoted' word is code;
//   - defaultDesc: what the default means, when envDefault alone cannot say;
//   - min: the least value of a number or a duration (a duration without it
//     must be positive); want: what a bad value is told it should be.
//
// The group types are exported only because the env library reads
// exported fields alone. docs/configuration.md is generated from the tags
// by go generate, and TestConfigurationReference fails when it is stale.
type config struct {
	ServerSettings   `group:"HTTP server" intro:"Where agentd listens and what it accepts."`
	DatabaseSettings `group:"Database" intro:"The PostgreSQL database every instance shares, and how long what ended is kept in it."`
	RunSettings      `group:"Runs" intro:"How this instance executes runs, and the ceilings of the timeouts a client may ask for: a client's '0' asks for the ceiling, so that no run is unbounded."`
	StreamSettings   `group:"Event streams" intro:"The server-sent event streams of runs."`
	ModelSettings    `group:"Model" intro:"The OpenAI-compatible endpoint runs call. Without 'OPENAI_API_KEY', agentd starts its built-in fake model on a loopback port and says so in one log line."`
	ToolSettings     `group:"Tools" intro:"The tools runs may call, and how many calls they may make."`
	WebhookSettings  `group:"Webhooks" intro:"Webhooks out (docs/webhooks.md): the events of runs POSTed, signed as Standard Webhooks says, to the URLs tenants subscribe (POST /webhooks) and that runs name (POST /runs 'webhook'). Their signing secrets are sealed under 'AGENTD_SECRET_KEY': without it, nothing can be subscribed."`
	AuthSettings     `group:"Authentication" intro:"Who may call the API. 'agentd keys create', 'list' and 'revoke' manage API keys in the database that 'DATABASE_URL' (or '--database-url' before the verb) names."`
	QuotaSettings    `group:"Tenant quotas" intro:"Limits per tenant, which keep one tenant from taking an instance or the database from the others."`
	MemorySettings   `group:"Memory" intro:"The tenants' memory (docs/memory.md): versioned items under namespaces, bounded per tenant, with old versions removed past retention, and what a model extracts from the completed runs that ask for it. A write past a limit is '422 memory_limit' naming it."`
	DatasetSettings  `group:"Datasets" intro:"The tenants' datasets of evaluation cases (docs/evals.md). A change past a limit is '422 dataset_limit' naming it."`
	TracingSettings  `group:"Tracing" intro:"agentd exports OpenTelemetry traces over OTLP/HTTP when a variable names an endpoint, and nothing otherwise. The exporter reads headers, timeout, compression and certificates from the other standard 'OTEL_EXPORTER_OTLP_*' variables. The 'OTEL_*' variables are OpenTelemetry's standard ones, and have no flags."`

	// The fields below are derived from the settings by parseConfig, in the
	// shapes the parts they configure take.
	OIDC        auth.OIDCConfig  `env:"-"`
	Quotas      api.Quotas       `env:"-"`
	MaxTimeouts [5]time.Duration `env:"-"` // total, step, idle, tool, action
	// getenv is the environment the config was read from: tracing reads
	// the standard OTEL_* variables from it.
	getenv func(string) string
}

// ServerSettings are the HTTP server's settings.
type ServerSettings struct {
	Addr               string        `env:"AGENTD_ADDR" envDefault:"127.0.0.1:8080" flag:"addr" desc:"listen address (host:port); on any but a loopback address, authentication is required"`
	MaxBodyBytes       int64         `env:"AGENTD_MAX_BODY_BYTES" envDefault:"1048576" flag:"max-body-bytes" min:"1024" desc:"largest accepted request body, in bytes; a body that carries images and files ('POST /runs', the AI SDK's chat, the Responses API) may be larger by their data, up to the base64 of 'AGENTD_MAX_INPUT_FILES_BYTES'"`
	MaxInputFile       int64         `env:"AGENTD_MAX_INPUT_FILE_BYTES" envDefault:"5242880" flag:"max-input-file-bytes" min:"1" desc:"the largest image or file (decoded) a run's input may hold (docs/inputs.md); a larger one is '422 invalid_field' naming it"`
	MaxInputFiles      int64         `env:"AGENTD_MAX_INPUT_FILES_BYTES" envDefault:"20971520" flag:"max-input-files-bytes" min:"1" desc:"the most bytes of images and files one run's input may hold, and one model request is sent: the newest of the conversation's, the older ones past it sent as a note that names them; it bounds what each run in progress holds in memory"`
	MaxBodyMemory      int64         `env:"AGENTD_MAX_BODY_MEMORY" envDefault:"0" flag:"max-body-memory" min:"0" defaultDesc:"12 times the largest body a request may send ('AGENTD_MAX_BODY_BYTES' and the base64 of 'AGENTD_MAX_INPUT_FILES_BYTES'): 348 MB with their defaults, two of the largest bodies at once" desc:"the memory, in bytes, that the bodies of the requests this instance is handling, and what is decoded from them, may hold together; each request reserves 6 times its Content-Length (as it reads, without one) before reading its body, and one that would go past it is answered '503 server_busy' with 'Retry-After', unread (docs/operations.md); a request alone may take all of it"`
	MaxWait            time.Duration `env:"AGENTD_MAX_WAIT" envDefault:"60s" flag:"max-wait" desc:"the longest wait a request may ask for (Prefer: wait=N or ?wait=N on POST /runs and GET /runs/{id}): it is answered when the run ends or waits for a decision, or after at most this long with the run as it is"`
	BodyTimeout        time.Duration `env:"AGENTD_BODY_TIMEOUT" envDefault:"30s" flag:"body-timeout" desc:"how long a request body may take to arrive after its headers, whether or not it is read; a slower one is '408 body_timeout' (or, for a request answered without its body, that answer late) and its connection closed"`
	MaxConnections     int           `env:"AGENTD_MAX_CONNECTIONS" envDefault:"1024" flag:"max-connections" min:"1" desc:"HTTP connections this instance holds open at once; when all of them have authenticated, more wait in the listen backlog until one closes"`
	MaxUnauthenticated int           `env:"AGENTD_MAX_UNAUTHENTICATED_CONNECTIONS" envDefault:"0" flag:"max-unauthenticated-connections" min:"0" defaultDesc:"a quarter of 'AGENTD_MAX_CONNECTIONS', at least 1" desc:"how many of the 'AGENTD_MAX_CONNECTIONS' may be connections on which no request has authenticated yet (one counts as authenticated from its first request with a valid credential, or from the start with 'AGENTD_AUTH=none'); a new connection that finds them all taken closes the oldest of them, so that clients without a credential cannot take the connections of those with one; fewer than 'AGENTD_MAX_CONNECTIONS'"`
	HealthAddr         string        `env:"AGENTD_HEALTH_ADDR" flag:"health-addr" desc:"serve 'GET /livez' and 'GET /readyz' on this address of its own too, outside the connection caps, so that an orchestrator's health checks are answered however many clients hold the API's connections"`
	CORSOrigins        []string      `env:"AGENTD_CORS_ORIGINS" flag:"cors-origins" defaultDesc:"none (CORS off)" desc:"comma-separated web origins ('scheme://host[:port]', such as 'https://ui.example', or '*') whose pages may call the API from a browser; a request that changes state with an 'Origin' other than these and the server's own is '403 origin_not_allowed'"`
	MetricsAddr        string        `env:"AGENTD_METRICS_ADDR" flag:"metrics-addr" desc:"serve '/metrics' on this address of its own; without it, '/metrics' is served on the API's address when authentication is off, and not at all when it is on"`
	LogLevel           slog.Level    `env:"AGENTD_LOG_LEVEL" envDefault:"info" flag:"log-level" want:"debug, info, warn or error" desc:"'debug', 'info', 'warn' or 'error' (JSON logs on stdout)"`
	ShutdownGrace      time.Duration `env:"AGENTD_SHUTDOWN_GRACE" envDefault:"10s" flag:"shutdown-grace" desc:"on SIGTERM, how long runs may take to reach a step boundary before their leases are handed back"`
}

// DatabaseSettings are the database's settings.
type DatabaseSettings struct {
	DatabaseURL    string        `env:"DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/agentd?sslmode=disable" flag:"database-url" desc:"PostgreSQL URL; the database is created if missing"`
	ReplicaURL     string        `env:"AGENTD_DATABASE_REPLICA_URL" flag:"database-replica-url" defaultDesc:"none" desc:"a streaming standby of the database that serves the reads that tolerate lag (run and conversation lists, usage reports, the replay of stored events); reads go to the primary while it is down, not a standby, or further behind than AGENTD_DATABASE_REPLICA_MAX_LAG"`
	ReplicaMaxLag  time.Duration `env:"AGENTD_DATABASE_REPLICA_MAX_LAG" envDefault:"5s" flag:"database-replica-max-lag" desc:"how far behind the primary the read replica may be and still serve"`
	Migrate        bool          `env:"AGENTD_MIGRATE" envDefault:"true" flag:"migrate" desc:"apply migrations at start-up (under an advisory lock, so that instances may start together)"`
	MaxConns       int           `env:"AGENTD_DB_MAX_CONNS" envDefault:"0" flag:"db-max-conns" min:"0" defaultDesc:"workers + 16" desc:"database pool size; '0': the workers plus 16"`
	Committers     int           `env:"AGENTD_COMMITTERS" envDefault:"1" flag:"committers" min:"1" desc:"group-commit workers: the executor's writes of concurrent runs share their transactions"`
	DeltaTick      time.Duration `env:"AGENTD_DELTA_TICK" envDefault:"50ms" flag:"delta-tick" min:"0s" want:"a duration such as 50ms, or 0" desc:"the tick of streamed text: the text deltas of every run streaming on the instance are committed together, in one transaction a tick (a delta is committed at most this long after the model sent it; the first of an answer at once); '0': each run commits its own every 50ms"`
	Retention      time.Duration `env:"AGENTD_RETENTION" flag:"retention" min:"1m" want:"a duration of at least 1m, such as 30d or 720h" defaultDesc:"none (keep everything)" desc:"remove conversations whose runs all ended longer ago than this ('30d', '720h'), with everything of theirs, idempotency keys and finished webhook deliveries as old; a conversation with a run newer than that keeps all its history"`
	RetentionEvery time.Duration `env:"AGENTD_RETENTION_INTERVAL" envDefault:"10m" flag:"retention-interval" desc:"how often each instance runs a retention pass"`
}

// RunSettings are the engine's settings.
type RunSettings struct {
	Workers          int           `env:"AGENTD_WORKERS" envDefault:"16" flag:"workers" min:"1" desc:"runs executed at once by this instance"`
	LeaseTTL         time.Duration `env:"AGENTD_LEASE_TTL" envDefault:"15s" flag:"lease-ttl" desc:"run lease; a dead instance's runs are taken over after it"`
	PollInterval     time.Duration `env:"AGENTD_POLL_INTERVAL" envDefault:"2s" flag:"poll-interval" desc:"fallback claim poll, for when no notification arrives (new runs wake workers through NOTIFY at once)"`
	MaxTotalTimeout  time.Duration `env:"AGENTD_MAX_TOTAL_TIMEOUT" envDefault:"24h" flag:"max-total-timeout" desc:"the longest total timeout a client may ask for"`
	MaxStepTimeout   time.Duration `env:"AGENTD_MAX_STEP_TIMEOUT" envDefault:"1h" flag:"max-step-timeout" desc:"the longest step timeout a client may ask for"`
	MaxIdleTimeout   time.Duration `env:"AGENTD_MAX_IDLE_TIMEOUT" envDefault:"10m" flag:"max-idle-timeout" desc:"the longest model idle timeout a client may ask for"`
	MaxToolTimeout   time.Duration `env:"AGENTD_MAX_TOOL_TIMEOUT" envDefault:"1h" flag:"max-tool-timeout" desc:"the longest tool attempt timeout a client may ask for"`
	MaxActionTimeout time.Duration `env:"AGENTD_MAX_ACTION_TIMEOUT" envDefault:"168h" flag:"max-action-timeout" desc:"the longest a run may wait for a client's decision, which its total timeout does not count"`
	ScheduleTick     time.Duration `env:"AGENTD_SCHEDULE_TICK" envDefault:"250ms" flag:"schedule-tick" min:"10ms" desc:"how often each instance looks for schedules whose slot is due (docs/schedules.md): a slot starts its run at most about this long after its time"`
	ScheduleFailures int           `env:"AGENTD_SCHEDULE_MAX_FAILURES" envDefault:"5" flag:"schedule-max-failures" min:"0" desc:"a schedule pauses itself after this many of its runs in a row failed or timed out (it says why in 'paused_reason', and a 'schedule.paused' webhook event goes out); '0': never"`
}

// StreamSettings are the event streams' settings.
type StreamSettings struct {
	Heartbeat time.Duration `env:"AGENTD_HEARTBEAT" envDefault:"15s" flag:"heartbeat" desc:"SSE heartbeat interval, which keeps proxies from closing a quiet stream"`
	SSERetry  time.Duration `env:"AGENTD_SSE_RETRY" envDefault:"2s" flag:"sse-retry" desc:"reconnect delay advised to SSE clients (the 'retry:' field)"`
}

// ModelSettings are the model's settings.
type ModelSettings struct {
	OpenAIKey     string `env:"OPENAI_API_KEY" defaultDesc:"none (the built-in fake model)" desc:"the model's API key; unset selects the built-in fake model. It has no flag, so that it never shows in a process list"`
	OpenAIBaseURL string `env:"OPENAI_BASE_URL" flag:"openai-base-url" defaultDesc:"OpenAI's API" desc:"the API root of any OpenAI-compatible endpoint"`
	Model         string `env:"AGENTD_MODEL" flag:"model" defaultDesc:"'gpt-4o-mini' ('fake' with the fake model)" desc:"a run's default model"`
	ModelsFile    string `env:"AGENTD_MODELS_FILE" flag:"models-file" desc:"JSON file of model profiles, over the built-in ones: '{\"models\": {\"NAME\": {\"context_window\": N, \"max_output_tokens\": M, \"compact_at\": 0.8, \"provider\": \"openai\", \"base_url\": URL, \"api_key_env\": VAR, \"model\": UPSTREAM}}}'; a model with a 'provider' is routed to that endpoint ('base_url', the provider's own when absent), with the key the environment variable 'api_key_env' names (never a key in the file) and under the name 'model' (its own when absent); every other model goes to the default endpoint"`
}

// ToolSettings are the tools' settings.
type ToolSettings struct {
	ToolsFile      string   `env:"AGENTD_TOOLS_FILE" flag:"tools-file" desc:"JSON file declaring webhook tools, MCP servers and tool policies"`
	HTTPAllowHosts []string `env:"AGENTD_HTTP_ALLOW_HOSTS" flag:"http-allow-hosts" defaultDesc:"none (the tool is off)" desc:"comma-separated hosts the 'http_request' tool may call: 'host' (ports 80 and 443) or 'host:port'; a name that resolves to a loopback, private, link-local or other non-public address is refused unless that 'ip:port' is listed itself; empty leaves the tool off"`
	SecretKey      string   `env:"AGENTD_SECRET_KEY" defaultDesc:"none (tenants' tools may not have headers)" desc:"the key that the header values of tenants' webhook tools (POST /tools) are sealed under, AES-256-GCM: the standard base64 of 32 random bytes ('openssl rand -base64 32'); keep it as a secret and the same on every instance. It has no flag, so that it never shows in a process list"`
	CallsPerStep   int      `env:"AGENTD_TOOL_CALLS_PER_STEP" envDefault:"64" flag:"tool-calls-per-step" min:"1" desc:"tool calls of one model response that are run; the model is told that the others were not"`
	CallsPerRun    int      `env:"AGENTD_TOOL_CALLS_PER_RUN" envDefault:"1000" flag:"tool-calls-per-run" min:"1" desc:"tool calls a run may make: the calls past it are not run (the model is told), and a model that asks for more ends the run ('tool_limit')"`
	ToolsAtOnce    int      `env:"AGENTD_TOOL_CONCURRENCY" envDefault:"64" flag:"tool-concurrency" min:"1" desc:"tool attempts this instance makes at once, across its runs"`
	AgentDepth     int      `env:"AGENTD_AGENT_DEPTH" envDefault:"3" flag:"agent-depth" min:"1" desc:"how deep sub-agents nest: a run that POST /runs started is at depth 0, its sub-agents' runs at 1, and a call that would start a run deeper fails (the model is told)"`
	AgentTreeRuns  int      `env:"AGENTD_AGENT_TREE_RUNS" envDefault:"100" flag:"agent-tree-runs" min:"1" desc:"how many runs one run tree may make: a run that POST /runs started and all its sub-agents' runs, however deep; a call of a sub-agent past it fails (the model is told)"`
	AgentChildren  int      `env:"AGENTD_AGENT_CHILDREN" envDefault:"8" flag:"agent-children" min:"1" desc:"how many sub-agents' runs one run may have open at once; a call of a sub-agent past it fails (the model is told)"`
}

// WebhookSettings are the settings of webhooks out.
type WebhookSettings struct {
	WebhookBackoff       time.Duration `env:"AGENTD_WEBHOOK_BACKOFF" envDefault:"5s" flag:"webhook-backoff" min:"10ms" desc:"the delay before a failed delivery's first retry; each next one doubles it (at most an hour), less up to a quarter at random"`
	WebhookHorizon       time.Duration `env:"AGENTD_WEBHOOK_HORIZON" envDefault:"24h" flag:"webhook-horizon" min:"1s" desc:"how long after its event (or a redelivery) a delivery is retried: past it, it is marked failed"`
	WebhookDisableAfter  time.Duration `env:"AGENTD_WEBHOOK_DISABLE_AFTER" envDefault:"24h" flag:"webhook-disable-after" min:"1s" desc:"how long every attempt to a subscription may fail (since the first failed one after the last delivered one) before it is disabled: its deliveries then end failed unattempted until its tenant re-enables it"`
	WebhookTimeout       time.Duration `env:"AGENTD_WEBHOOK_TIMEOUT" envDefault:"10s" flag:"webhook-timeout" min:"100ms" desc:"how long one delivery attempt may take before it counts as failed"`
	WebhookWorkers       int           `env:"AGENTD_WEBHOOK_WORKERS" envDefault:"8" flag:"webhook-workers" min:"1" desc:"delivery attempts this instance makes at once; at most two of them to one URL and half of them to one tenant's deliveries, so that a slow endpoint, or a tenant's many, never holds the others"`
	WebhookTenantWorkers int           `env:"AGENTD_WEBHOOK_TENANT_WORKERS" envDefault:"0" flag:"webhook-tenant-workers" min:"0" defaultDesc:"half of 'AGENTD_WEBHOOK_WORKERS', at least 1" desc:"of the 'AGENTD_WEBHOOK_WORKERS', how many may make one tenant's deliveries at once, so that one tenant's slow endpoints never hold another's deliveries; an instance with one tenant may set it to all of them"`
	WebhookAllowHosts    []string      `env:"AGENTD_WEBHOOK_ALLOW_HOSTS" flag:"webhook-allow-hosts" defaultDesc:"none (public hosts only)" desc:"comma-separated loopback or private 'ip:port's that webhook URLs may target, in the syntax of 'AGENTD_HTTP_ALLOW_HOSTS'; public hosts need no listing, and a name that resolves to a private address is refused as it is dialled"`
}

// AuthSettings are the authentication's settings.
type AuthSettings struct {
	Auth            string        `env:"AGENTD_AUTH" flag:"auth" defaultDesc:"'none' on a loopback address, else required" desc:"'keys' (API keys, made with 'agentd keys create'), 'oidc' (JWTs of an identity provider, and API keys), or 'none' (loopback addresses only: agentd refuses to start without authentication on any other)"`
	KeyCacheTTL     time.Duration `env:"AGENTD_KEY_CACHE_TTL" envDefault:"5s" flag:"key-cache-ttl" desc:"how long an API key read from the database is trusted: a revoked key stops working within it on every instance, and its open event streams close"`
	OIDCIssuer      string        `env:"AGENTD_OIDC_ISSUER" flag:"oidc-issuer" desc:"with 'AGENTD_AUTH=oidc', which needs it: the OpenID Connect issuer URL, which the tokens' 'iss' must be"`
	OIDCAudience    string        `env:"AGENTD_OIDC_AUDIENCE" flag:"oidc-audience" desc:"with 'AGENTD_AUTH=oidc', which needs it: the audience the tokens' 'aud' must hold"`
	OIDCJWKSURL     string        `env:"AGENTD_OIDC_JWKS_URL" flag:"oidc-jwks-url" defaultDesc:"from the issuer's discovery document" desc:"the provider's signing keys (cached; fetched again when a token names a key it does not know)"`
	OIDCTenantClaim string        `env:"AGENTD_OIDC_TENANT_CLAIM" envDefault:"tenant" flag:"oidc-tenant-claim" desc:"the claim that names the tenant"`
	OIDCScopesClaim string        `env:"AGENTD_OIDC_SCOPES_CLAIM" envDefault:"scope" flag:"oidc-scopes-claim" desc:"the claim that holds the scopes, a space-separated string or a list"`
}

// QuotaSettings are the per-tenant limits.
type QuotaSettings struct {
	TenantRunsPerSecond float64 `env:"AGENTD_TENANT_RUNS_PER_SECOND" envDefault:"0" flag:"tenant-runs-per-second" min:"0" defaultDesc:"unbounded" desc:"runs a tenant may create per second on this instance (a token bucket of twice that, at least 1); past it '429 rate_limited' with 'Retry-After'"`
	TenantRunning       int     `env:"AGENTD_TENANT_RUNS_IN_PROGRESS" envDefault:"0" flag:"tenant-runs-in-progress" min:"0" defaultDesc:"unbounded" desc:"runs of one tenant that run at once, across instances; its other runs wait queued (or '429 quota_exceeded' with '\"on_quota\": \"reject\"')"`
	TenantStreams       int     `env:"AGENTD_TENANT_STREAMS" envDefault:"0" flag:"tenant-streams" min:"0" defaultDesc:"unbounded" desc:"event streams a tenant may hold open at once on this instance; past it '429 rate_limited'"`
	TenantMonthlyBudget float64 `env:"AGENTD_TENANT_MONTHLY_BUDGET" envDefault:"0" flag:"tenant-monthly-budget" min:"0" defaultDesc:"none" desc:"what a tenant's model calls may cost in a calendar month (UTC), in the currency of the models file's prices, for a tenant whose budget an admin did not set ('PUT /admin/tenants/{tenant}/budget'); checked before each model call: past it the run ends failed with reason 'budget_exceeded' and no call is made (docs/usage.md); '0': none"`
}

// MemorySettings are memory's limits, retention and extraction.
type MemorySettings struct {
	MemoryItemsPerNamespace int           `env:"AGENTD_MEMORY_ITEMS_PER_NAMESPACE" envDefault:"10000" flag:"memory-items-per-namespace" min:"0" desc:"live items one namespace may hold (a write of a new item past it is refused, 'items_per_namespace'); '0': unbounded"`
	MemoryBytesPerItem      int           `env:"AGENTD_MEMORY_BYTES_PER_ITEM" envDefault:"65536" flag:"memory-bytes-per-item" min:"0" desc:"the largest item a write may make, in bytes of its key, value and data ('bytes_per_item'); '0': unbounded"`
	MemoryBytesPerTenant    int64         `env:"AGENTD_MEMORY_BYTES_PER_TENANT" envDefault:"104857600" flag:"memory-bytes-per-tenant" min:"0" desc:"the bytes of every version a tenant's memory keeps, tombstones and forks' overlays included ('bytes_per_tenant'); retention and purges free them; '0': unbounded"`
	MemoryKeepVersions      int           `env:"AGENTD_MEMORY_KEEP_VERSIONS" envDefault:"10" flag:"memory-keep-versions" min:"0" desc:"versions of an item kept whatever their age (with 'AGENTD_MEMORY_VERSION_MAX_AGE': a version is kept while it is among these newest, or younger than that); an item's current version is always kept; '0': none by count"`
	MemoryVersionMaxAge     time.Duration `env:"AGENTD_MEMORY_VERSION_MAX_AGE" envDefault:"30d" flag:"memory-version-max-age" want:"a duration such as 30d or 720h, or 0" desc:"how long an item's older versions (readable with 'as_of' and in its versions) are kept beyond 'AGENTD_MEMORY_KEEP_VERSIONS'; '0': no age bound (then only the count bounds them; with both '0', every version is kept)"`
	MemorySweepEvery        time.Duration `env:"AGENTD_MEMORY_SWEEP_INTERVAL" envDefault:"10m" flag:"memory-sweep-interval" min:"1s" desc:"how often each instance removes memory's versions past retention and its expired items"`
	MemoryExtractModel      string        `env:"AGENTD_MEMORY_EXTRACT_MODEL" flag:"memory-extract-model" defaultDesc:"the server's model ('AGENTD_MODEL')" desc:"the model that extracts what to remember from a completed run whose 'memory.extract' names none (docs/memory.md, 'Extraction'): a small, cheap model of the models file, priced there for the ledger"`
	MemoryExtractWorkers    int           `env:"AGENTD_MEMORY_EXTRACT_WORKERS" envDefault:"2" flag:"memory-extract-workers" min:"1" desc:"extractions this instance makes at once (the instances share the jobs)"`
	MemoryExtractTimeout    time.Duration `env:"AGENTD_MEMORY_EXTRACT_TIMEOUT" envDefault:"2m" flag:"memory-extract-timeout" min:"1s" desc:"how long one extraction attempt (its model call, its embeddings and its write) may take; an instance that dies during one leaves its job to another after half as long again"`
	MemoryExtractAttempts   int           `env:"AGENTD_MEMORY_EXTRACT_ATTEMPTS" envDefault:"5" flag:"memory-extract-attempts" min:"1" desc:"attempts of an extraction before it is marked failed with its last error; each retry waits twice as long as the one before, from 30s"`
}

// DatasetSettings are datasets' limits.
type DatasetSettings struct {
	DatasetMaxCases     int `env:"AGENTD_DATASET_MAX_CASES" envDefault:"1000" flag:"dataset-max-cases" min:"1" desc:"the cases one version of a dataset may hold ('cases_per_dataset')"`
	DatasetMaxCaseBytes int `env:"AGENTD_DATASET_MAX_CASE_BYTES" envDefault:"2097152" flag:"dataset-max-case-bytes" min:"1024" desc:"the largest case, in bytes of its JSON, a conversation captured from a run with its images and files included ('bytes_per_case'): the older images and files of a captured conversation past it are left out, each a text that names it"`
}

// TracingSettings are the traces' settings. internal/telemetry reads the
// OTEL_* variables from the environment run is given; they are read here
// too so that they are documented and a bad delay is refused.
type TracingSettings struct {
	TraceContent       bool   `env:"AGENTD_TRACE_CONTENT" envDefault:"false" flag:"trace-content" desc:"record message contents, tool arguments and tool results in spans"`
	OTLPEndpoint       string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"the OTLP/HTTP collector; spans go to its '/v1/traces'"`
	OTLPTracesEndpoint string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" desc:"the URL spans go to, as it is; it wins over 'OTEL_EXPORTER_OTLP_ENDPOINT'"`
	ServiceName        string `env:"OTEL_SERVICE_NAME" envDefault:"agentd" desc:"the service name of the spans"`
	SDKDisabled        string `env:"OTEL_SDK_DISABLED" desc:"'true' turns tracing off, whatever the endpoint"`
	TracesExporter     string `env:"OTEL_TRACES_EXPORTER" desc:"'none' turns tracing off, whatever the endpoint"`
	BatchDelayMS       int    `env:"OTEL_BSP_SCHEDULE_DELAY" envDefault:"5000" min:"1" desc:"milliseconds between two batches of spans sent"`
}

// Authentication modes (AGENTD_AUTH).
const (
	authNone = "none"
	authKeys = "keys"
	authOIDC = "oidc"
)

// defaultDatabaseURL is DATABASE_URL's envDefault, which `agentd keys`
// uses too (TestConfigDefaults holds them equal).
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/agentd?sslmode=disable"

// durationType is time.Duration's type, which the env library, the bounds
// and the messages treat apart from other integers.
var durationType = reflect.TypeFor[time.Duration]()

// parsers replace the env library's own for every field of their type:
// durations may be given in days, switches as yes or no too, and lists
// drop blanks around and between their items.
var parsers = map[reflect.Type]env.ParserFunc{
	durationType:                func(v string) (any, error) { return parseDays(v) },
	reflect.TypeFor[bool]():     func(v string) (any, error) { return parseSwitch(v) },
	reflect.TypeFor[[]string](): func(v string) (any, error) { return parseList(v), nil },
}

// parseConfig reads the settings from the environment through getenv, and
// from the flags in args, which win over it. Every bad value is reported,
// naming the variable or the flag it came from.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	all := configSettings()
	environ := make(map[string]string, len(all)) // never nil: the env library would read os.Environ
	for _, s := range all {
		if v := getenv(s.key); v != "" {
			environ[s.key] = v
		}
	}
	fromFlag, err := parseFlags(args, all, environ, stderr)
	if err != nil {
		return c, err
	}
	name := func(key string) string {
		if f, ok := fromFlag[key]; ok {
			return "-" + f
		}
		return key
	}
	errs := readSettings(&c, all, environ, name)
	if c.MaxUnauthenticated > 0 && c.MaxUnauthenticated >= c.MaxConnections {
		errs = append(errs, fmt.Errorf("%s: want fewer than %s's %d, got %d", name("AGENTD_MAX_UNAUTHENTICATED_CONNECTIONS"),
			name("AGENTD_MAX_CONNECTIONS"), c.MaxConnections, c.MaxUnauthenticated))
	}
	c.derive(getenv)
	if err := c.checkAuth(name("AGENTD_AUTH")); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// parseFlags defines a flag per setting that has one and parses args; the
// value of each flag given replaces its variable's in environ. It returns
// the flags given, by variable.
func parseFlags(args []string, all []setting, environ map[string]string, stderr io.Writer) (map[string]string, error) {
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	byFlag := make(map[string]setting, len(all))
	for _, s := range all {
		if s.flag == "" {
			continue
		}
		byFlag[s.flag] = s
		usage := s.desc
		if s.defaultDesc != "" && s.def == "" {
			usage += "; default " + s.defaultDesc
		}
		// The default shown by -h is the built-in one, not the
		// environment's, which may hold a secret such as DATABASE_URL's.
		fs.String(s.flag, s.def, usage+" ("+s.key+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: settings are flags (see -h) or environment variables", fs.Arg(0))
	}
	fromFlag := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		s := byFlag[f.Name]
		environ[s.key] = f.Value.String()
		fromFlag[s.key] = f.Name
	})
	return fromFlag, nil
}

// readSettings reads environ into c through the env library, then checks
// every value given (or defaulted) against its setting's bounds.
func readSettings(c *config, all []setting, environ map[string]string, name func(key string) string) []error {
	byField := make(map[string]setting, len(all))
	for _, s := range all {
		byField[s.field.Name] = s
	}
	bad := func(s setting) error {
		v, ok := environ[s.key]
		if !ok {
			v = s.def
		}
		return fmt.Errorf("%s: want %s, got %q", name(s.key), s.wanted(), v)
	}
	var errs []error
	failed := map[string]bool{}
	err := env.ParseWithOptions(c, env.Options{Environment: environ, FuncMap: parsers})
	var agg env.AggregateError
	if !errors.As(err, &agg) && err != nil {
		agg.Errors = []error{err}
	}
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if s, ok := byField[pe.Name]; ok {
				failed[s.key] = true
				errs = append(errs, bad(s))
				continue
			}
		}
		errs = append(errs, fmt.Errorf("read settings: %w", e))
	}
	fields := reflect.ValueOf(c).Elem()
	for _, s := range all {
		if failed[s.key] || (environ[s.key] == "" && s.def == "") {
			continue
		}
		if !s.inBounds(fields.FieldByIndex(s.index)) {
			errs = append(errs, bad(s))
		}
	}
	return errs
}

// derive sets the fields that are built from the settings.
func (c *config) derive(getenv func(string) string) {
	c.getenv = getenv
	if c.MaxConns == 0 {
		c.MaxConns = c.Workers + 16
	}
	c.OIDC = auth.OIDCConfig{Issuer: c.OIDCIssuer, Audience: c.OIDCAudience, JWKSURL: c.OIDCJWKSURL,
		TenantClaim: c.OIDCTenantClaim, ScopesClaim: c.OIDCScopesClaim}
	c.Quotas = api.Quotas{CreatesPerSecond: c.TenantRunsPerSecond, CreateBurst: max(1, int(2*c.TenantRunsPerSecond)),
		StreamsPerTenant: c.TenantStreams}
	c.MaxTimeouts = [5]time.Duration{c.MaxTotalTimeout, c.MaxStepTimeout, c.MaxIdleTimeout, c.MaxToolTimeout, c.MaxActionTimeout}
}

// checkAuth settles the authentication mode: none by default on a loopback
// address, and never without authentication on any other. name is where
// the mode came from, AGENTD_AUTH or its flag.
func (c *config) checkAuth(name string) error {
	loopback := isLoopback(c.Addr)
	switch c.Auth {
	case "":
		if !loopback {
			return fmt.Errorf("refusing to serve %s without authentication: set AGENTD_AUTH=keys (and create a key with `agentd keys create`) or AGENTD_AUTH=oidc", c.Addr)
		}
		c.Auth = authNone
	case authNone:
		if !loopback {
			return fmt.Errorf("%s: none is allowed only on a loopback address, and %s is not one: set AGENTD_AUTH=keys or oidc", name, c.Addr)
		}
	case authKeys:
	case authOIDC:
		if c.OIDC.Issuer == "" || c.OIDC.Audience == "" {
			return fmt.Errorf("%s: oidc needs AGENTD_OIDC_ISSUER and AGENTD_OIDC_AUDIENCE", name)
		}
	default:
		return fmt.Errorf("%s: want keys, oidc or none, got %q", name, c.Auth)
	}
	return nil
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// setting is one field of a settings group, with its tags read.
type setting struct {
	index []int // of the field in config
	field reflect.StructField
	key   string // the variable
	def   string // its default; "" for none
	flag  string // "" for none

	desc, defaultDesc, min, want string
}

// settingGroup is one embedded settings struct of config.
type settingGroup struct {
	title, intro string
	settings     []setting
}

// configGroups reads config's settings from its tags, group by group, in
// the order of the struct.
func configGroups() []settingGroup {
	t := reflect.TypeFor[config]()
	var groups []settingGroup
	for i := range t.NumField() {
		g := t.Field(i)
		if !g.Anonymous {
			continue
		}
		sg := settingGroup{title: g.Tag.Get("group"), intro: g.Tag.Get("intro")}
		for j := range g.Type.NumField() {
			f := g.Type.Field(j)
			sg.settings = append(sg.settings, setting{index: []int{i, j}, field: f, key: f.Tag.Get("env"),
				def: f.Tag.Get("envDefault"), flag: f.Tag.Get("flag"), desc: f.Tag.Get("desc"),
				defaultDesc: f.Tag.Get("defaultDesc"), min: f.Tag.Get("min"), want: f.Tag.Get("want")})
		}
		groups = append(groups, sg)
	}
	return groups
}

// configSettings is every setting of config.
func configSettings() []setting {
	var all []setting
	for _, g := range configGroups() {
		all = append(all, g.settings...)
	}
	return all
}

// inBounds reports whether v, the setting's value, is at least its min; a
// duration without one must be positive, and a number must be finite.
func (s setting) inBounds(v reflect.Value) bool {
	switch {
	case v.Type() == durationType:
		least := time.Duration(1)
		if s.min != "" {
			least, _ = parseDays(s.min) // TestConfigSettings parses every min
		}
		return time.Duration(v.Int()) >= least
	case s.min == "":
		return true
	case v.CanInt():
		least, _ := strconv.ParseInt(s.min, 10, 64)
		return v.Int() >= least
	case v.CanFloat():
		least, _ := strconv.ParseFloat(s.min, 64)
		return v.Float() >= least && !math.IsInf(v.Float(), 0) // NaN is not >= anything
	}
	return true
}

// wanted says what a good value of the setting is.
func (s setting) wanted() string {
	switch t := s.field.Type; {
	case s.want != "":
		return s.want
	case t == durationType && s.min != "":
		return "a duration of at least " + s.min
	case t == durationType:
		return "a positive duration such as 15s"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Float64:
		return "a number >= " + s.min
	}
	return "an integer >= " + s.min
}

// parseDays reads a duration that may be given in days ("30d").
func parseDays(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad number of days %q", days)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// parseSwitch reads a switch: true, 1 or yes; false, 0 or no.
func parseSwitch(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("bad switch %q", v)
}

// parseList reads a comma-separated list, without blanks.
func parseList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// referenceHead and referenceTail frame the tables of docs/configuration.md.
const (
	referenceHead = `# Configuration

<!-- Generated from the settings structs in cmd/server/config.go by
'go generate ./cmd/server'; edit their tags, not this file. -->

agentd reads its settings from environment variables. Most have a flag twin
('AGENTD_WORKERS' is '-workers'), and a flag wins over its variable. An
empty value is the same as an unset one: the default applies.

Durations are Go durations ('15s', '10m', '1h30m') or whole days ('30d').
Switches are 'true' or 'false' ('1' or '0', 'yes' or 'no' too). A value
agentd cannot read, or one out of its range, stops it at start-up with an
error that names the variable or the flag it came from; every bad value is
reported at once. 'agentd -h' lists the flags.
`
	referenceTail = `
## Outside agentd's settings

The Go runtime's own 'GOGC' applies too. agentd's live heap is small, so a
higher value trades a little memory for CPU: with 16 runs in flight,
'GOGC=300' cut agentd's CPU per step by about 15% in
[benchmarks.md](benchmarks.md)'s step benchmark (the figures there use the
default, 100).

Tests use 'AGENTD_TEST_DATABASE_URL' (default
'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable') to create and
drop a database of their own per test.
`
)

// codeSpan matches a 'quoted' word of a description, which the reference
// shows as code; an apostrophe inside a word does not open one.
var codeSpan = regexp.MustCompile("(^|[\\s(\\[])'([^']+)'")

// writeReference writes docs/configuration.md: a table of config's
// settings per group.
func writeReference(w io.Writer) error {
	md := func(s string) string {
		return strings.ReplaceAll(codeSpan.ReplaceAllString(s, "$1`$2`"), "|", `\|`)
	}
	var b strings.Builder
	b.WriteString(md(referenceHead))
	for _, g := range configGroups() {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", g.title, wrap(md(g.intro), 76))
		b.WriteString("| Variable | Flag | Default | What it does |\n| --- | --- | --- | --- |\n")
		for _, s := range g.settings {
			flagCell := "none"
			if s.flag != "" {
				flagCell = "`-" + s.flag + "`"
			}
			def := "none"
			switch {
			case s.def != "" && s.defaultDesc != "":
				def = "`" + s.def + "` (" + md(s.defaultDesc) + ")"
			case s.def != "":
				def = "`" + s.def + "`"
			case s.defaultDesc != "":
				def = md(s.defaultDesc)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.key, flagCell, def, md(s.desc))
		}
	}
	b.WriteString(md(referenceTail))
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap breaks text into lines of at most width characters, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
