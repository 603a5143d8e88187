-- +goose Up
-- A tenant's remote MCP servers (POST /mcp-servers) are rows of
-- tenant_tools of kind 'mcp': config is the server's configuration (its
-- URL, the tools it offers, its connect timeout) without its headers,
-- sealed as a webhook tool's are. A tenant's tools and MCP servers share
-- one namespace of names.
ALTER TABLE tenant_tools ADD COLUMN kind text NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook', 'mcp'));

-- +goose Down
DELETE FROM tenant_tools WHERE kind = 'mcp';
ALTER TABLE tenant_tools DROP COLUMN kind;
