package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// TenantTools keeps the tools tenants declare (internal/tenanttools.Catalog
// implements it).
type TenantTools interface {
	// For returns the registry of a tenant's runs: the server's tools and
	// the tenant's own, made again when it lacks a tool of need.
	For(ctx context.Context, tenant string, need ...string) (*tools.Registry, error)
	// Forget drops a tenant's registry after its tools changed.
	Forget(tenant string)
	// Seal seals a tool's headers; CanSeal reports whether the server has
	// a key to.
	Seal(tenant, name string, headers map[string]string) (string, error)
	CanSeal() bool
	// AllowHosts are the private ip:ports tenants' URLs may reach.
	AllowHosts() []string
	// CheckMCPServer checks an MCP server a tenant declares, as the
	// operator's are checked; MCPStatus says whether this instance is
	// connected to one, and which tools it offers.
	CheckMCPServer(name string, cfg agentd.MCPServerConfig) error
	MCPStatus(tenant, name string) (agentd.MCPServerStatus, bool)
}

// serverTool returns the server's own tool of name.
func (s *server) serverTool(name string) (tools.Tool, bool) {
	if s.tools == nil {
		return nil, false
	}
	return s.tools.Get(name)
}

// registry is the registry of the request's tenant: the server's tools
// and its own.
func (s *server) registry(ctx context.Context) (*tools.Registry, error) {
	if s.tenantTools == nil {
		return s.tools, nil
	}
	return s.tenantTools.For(ctx, TenantFromContext(ctx))
}

var errToolNotFound = newError(http.StatusNotFound, CodeToolNotFound, "Tool not found", "the tenant has no tool of this name")

var errNoTenantTools = newError(http.StatusNotImplemented, CodeTenantToolsUnavailable, "Tenant tools unavailable",
	"this server does not keep tools of tenants")

// tenantToolOf reads and checks the body of POST /tools or PUT
// /tools/{name} (name: the route's, empty for POST) into a row, its headers
// sealed.
func (s *server) tenantToolOf(w http.ResponseWriter, r *http.Request, name string) (agentd.TenantTool, error) {
	var row agentd.TenantTool
	if s.tenantTools == nil {
		return row, errNoTenantTools
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return row, err
	}
	if err := checkText(body); err != nil {
		return row, err
	}
	// The body is a webhook tool, as an entry of the operator's tools file
	// (docs/tools.md) but reconcile_url.
	var cfg tools.WebhookConfig
	if err := decodeStrict(body, &cfg, ""); err != nil {
		return row, err
	}
	if cfg.ReconcileURL != "" {
		return row, fieldError("reconcile_url", "is taken only in the operator's tools file")
	}
	var given *string
	if cfg.Name != "" {
		given = &cfg.Name
	}
	name, err = nameOf("tool", name, given)
	if err != nil {
		return row, err
	}
	if _, taken := s.serverTool(name); taken {
		return row, fieldError("name", "%q is the name of one of the server's tools (GET /tools)", name)
	}
	if err := tools.CheckEgress(cfg.URL, s.tenantTools.AllowHosts()); err != nil && cfg.URL != "" {
		return row, fieldError("url", "%v", err)
	}
	if len(cfg.Headers) > 0 && !s.tenantTools.CanSeal() {
		return row, fieldError("headers", "the server has no AGENTD_SECRET_KEY to keep header values under: its operator sets one")
	}
	cfg.Name = name
	if _, err := tools.NewWebhook(cfg, nil); err != nil {
		return row, fieldError(toolField(err), "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	tenant := TenantFromContext(r.Context())
	row = agentd.TenantTool{TenantID: tenant, Name: name, Kind: agentd.ToolKindWebhook, Actor: ActorFromContext(r.Context()),
		HeaderNames: slices.Sorted(maps.Keys(cfg.Headers))}
	headers := cfg.Headers
	cfg.Name, cfg.Headers = "", nil
	if row.Config, err = json.Marshal(cfg); err != nil {
		return row, err
	}
	if row.SealedHeaders, err = s.tenantTools.Seal(tenant, name, headers); err != nil {
		return row, err
	}
	return row, nil
}

// toolField names the field a webhook tool's error is about.
func toolField(err error) string {
	msg := err.Error()
	for _, f := range []string{"url", "effect", "timeout_ms", "max_attempts", "max_result_bytes", "headers", "parameters"} {
		if strings.Contains(msg, f) {
			return f
		}
	}
	return "body"
}

// tenantToolView is row as the API shows it: never its headers' values.
func tenantToolView(row agentd.TenantTool) agentd.TenantToolView {
	var cfg tools.WebhookConfig
	_ = json.Unmarshal(row.Config, &cfg) // written by tenantToolOf
	params := cfg.Parameters
	if isNull(params) {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	names := row.HeaderNames
	if names == nil {
		names = []string{}
	}
	return agentd.TenantToolView{Object: agentd.ObjectTenantTool, Name: row.Name, Description: cfg.Description,
		Parameters: params, URL: cfg.URL, Effect: cfg.Effect, TimeoutMS: cfg.TimeoutMS, MaxAttempts: cfg.MaxAttempts,
		NeedsApproval: cfg.NeedsApproval, MaxResultBytes: cfg.MaxResultBytes, HeaderNames: names, CreatedBy: row.Actor,
		CreatedAt: row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC()}
}

// tenantKind is what the routes of one kind of a tenant's tools (webhook
// tools under /tools, MCP servers under /mcp-servers) do differently.
type tenantKind struct {
	kind     string // agentd.ToolKindWebhook or agentd.ToolKindMCP
	path     string // its routes' prefix, "/tools/"
	notFound error
	conflict func(name string) error
	// of reads a body into a row (name: the route's; "" for POST); view
	// is a row as the routes answer it.
	of   func(s *server, w http.ResponseWriter, r *http.Request, name string) (agentd.TenantTool, error)
	view func(s *server, r *http.Request, row agentd.TenantTool) any
}

var webhookKind = tenantKind{kind: agentd.ToolKindWebhook, path: "/tools/", notFound: errToolNotFound,
	conflict: func(name string) error {
		return newError(http.StatusConflict, CodeToolExists, "Tool exists",
			fmt.Sprintf("the tenant has a tool or MCP server named %q: PUT /tools/%s replaces a tool", name, name))
	},
	of:   (*server).tenantToolOf,
	view: func(_ *server, _ *http.Request, row agentd.TenantTool) any { return tenantToolView(row) },
}

// rowCreate answers POST of kind k.
func (s *server) rowCreate(k tenantKind) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		row, err := k.of(s, w, r, "")
		if err != nil {
			return err
		}
		out, err := s.store.TenantToolCreate(r.Context(), row)
		if errors.Is(err, agentd.ErrToolExists) {
			return k.conflict(row.Name)
		}
		if err != nil {
			return err
		}
		s.tenantTools.Forget(row.TenantID)
		w.Header().Set("Location", k.path+out.Name)
		s.writeJSON(w, r, http.StatusCreated, k.view(s, r, out))
		return nil
	}
}

// rowReplace answers PUT of kind k.
func (s *server) rowReplace(k tenantKind) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		row, err := k.of(s, w, r, chi.URLParam(r, "name"))
		if err != nil {
			return err
		}
		out, err := s.store.TenantToolReplace(r.Context(), row)
		if errors.Is(err, agentd.ErrToolNotFound) {
			return k.notFound
		}
		if err != nil {
			return err
		}
		s.tenantTools.Forget(row.TenantID)
		s.writeJSON(w, r, http.StatusOK, k.view(s, r, out))
		return nil
	}
}

// rowGet answers GET of one of kind k.
func (s *server) rowGet(k tenantKind) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.tenantTools == nil {
			return k.notFound
		}
		row, err := s.store.TenantToolGet(r.Context(), TenantFromContext(r.Context()), k.kind, chi.URLParam(r, "name"))
		if errors.Is(err, agentd.ErrToolNotFound) {
			return k.notFound
		}
		if err != nil {
			return err
		}
		s.writeJSON(w, r, http.StatusOK, k.view(s, r, row))
		return nil
	}
}

// rowDelete answers DELETE of kind k. The tenant's registry is made again
// at once: this instance's connection to a deleted MCP server closes.
func (s *server) rowDelete(k tenantKind) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.tenantTools == nil {
			return k.notFound
		}
		tenant := TenantFromContext(r.Context())
		err := s.store.TenantToolDelete(r.Context(), tenant, k.kind, chi.URLParam(r, "name"))
		if errors.Is(err, agentd.ErrToolNotFound) {
			return k.notFound
		}
		if err != nil {
			return err
		}
		s.tenantTools.Forget(tenant)
		if k.kind == agentd.ToolKindMCP {
			_, _ = s.tenantTools.For(r.Context(), tenant)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}
