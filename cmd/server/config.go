package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/auth"
	engine "github.com/agentd/agentd/internal/run"
)

// config is the server's configuration.
type config struct {
	DatabaseURL    string
	Addr           string
	Migrate        bool
	Workers        int
	LeaseTTL       time.Duration
	PollInterval   time.Duration
	Heartbeat      time.Duration
	SSERetry       time.Duration
	ShutdownGrace  time.Duration
	ToolsFile      string
	HTTPAllowHosts []string
	Model          string
	OpenAIKey      string
	OpenAIBaseURL  string
	LogLevel       slog.Level
	MaxBodyBytes   int64
	MaxConns       int
	Committers     int
	MaxTimeouts    [5]time.Duration // total, step, idle, tool, action
	CORSOrigins    []string
	BodyTimeout    time.Duration
	CallsPerStep   int
	CallsPerRun    int
	ToolsAtOnce    int
	Auth           string // none, keys or oidc
	OIDC           auth.OIDCConfig
	MetricsAddr    string
	MaxConnections int
	KeyCacheTTL    time.Duration
	Quotas         api.Quotas
	TenantRunning  int
	ModelsFile     string
	// getenv is the environment the config was read from: tracing reads
	// the standard OTEL_* variables from it.
	getenv       func(string) string
	TraceContent bool
	// Retention, when set, is how long what ended is kept (AGENTD_RETENTION);
	// RetentionEvery is how often a pass runs.
	Retention      time.Duration
	RetentionEvery time.Duration
}

// Authentication modes (AGENTD_AUTH).
const (
	authNone = "none"
	authKeys = "keys"
	authOIDC = "oidc"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/agentd?sslmode=disable"

// parseConfig reads the environment through getenv, then the flags in args,
// which override it.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	var c config
	var allow, level, migrate string
	fs := flag.NewFlagSet("agentd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", defaultDatabaseURL), "PostgreSQL URL; the database is created if missing (DATABASE_URL)")
	fs.StringVar(&c.Addr, "addr", env("AGENTD_ADDR", "127.0.0.1:8080"), "listen address (AGENTD_ADDR)")
	fs.StringVar(&migrate, "migrate", env("AGENTD_MIGRATE", "true"), "apply migrations at start-up (AGENTD_MIGRATE)")
	workers := fs.String("workers", env("AGENTD_WORKERS", strconv.Itoa(engine.DefaultWorkers)), "runs executed at once by this instance (AGENTD_WORKERS)")
	lease := fs.String("lease-ttl", env("AGENTD_LEASE_TTL", "15s"), "run lease TTL; a dead instance's runs move after it (AGENTD_LEASE_TTL)")
	poll := fs.String("poll-interval", env("AGENTD_POLL_INTERVAL", "2s"), "fallback claim poll when no notification arrives (AGENTD_POLL_INTERVAL)")
	heartbeat := fs.String("heartbeat", env("AGENTD_HEARTBEAT", "15s"), "SSE heartbeat interval (AGENTD_HEARTBEAT)")
	sseRetry := fs.String("sse-retry", env("AGENTD_SSE_RETRY", "2s"), "reconnect delay advised to SSE clients in the retry: field (AGENTD_SSE_RETRY)")
	grace := fs.String("shutdown-grace", env("AGENTD_SHUTDOWN_GRACE", "10s"), "how long runs may take to reach a step boundary at shutdown (AGENTD_SHUTDOWN_GRACE)")
	retention := fs.String("retention", env("AGENTD_RETENTION", ""), "remove conversations whose runs all ended longer ago than this, such as 30d or 720h; empty: keep everything (AGENTD_RETENTION)")
	retentionEvery := fs.String("retention-interval", env("AGENTD_RETENTION_INTERVAL", "10m"), "how often a retention pass runs (AGENTD_RETENTION_INTERVAL)")
	fs.StringVar(&c.ModelsFile, "models-file", env("AGENTD_MODELS_FILE", ""), "JSON file of model profiles ({\"models\": {\"NAME\": {\"context_window\": N, \"max_output_tokens\": M}}}) over the built-in ones (AGENTD_MODELS_FILE)")
	fs.StringVar(&c.ToolsFile, "tools-file", env("AGENTD_TOOLS_FILE", ""), "JSON file declaring webhook tools (AGENTD_TOOLS_FILE)")
	fs.StringVar(&allow, "http-allow-hosts", env("AGENTD_HTTP_ALLOW_HOSTS", ""), "comma-separated hosts the http_request tool may call; empty disables the tool (AGENTD_HTTP_ALLOW_HOSTS)")
	fs.StringVar(&c.Model, "model", env("AGENTD_MODEL", ""), "default model of a run (AGENTD_MODEL; default gpt-4o-mini, or fake with the built-in fake model)")
	fs.StringVar(&c.OpenAIBaseURL, "openai-base-url", env("OPENAI_BASE_URL", ""), "OpenAI-compatible API root (OPENAI_BASE_URL)")
	fs.StringVar(&level, "log-level", env("AGENTD_LOG_LEVEL", "info"), "debug, info, warn or error (AGENTD_LOG_LEVEL)")
	maxBody := fs.String("max-body-bytes", env("AGENTD_MAX_BODY_BYTES", "1048576"), "largest accepted request body (AGENTD_MAX_BODY_BYTES)")
	committers := fs.String("committers", env("AGENTD_COMMITTERS", "1"), "group-commit workers: executor writes of concurrent runs share their transactions (AGENTD_COMMITTERS)")
	maxTotal := fs.String("max-total-timeout", env("AGENTD_MAX_TOTAL_TIMEOUT", "24h"), "the longest total timeout a client may ask for; 0 asks for it (AGENTD_MAX_TOTAL_TIMEOUT)")
	maxStep := fs.String("max-step-timeout", env("AGENTD_MAX_STEP_TIMEOUT", "1h"), "the longest step timeout a client may ask for (AGENTD_MAX_STEP_TIMEOUT)")
	maxIdle := fs.String("max-idle-timeout", env("AGENTD_MAX_IDLE_TIMEOUT", "10m"), "the longest model idle timeout a client may ask for (AGENTD_MAX_IDLE_TIMEOUT)")
	maxAction := fs.String("max-action-timeout", env("AGENTD_MAX_ACTION_TIMEOUT", "168h"), "the longest a run may wait for a client's decision, which its total timeout does not count (AGENTD_MAX_ACTION_TIMEOUT)")
	maxTool := fs.String("max-tool-timeout", env("AGENTD_MAX_TOOL_TIMEOUT", "1h"), "the longest tool attempt timeout a client may ask for (AGENTD_MAX_TOOL_TIMEOUT)")
	bodyTimeout := fs.String("body-timeout", env("AGENTD_BODY_TIMEOUT", "30s"), "how long a request body may take to arrive; a slower one gets 408 (AGENTD_BODY_TIMEOUT)")
	var corsOrigins string
	fs.StringVar(&corsOrigins, "cors-origins", env("AGENTD_CORS_ORIGINS", ""), "comma-separated web origins (scheme://host[:port], or *) whose pages may call the API from a browser; empty: CORS off (AGENTD_CORS_ORIGINS)")
	callsPerStep := fs.String("tool-calls-per-step", env("AGENTD_TOOL_CALLS_PER_STEP", "64"), "tool calls of one step that are run; the model is told the rest were not (AGENTD_TOOL_CALLS_PER_STEP)")
	callsPerRun := fs.String("tool-calls-per-run", env("AGENTD_TOOL_CALLS_PER_RUN", "1000"), "tool calls a run may make; a model that asks for more ends it (tool_limit) (AGENTD_TOOL_CALLS_PER_RUN)")
	toolsAtOnce := fs.String("tool-concurrency", env("AGENTD_TOOL_CONCURRENCY", "64"), "tool attempts this instance makes at once, across its runs (AGENTD_TOOL_CONCURRENCY)")
	fs.StringVar(&c.Auth, "auth", env("AGENTD_AUTH", ""), "authentication: keys (agentd keys create), oidc (JWTs, and keys), or none (loopback addresses only); default none on a loopback address, else required (AGENTD_AUTH)")
	fs.StringVar(&c.OIDC.Issuer, "oidc-issuer", env("AGENTD_OIDC_ISSUER", ""), "OpenID Connect issuer URL, with -auth oidc (AGENTD_OIDC_ISSUER)")
	fs.StringVar(&c.OIDC.Audience, "oidc-audience", env("AGENTD_OIDC_AUDIENCE", ""), "the audience tokens must be issued for (AGENTD_OIDC_AUDIENCE)")
	fs.StringVar(&c.OIDC.JWKSURL, "oidc-jwks-url", env("AGENTD_OIDC_JWKS_URL", ""), "the provider's JWKS URL; empty: from the issuer's discovery document (AGENTD_OIDC_JWKS_URL)")
	fs.StringVar(&c.OIDC.TenantClaim, "oidc-tenant-claim", env("AGENTD_OIDC_TENANT_CLAIM", "tenant"), "the claim that names the tenant (AGENTD_OIDC_TENANT_CLAIM)")
	fs.StringVar(&c.OIDC.ScopesClaim, "oidc-scopes-claim", env("AGENTD_OIDC_SCOPES_CLAIM", "scope"), "the claim that holds the scopes, a space-separated string or a list (AGENTD_OIDC_SCOPES_CLAIM)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("AGENTD_METRICS_ADDR", ""), "serve /metrics on this address of its own; empty: on the API's address without authentication, else not at all (AGENTD_METRICS_ADDR)")
	keyCache := fs.String("key-cache-ttl", env("AGENTD_KEY_CACHE_TTL", "5s"), "how long an API key read from the database is trusted; a revoked key stops working within it (AGENTD_KEY_CACHE_TTL)")
	maxConnections := fs.String("max-connections", env("AGENTD_MAX_CONNECTIONS", "1024"), "open HTTP connections this instance accepts at once; more wait to be accepted (AGENTD_MAX_CONNECTIONS)")
	createRate := fs.String("tenant-runs-per-second", env("AGENTD_TENANT_RUNS_PER_SECOND", "0"), "runs a tenant may create per second on this instance (a token bucket of twice that, at least 1); past it 429; 0: unbounded (AGENTD_TENANT_RUNS_PER_SECOND)")
	inProgress := fs.String("tenant-runs-in-progress", env("AGENTD_TENANT_RUNS_IN_PROGRESS", "0"), "runs of one tenant that run at once, across instances; more wait queued (or 429 with on_quota: reject); 0: unbounded (AGENTD_TENANT_RUNS_IN_PROGRESS)")
	streams := fs.String("tenant-streams", env("AGENTD_TENANT_STREAMS", "0"), "event streams a tenant may have open at once on this instance; past it 429; 0: unbounded (AGENTD_TENANT_STREAMS)")
	maxConns := fs.String("db-max-conns", env("AGENTD_DB_MAX_CONNS", "0"), "database pool size; 0 means workers+16 (AGENTD_DB_MAX_CONNS)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.OpenAIKey = getenv("OPENAI_API_KEY")
	if *retention != "" {
		d, err := parseDays(*retention)
		if err != nil || d < time.Minute {
			return c, fmt.Errorf("retention: want a duration of at least 1m, such as 30d or 720h, got %q", *retention)
		}
		c.Retention = d
	}
	c.getenv = getenv
	c.TraceContent = strings.EqualFold(getenv("AGENTD_TRACE_CONTENT"), "true")
	var errs []error
	atoi := func(name, v string, min int) int {
		n, err := strconv.Atoi(v)
		if err != nil || n < min {
			errs = append(errs, fmt.Errorf("%s: want an integer >= %d, got %q", name, min, v))
		}
		return n
	}
	dur := func(name, v string) time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive duration such as 15s, got %q", name, v))
		}
		return d
	}
	c.Workers = atoi("workers", *workers, 1)
	c.MaxConns = atoi("db-max-conns", *maxConns, 0)
	c.Committers = atoi("committers", *committers, 1)
	c.CallsPerStep = atoi("tool-calls-per-step", *callsPerStep, 1)
	c.CallsPerRun = atoi("tool-calls-per-run", *callsPerRun, 1)
	c.ToolsAtOnce = atoi("tool-concurrency", *toolsAtOnce, 1)
	c.MaxBodyBytes = int64(atoi("max-body-bytes", *maxBody, 1024))
	c.MaxConnections = atoi("max-connections", *maxConnections, 1)
	c.Quotas.StreamsPerTenant = atoi("tenant-streams", *streams, 0)
	c.TenantRunning = atoi("tenant-runs-in-progress", *inProgress, 0)
	if r, err := strconv.ParseFloat(*createRate, 64); err != nil || r < 0 {
		errs = append(errs, fmt.Errorf("tenant-runs-per-second: want a number >= 0, got %q", *createRate))
	} else {
		c.Quotas.CreatesPerSecond = r
		c.Quotas.CreateBurst = max(1, int(2*r))
	}
	if err := c.checkAuth(); err != nil {
		errs = append(errs, err)
	}
	c.LeaseTTL = dur("lease-ttl", *lease)
	c.PollInterval = dur("poll-interval", *poll)
	c.Heartbeat = dur("heartbeat", *heartbeat)
	c.SSERetry = dur("sse-retry", *sseRetry)
	c.ShutdownGrace = dur("shutdown-grace", *grace)
	c.BodyTimeout = dur("body-timeout", *bodyTimeout)
	c.KeyCacheTTL = dur("key-cache-ttl", *keyCache)
	c.RetentionEvery = dur("retention-interval", *retentionEvery)
	c.MaxTimeouts = [5]time.Duration{dur("max-total-timeout", *maxTotal), dur("max-step-timeout", *maxStep),
		dur("max-idle-timeout", *maxIdle), dur("max-tool-timeout", *maxTool), dur("max-action-timeout", *maxAction)}
	switch strings.ToLower(migrate) {
	case "true", "1", "yes":
		c.Migrate = true
	case "false", "0", "no":
	default:
		errs = append(errs, fmt.Errorf("migrate: want true or false, got %q", migrate))
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	for _, o := range strings.Split(corsOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.CORSOrigins = append(c.CORSOrigins, o)
		}
	}
	for _, h := range strings.Split(allow, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.HTTPAllowHosts = append(c.HTTPAllowHosts, h)
		}
	}
	if c.MaxConns == 0 {
		c.MaxConns = c.Workers + 16
	}
	return c, errors.Join(errs...)
}

// checkAuth settles the authentication mode: none by default on a loopback
// address, and never without authentication on any other.
func (c *config) checkAuth() error {
	loopback := isLoopback(c.Addr)
	switch c.Auth {
	case "":
		if !loopback {
			return fmt.Errorf("refusing to serve %s without authentication: set AGENTD_AUTH=keys (and create a key with `agentd keys create`) or AGENTD_AUTH=oidc", c.Addr)
		}
		c.Auth = authNone
	case authNone:
		if !loopback {
			return fmt.Errorf("auth: none is allowed only on a loopback address, and %s is not one: set AGENTD_AUTH=keys or oidc", c.Addr)
		}
	case authKeys:
	case authOIDC:
		if c.OIDC.Issuer == "" || c.OIDC.Audience == "" {
			return errors.New("auth: oidc needs AGENTD_OIDC_ISSUER and AGENTD_OIDC_AUDIENCE")
		}
	default:
		return fmt.Errorf("auth: want keys, oidc or none, got %q", c.Auth)
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
