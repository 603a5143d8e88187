-- +goose Up
-- Compactions of a conversation that failed in a row; past 3, agentd stops
-- trying (the run fails saying why) until one succeeds.
ALTER TABLE conversations ADD COLUMN compaction_failures integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE conversations DROP COLUMN compaction_failures;
