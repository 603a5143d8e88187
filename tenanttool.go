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
	// Config is the tool's webhook configuration (the fields of a tools
	// file's entry) without its headers, as a JSON object.
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

// Errors of tenants' tools.
var (
	// ErrToolNotFound is the ErrNotFound of a tenant's tool.
	ErrToolNotFound = fmt.Errorf("tool %w", ErrNotFound)
	// ErrToolExists is the ErrConflict of declaring a tool whose name the
	// tenant uses already.
	ErrToolExists = fmt.Errorf("tool exists: %w", ErrConflict)
)
