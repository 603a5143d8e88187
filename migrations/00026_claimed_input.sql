-- +goose Up
-- The input of a run queued behind another run of its conversation is
-- stored at once but pending, with provisional seqs from pending_from on
-- (persist.PendingSeq), so that it cannot fall between the other run's tool
-- calls and their results. Such a run has input_pending set, and its claim
-- calls agentd_number_input in the claim's own statement (clearing the
-- flag): the input is numbered after every message of the conversation
-- (nothing else of it is in flight then), in its order, and marked
-- completed. The flag spares every other claim any work: no probe of
-- messages, no lock of the conversation (a claim by id executes in
-- 0.17 ms, as before, EXPLAIN ANALYZE).
--
-- A function rather than data-modifying CTEs of the claim: those made the
-- execution of every claim by id 0.7-0.8 ms longer, even when they changed
-- nothing.
ALTER TABLE runs ADD COLUMN input_pending boolean NOT NULL DEFAULT false;

-- It returns how many messages it numbered.
-- +goose StatementBegin
CREATE FUNCTION agentd_number_input(run uuid, conv uuid, pending_from int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    n int;
    first int;
BEGIN
    SELECT count(*) INTO n FROM messages WHERE conversation_id = conv AND seq >= pending_from AND run_id = run;
    IF n = 0 THEN
        RETURN 0;
    END IF;
    UPDATE conversations SET next_seq = next_seq + n, updated_at = now() WHERE id = conv
        RETURNING next_seq - n INTO first;
    -- The new seqs are below every pending one and past every numbered
    -- one: no row holds them, so the key's check passes row by row.
    UPDATE messages m SET seq = first + p.k - 1, status = 'completed'
    FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS k FROM messages
        WHERE conversation_id = conv AND seq >= pending_from AND run_id = run) p
    WHERE m.conversation_id = conv AND m.seq = p.seq;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentd_number_input(uuid, uuid, int);
ALTER TABLE runs DROP COLUMN input_pending;
