-- +goose Up
-- Memory extraction (docs/memory.md, "Extraction"): a job per run that
-- completed and asked for memory.extract, made when its outbox row is
-- dispatched (in the dispatching transaction, off the run's end), at most
-- one per run (run_id is unique). Instances share the due jobs with SKIP
-- LOCKED. A claim counts the attempt and sets the job running, with
-- next_attempt_at pushed past its lease: an instance that dies leaves the
-- job due again then, and the next claim counts the next attempt. An
-- attempt writes its items, the job's end and its model call's ledger row
-- in one transaction that checks the job still has its attempt's count
-- (the fence): a crash before its commit writes nothing, and an attempt
-- whose lease was taken over writes nothing.
--
-- namespace is the run's extract namespace in its path form (as memory's
-- tables keep it); model is NULL until the first attempt chose the
-- server's default for a run that named none. No foreign key to runs: the
-- job outlives its run, as the memory it wrote does.
CREATE TABLE memory_extractions (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL,
    run_id          uuid NOT NULL UNIQUE,
    namespace       text COLLATE "C" NOT NULL,
    model           text,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts        int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_by       text,
    error           text,
    items           int NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX memory_extractions_due ON memory_extractions (next_attempt_at) WHERE status IN ('pending', 'running');
CREATE INDEX memory_extractions_tenant ON memory_extractions (tenant_id, created_at DESC, id DESC);

-- An extraction's model call is a row of the ledger of its own kind.
ALTER TABLE model_calls DROP CONSTRAINT model_calls_kind_check,
    ADD CONSTRAINT model_calls_kind_check CHECK (kind IN ('step', 'compaction', 'extraction'));

-- +goose Down
-- The calls stay in the ledger (and in the months' spend), counted as
-- calls of a step 0, which no run has.
UPDATE model_calls SET kind = 'step' WHERE kind = 'extraction';
ALTER TABLE model_calls DROP CONSTRAINT model_calls_kind_check,
    ADD CONSTRAINT model_calls_kind_check CHECK (kind IN ('step', 'compaction'));
DROP TABLE memory_extractions;
