-- +goose Up
-- Input sent to a run that is already under way (steering): each input is
-- a row, committed before it is acknowledged, in the order the run
-- accepted them (n). Its executor applies the pending ones at its next
-- step boundary: in the write that starts the next step it inserts their
-- messages and marks them applied, so that an input is applied once or
-- not at all, whatever dies. A run that stops for good with inputs pending
-- marks them unapplied in its stop's transaction.
--
-- runs.inputs_pending counts the run's pending inputs, under the run's
-- row lock: an acceptance and an executor's write both hold it, so the
-- write that ends a run checks the count it expects (agentd_inputs_check)
-- and an input accepted meanwhile is never left behind.
-- inputs_unapplied counts the run's unapplied inputs not yet carried into
-- the conversation's next run, so that a view reads the inputs only of a
-- run that has some.
-- inputs_n counts every input the run accepted, for the next one's n.
ALTER TABLE runs ADD COLUMN inputs_pending int NOT NULL DEFAULT 0,
    ADD COLUMN inputs_unapplied int NOT NULL DEFAULT 0,
    ADD COLUMN inputs_n int NOT NULL DEFAULT 0;

-- Its key is (run_id, n): every read of inputs is a run's (or one
-- idempotency key's), so its id, a UUIDv7 the API shows, needs no index
-- of its own.
CREATE TABLE run_inputs (
    id uuid NOT NULL,
    run_id uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id text NOT NULL,
    n int NOT NULL,
    source text NOT NULL CHECK (source IN ('client', 'hook', 'agent')),
    at_once boolean NOT NULL DEFAULT false,
    content jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied', 'unapplied')),
    step int,
    reason text,
    -- carried_to: the run of the conversation that took this unapplied
    -- input as its own input.
    carried_to uuid,
    idempotency_key text,
    request_hash text,
    created_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    applied_at timestamptz,
    PRIMARY KEY (run_id, n)
);
-- A detached sub-agent's run (its parent did not wait for it) reports its
-- end to its parent as input, or starts the parent conversation's next
-- run: reported_at marks it done, under the child's row lock, once.
ALTER TABLE runs ADD COLUMN reported_at timestamptz;
CREATE INDEX runs_unreported ON runs (parent_run_id)
    WHERE reported_at IS NULL AND (params->'parent'->>'detached') = 'true';

CREATE UNIQUE INDEX run_inputs_key ON run_inputs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- No index holds status, so that applying an input is an update in
-- place (HOT); a run's pending inputs are found through (run_id, n).

-- agentd_inputs_check raises AD002 when run's pending inputs are not the
-- expected count: the executor's write that ends the run (and marks the
-- pending inputs it knows of unapplied) must not pass an input it did not
-- know of. The write's fence holds the run's row lock already.
-- +goose StatementBegin
CREATE FUNCTION agentd_inputs_check(run uuid, expected int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    SELECT inputs_pending INTO n FROM runs WHERE id = run;
    IF n <> expected THEN
        RAISE EXCEPTION 'run % has % inputs pending, not %', run, n, expected USING ERRCODE = 'AD002';
    END IF;
END
$$;
-- +goose StatementEnd

-- agentd_inputs_apply marks run's pending inputs ids applied before step,
-- and raises AD002 when one of them is not pending: an executor's write
-- that applies inputs applies each once, or fails as a whole (the server
-- refused it, so group commit retries the other runs' writes alone).
-- +goose StatementBegin
CREATE FUNCTION agentd_inputs_apply(run uuid, ids uuid[], step int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    UPDATE run_inputs SET status = 'applied', step = agentd_inputs_apply.step, applied_at = now()
        WHERE run_id = run AND id = ANY(ids) AND status = 'pending';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(ids) THEN
        RAISE EXCEPTION 'run % had % of % inputs pending', run, n, cardinality(ids) USING ERRCODE = 'AD002';
    END IF;
    UPDATE runs SET inputs_pending = inputs_pending - n WHERE id = run;
END
$$;
-- +goose StatementEnd

-- A run whose on_answer hook asked it to go on more times than it may
-- ends with reason max_continues.
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter',
        'client_tool_calls', 'budget_exceeded', 'max_continues'));

-- +goose Down
UPDATE runs SET terminal_reason = 'completed' WHERE terminal_reason = 'max_continues';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter',
        'client_tool_calls', 'budget_exceeded'));
DROP FUNCTION agentd_inputs_apply(uuid, uuid[], int);
DROP FUNCTION agentd_inputs_check(uuid, int);
DROP TABLE run_inputs;
DROP INDEX runs_unreported;
ALTER TABLE runs DROP COLUMN reported_at, DROP COLUMN inputs_n, DROP COLUMN inputs_unapplied, DROP COLUMN inputs_pending;
