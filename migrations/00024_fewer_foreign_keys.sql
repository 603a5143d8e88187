-- +goose Up
-- The rows of a run's execution are written only in transactions that
-- fence the run (agentd_fence updates its row first, under its epoch), or
-- in the transaction that creates the run and its conversation; they are
-- removed with their run (retention, a conversation's deletion), children
-- first. Their foreign keys checked what the writes already guarantee, at
-- a query and a row lock (a WAL record) of the parent per row: about 14
-- per three-step run. run_events went without one from the start (00001).
ALTER TABLE messages DROP CONSTRAINT messages_conversation_id_fkey,
    DROP CONSTRAINT messages_run_id_fkey;
ALTER TABLE steps DROP CONSTRAINT steps_run_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_step_id_fkey,
    DROP CONSTRAINT tool_calls_run_id_fkey;
ALTER TABLE tool_attempts DROP CONSTRAINT tool_attempts_tool_call_id_fkey;

-- +goose Down
ALTER TABLE messages ADD CONSTRAINT messages_conversation_id_fkey FOREIGN KEY (conversation_id) REFERENCES conversations (id),
    ADD CONSTRAINT messages_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
ALTER TABLE steps ADD CONSTRAINT steps_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_step_id_fkey FOREIGN KEY (step_id) REFERENCES steps (id),
    ADD CONSTRAINT tool_calls_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
ALTER TABLE tool_attempts ADD CONSTRAINT tool_attempts_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES tool_calls (id);
