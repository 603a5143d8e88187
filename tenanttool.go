package agentd

import (
	"encoding/json"
	"fmt"
	"time"
)

// TenantTool is a webhook tool that a tenant declared through the API: its
// runs, and only its runs, may call it, beside the operator's tools. Its
// headers' values are kept sealed under the server's key (internal/secrets)
// and never shown: only their names are.
type TenantTool struct {
	TenantID string
	Name     string
	// Kind is ToolKindWebhook (a webhook tool, POST /tools) or ToolKindMCP
	// (a remote MCP server, POST /mcp-servers, whose tools its runs may
	// call); "" is a webhook.
	Kind string
	// Config is the tool's webhook configuration (the fields of a tools
	// file's entry), or the MCP server's, without its headers, as a JSON
	// object.
	Config json.RawMessage
	// HeaderNames are the names of its headers; SealedHeaders their values,
	// sealed (empty: none).
	HeaderNames   []string
	SealedHeaders string
	Actor         string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// TenantToolView is a tenant's tool as the API shows it (POST, PUT and GET
// /tools/{name}): its configuration, and the names of its headers, never
// their values.
type TenantToolView struct {
	Object         string          `json:"object"` // ObjectTenantTool
	Name           string          `json:"name"`
	Description    string          `json:"description"`
	Parameters     json.RawMessage `json:"parameters"`
	URL            string          `json:"url"`
	Effect         Effect          `json:"effect"`
	TimeoutMS      int             `json:"timeout_ms"`
	MaxAttempts    int             `json:"max_attempts"`
	NeedsApproval  bool            `json:"needs_approval"`
	MaxResultBytes int             `json:"max_result_bytes"`
	HeaderNames    []string        `json:"header_names"`
	CreatedBy      string          `json:"created_by"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// ObjectTenantTool is the object type of a TenantToolView.
const ObjectTenantTool = "tenant_tool"

// The kinds of a TenantTool.
const (
	ToolKindWebhook = "webhook"
	ToolKindMCP     = "mcp"
)

// ToolKinds lists every kind of a TenantTool.
func ToolKinds() []string { return []string{ToolKindWebhook, ToolKindMCP} }

// TenantMCPServerView is a tenant's remote MCP server as the API shows it
// (POST, PUT and GET /mcp-servers/{name}): its configuration, the names of
// its headers (never their values), and whether this instance reached it.
type TenantMCPServerView struct {
	Object           string          `json:"object"` // ObjectMCPServer
	Name             string          `json:"name"`
	URL              string          `json:"url"`
	Tools            []string        `json:"tools"`
	ConnectTimeoutMS int             `json:"connect_timeout_ms"`
	HeaderNames      []string        `json:"header_names"`
	Status           MCPServerStatus `json:"status"`
	CreatedBy        string          `json:"created_by"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
}

// MCPServerStatus says whether this instance is connected to an MCP
// server, the tools it offers (as the model sees them: <server>__<tool>),
// and the last error of a connection.
type MCPServerStatus struct {
	Connected bool     `json:"connected"`
	Tools     []string `json:"tools"`
	Error     string   `json:"error,omitempty"`
}

// MCPServerConfig is the stored configuration of a tenant's remote MCP
// server (a TenantTool's Config of kind ToolKindMCP): the fields of a
// tools file's mcp_servers entry that a tenant may set, but its headers,
// sealed beside it.
type MCPServerConfig struct {
	URL              string   `json:"url"`
	Tools            []string `json:"tools,omitempty"` // the only tools offered; none: all
	ConnectTimeoutMS int      `json:"connect_timeout_ms,omitempty"`
}

// ObjectMCPServer is the object type of a TenantMCPServerView.
const ObjectMCPServer = "mcp_server"

// Errors of tenants' tools.
var (
	// ErrToolNotFound is the ErrNotFound of a tenant's tool.
	ErrToolNotFound = fmt.Errorf("tool %w", ErrNotFound)
	// ErrToolExists is the ErrConflict of declaring a tool whose name the
	// tenant uses already.
	ErrToolExists = fmt.Errorf("tool exists: %w", ErrConflict)
)
