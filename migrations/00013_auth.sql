-- +goose Up
-- API keys: a key is agd_<prefix>_<secret>; only the prefix and the SHA-256
-- of the secret are kept. last_used_at is written at most once a minute per
-- key and instance.
CREATE TABLE api_keys (
    prefix       text PRIMARY KEY,
    tenant_id    text NOT NULL,
    name         text NOT NULL,
    scopes       text[] NOT NULL,
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

-- Who asked: the actor (key:<prefix>, oidc:<subject>, or local) of a run's
-- creation, of its cancel, of the resume or decision that last queued it
-- again, and of a client's decision on a tool call.
ALTER TABLE runs ADD COLUMN created_by text, ADD COLUMN cancelled_by text, ADD COLUMN resumed_by text;
ALTER TABLE tool_calls ADD COLUMN decided_by text;

-- +goose Down
ALTER TABLE tool_calls DROP COLUMN decided_by;
ALTER TABLE runs DROP COLUMN created_by, DROP COLUMN cancelled_by, DROP COLUMN resumed_by;
DROP TABLE api_keys;
