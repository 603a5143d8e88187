-- +goose Up
-- A run whose write the database refuses as data fails with reason
-- storage_error instead of being claimed again and again.
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error'));

-- +goose Down
UPDATE runs SET terminal_reason = 'model_error' WHERE terminal_reason = 'storage_error';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted'));
