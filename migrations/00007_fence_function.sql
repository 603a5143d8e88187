-- +goose Up
-- The fence of an executor write, as one statement that fails when any run's
-- epoch moved on. An executor write is then one pipelined round trip (the
-- fence, its rows, its events, and the implicit commit): a stale fence raises
-- SQLSTATE AD001, which aborts everything queued after it, so a worker that
-- lost its lease commits nothing. For each run fenced it reserves n event
-- seqs under the run's row lock and returns the run's new last seq.
-- +goose StatementBegin
CREATE FUNCTION agentd_fence(ids uuid[], epochs bigint[], ns bigint[])
RETURNS TABLE (fenced_run uuid, fenced_seq bigint)
LANGUAGE plpgsql AS $$
BEGIN
    -- One indexed update per run, in the caller's order (sorted by id, so
    -- that concurrent writers lock runs in the same order).
    FOR i IN 1 .. cardinality(ids) LOOP
        UPDATE runs r SET last_event_seq = r.last_event_seq + ns[i], updated_at = now()
            WHERE r.id = ids[i] AND r.epoch = epochs[i]
            RETURNING r.id, r.last_event_seq INTO fenced_run, fenced_seq;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'lease lost: run % is past epoch %', ids[i], epochs[i] USING ERRCODE = 'AD001';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentd_fence(uuid[], bigint[], bigint[]);
