-- +goose Up
-- An answer still cut at the model's output limit after its continuations
-- ends a run completed with reason max_output_tokens; the model's content
-- filter ends one failed with content_filter.
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter'));

-- +goose Down
UPDATE runs SET terminal_reason = 'completed' WHERE terminal_reason = 'max_output_tokens';
UPDATE runs SET terminal_reason = 'model_error' WHERE terminal_reason = 'content_filter';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected'));
