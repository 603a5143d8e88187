-- +goose Up
-- A tenant's own webhook tools, declared through the API (POST /tools):
-- config is the tool's configuration without its headers; the headers'
-- values are in sealed_headers, sealed under the server's key
-- (AGENTD_SECRET_KEY, internal/secrets) and bound to the tenant and the
-- tool's name, so that the table never holds a secret. header_names are
-- what the API shows of them.
CREATE TABLE tenant_tools (
    tenant_id      text        NOT NULL,
    name           text        NOT NULL,
    config         jsonb       NOT NULL,
    header_names   text[]      NOT NULL DEFAULT '{}',
    sealed_headers text        NOT NULL DEFAULT '',
    created_by     text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

-- +goose Down
DROP TABLE tenant_tools;
