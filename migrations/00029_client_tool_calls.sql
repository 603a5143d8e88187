-- +goose Up
-- A run that ends when its model calls client tools (the Responses API's
-- function tools) ends completed with reason client_tool_calls: its calls
-- stay awaiting_client, and the run that continues the conversation gives
-- their outputs.
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter',
        'client_tool_calls'));

-- +goose Down
UPDATE runs SET terminal_reason = 'completed' WHERE terminal_reason = 'client_tool_calls';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter'));
