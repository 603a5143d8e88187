-- +goose Up
-- A call of a sub-agent (awaiting_agent) starts one child run, which names
-- its parent run and the call; the child's end answers the call. The
-- unique index is the call's one child, whatever crashes; the partial index
-- on tool_calls finds the calls that wait for a child (few rows at any
-- time), which the sweeper answers from the children that ended; that on
-- runs finds the children still open, which a parent's cancel cancels.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check CHECK (status IN ('planned', 'running', 'succeeded', 'failed',
    'unknown', 'awaiting_approval', 'rejected', 'awaiting_client', 'awaiting_agent'));
CREATE INDEX tool_calls_awaiting_agent ON tool_calls (run_id) WHERE status = 'awaiting_agent';
ALTER TABLE runs ADD COLUMN parent_run_id uuid, ADD COLUMN parent_tool_call_id uuid;
CREATE UNIQUE INDEX runs_parent_tool_call ON runs (parent_tool_call_id) WHERE parent_tool_call_id IS NOT NULL;
CREATE INDEX runs_open_children ON runs (parent_run_id)
    WHERE parent_run_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled', 'timed_out');

-- +goose Down
DROP INDEX runs_open_children;
DROP INDEX runs_parent_tool_call;
ALTER TABLE runs DROP COLUMN parent_run_id, DROP COLUMN parent_tool_call_id;
DROP INDEX tool_calls_awaiting_agent;
UPDATE tool_calls SET status = 'failed' WHERE status = 'awaiting_agent';
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check CHECK (status IN ('planned', 'running', 'succeeded', 'failed',
    'unknown', 'awaiting_approval', 'rejected', 'awaiting_client'));
