-- +goose Up
-- A call of a client tool waits for the client's output.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check CHECK (status IN ('planned', 'running', 'succeeded', 'failed',
    'unknown', 'awaiting_approval', 'rejected', 'awaiting_client'));

-- +goose Down
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check CHECK (status IN ('planned', 'running', 'succeeded', 'failed',
    'unknown', 'awaiting_approval', 'rejected'));
