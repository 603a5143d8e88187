-- +goose Up
-- A tenant's schedules (POST /schedules, docs/schedules.md): a cron
-- expression in a time zone, and the body of POST /runs that each of its
-- slots starts. next_at is the next slot to fire; the instances take due
-- schedules with FOR UPDATE SKIP LOCKED and advance next_at in the
-- transaction that creates the slot's run, whose row names the schedule and
-- the slot: the unique index on runs is one run per slot, whatever crashes.
-- last_run_id is the latest run a slot started (what overlap looks at);
-- counted_through is the latest slot whose run's end was counted towards
-- consecutive_failures, which pause the schedule past their limit.
CREATE TABLE schedules (
    id                   uuid        PRIMARY KEY,
    tenant_id            text        NOT NULL,
    name                 text        NOT NULL,
    cron                 text        NOT NULL,
    timezone             text        NOT NULL,
    run                  jsonb       NOT NULL,
    overlap              text        NOT NULL CHECK (overlap IN ('skip', 'enqueue', 'allow')),
    catch_up             text        NOT NULL CHECK (catch_up IN ('skip', 'one')),
    paused               boolean     NOT NULL DEFAULT false,
    paused_reason        text,
    next_at              timestamptz NOT NULL,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    last_error           text,
    last_run_id          uuid,
    last_slot            timestamptz,
    counted_through      timestamptz,
    created_by           text        NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;
CREATE INDEX schedules_uncounted ON schedules (id) WHERE last_slot IS DISTINCT FROM counted_through;

ALTER TABLE runs ADD COLUMN schedule_id uuid, ADD COLUMN scheduled_for timestamptz;
CREATE UNIQUE INDEX runs_schedule_slot ON runs (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL;

-- +goose Down
DROP INDEX runs_schedule_slot;
ALTER TABLE runs DROP COLUMN schedule_id, DROP COLUMN scheduled_for;
DROP TABLE schedules;
