-- +goose Up
-- Most runs have no idempotency key; the unique index on it indexed their
-- NULLs all the same, an entry per run and another at each update that
-- cannot be HOT (the run's end). Only keys are indexed now.
ALTER TABLE runs DROP CONSTRAINT runs_idempotency;
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP INDEX runs_idempotency;
ALTER TABLE runs ADD CONSTRAINT runs_idempotency UNIQUE (tenant_id, idempotency_key);
