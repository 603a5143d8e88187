-- +goose Up
-- A run whose model asks for tool calls after the run made as many as it
-- may ends with reason tool_limit.
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit'));

-- +goose Down
UPDATE runs SET terminal_reason = 'tool_error' WHERE terminal_reason = 'tool_limit';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress'));
