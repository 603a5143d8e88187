-- +goose Up
-- A fenced write is refused once its run stopped, not only once another
-- claim moved its epoch on: a run's stop (RunEnd) keeps its epoch, so a
-- write of its executor that reached the server after the stop committed
-- (a streamed delta whose client gave up on it when the run's deadline
-- cut its context, while the server still held it) was appended after
-- the run's terminal event. The lease's other statements (LeaseExtend,
-- LeaseRelease) already hold a run by its epoch and its running status.
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
        UPDATE runs r SET last_event_seq = r.last_event_seq + run_ns[i],
                updated_at = CASE WHEN run_steps[i] > r.step_count OR add_input[i] + add_output[i] <> 0
                    OR r.updated_at < now() - interval '1 second' THEN now() ELSE r.updated_at END,
                step_count = greatest(r.step_count, run_steps[i]),
                stall_claims = CASE WHEN run_steps[i] > r.step_count THEN 0 ELSE r.stall_claims END,
                input_tokens = r.input_tokens + add_input[i], output_tokens = r.output_tokens + add_output[i],
                cached_input_tokens = r.cached_input_tokens + add_cached[i],
                reasoning_tokens = r.reasoning_tokens + add_reasoning[i]
            WHERE r.id = run_ids[i] AND r.epoch = run_epochs[i] AND r.status = 'running'
            RETURNING r.id, r.last_event_seq INTO fenced_run, fenced_seq;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'lease lost: run % is past epoch % or stopped', run_ids[i], run_epochs[i] USING ERRCODE = 'AD001';
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
        UPDATE runs r SET last_event_seq = r.last_event_seq + run_ns[i],
                updated_at = CASE WHEN run_steps[i] > r.step_count OR add_input[i] + add_output[i] <> 0
                    OR r.updated_at < now() - interval '1 second' THEN now() ELSE r.updated_at END,
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
