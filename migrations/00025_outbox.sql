-- +goose Up
-- Every event that tells whoever waits on a run that it stopped (its end,
-- or run.requires_action) is written with a row here, in the same
-- transaction, whichever path wrote it: the executor, a cancel or an
-- interrupt of a run nobody executes, an if_busy: interrupt. Consumers
-- (webhooks, parent runs) read the rows at least once; a row's stable
-- identity is its run and seq (the event's), its key. No other index: it
-- is written once per run's stop, on the hot path; a consumer adds what it
-- searches by. No foreign key: the row is written in the transaction that
-- fences or locks its run, and removed with it.
CREATE TABLE outbox (
    run_id      uuid NOT NULL,
    tenant_id   text NOT NULL,
    event_type  text NOT NULL CHECK (event_type IN ('run.completed', 'run.failed', 'run.cancelled', 'run.timed_out',
        'run.interrupted', 'run.requires_action')),
    seq         bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- +goose Down
DROP TABLE outbox;
