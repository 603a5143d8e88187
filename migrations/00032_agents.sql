-- +goose Up
-- A tenant's agents: named, versioned run definitions. An agent's row is
-- its head: the latest version, and when it was deleted (a deleted agent
-- keeps its versions, for the runs that ran them; creating it again goes
-- on from its last version). A version is immutable: its definition is the
-- run fields it was defined with, as agentd checked them (docs/agents.md),
-- and actor is the credential that made it.
CREATE TABLE agents (
    tenant_id      text        NOT NULL,
    name           text        NOT NULL,
    latest_version integer     NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at     timestamptz,
    deleted_by     text,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE agent_versions (
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    version     integer     NOT NULL,
    description text        NOT NULL DEFAULT '',
    definition  jsonb       NOT NULL,
    actor       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name, version),
    FOREIGN KEY (tenant_id, name) REFERENCES agents (tenant_id, name) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE agent_versions;
DROP TABLE agents;
