package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/conns"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/lifecycle"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/mcptools"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/responses"
	engine "github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/schedule"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/stream"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/tenanttools"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/webhook"
)

// run starts agentd and serves until ctx ends, then shuts down in this
// order (docs/design.md, "Graceful shutdown"):
//
//  1. GET /readyz answers 503 shutting_down at once, so that load balancers
//     stop sending requests here; HTTP and event streams go on meanwhile.
//  2. The instance's parts stop in the reverse of the order they started
//     in (instance.parts): intake first (the scheduler, the webhook
//     deliverer, whose attempts under way finish, memory's extractor,
//     whose attempts under way have 5 s to finish, retention and memory's
//     retention), then the
//     engine, which stops claiming and drains: runs reach a step boundary
//     (or the grace period ends), then their leases are handed back.
//     Events committed meanwhile still reach this instance's streams and
//     are notified to the other instances. These share the grace period.
//  3. The tenants' and the tools file's MCP connections close, then the
//     event streams (their clients reconnect, to a peer, and replay from
//     Last-Event-ID; queued notifications are sent), then the HTTP server;
//     then the group committer, the model, the replica's sampler and the
//     pool. Each of these has a bound of its own.
//
// Stop order: scheduler, webhooks, evaluations, memory_extraction, memory_retention, retention, engine,
// tenant_tools, mcp,
// streams, http, group_commit, model, replica, pool.
//
// A part that fails to start stops those that started before it. When
// ready is not nil it is called with the bound address once serving.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready func(addr string)) error {
	if len(args) > 0 && args[0] == "keys" {
		return runKeys(ctx, args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	in, err := assemble(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer in.close()

	parts := in.parts()
	if err := parts.Start(ctx); err != nil {
		return err
	}
	// The API serves once every part started, so that no request reaches
	// one that has not.
	serveErr := in.http.serve()
	in.logStart(in.http)
	if ready != nil {
		ready(in.http.apiLn.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
		runErr = fmt.Errorf("serve: %w", runErr)
	}
	in.shutdown(context.WithoutCancel(ctx), parts)
	in.http.closeSide()
	return runErr
}

// servers are an instance's HTTP servers: the API's, behind the connection
// budgets, and those on addresses of their own (metrics, health), which
// are not capped and stop after the API's, so that /readyz says 503
// through the shutdown.
type servers struct {
	in    *instance
	api   *http.Server
	apiLn *conns.Listener
	side  []sideServer

	mu      sync.Mutex
	bound   bool // Start opened the listeners
	serving bool // serve serves them
	stopped bool
}

// sideServer is a server on an address of its own.
type sideServer struct {
	name string // "metrics" or "health"
	srv  *http.Server
	ln   net.Listener
}

// Start opens the instance's listeners and builds their servers, which
// serve once every part started (serve): an address in use fails the
// start before anything runs. Starting twice, or after Stop, does nothing.
func (s *servers) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound || s.stopped {
		return nil
	}
	if err := s.listen(); err != nil {
		return err
	}
	s.bound = true
	return nil
}

// Stop stops the API's server: it stops accepting, and waits, within ctx,
// for the requests under way (the event streams closed before); past ctx
// it closes their connections. Listeners that never served are closed.
// The servers on addresses of their own stay up (closeSide), so that
// /readyz says 503 through the shutdown. Stopping twice, or before Start,
// is safe.
func (s *servers) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || !s.bound {
		s.stopped = true
		return nil
	}
	s.stopped = true
	if !s.serving {
		s.closeListeners()
		return nil
	}
	if err := s.api.Shutdown(ctx); err != nil {
		_ = s.api.Close()
		return err
	}
	return nil
}

// listen opens the listeners and builds their servers.
func (s *servers) listen() error {
	in := s.in
	cfg := in.cfg
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// A new connection past the budget of unauthenticated ones closes the
	// oldest of them; when every connection has authenticated, new ones
	// wait in the kernel's backlog until one closes, rather than each
	// taking a file descriptor. With authentication off only loopback
	// clients reach the address, and each of them counts as authenticated.
	s.apiLn = conns.NewListener(ln, conns.Config{Max: cfg.MaxConnections,
		MaxUnauthenticated: cfg.MaxUnauthenticated, TrustLoopback: cfg.Auth == authNone})
	s.api = in.httpServer(in.handler)
	s.api.ConnContext = conns.ConnContext
	in.countConnections(s.apiLn)
	var sides []sideServer
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", in.metrics)
		sides = append(sides, sideServer{name: "metrics", srv: in.httpServer(mux)})
	}
	if cfg.HealthAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /livez", in.handler)
		mux.Handle("GET /readyz", in.handler)
		sides = append(sides, sideServer{name: "health", srv: in.httpServer(mux)})
	}
	addrs := map[string]string{"metrics": cfg.MetricsAddr, "health": cfg.HealthAddr}
	for _, side := range sides {
		if side.ln, err = net.Listen("tcp", addrs[side.name]); err != nil {
			s.closeListeners()
			return fmt.Errorf("%s listen: %w", side.name, err)
		}
		s.side = append(s.side, side)
	}
	return nil
}

// httpServer is a server of h with agentd's timeouts: headers within 10 s,
// a body within the body timeout of its headers (conns.BodyDeadline), and
// idle connections closed after 2 minutes.
func (in *instance) httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: conns.BodyDeadline(conns.Serving(h), in.cfg.BodyTimeout), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 120 * time.Second, ErrorLog: slog.NewLogLogger(in.log.Handler(), slog.LevelWarn)}
}

// countConnections exports how the API's connections stand.
func (in *instance) countConnections(l *conns.Listener) {
	for _, authenticated := range []bool{true, false} {
		in.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "agentd_http_connections",
			Help:        "Connections open on the API's address, by whether a request on them authenticated.",
			ConstLabels: prometheus.Labels{"authenticated": strconv.FormatBool(authenticated)},
		}, func() float64 {
			st := l.Stats()
			if authenticated {
				return float64(st.Authenticated)
			}
			return float64(st.Unauthenticated)
		}))
	}
	in.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "agentd_http_unauthenticated_connections_closed_total",
		Help: "Unauthenticated connections closed to make room for a new one (AGENTD_MAX_UNAUTHENTICATED_CONNECTIONS).",
	}, func() float64 { return float64(l.Stats().Evicted) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "agentd_http_connections_refused_total",
		Help: "New connections answered 503 with Retry-After, for want of room, when no unauthenticated connection could be closed to make it.",
	}, func() float64 { return float64(l.Stats().Refused) }))
}

// serve serves every listener; the channel receives the first failure.
func (s *servers) serve() <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = true
	serveErr := make(chan error, 1+len(s.side))
	go func() { serveErr <- s.api.Serve(s.apiLn) }()
	for _, side := range s.side {
		go func() {
			if err := side.srv.Serve(side.ln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("%s: %w", side.name, err)
			}
		}()
	}
	return serveErr
}

// closeListeners closes the listeners of servers that never served.
func (s *servers) closeListeners() {
	if s.apiLn != nil {
		s.apiLn.Close()
	}
	for _, side := range s.side {
		side.ln.Close()
	}
}

// logStart writes the one start-up line: where the instance serves and
// what it loaded (the fake model, when it runs, has a line of its own).
func (in *instance) logStart(s *servers) {
	cfg := in.cfg
	addr := s.apiLn.Addr().String()
	base := "http://" + browsable(addr)
	metrics := "off: authentication is on; set AGENTD_METRICS_ADDR to serve it on an address of its own"
	if cfg.Auth == authNone {
		metrics = base + "/metrics"
	}
	maxConns, maxUnauth := s.apiLn.Budgets()
	attrs := []any{"addr", addr, "auth", cfg.Auth, "worker", in.eng.WorkerID(), "workers", cfg.Workers,
		"lease_ttl", cfg.LeaseTTL.String(), "model", in.modelName, "ui", base + "/ui/",
		"tools_file", cfg.ToolsFile, "file_tools", in.loaded.fileTools, "mcp_servers", in.loaded.mcpServers,
		"tracing", in.loaded.traceEndpoint != "", "tracing_endpoint", in.loaded.traceEndpoint,
		"max_connections", maxConns, "max_unauthenticated_connections", maxUnauth,
		"read_replica", cfg.ReplicaURL != ""}
	for _, side := range s.side {
		sideAddr := side.ln.Addr().String()
		if side.name == "metrics" {
			metrics = "http://" + browsable(sideAddr) + "/metrics"
		}
		attrs = append(attrs, side.name+"_addr", sideAddr)
	}
	in.log.Info("agentd serving", append(attrs, "metrics", metrics)...)
}

// browsable is addr as a browser on this host can reach it: an unspecified
// host (all addresses) becomes localhost.
func browsable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err == nil && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return net.JoinHostPort("localhost", port)
	}
	return addr
}

// closeSide stops the servers on addresses of their own.
func (s *servers) closeSide() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, side := range s.side {
		_ = side.srv.Close()
	}
}

// instance is agentd's parts, wired: the store, the stream hub that
// publishes its commits, the engine, and the API in front of them.
type instance struct {
	cfg   config
	log   *slog.Logger
	store *persist.Store
	hub   *stream.Hub
	eng   *engine.Engine
	// hooks are the tools file's hooks at the loop's boundaries (nil: none).
	hooks     *tools.LoopHooks
	hosted    map[string]string   // the tools file's hosted_tools
	sched     *schedule.Scheduler // fires the schedules' slots
	deliver   *webhook.Deliverer  // delivers the webhooks
	commit    *persist.GroupCommit
	replica   *persist.ReplicaSampler
	retention *persist.Retention // nil without AGENTD_RETENTION
	memory    *memory.Service    // the tenants' memory (the /memory routes)
	memSweep  *memory.Sweeper    // memory's retention passes
	extract   *memory.Extractor  // memory's extraction jobs
	evals     *eval.Driver       // makes and scores the evaluations' runs
	chat      llm.Model          // the model router: the engine's, and extraction's
	model     *modelService
	http      *servers
	box       *secrets.Box // seals what tenants give: headers, signing secrets
	handler   http.Handler
	metrics   http.Handler // GET /metrics
	modelName string
	profiles  *compact.Profiles // the models' profiles: what each takes as input
	mcp       *mcptools.Manager
	tenants   *tenanttools.Catalog // the tools tenants declare
	// composer composes every run: the API's, the schedules' slots and the
	// sub-agents' children.
	composer *compose.Composer
	loaded   loaded               // what the start-up line reports
	reg      *prometheus.Registry // every metric the instance exports
	draining atomic.Bool          // set at shutdown: /readyz answers 503
	// closers release what assemble opened, last first, whether or not
	// the parts started: the pool, the fake model's listener, tracing.
	closers []func()
}

// loaded is what an instance loaded, beyond its settings, for the start-up
// line.
type loaded struct {
	fileTools     int      // tools the tools file declares
	mcpServers    []string // the tools file's MCP servers, by name
	traceEndpoint string   // where spans go; "" with tracing off
}

// assemble prepares the database and builds agentd's parts. On an error it
// closes what it had opened.
func assemble(ctx context.Context, cfg config, log *slog.Logger) (_ *instance, err error) {
	in := &instance{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	startCtx, cancelStart := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStart()
	if err := in.openStore(startCtx); err != nil {
		return nil, err
	}
	registry, err := in.startEngine()
	if err != nil {
		return nil, err
	}
	if err := in.buildMemory(); err != nil {
		return nil, err
	}
	// Runs with memory are offered its tools (docs/memory.md).
	if err := registry.SetSource("memory", in.memory.Tools()); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	if err := in.buildHandler(ctx, registry); err != nil {
		return nil, err
	}
	return in, nil
}

// openStore readies the database (created, migrated), the metrics
// registry, the stream hub and the store, and builds the store's services
// (group commit, retention, the replica's sampler), not yet started.
func (in *instance) openStore(ctx context.Context) error {
	cfg, log := in.cfg, in.log
	if err := persist.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if cfg.Migrate {
		if err := persist.Migrate(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
	}
	in.reg = prometheus.NewRegistry()
	in.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The hub publishes the store's commits: they reach this instance's
	// streams at once (the executor's without being read back), and peers
	// by NOTIFY.
	in.hub = stream.New(stream.Config{Logger: log, Heartbeat: cfg.Heartbeat, Retry: cfg.SSERetry, Registerer: in.reg})
	var err error
	in.store, err = persist.Open(ctx, persist.Config{URL: cfg.DatabaseURL, MaxConns: int32(cfg.MaxConns), Publisher: in.hub,
		TenantRunsInProgress: cfg.TenantRunning, Logger: log, ReplicaURL: cfg.ReplicaURL, ReplicaMaxLag: cfg.ReplicaMaxLag,
		MemoryLimits: agentd.MemoryLimits{ItemsPerNamespace: cfg.MemoryItemsPerNamespace, BytesPerItem: cfg.MemoryBytesPerItem,
			BytesPerTenant: cfg.MemoryBytesPerTenant}})
	if err != nil {
		return err
	}
	in.closers = append(in.closers, in.store.Close)
	if cfg.ReplicaURL != "" {
		store := in.store
		in.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentd_db_replica_serving",
			Help: "1 while the read replica serves the reads that tolerate lag, 0 while they go to the primary.",
		}, func() float64 {
			if store.ReplicaFresh() {
				return 1
			}
			return 0
		}), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "agentd_db_replica_reads_total",
			Help: "Reads the read replica served.",
		}, func() float64 { return float64(store.ReplicaReads()) }))
	}
	in.replica = in.store.ReplicaSampler()
	in.commit = in.store.GroupCommit(cfg.Committers, 64, persist.DeferTick(cfg.DeltaTick))
	if cfg.Retention > 0 {
		in.retention = in.store.Retention(cfg.Retention, cfg.RetentionEvery, log)
	}
	in.hub.Bind(in.store)
	return nil
}

// startEngine builds the tools (the MCP servers' manager), the model and
// the engine, not yet started; it returns the tools.
func (in *instance) startEngine() (*tools.Registry, error) {
	cfg, log := in.cfg, in.log
	registry, mcpServers, fileTools, err := buildTools(cfg, in.store)
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	in.loaded.fileTools = fileTools
	if cfg.ToolsFile != "" {
		data, err := os.ReadFile(cfg.ToolsFile)
		if err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		if in.hooks, err = tools.ParseLoopHooks(data, nil); err != nil {
			return nil, fmt.Errorf("tools: load tools file %s: %w", cfg.ToolsFile, err)
		}
		if in.hosted, err = tools.ParseHostedTools(data, responses.Hosted); err != nil {
			return nil, fmt.Errorf("tools: load tools file %s: %w", cfg.ToolsFile, err)
		}
	}
	in.loaded.mcpServers = []string{}
	for _, m := range mcpServers {
		in.loaded.mcpServers = append(in.loaded.mcpServers, m.Name)
	}
	in.mcp = mcptools.New(registry, mcpServers, log)
	profiles := compact.DefaultProfiles()
	if cfg.ModelsFile != "" {
		if profiles, err = compact.LoadProfiles(cfg.ModelsFile); err != nil {
			return nil, fmt.Errorf("models: %w", err)
		}
	}
	box := &secrets.Box{}
	if cfg.SecretKey != "" {
		key, err := secrets.ParseKey(cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("AGENTD_SECRET_KEY: %w", err)
		}
		if box, err = secrets.New(key); err != nil {
			return nil, fmt.Errorf("AGENTD_SECRET_KEY: %w", err)
		}
	}
	in.box = box
	in.tenants = tenanttools.New(tenanttools.Config{Source: in.store, Base: registry, Box: box, AllowHosts: cfg.HTTPAllowHosts,
		Logger: log})
	in.profiles = profiles
	model, modelName, ms, err := buildModel(cfg, profiles, log)
	if err != nil {
		return nil, err
	}
	in.modelName, in.model, in.chat = modelName, ms, model
	in.closers = append(in.closers, ms.closeListener)
	in.composer = compose.New(compose.Config{Builder: runspec.New(in.runDefaults(), registry), Agents: in.store,
		Tools: in.tenants, Registry: registry, Instructions: in.store,
		Memory: memory.New(memory.Config{Store: in.store}), Overlays: in.store})
	in.eng = engine.New(engine.Config{
		Profiles: profiles,
		Store:    in.store, Model: model, Tools: registry, ToolsFor: in.tenants.For, Logger: log, Metrics: engine.NewMetrics(in.reg),
		Workers: cfg.Workers, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval,
		ToolCallsPerStep: cfg.CallsPerStep, ToolCallsPerRun: cfg.CallsPerRun, ToolConcurrency: cfg.ToolsAtOnce,
		TraceContent: cfg.TraceContent, AgentDepth: cfg.AgentDepth, AgentTreeRuns: cfg.AgentTreeRuns, AgentChildren: cfg.AgentChildren, MaxInputFilesBytes: cfg.MaxInputFiles,
		MonthlyBudget: cfg.TenantMonthlyBudget, Composer: in.composer, Hooks: in.hooks,
	})
	in.evals = eval.NewDriver(eval.DriverConfig{Store: in.store, Composer: in.composer, Runs: in.eng.Service(),
		Judge: model, JudgeModel: modelName, Hooks: tools.GuardedClient(cfg.WebhookAllowHosts, &http.Client{}),
		Owner: in.eng.WorkerID(), Log: log})
	return registry, nil
}

// buildHandler builds the API's handler: authentication, tracing, and the
// routes over the engine's service, the store and the hub.
func (in *instance) buildHandler(ctx context.Context, registry *tools.Registry) error {
	cfg, log := in.cfg, in.log
	authn, err := buildAuth(ctx, cfg, in.store)
	if err != nil {
		return err
	}
	in.metrics = promhttp.HandlerFor(in.reg, promhttp.HandlerOpts{})
	getenv := cfg.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	shutdownTracing, err := telemetry.Setup(ctx, getenv)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	in.closers = append(in.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx) // flushes the last spans
	})
	acfg := api.Config{
		Store: in.store, Hooks: in.hooks, HostedTools: in.hosted, Runs: in.eng.Service(), Events: in.hub, Tools: registry, TenantTools: in.tenants, Logger: log, Registerer: in.reg,
		Metrics: in.metrics, HideMetrics: cfg.MetricsAddr != "" || cfg.Auth != authNone,
		Auth: authn, AuthenticatedFunc: conns.Authenticated, Quotas: cfg.Quotas, MonthlyBudget: cfg.TenantMonthlyBudget,
		Models:       modelViews(in.profiles, in.modelName),
		Composer:     in.composer,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxWait: cfg.MaxWait, MaxBodyMemory: cfg.MaxBodyMemory,
		CORSOrigins: cfg.CORSOrigins,
		BodyTimeout: cfg.BodyTimeout,
		Webhooks:    api.Webhooks{Store: in.store, Box: in.box, AllowHosts: cfg.WebhookAllowHosts},
		Memory:      in.memory,
		Datasets:    api.DatasetLimits{CasesPerDataset: cfg.DatasetMaxCases, BytesPerCase: cfg.DatasetMaxCaseBytes},
		ReadyFunc:   in.ready,
		ToolSources: func() any {
			if st := in.mcp.Statuses(); len(st) > 0 {
				return st
			}
			return nil
		},
	}
	in.handler = api.New(acfg)
	in.deliver = webhook.New(webhook.Config{Store: in.store, Box: in.box, Payload: webhook.Payload,
		Client:  tools.GuardedClient(cfg.WebhookAllowHosts, &http.Client{}),
		Backoff: cfg.WebhookBackoff, Horizon: cfg.WebhookHorizon, Timeout: cfg.WebhookTimeout, Workers: cfg.WebhookWorkers,
		PerTenant: cfg.WebhookTenantWorkers, DisableAfter: cfg.WebhookDisableAfter, Logger: log, Registerer: in.reg})
	failures := cfg.ScheduleFailures
	if failures == 0 {
		failures = -1 // never pause
	}
	in.sched = schedule.New(schedule.Config{Store: in.store, Tick: cfg.ScheduleTick,
		Composer:    in.composer,
		MaxFailures: failures, Logger: log, Registerer: in.reg})
	in.http = &servers{in: in}
	in.loaded.traceEndpoint = telemetry.Endpoint(getenv)
	if in.loaded.traceEndpoint != "" {
		// HTTP server spans, joining a caller's trace (traceparent); the
		// API names each by its route.
		in.handler = otelhttp.NewHandler(in.handler, "agentd")
	}
	return nil
}

// buildMemory builds memory's service, with the models file's embedding
// model when it names one (at the default endpoint, the fake's without an
// API key, unless it gives its own), its retention sweeper, and its
// metrics.
func (in *instance) buildMemory() error {
	cfg := in.cfg
	mc := memory.Config{Store: in.store, Logger: in.log}
	if e, ok := in.profiles.Embeddings(); ok {
		oc := memory.OpenAIConfig{BaseURL: e.BaseURL, Model: e.Model, Dimensions: e.Dimensions}
		switch {
		case e.BaseURL != "":
			if e.APIKeyEnv != "" {
				getenv := cfg.getenv
				if getenv == nil {
					getenv = os.Getenv
				}
				if oc.APIKey = getenv(e.APIKeyEnv); oc.APIKey == "" {
					return fmt.Errorf("models: embeddings: the variable %s is empty", e.APIKeyEnv)
				}
			}
		case cfg.OpenAIKey != "":
			oc.BaseURL, oc.APIKey = cmp.Or(cfg.OpenAIBaseURL, "https://api.openai.com/v1"), cfg.OpenAIKey
		default:
			oc.BaseURL, oc.APIKey = in.model.baseURL(), "fake"
		}
		mc.Embedder = memory.NewOpenAI(oc)
	}
	in.memory = memory.New(mc)
	in.memSweep = memory.NewSweeper(in.store, agentd.MemoryRetention{Keep: cfg.MemoryKeepVersions,
		MaxAge: cfg.MemoryVersionMaxAge}, cfg.MemorySweepEvery, in.log)
	in.reg.MustRegister(memory.NewCollector(in.store))
	in.buildExtractor(mc.Embedder)
	return nil
}

// buildExtractor builds memory's extractor: the runs' model router, the
// models file's prices and embedding model, and the tenants' default
// budget. Every instance runs one (the outbox, which makes the jobs, is
// dispatched on every instance too, webhooks or none).
func (in *instance) buildExtractor(emb memory.Embedder) {
	cfg := in.cfg
	in.extract = memory.NewExtractor(memory.ExtractConfig{Store: in.store, Model: in.chat, Profiles: in.profiles,
		Embedder: emb, DefaultModel: cmp.Or(cfg.MemoryExtractModel, in.modelName), Workers: cfg.MemoryExtractWorkers,
		Timeout: cfg.MemoryExtractTimeout, Attempts: cfg.MemoryExtractAttempts, MonthlyBudget: cfg.TenantMonthlyBudget,
		Logger: in.log, Registerer: in.reg})
}

// runDefaults are the defaults and ceilings of every run this instance
// composes.
func (in *instance) runDefaults() runspec.Defaults {
	cfg := in.cfg
	return runspec.Defaults{Model: in.modelName, MaxTimeouts: agentd.Timeouts{
		TotalMS: cfg.MaxTimeouts[0].Milliseconds(), StepMS: cfg.MaxTimeouts[1].Milliseconds(),
		IdleMS: cfg.MaxTimeouts[2].Milliseconds(), ToolMS: cfg.MaxTimeouts[3].Milliseconds(),
		ActionMS: cfg.MaxTimeouts[4].Milliseconds()},
		MaxInputFileBytes: cfg.MaxInputFile, MaxInputFilesBytes: cfg.MaxInputFiles,
		Accepts: func(model string, kind agentd.PartType) bool { return in.profiles.For(model).Accepts(string(kind)) }}
}

// ready answers GET /readyz: the database answers, and the instance is not
// shutting down.
func (in *instance) ready(ctx context.Context) error {
	if in.draining.Load() {
		return api.ErrDraining
	}
	return in.store.Ping(ctx)
}

// parts lists the instance's services in start order; they stop in
// reverse, as run's comment says. The intake and the engine stop within
// the grace period (the context given to Stop), in turn; the others, which
// come after the drain, each within a bound of their own.
func (in *instance) parts() *lifecycle.Group {
	within := lifecycle.StopWithin
	g := &lifecycle.Group{}
	g.Add("pool", lifecycle.Funcs{StopFunc: in.closePool}, within(5*time.Second))
	if in.cfg.ReplicaURL != "" {
		g.Add("replica", in.replica, within(5*time.Second))
	}
	g.Add("model", in.model, within(5*time.Second))
	g.Add("group_commit", in.commit, within(10*time.Second)) // before the engine starts, after it stopped
	g.Add("http", in.http, within(5*time.Second))
	g.Add("streams", in.hub, within(5*time.Second))
	g.Add("mcp", in.mcp, within(5*time.Second))
	g.Add("tenant_tools", in.tenants, within(5*time.Second))
	g.Add("engine", in.eng)
	if in.cfg.Retention > 0 {
		g.Add("retention", in.retention)
	}
	g.Add("memory_retention", in.memSweep)
	g.Add("memory_extraction", in.extract, within(5*time.Second)) // cut attempts come back when their lease ends
	g.Add("evaluations", in.evals, within(5*time.Second))         // a pass cut here is the next pass's, anywhere
	g.Add("webhooks", in.deliver)                                 // its attempts under way finish
	g.Add("scheduler", in.sched)                                  // no new slot starts a run here
	return g
}

// closePool closes the pool, waiting for the connections in use within
// ctx. Closing twice is safe.
func (in *instance) closePool(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.store.Close()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown stops serving in the order run's comment gives.
func (in *instance) shutdown(ctx context.Context, parts *lifecycle.Group) {
	in.draining.Store(true)
	in.log.Info("shutting down", "grace", in.cfg.ShutdownGrace.String())
	graceCtx, cancelGrace := context.WithTimeout(ctx, in.cfg.ShutdownGrace)
	defer cancelGrace()
	for _, err := range unjoin(parts.Stop(graceCtx)) {
		attrs := []any{"error", err}
		if se := (*lifecycle.StopError)(nil); errors.As(err, &se) {
			attrs = []any{"part", se.Name, "error", se.Err}
		}
		in.log.Warn("stop", attrs...)
	}
	in.log.Info("stopped")
}

// unjoin returns the errors errors.Join joined into err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}

// close releases what assemble opened, last first.
func (in *instance) close() {
	for i := len(in.closers) - 1; i >= 0; i-- {
		in.closers[i]()
	}
	in.closers = nil
}

// Each port is checked here, where its implementation is wired in, not in
// the package that declares it: the engine's service, the store and the
// hub are the API's doors to runs, reads and streams; the store keeps the
// engine's rows, the keys and the agents the composer reads; the catalog
// gives the composer each tenant's tools, and the composer the engine its
// sub-agents' children; the scorers read runs from the store.
var (
	_ api.Runs             = (*engine.Service)(nil)
	_ api.Store            = (*persist.Store)(nil)
	_ api.Events           = (*stream.Hub)(nil)
	_ engine.Store         = (*persist.Store)(nil)
	_ engine.Composer      = (*compose.Composer)(nil)
	_ auth.KeyStore        = (*persist.Store)(nil)
	_ compose.Agents       = (*persist.Store)(nil)
	_ compose.Instructions = (*persist.Store)(nil)
	_ compose.Tools        = (*tenanttools.Catalog)(nil)
	_ tenanttools.Source   = (*persist.Store)(nil)
	_ schedule.Store       = (*persist.Store)(nil)
	_ stream.Store         = (*persist.Store)(nil)
	_ persist.Publisher    = (*stream.Hub)(nil)
	_ webhook.Store        = (*persist.Store)(nil)
	_ schedule.Composer    = (*compose.Composer)(nil)
	_ eval.Store           = (*persist.Store)(nil)
)

// buildTools returns the registry of the built-in and tools-file tools, the
// MCP servers of the tools file, whose tools join the registry once they
// are connected, and how many tools the file declares.
func buildTools(cfg config, artifacts tools.ArtifactReader) (_ *tools.Registry, _ []mcptools.ServerConfig, fileTools int, _ error) {
	list := []tools.Tool{tools.Calculator(), tools.Clock(), tools.ReadArtifact(artifacts)}
	if len(cfg.HTTPAllowHosts) > 0 {
		list = append(list, tools.HTTPRequest(cfg.HTTPAllowHosts, nil))
	}
	var servers []mcptools.ServerConfig
	var policies tools.Policies
	if cfg.ToolsFile != "" {
		hooks, err := tools.LoadFile(cfg.ToolsFile, nil)
		if err != nil {
			return nil, nil, 0, err
		}
		list = append(list, hooks...)
		fileTools = len(hooks)
		data, err := os.ReadFile(cfg.ToolsFile)
		if err != nil {
			return nil, nil, 0, err
		}
		if servers, err = mcptools.ParseFile(data); err != nil {
			return nil, nil, 0, fmt.Errorf("load tools file %s: %w", cfg.ToolsFile, err)
		}
		if policies, err = tools.ParsePolicies(data); err != nil {
			return nil, nil, 0, fmt.Errorf("load tools file %s: %w", cfg.ToolsFile, err)
		}
	}
	reg, err := tools.NewRegistry(list...)
	if err == nil && len(policies) > 0 {
		reg.SetHook(policies)
	}
	return reg, servers, fileTools, err
}

// buildModel returns the model: a router that sends each model the models
// file routes to its endpoint, and every other model to the default one:
// the configured OpenAI-compatible endpoint, or, without an API key, the
// built-in fake served on a loopback port so that the real client code
// runs. Its service serves the fake, if any, once started. A route the
// router refuses (an unknown provider, a key variable that is not set)
// fails the start.
func buildModel(cfg config, profiles *compact.Profiles, log *slog.Logger) (llm.Model, string, *modelService, error) {
	name := cfg.Model
	// prompt_cache_key goes to OpenAI's own API; another endpoint may
	// refuse a field it does not know.
	def := llm.OpenAIConfig{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIKey, PromptCacheKey: llm.OfficialOpenAI(cfg.OpenAIBaseURL)}
	ms := &modelService{}
	if cfg.OpenAIKey != "" {
		if name == "" {
			name = "gpt-4o-mini"
		}
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", nil, fmt.Errorf("fake model listen: %w", err)
		}
		ms.ln, ms.srv = ln, &http.Server{Handler: fakellm.New(), ReadHeaderTimeout: 10 * time.Second}
		def = llm.OpenAIConfig{BaseURL: "http://" + ln.Addr().String() + "/v1", APIKey: "fake", PromptCacheKey: true}
		if name == "" {
			name = "fake"
		}
		log.Info("OPENAI_API_KEY is not set: using the built-in fake model for every model the models file does not route; see docs/fake-model.md for its directives",
			"fake_base_url", def.BaseURL)
	}
	m, err := llm.NewRouter(profiles.Routes(), def, cfg.getenv)
	if err != nil {
		ms.closeListener()
		return nil, "", nil, fmt.Errorf("models: %w", err)
	}
	ms.router = m
	return m, name, ms, nil
}

// baseURL is the fake model's API root; "" without it.
func (ms *modelService) baseURL() string {
	if ms.ln == nil {
		return ""
	}
	return "http://" + ms.ln.Addr().String() + "/v1"
}

// modelService is the model's part of an instance: the built-in fake
// model's server, when it runs, and the router's idle connections.
type modelService struct {
	router interface{ CloseIdleConnections() }
	srv    *http.Server // nil: no fake model
	ln     net.Listener

	mu      sync.Mutex
	started bool
	stopped bool
	served  chan struct{} // closed when Serve returned
}

// Start serves the fake model, if any. Starting twice, or after Stop, does
// nothing.
func (ms *modelService) Start(context.Context) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.srv == nil || ms.started || ms.stopped {
		return nil
	}
	ms.started = true
	ms.served = make(chan struct{})
	go func() {
		defer close(ms.served)
		_ = ms.srv.Serve(ms.ln)
	}()
	return nil
}

// Stop closes the router's idle connections and shuts the fake model
// down, waiting within ctx for the answers under way (the engine, which
// asks for them, stopped before); past ctx it closes their connections.
// Stopping twice, or before Start, is safe.
func (ms *modelService) Stop(ctx context.Context) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.router != nil {
		ms.router.CloseIdleConnections()
	}
	if ms.stopped || ms.srv == nil {
		ms.stopped = true
		return nil
	}
	ms.stopped = true
	if !ms.started {
		ms.closeListener()
		return nil
	}
	err := ms.srv.Shutdown(ctx)
	if err != nil {
		_ = ms.srv.Close()
	}
	<-ms.served
	return err
}

// closeListener closes the fake model's listener, if any: for an instance
// whose parts never started.
func (ms *modelService) closeListener() {
	if ms.ln != nil {
		_ = ms.ln.Close()
	}
}

// buildAuth returns the authenticator of cfg.Auth.
func buildAuth(ctx context.Context, cfg config, store *persist.Store) (auth.Authenticator, error) {
	keys := func() *auth.Keys { return auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: cfg.KeyCacheTTL}) }
	switch cfg.Auth {
	case authKeys:
		return keys(), nil
	case authOIDC:
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		o, err := auth.NewOIDC(dctx, cfg.OIDC)
		if err != nil {
			return nil, err
		}
		return auth.Either(keys(), o), nil
	}
	return auth.None(), nil
}
