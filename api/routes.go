package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
)

// Public marks a route that needs no credential.
const Public auth.Scope = "public"

// RouteScopes is what each route needs: the scope a credential must hold,
// or Public. The guard looks every request's route up here and refuses a
// route that is missing (a test walks the router for that), so no route can
// be served without a decision about who may call it.
var RouteScopes = map[string]auth.Scope{
	"GET /livez":                                    Public,
	"GET /readyz":                                   Public,
	"GET /ui":                                       Public, // the run viewer's pages: they hold no data
	"GET /ui/*":                                     Public,
	"GET /metrics":                                  Public, // only when Config.HideMetrics is false: without authentication
	"POST /runs":                                    auth.RunsWrite,
	"GET /runs":                                     auth.RunsRead,
	"GET /runs/{id}":                                auth.RunsRead,
	"GET /runs/{id}/steps":                          auth.RunsRead,
	"GET /runs/{id}/audit":                          auth.RunsRead, // as the steps: the same facts, as an export
	"GET /runs/{id}/events":                         auth.RunsRead,
	"GET /runs/{id}/artifacts/{artifact_id}":        auth.RunsRead,
	"POST /runs/{id}/cancel":                        auth.RunsWrite,
	"POST /runs/{id}/resume":                        auth.RunsWrite,
	"POST /runs/{id}/actions":                       auth.ActionsWrite,
	"POST /runs/{id}/fork":                          auth.RunsWrite,
	"POST /runs/{id}/input":                         auth.RunsWrite,
	"GET /runs/{id}/inputs":                         auth.RunsRead,
	"POST /conversations/{id}/messages":             auth.RunsWrite,
	"GET /conversations":                            auth.RunsRead,
	"POST /conversations":                           auth.RunsWrite,
	"GET /conversations/{id}":                       auth.RunsRead,
	"PATCH /conversations/{id}":                     auth.RunsWrite,
	"DELETE /conversations/{id}":                    auth.RunsWrite,
	"GET /conversations/{id}/messages":              auth.RunsRead,
	"GET /tools":                                    auth.RunsRead,
	"GET /models":                                   auth.RunsRead,
	"POST /tools":                                   auth.AgentsWrite,
	"GET /tools/{name}":                             auth.RunsRead,
	"PUT /tools/{name}":                             auth.AgentsWrite,
	"DELETE /tools/{name}":                          auth.AgentsWrite,
	"GET /mcp-servers":                              auth.RunsRead,
	"POST /mcp-servers":                             auth.AgentsWrite,
	"GET /mcp-servers/{name}":                       auth.RunsRead,
	"PUT /mcp-servers/{name}":                       auth.AgentsWrite,
	"DELETE /mcp-servers/{name}":                    auth.AgentsWrite,
	"POST /ai-sdk/chat":                             auth.RunsWrite, // answering an approval needs actions:write too
	"GET /ai-sdk/chat/{id}/stream":                  auth.RunsRead,
	"DELETE /ai-sdk/chat/{id}/stream":               auth.RunsWrite,
	"POST /v1/responses":                            auth.RunsWrite,
	"GET /v1/responses":                             auth.RunsWrite, // the WebSocket mode: it creates and steers responses
	"POST /v1/responses/compact":                    auth.RunsWrite, // it runs the model, as a response does
	"GET /v1/models":                                auth.RunsRead,  // as GET /models
	"GET /v1/models/{id}":                           auth.RunsRead,
	"GET /v1/responses/{id}":                        auth.RunsRead,
	"POST /v1/responses/{id}/cancel":                auth.RunsWrite,
	"DELETE /v1/responses/{id}":                     auth.RunsWrite,
	"GET /v1/responses/{id}/input_items":            auth.RunsRead,
	"POST /v1/conversations":                        auth.RunsWrite,
	"GET /v1/conversations/{id}":                    auth.RunsRead,
	"POST /v1/conversations/{id}":                   auth.RunsWrite,
	"DELETE /v1/conversations/{id}":                 auth.RunsWrite,
	"GET /v1/conversations/{id}/items":              auth.RunsRead,
	"GET /v1/conversations/{id}/items/{item_id}":    auth.RunsRead,
	"POST /v1/conversations/{id}/items":             auth.RunsWrite,
	"DELETE /v1/conversations/{id}/items/{item_id}": auth.RunsWrite,
	"POST /webhooks":                                auth.AgentsWrite,
	"GET /webhooks":                                 auth.RunsRead,
	"GET /webhooks/{id}":                            auth.RunsRead,
	"PATCH /webhooks/{id}":                          auth.AgentsWrite,
	"DELETE /webhooks/{id}":                         auth.AgentsWrite,
	"GET /webhooks/{id}/deliveries":                 auth.RunsRead,
	"POST /webhooks/{id}/deliveries/{delivery_id}/redeliver": auth.AgentsWrite,
	"GET /runs/{id}/deliveries":                              auth.RunsRead,
	"POST /agents":                                           auth.AgentsWrite,
	"GET /agents":                                            auth.RunsRead,
	"GET /agents/{name}":                                     auth.RunsRead,
	"PUT /agents/{name}":                                     auth.AgentsWrite,
	"DELETE /agents/{name}":                                  auth.AgentsWrite,
	"GET /agents/{name}/versions":                            auth.RunsRead,
	"GET /agents/{name}/versions/{version}":                  auth.RunsRead,
	// A schedule is standing configuration, as an agent is: it goes on
	// starting runs long after the request that made it (and after the
	// key that made it is revoked), so changing schedules takes the
	// scope of definitions, not that of one run.
	"POST /schedules":          auth.AgentsWrite,
	"GET /schedules":           auth.RunsRead,
	"GET /schedules/{id}":      auth.RunsRead,
	"PATCH /schedules/{id}":    auth.AgentsWrite,
	"DELETE /schedules/{id}":   auth.AgentsWrite,
	"GET /schedules/{id}/runs": auth.RunsRead,
	// The cost ledger: a tenant's own usage, and the budgets only an
	// admin sets (docs/usage.md).
	"GET /usage":                         auth.RunsRead,
	"GET /admin/tenants/{tenant}/budget": auth.Admin,
	"PUT /admin/tenants/{tenant}/budget": auth.Admin,
	// The tenant's managed instructions, above every agent and run: an
	// admin's, as a budget is; reading them too, since no run shows them.
	"GET /instructions":    auth.Admin,
	"PUT /instructions":    auth.Admin,
	"DELETE /instructions": auth.Admin,
	// Memory (docs/memory.md): scopes of its own, since what the agents
	// remember of a tenant's users is not run history.
	"PUT /memory/items":         auth.MemoryWrite,
	"GET /memory/items":         auth.MemoryRead,
	"DELETE /memory/items":      auth.MemoryWrite, // a purge: purge=true and confirm say so
	"GET /memory/item":          auth.MemoryRead,
	"DELETE /memory/item":       auth.MemoryWrite,
	"GET /memory/item/versions": auth.MemoryRead,
	"POST /memory/search":       auth.MemoryRead,
	// What extraction wrote from which run: memory's, as the items are.
	"GET /memory/extractions":      auth.MemoryRead,
	"GET /memory/extractions/{id}": auth.MemoryRead,
	// Datasets (docs/evals.md) are definitions, as agents are: read
	// with runs:read, changed with agents:write; a case captured from a
	// run (from_run) needs runs:read too, since it copies the run.
	"POST /datasets":                          auth.AgentsWrite,
	"GET /datasets":                           auth.RunsRead,
	"GET /datasets/{name}":                    auth.RunsRead,
	"DELETE /datasets/{name}":                 auth.AgentsWrite,
	"GET /datasets/{name}/versions/{version}": auth.RunsRead,
	"GET /datasets/{name}/cases":              auth.RunsRead,
	"POST /datasets/{name}/cases":             auth.AgentsWrite,
	"DELETE /datasets/{name}/cases/{case_id}": auth.AgentsWrite,
	// Evaluations make runs: runs' scopes.
	"POST /evals":             auth.RunsWrite,
	"GET /evals":              auth.RunsRead,
	"GET /evals/{id}":         auth.RunsRead,
	"POST /evals/{id}/cancel": auth.RunsWrite,
}

// RouteParams are the query parameters each route takes; a route not named
// here takes none. Any other parameter is refused (400 unknown_parameter),
// so that a misspelt one is never ignored (a paginator sending "after" to
// a list that pages by "cursor" would get its first page again, forever).
var RouteParams = map[string][]string{
	"GET /runs":                        {"status", "conversation_id", "agent", "agent_version", "parent_run_id", "schedule_id", "q", "limit", "cursor"},
	"GET /runs/{id}/events":            {"after"},
	"GET /runs/{id}":                   {"wait"},
	"POST /runs":                       {"wait"},
	"GET /conversations/{id}/messages": {"limit", "cursor"},
	"GET /conversations":               {"limit", "cursor", "metadata.*", "chat_id"},
	"GET /agents":                      {"limit", "cursor"},
	"GET /agents/{name}/versions":      {"limit", "cursor"},
	"GET /webhooks":                    {"limit", "cursor"},
	"GET /webhooks/{id}/deliveries":    {"limit", "cursor"},
	"GET /schedules":                   {"limit", "cursor"},
	"GET /schedules/{id}/runs":         {"limit", "cursor"},
	"GET /usage":                       {"from", "to", "group_by", "tenant"},
	"GET /memory/items":                {"prefix", "limit", "cursor"},
	"DELETE /memory/items":             {"prefix", "purge", "confirm"},
	"GET /memory/item":                 {"namespace", "key", "as_of"},
	"DELETE /memory/item":              {"namespace", "key", "if_version"},
	"GET /memory/item/versions":        {"namespace", "key", "limit", "cursor"},
	"GET /memory/extractions":          {"run_id", "limit", "cursor"},
	"GET /datasets":                    {"limit", "cursor"},
	"GET /evals":                       {"limit", "cursor"},
	"GET /datasets/{name}/cases":       {"version", "limit", "cursor"},
	// OpenAI's SDKs send include[] (and the stream's options) on every
	// retrieve; agentd includes nothing more, whatever they ask.
	"GET /v1/responses/{id}":                     {"stream", "starting_after", "include", "include[]", "include_obfuscation"},
	"GET /v1/responses/{id}/input_items":         {"after", "before", "limit", "order", "include", "include[]"},
	"GET /v1/conversations/{id}/items":           {"after", "limit", "order", "include", "include[]"},
	"GET /v1/conversations/{id}/items/{item_id}": {"include", "include[]"},
	"POST /v1/conversations/{id}/items":          {"include", "include[]"},
	// Codex asks for its models with its version; the list is the same
	// for every client.
	"GET /v1/models": {"client_version"},
}

// routes builds the router. Every route here is in openapi.yaml
// (openapi_test.go checks it) and in RouteScopes (routes_test.go).
func (s *server) routes(cfg Config) *chi.Mux {
	r := chi.NewRouter()
	r.Use(requestID, s.accessLog, s.recoverer, s.holdBodies)
	if c := corsHandler(cfg.CORSOrigins); c != nil {
		r.Use(c)
	}
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed(r))

	r.Group(func(r chi.Router) {
		r.Use(s.guard)
		r.Get("/livez", s.livez)
		r.Get("/readyz", s.readyz)
		r.Get("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently).ServeHTTP)
		r.Get("/ui/*", uiHandler().ServeHTTP)
		if !cfg.HideMetrics {
			metrics := cfg.Metrics
			if metrics == nil {
				metrics = promhttp.Handler()
			}
			r.Method(http.MethodGet, "/metrics", metrics)
		}

		changes := r.With(s.checkOrigin, s.requireJSON)
		changes.With(s.limitCreates).Post("/runs", s.handle(s.runCreate))
		r.Get("/runs", s.handle(s.runList))
		r.Get("/runs/{id}", s.handle(s.runGet))
		r.Get("/runs/{id}/steps", s.handle(s.stepsList))
		r.Get("/runs/{id}/audit", s.handle(s.runAudit))
		changes.With(s.idempotent).Post("/runs/{id}/cancel", s.handle(s.runCancel))
		changes.With(s.idempotent).Post("/runs/{id}/resume", s.handle(s.runResume))
		changes.With(s.idempotent).Post("/runs/{id}/actions", s.handle(s.runAction))
		changes.With(s.limitCreates).Post("/runs/{id}/fork", s.handle(s.runFork))
		changes.With(s.limitCreates).Post("/runs/{id}/input", s.handle(s.runInput))
		r.Get("/runs/{id}/inputs", s.handle(s.runInputs))
		changes.With(s.limitCreates).Post("/conversations/{id}/messages", s.handle(s.conversationSend))
		r.Get("/runs/{id}/events", s.handle(s.runEvents))
		r.Get("/runs/{id}/artifacts/{artifact_id}", s.handle(s.artifactGet))
		r.Get("/conversations", s.handle(s.conversationList))
		changes.With(s.idempotent).Post("/conversations", s.handle(s.conversationCreate))
		r.Get("/conversations/{id}", s.handle(s.conversationGet))
		changes.Patch("/conversations/{id}", s.handle(s.conversationUpdate))
		changes.Delete("/conversations/{id}", s.handle(s.conversationDelete))
		r.Get("/conversations/{id}/messages", s.handle(s.messagesList))
		r.Get("/tools", s.handle(s.toolsList))
		r.Get("/models", s.handle(s.modelsList))
		changes.With(s.idempotent).Post("/tools", s.handle(s.rowCreate(webhookKind)))
		r.Get("/tools/{name}", s.handle(s.rowGet(webhookKind)))
		changes.Put("/tools/{name}", s.handle(s.rowReplace(webhookKind)))
		changes.Delete("/tools/{name}", s.handle(s.rowDelete(webhookKind)))
		r.Get("/mcp-servers", s.handle(s.mcpServerList))
		changes.With(s.idempotent).Post("/mcp-servers", s.handle(s.rowCreate(mcpKind)))
		r.Get("/mcp-servers/{name}", s.handle(s.rowGet(mcpKind)))
		changes.Put("/mcp-servers/{name}", s.handle(s.rowReplace(mcpKind)))
		changes.Delete("/mcp-servers/{name}", s.handle(s.rowDelete(mcpKind)))
		s.webhookRoutes(r, changes)
		s.agentRoutes(r, changes)
		s.scheduleRoutes(r, changes)
		s.usageRoutes(r, changes)
		s.memoryRoutes(r, changes)
		s.datasetRoutes(r, changes)
		s.evalRoutes(r, changes)
		changes.Post("/ai-sdk/chat", s.handle(s.chatSend))
		r.Get("/ai-sdk/chat/{id}/stream", s.handle(s.chatResume))
		r.With(s.checkOrigin).Delete("/ai-sdk/chat/{id}/stream", s.handle(s.chatStop))
		changes.With(s.limitCreates).Post("/v1/responses", s.handle(s.responseCreate))
		r.With(s.checkOrigin).Get("/v1/responses", s.handle(s.responseSocket))
		s.v1MoreRoutes(r, changes)
		r.Get("/v1/responses/{id}", s.handle(s.responseGet))
		changes.With(s.idempotent).Post("/v1/responses/{id}/cancel", s.handle(s.responseCancel))
		r.With(s.checkOrigin).Delete("/v1/responses/{id}", s.handle(s.responseDelete))
		r.Get("/v1/responses/{id}/input_items", s.handle(s.responseInputItems))
		s.v1ConversationRoutes(r, changes)
	})
	return r
}

// v1ConversationRoutes routes the Responses API's conversations: r the
// reads, changes the writes.
func (s *server) v1ConversationRoutes(r, changes chi.Router) {
	changes.Post("/v1/conversations", s.handle(s.v1ConversationCreate))
	r.Get("/v1/conversations/{id}", s.handle(s.v1ConversationGet))
	changes.Post("/v1/conversations/{id}", s.handle(s.v1ConversationUpdate))
	r.With(s.checkOrigin).Delete("/v1/conversations/{id}", s.handle(s.v1ConversationDelete))
	r.Get("/v1/conversations/{id}/items", s.handle(s.v1ConversationItems))
	r.Get("/v1/conversations/{id}/items/{item_id}", s.handle(s.v1ConversationItem))
	changes.With(s.idempotent).Post("/v1/conversations/{id}/items", s.handle(s.v1ConversationItemsCreate))
	r.With(s.checkOrigin).Delete("/v1/conversations/{id}/items/{item_id}", s.handle(s.v1ConversationItemDelete))
}

// v1MoreRoutes routes the Responses API's standalone compaction and
// OpenAI's Models API: r the reads, changes the writes.
func (s *server) v1MoreRoutes(r, changes chi.Router) {
	changes.With(s.limitCreates).Post("/v1/responses/compact", s.handle(s.responseCompact))
	r.Get("/v1/models", s.handle(s.v1ModelList))
	r.Get("/v1/models/{id}", s.handle(s.v1ModelGet))
}

// agentRoutes routes agents: r the reads, changes the writes.
func (s *server) agentRoutes(r, changes chi.Router) {
	changes.With(s.idempotent).Post("/agents", s.handle(s.agentCreate))
	r.Get("/agents", s.handle(s.agentList))
	r.Get("/agents/{name}", s.handle(s.agentGet))
	changes.Put("/agents/{name}", s.handle(s.agentUpdate))
	changes.Delete("/agents/{name}", s.handle(s.agentDelete))
	r.Get("/agents/{name}/versions", s.handle(s.agentVersions))
	r.Get("/agents/{name}/versions/{version}", s.handle(s.agentVersionGet))
}

// scheduleRoutes adds the schedules' routes: r reads, changes writes.
func (s *server) scheduleRoutes(r, changes chi.Router) {
	changes.With(s.idempotent).Post("/schedules", s.handle(s.scheduleCreate))
	r.Get("/schedules", s.handle(s.scheduleList))
	r.Get("/schedules/{id}", s.handle(s.scheduleGet))
	changes.Patch("/schedules/{id}", s.handle(s.scheduleUpdate))
	changes.Delete("/schedules/{id}", s.handle(s.scheduleDelete))
	r.Get("/schedules/{id}/runs", s.handle(s.scheduleRuns))
}

// usageRoutes routes the cost ledger's reports, the budgets and the
// managed instructions: r the reads, changes the writes.
func (s *server) usageRoutes(r, changes chi.Router) {
	r.Get("/usage", s.handle(s.usageGet))
	r.Get("/admin/tenants/{tenant}/budget", s.handle(s.budgetGet))
	changes.Put("/admin/tenants/{tenant}/budget", s.handle(s.budgetPut))
	r.Get("/instructions", s.handle(s.instructionsGet))
	changes.Put("/instructions", s.handle(s.instructionsPut))
	r.With(s.checkOrigin).Delete("/instructions", s.handle(s.instructionsDelete))
}

// webhookRoutes routes webhooks out: r the reads, changes the writes.
func (s *server) webhookRoutes(r, changes chi.Router) {
	changes.With(s.idempotent).Post("/webhooks", s.handle(s.webhookCreate))
	r.Get("/webhooks", s.handle(s.webhookList))
	r.Get("/webhooks/{id}", s.handle(s.webhookGet))
	changes.Patch("/webhooks/{id}", s.handle(s.webhookUpdate))
	r.With(s.checkOrigin).Delete("/webhooks/{id}", s.handle(s.webhookDelete))
	r.Get("/webhooks/{id}/deliveries", s.handle(s.deliveryList))
	changes.Post("/webhooks/{id}/deliveries/{delivery_id}/redeliver", s.handle(s.deliveryRedeliver))
	r.Get("/runs/{id}/deliveries", s.handle(s.runDeliveries))
}

// HeaderTenant names the tenant a request acts for, when its credential
// holds the admin scope; every such use is logged as an audit record.
const HeaderTenant = "X-Tenant-ID"

// caller is who a request comes from and the tenant it acts for.
type caller struct {
	auth.Principal
	tenant string
}

// TenantFromContext returns the tenant a request acts for, set by the
// guard.
func TenantFromContext(ctx context.Context) string {
	c, _ := ctx.Value(keyCaller).(*caller)
	if c == nil {
		return ""
	}
	return c.tenant
}

// ActorFromContext returns who a request comes from ("key:<prefix>",
// "oidc:<subject>", or "local"), set by the guard.
func ActorFromContext(ctx context.Context) string {
	c, _ := ctx.Value(keyCaller).(*caller)
	if c == nil {
		return ""
	}
	return c.Actor
}

// wwwAuthenticate is the challenge of a 401 (RFC 6750).
const wwwAuthenticate = `Bearer realm="agentd"`

// guard is the API's one authentication and authorization step: it finds
// the scope the request's route needs in RouteScopes, authenticates the
// request (unless the route is public), checks the scope, and sets the
// tenant the request acts for: the credential's, or, for a credential with
// the admin scope, X-Tenant-ID's (audited).
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		route := r.Method + " " + chi.RouteContext(ctx).RoutePattern()
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", chi.RouteContext(ctx).RoutePattern()))
		}
		need, ok := RouteScopes[route]
		if !ok {
			s.fail(w, r, errors.New("route "+route+" has no entry in RouteScopes"))
			return
		}
		if need == Public {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.auth.Authenticate(ctx, r)
		switch {
		case errors.Is(err, auth.ErrNoCredential):
			w.Header().Set("WWW-Authenticate", wwwAuthenticate)
			s.fail(w, r, newError(http.StatusUnauthorized, CodeUnauthorized, "Unauthorized", err.Error()))
			return
		case errors.Is(err, auth.ErrInvalidCredential):
			w.Header().Set("WWW-Authenticate", wwwAuthenticate+`, error="invalid_token"`)
			s.fail(w, r, newError(http.StatusUnauthorized, CodeInvalidCredential, "Invalid credential", err.Error()))
			return
		case err != nil:
			if !errors.Is(err, agentd.ErrUnavailable) {
				// The store logs an outage of the database once.
				s.log.ErrorContext(ctx, "authenticate", slog.String("error", err.Error()),
					slog.String("request_id", requestIDFrom(ctx)))
			}
			e := newError(http.StatusServiceUnavailable, CodeAuthUnavailable, "Authentication unavailable",
				"the server cannot check credentials now; retry after Retry-After seconds")
			e.retryAfter = unavailableRetryAfter
			s.fail(w, r, e)
			return
		}
		if s.onAuth != nil {
			s.onAuth(ctx)
		}
		c := &caller{Principal: p, tenant: p.Tenant}
		if t := r.Header.Get(HeaderTenant); t != "" && t != p.Tenant {
			if !p.Has(auth.Admin) {
				s.fail(w, r, newError(http.StatusForbidden, CodeTenantNotAllowed, "Tenant not allowed",
					HeaderTenant+" names another tenant than the credential's; only a credential with the admin scope may act for another tenant"))
				return
			}
			if !auth.ValidTenant(t) {
				s.fail(w, r, fieldError(HeaderTenant, "must be %s", auth.TenantRule))
				return
			}
			c.tenant = t
			if !p.Local {
				s.log.InfoContext(ctx, "audit: acting for a tenant", slog.Bool("audit", true),
					slog.String("actor", p.Actor), slog.String("actor_tenant", p.Tenant), slog.String("tenant_id", t),
					slog.String("route", route), slog.String("path", r.URL.Path), slog.String("request_id", requestIDFrom(ctx)))
			}
		}
		if !p.Has(need) {
			w.Header().Set("WWW-Authenticate", wwwAuthenticate+`, error="insufficient_scope", scope="`+string(need)+`"`)
			s.fail(w, r, newError(http.StatusForbidden, CodeInsufficientScope, "Insufficient scope",
				route+" needs the "+string(need)+" scope"))
			return
		}
		if err := checkParams(route, r.URL.Query()); err != nil {
			s.fail(w, r, err)
			return
		}
		if slot, _ := ctx.Value(keyCallerSlot).(*callerSlot); slot != nil {
			slot.tenant, slot.actor = c.tenant, c.Actor
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, keyCaller, c)))
	})
}

// checkParams refuses a query parameter that route does not take.
func checkParams(route string, q url.Values) error {
	known := RouteParams[route]
	for name := range q {
		if !slices.ContainsFunc(known, func(k string) bool {
			prefix, wild := strings.CutSuffix(k, "*")
			return k == name || (wild && strings.HasPrefix(name, prefix) && len(name) > len(prefix))
		}) {
			takes := "no query parameters"
			if len(known) > 0 {
				takes = "only " + strings.Join(known, ", ")
			}
			e := newError(http.StatusBadRequest, CodeUnknownParameter, "Unknown parameter",
				fmt.Sprintf("%s takes %s, not %q", route, takes, clip(name, 64)))
			e.field = clip(name, 64)
			return e
		}
	}
	return nil
}
