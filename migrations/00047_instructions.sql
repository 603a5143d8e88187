-- +goose Up
-- A tenant's managed instructions (PUT /instructions, docs/api.md): one
-- text per tenant that every run of the tenant is given first in its
-- system prompt. version counts its changes (each PUT and DELETE takes the
-- next, so a version never names two texts); text is NULL once deleted. A
-- run keeps the text and version it was created with in its parameters.
CREATE TABLE tenant_instructions (
    tenant_id  text        PRIMARY KEY,
    version    integer     NOT NULL,
    text       text,
    updated_by text,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tenant_instructions;
