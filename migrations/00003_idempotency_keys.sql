-- +goose Up
-- Idempotency keys of POST /runs/{id}/cancel, /resume and /actions (POST /runs
-- keeps its key on the run row). The first request's response is stored, and a
-- repeat with the same key and request gets it back.
CREATE TABLE idempotency_keys (
    tenant_id    text NOT NULL,
    key          text NOT NULL,
    request_hash text NOT NULL,
    status       integer,          -- null while the first request is in flight
    content_type text,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

-- +goose Down
DROP TABLE idempotency_keys;
