package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// A tenant's remote MCP servers (POST /mcp-servers): their tools join the
// tenant's runs' tools, named <server>__<tool>, reached through the
// operator's egress rule, their headers sealed as a tenant's webhook
// tool's are. They are rows of the tenant's tools of kind mcp: a tenant's
// tools and MCP servers share one namespace of names.

var errMCPServerNotFound = newError(http.StatusNotFound, CodeToolNotFound, "MCP server not found",
	"the tenant has no MCP server of this name")

// mcpServerRequest is the body of POST /mcp-servers and PUT
// /mcp-servers/{name}.
type mcpServerRequest struct {
	Name             *string           `json:"name"`
	URL              *string           `json:"url"`
	Headers          map[string]string `json:"headers"`
	Tools            []string          `json:"tools"`
	ConnectTimeoutMS int               `json:"connect_timeout_ms"`
}

// maxMCPTools caps the names of a server's tools list.
const maxMCPTools = 128

// mcpServerOf reads and checks the body of POST /mcp-servers or PUT
// /mcp-servers/{name} (name: the route's, empty for POST) into a row, its
// headers sealed.
func (s *server) mcpServerOf(w http.ResponseWriter, r *http.Request, name string) (agentd.TenantTool, error) {
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
	var req mcpServerRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return row, err
	}
	if name, err = nameOf("MCP server", name, req.Name); err != nil {
		return row, err
	}
	if req.URL == nil || *req.URL == "" {
		return row, fieldError("url", "is required: the server's streamable HTTP endpoint, such as https://mcp.example.com/mcp")
	}
	if err := tools.CheckEgress(*req.URL, s.tenantTools.AllowHosts()); err != nil {
		return row, fieldError("url", "%v", err)
	}
	if len(req.Headers) > 0 && !s.tenantTools.CanSeal() {
		return row, fieldError("headers", "the server has no AGENTD_SECRET_KEY to keep header values under: its operator sets one")
	}
	if len(req.Tools) > maxMCPTools {
		return row, fieldError("tools", "may name at most %d tools", maxMCPTools)
	}
	for i, t := range req.Tools {
		if t == "" || slices.Contains(req.Tools[:i], t) {
			return row, fieldError(fmt.Sprintf("tools[%d]", i), "must be the name of one of the server's tools, once")
		}
	}
	cfg := agentd.MCPServerConfig{URL: *req.URL, Tools: req.Tools, ConnectTimeoutMS: req.ConnectTimeoutMS}
	if err := s.tenantTools.CheckMCPServer(name, cfg); err != nil {
		return row, fieldError(mcpField(err), "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	tenant := TenantFromContext(r.Context())
	row = agentd.TenantTool{TenantID: tenant, Name: name, Kind: agentd.ToolKindMCP, Actor: ActorFromContext(r.Context()),
		HeaderNames: slices.Sorted(maps.Keys(req.Headers))}
	if row.Config, err = json.Marshal(cfg); err != nil {
		return row, err
	}
	if row.SealedHeaders, err = s.tenantTools.Seal(tenant, name, req.Headers); err != nil {
		return row, err
	}
	return row, nil
}

// mcpField names the field an MCP server's error is about.
func mcpField(err error) string {
	msg := err.Error()
	for _, f := range []string{"connect_timeout_ms", "url", "name"} {
		if strings.Contains(msg, f) {
			return f
		}
	}
	return "body"
}

// mcpServerView is row as the API shows it, with this instance's
// connection to it: never its headers' values.
func (s *server) mcpServerView(r *http.Request, row agentd.TenantTool) agentd.TenantMCPServerView {
	var cfg agentd.MCPServerConfig
	_ = json.Unmarshal(row.Config, &cfg) // written by mcpServerOf
	names, list := row.HeaderNames, cfg.Tools
	if names == nil {
		names = []string{}
	}
	if list == nil {
		list = []string{}
	}
	// Making the tenant's registry connects to its servers (cached):
	// the status is this instance's.
	_, _ = s.tenantTools.For(r.Context(), row.TenantID)
	st, _ := s.tenantTools.MCPStatus(row.TenantID, row.Name)
	return agentd.TenantMCPServerView{Object: agentd.ObjectMCPServer, Name: row.Name, URL: cfg.URL, Tools: list,
		ConnectTimeoutMS: cfg.ConnectTimeoutMS, HeaderNames: names, Status: st, CreatedBy: row.Actor,
		CreatedAt: row.CreatedAt.UTC(), UpdatedAt: row.UpdatedAt.UTC()}
}

var mcpKind = tenantKind{kind: agentd.ToolKindMCP, path: "/mcp-servers/", notFound: errMCPServerNotFound,
	conflict: func(name string) error {
		return newError(http.StatusConflict, CodeToolExists, "Name taken", fmt.Sprintf("the tenant has a tool or MCP server "+
			"named %q (a tenant's tools and MCP servers share their names): PUT /mcp-servers/%s replaces an MCP server", name, name))
	},
	of:   (*server).mcpServerOf,
	view: func(s *server, r *http.Request, row agentd.TenantTool) any { return s.mcpServerView(r, row) },
}

func (s *server) mcpServerList(w http.ResponseWriter, r *http.Request) error {
	out := listJSON[agentd.TenantMCPServerView]{Data: []agentd.TenantMCPServerView{}}
	if s.tenantTools != nil {
		rows, err := s.store.TenantTools(r.Context(), TenantFromContext(r.Context()))
		if err != nil {
			return err
		}
		for _, row := range rows {
			if row.Kind == agentd.ToolKindMCP {
				out.Data = append(out.Data, s.mcpServerView(r, row))
			}
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
