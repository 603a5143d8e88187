-- +goose Up
-- Evaluations (docs/evals.md): an agent's versions run on the cases of a
-- version of a dataset. An evaluation's row says what it runs and where it
-- is; each case, version and repetition is a row of eval_runs, made with
-- the evaluation, whose run_id is set in the transaction that creates its
-- run (so each is made once, whatever instance makes it or dies) and
-- whose scores are set once its run stopped.
--
-- The driver that makes and scores them takes an evaluation for a lease
-- (lease_owner, lease_until) for one pass; a pass that dies leaves it to
-- the next instance when the lease ends.
CREATE TABLE evals (
    id              uuid        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    agent           text        NOT NULL,
    versions        text[]      NOT NULL,
    baseline        text        NOT NULL,
    candidate       jsonb,
    dataset         text        NOT NULL,
    dataset_version integer     NOT NULL,
    repeat          integer     NOT NULL,
    concurrency     integer     NOT NULL,
    status          text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'cancelled', 'failed')),
    error           text        NOT NULL DEFAULT '',
    metadata        jsonb,
    actor           text        NOT NULL,
    runs            integer     NOT NULL,
    scored          integer     NOT NULL DEFAULT 0,
    lease_owner     text,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX evals_tenant ON evals (tenant_id, created_at DESC, id);
CREATE INDEX evals_running ON evals (lease_until NULLS FIRST) WHERE status = 'running';

CREATE TABLE eval_runs (
    eval_id   uuid        NOT NULL REFERENCES evals (id) ON DELETE CASCADE,
    case_seq  integer     NOT NULL,
    case_id   text        NOT NULL,
    version   text        NOT NULL,
    rep       integer     NOT NULL,
    run_id    uuid UNIQUE,
    passed    boolean,
    scores    jsonb,
    scored_at timestamptz,
    PRIMARY KEY (eval_id, case_seq, version, rep)
);

-- +goose Down
DROP TABLE eval_runs;
DROP TABLE evals;
