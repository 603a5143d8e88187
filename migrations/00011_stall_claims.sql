-- +goose Up
-- A run taken over again and again without progress fails (no_progress)
-- instead of being executed forever: stall_claims counts the takeovers of a
-- running run (its worker died or lost its lease) since the run last started
-- a new step. The fence resets it when a write moves the step count up, in
-- the update of the run's row it makes anyway; a run leaving the executor,
-- or handed back at shutdown, resets it too.
ALTER TABLE runs ADD COLUMN stall_claims int NOT NULL DEFAULT 0;
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress'));

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentd_fence(run_ids uuid[], run_epochs bigint[], run_ns bigint[], run_steps int[],
    add_input bigint[], add_output bigint[], add_cached bigint[], add_reasoning bigint[],
    ev_run int[], ev_k bigint[], ev_type text[], ev_step int[], ev_data text[], ev_at timestamptz[])
RETURNS TABLE (fenced_run uuid, fenced_seq bigint)
LANGUAGE plpgsql AS $$
DECLARE
    firsts bigint[] := '{}'; -- per run: the seq before this write's events
BEGIN
    FOR i IN 1 .. cardinality(run_ids) LOOP
        UPDATE runs r SET last_event_seq = r.last_event_seq + run_ns[i], updated_at = now(),
                step_count = greatest(r.step_count, run_steps[i]),
                stall_claims = CASE WHEN run_steps[i] > r.step_count THEN 0 ELSE r.stall_claims END,
                input_tokens = r.input_tokens + add_input[i], output_tokens = r.output_tokens + add_output[i],
                cached_input_tokens = r.cached_input_tokens + add_cached[i],
                reasoning_tokens = r.reasoning_tokens + add_reasoning[i]
            WHERE r.id = run_ids[i] AND r.epoch = run_epochs[i]
            RETURNING r.id, r.last_event_seq INTO fenced_run, fenced_seq;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'lease lost: run % is past epoch %', run_ids[i], run_epochs[i] USING ERRCODE = 'AD001';
        END IF;
        firsts := firsts || (fenced_seq - run_ns[i]);
        RETURN NEXT;
    END LOOP;
    INSERT INTO run_events (run_id, seq, type, step, data, created_at)
        SELECT run_ids[e.i], firsts[e.i] + e.k, e.t, e.s, e.d::json, e.a
        FROM unnest(ev_run, ev_k, ev_type, ev_step, ev_data, ev_at) AS e(i, k, t, s, d, a);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentd_fence(run_ids uuid[], run_epochs bigint[], run_ns bigint[], run_steps int[],
    add_input bigint[], add_output bigint[], add_cached bigint[], add_reasoning bigint[],
    ev_run int[], ev_k bigint[], ev_type text[], ev_step int[], ev_data text[], ev_at timestamptz[])
RETURNS TABLE (fenced_run uuid, fenced_seq bigint)
LANGUAGE plpgsql AS $$
DECLARE
    firsts bigint[] := '{}'; -- per run: the seq before this write's events
BEGIN
    FOR i IN 1 .. cardinality(run_ids) LOOP
        UPDATE runs r SET last_event_seq = r.last_event_seq + run_ns[i], updated_at = now(),
                step_count = greatest(r.step_count, run_steps[i]),
                input_tokens = r.input_tokens + add_input[i], output_tokens = r.output_tokens + add_output[i],
                cached_input_tokens = r.cached_input_tokens + add_cached[i],
                reasoning_tokens = r.reasoning_tokens + add_reasoning[i]
            WHERE r.id = run_ids[i] AND r.epoch = run_epochs[i]
            RETURNING r.id, r.last_event_seq INTO fenced_run, fenced_seq;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'lease lost: run % is past epoch %', run_ids[i], run_epochs[i] USING ERRCODE = 'AD001';
        END IF;
        firsts := firsts || (fenced_seq - run_ns[i]);
        RETURN NEXT;
    END LOOP;
    INSERT INTO run_events (run_id, seq, type, step, data, created_at)
        SELECT run_ids[e.i], firsts[e.i] + e.k, e.t, e.s, e.d::json, e.a
        FROM unnest(ev_run, ev_k, ev_type, ev_step, ev_data, ev_at) AS e(i, k, t, s, d, a);
END
$$;
-- +goose StatementEnd
UPDATE runs SET terminal_reason = 'model_error' WHERE terminal_reason = 'no_progress';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error'));
ALTER TABLE runs DROP COLUMN stall_claims;
