package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	engine "agentd/internal/run"
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
	MaxTimeouts    [4]time.Duration // total, step, idle, tool
	CORSOrigins    []string
	BodyTimeout    time.Duration
	CallsPerStep   int
	CallsPerRun    int
	ToolsAtOnce    int
}

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
	maxTool := fs.String("max-tool-timeout", env("AGENTD_MAX_TOOL_TIMEOUT", "1h"), "the longest tool attempt timeout a client may ask for (AGENTD_MAX_TOOL_TIMEOUT)")
	bodyTimeout := fs.String("body-timeout", env("AGENTD_BODY_TIMEOUT", "30s"), "how long a request body may take to arrive; a slower one gets 408 (AGENTD_BODY_TIMEOUT)")
	var corsOrigins string
	fs.StringVar(&corsOrigins, "cors-origins", env("AGENTD_CORS_ORIGINS", ""), "comma-separated web origins (scheme://host[:port], or *) whose pages may call the API from a browser; empty: CORS off (AGENTD_CORS_ORIGINS)")
	callsPerStep := fs.String("tool-calls-per-step", env("AGENTD_TOOL_CALLS_PER_STEP", "64"), "tool calls of one step that are run; the model is told the rest were not (AGENTD_TOOL_CALLS_PER_STEP)")
	callsPerRun := fs.String("tool-calls-per-run", env("AGENTD_TOOL_CALLS_PER_RUN", "1000"), "tool calls a run may make; a model that asks for more ends it (tool_limit) (AGENTD_TOOL_CALLS_PER_RUN)")
	toolsAtOnce := fs.String("tool-concurrency", env("AGENTD_TOOL_CONCURRENCY", "64"), "tool attempts this instance makes at once, across its runs (AGENTD_TOOL_CONCURRENCY)")
	maxConns := fs.String("db-max-conns", env("AGENTD_DB_MAX_CONNS", "0"), "database pool size; 0 means workers+16 (AGENTD_DB_MAX_CONNS)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.OpenAIKey = getenv("OPENAI_API_KEY")
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
	c.LeaseTTL = dur("lease-ttl", *lease)
	c.PollInterval = dur("poll-interval", *poll)
	c.Heartbeat = dur("heartbeat", *heartbeat)
	c.SSERetry = dur("sse-retry", *sseRetry)
	c.ShutdownGrace = dur("shutdown-grace", *grace)
	c.BodyTimeout = dur("body-timeout", *bodyTimeout)
	c.MaxTimeouts = [4]time.Duration{dur("max-total-timeout", *maxTotal), dur("max-step-timeout", *maxStep),
		dur("max-idle-timeout", *maxIdle), dur("max-tool-timeout", *maxTool)}
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
