-- +goose Up
-- Events are stored in parts, and the envelope a client receives,
-- {"seq":S,"type":T,"run_id":R,"step":N,"at":A,"data":D}, is put back
-- together when they are read: a row keeps seq, type, step, data (D) and
-- created_at (A, to the microsecond). A row written before this migration
-- keeps the exact "at" it was sent with in legacy_at, so that its bytes do
-- not change. The envelope's repeated parts were about 40% of an event row.
ALTER TABLE run_events ADD COLUMN step int NOT NULL DEFAULT 0, ADD COLUMN legacy_at text;
UPDATE run_events SET step = (data->>'step')::int, legacy_at = data->>'at', data = data->'data';
ALTER TABLE run_events ALTER COLUMN step DROP DEFAULT;

-- The fence of an executor write, as one statement that fails when any run's
-- epoch moved on. An executor write is then one pipelined round trip (this
-- call, the write's own rows, and the implicit commit): a stale fence raises
-- SQLSTATE AD001, which aborts everything queued after it, so a worker that
-- lost its lease commits nothing.
--
-- For each run (sorted by id, so that concurrent writers lock runs in the
-- same order) it takes the run's row lock with one indexed update that
-- reserves run_ns[i] event seqs and moves the run's counters: its step count
-- up to at least run_steps[i], and its token usage by the add_* amounts. Then
-- it appends the events: event j belongs to run ev_run[j] (an index into
-- run_ids) and is the ev_k[j]-th of that run's events in this write, which
-- numbers it. It returns each run's new last seq.
-- +goose StatementBegin
CREATE FUNCTION agentd_fence(run_ids uuid[], run_epochs bigint[], run_ns bigint[], run_steps int[],
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

-- +goose Down
DROP FUNCTION agentd_fence(uuid[], bigint[], bigint[], int[], bigint[], bigint[], bigint[], bigint[],
    int[], bigint[], text[], int[], text[], timestamptz[]);
UPDATE run_events SET data = ('{"seq":' || seq || ',"type":' || to_json(type)::text || ',"run_id":"' || run_id
    || '","step":' || step || ',"at":' || to_json(coalesce(legacy_at,
        regexp_replace(to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '\.?0+$', '') || 'Z'))::text
    || ',"data":' || data::text || '}')::json;
ALTER TABLE run_events DROP COLUMN step, DROP COLUMN legacy_at;
