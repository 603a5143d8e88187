-- +goose Up
-- Indexes no query uses: every index entry is WAL on the hot path of a step.
-- Tool calls are found through their step (tool_calls_step_position).
DROP INDEX conversations_tenant;
DROP INDEX messages_run;
DROP INDEX tool_calls_run;

-- +goose Down
CREATE INDEX conversations_tenant ON conversations (tenant_id, id);
CREATE INDEX messages_run ON messages (run_id);
CREATE INDEX tool_calls_run ON tool_calls (run_id);
