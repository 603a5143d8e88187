package persist

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

const tenantToolColumns = `tenant_id, name, kind, config, header_names, sealed_headers, created_by, created_at, updated_at`

func scanTenantTool(row pgx.Row) (agentd.TenantTool, error) {
	var t agentd.TenantTool
	err := row.Scan(&t.TenantID, &t.Name, &t.Kind, &t.Config, &t.HeaderNames, &t.SealedHeaders, &t.Actor, &t.CreatedAt, &t.UpdatedAt)
	return t, notFound(translate(err), agentd.ErrToolNotFound)
}

// TenantToolCreate stores a tenant's new tool. ErrToolExists: the tenant
// has a tool of that name.
func (s *Store) TenantToolCreate(ctx context.Context, t agentd.TenantTool) (agentd.TenantTool, error) {
	out, err := scanTenantTool(s.pool.QueryRow(ctx, `INSERT INTO tenant_tools
		(tenant_id, name, config, header_names, sealed_headers, created_by, kind) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tenant_id, name) DO NOTHING RETURNING `+tenantToolColumns,
		t.TenantID, t.Name, []byte(t.Config), headerNames(t.HeaderNames), t.SealedHeaders, t.Actor, kindOf(t)))
	if errors.Is(err, agentd.ErrToolNotFound) {
		return out, agentd.ErrToolExists
	}
	return out, err
}

// TenantToolReplace replaces a tenant's tool (or MCP server) of t's kind;
// its creation is kept. ErrToolNotFound: the tenant has no such tool.
func (s *Store) TenantToolReplace(ctx context.Context, t agentd.TenantTool) (agentd.TenantTool, error) {
	return scanTenantTool(s.pool.QueryRow(ctx, `UPDATE tenant_tools
		SET config = $3, header_names = $4, sealed_headers = $5, created_by = $6, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 AND kind = $7 RETURNING `+tenantToolColumns,
		t.TenantID, t.Name, []byte(t.Config), headerNames(t.HeaderNames), t.SealedHeaders, t.Actor, kindOf(t)))
}

// TenantToolGet returns a tenant's tool (or MCP server) of kind, or
// ErrToolNotFound.
func (s *Store) TenantToolGet(ctx context.Context, tenantID, kind, name string) (agentd.TenantTool, error) {
	return scanTenantTool(s.pool.QueryRow(ctx, `SELECT `+tenantToolColumns+` FROM tenant_tools
		WHERE tenant_id = $1 AND name = $2 AND kind = $3`, tenantID, name, kind))
}

// kindOf is t's kind, a webhook when it says none.
func kindOf(t agentd.TenantTool) string {
	if t.Kind == "" {
		return agentd.ToolKindWebhook
	}
	return t.Kind
}

// TenantTools returns a tenant's tools and MCP servers, by name.
func (s *Store) TenantTools(ctx context.Context, tenantID string) ([]agentd.TenantTool, error) {
	return queryAll(ctx, s.pool, scanTenantTool, `SELECT `+tenantToolColumns+` FROM tenant_tools
		WHERE tenant_id = $1 ORDER BY name`, tenantID)
}

// TenantToolDelete deletes a tenant's tool (or MCP server) of kind.
// ErrToolNotFound: none.
func (s *Store) TenantToolDelete(ctx context.Context, tenantID, kind, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tenant_tools WHERE tenant_id = $1 AND name = $2 AND kind = $3`, tenantID, name, kind)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return agentd.ErrToolNotFound
	}
	return nil
}

// headerNames is names, never NULL.
func headerNames(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}
