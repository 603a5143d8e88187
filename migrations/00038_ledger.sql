-- +goose Up
-- The cost ledger (docs/usage.md). A row is one model call: a step's call
-- (each continuation of a cut answer is a call of its own) or a
-- compaction's, written in the executor's transaction that commits what
-- the call produced, so that a call counts once with its output or not at
-- all. Its key is the call's place in its run (step, kind, its number
-- within the step): a write made again (a retry after a lost answer, a
-- takeover) inserts nothing. Rows have no foreign key to runs and nothing
-- deletes them with a run, a conversation or the retention's pass: usage
-- outlives the runs it was spent on. model_calls_tenant serves GET /usage
-- for a tenant and the tail of a month's spend (cost included, for an
-- index-only sum); the BRIN index serves the admin's reports over every
-- tenant at the cost of a few pages.
CREATE TABLE model_calls (
    tenant_id           text        NOT NULL,
    run_id              uuid        NOT NULL,
    step_id             uuid,
    step_seq            integer     NOT NULL,
    n                   integer     NOT NULL,
    kind                text        NOT NULL CHECK (kind IN ('step', 'compaction')),
    model               text        NOT NULL,
    provider            text        NOT NULL,
    upstream_model      text,
    agent               text,
    input_tokens        bigint      NOT NULL,
    cached_input_tokens bigint      NOT NULL,
    cache_write_tokens  bigint      NOT NULL,
    output_tokens       bigint      NOT NULL,
    reasoning_tokens    bigint      NOT NULL,
    price_version       text,
    cost                numeric     NOT NULL,
    fallback_from       text,
    fallback_reason     text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- The call's place is its key: no surrogate id, one index fewer per
    -- row (about 100 bytes of WAL a call).
    PRIMARY KEY (run_id, step_seq, kind, n)
);
CREATE INDEX model_calls_tenant ON model_calls (tenant_id, created_at) INCLUDE (cost);
CREATE INDEX model_calls_time ON model_calls USING brin (created_at);

-- A tenant's spend of a month, summed up to a watermark: cost is the sum
-- of the month's ledger rows created before through, and a month's spend
-- is that plus the rows from through on (a short range of the tenant's
-- index). The watermark moves only over rows older than any write
-- transaction can be, so that no row commits behind it; inserts never
-- touch this row, so one tenant's concurrent calls never wait on it.
CREATE TABLE tenant_spend (
    tenant_id  text        NOT NULL,
    month      timestamptz NOT NULL, -- the month's first instant, UTC
    through    timestamptz NOT NULL,
    cost       numeric     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, month)
);

-- A tenant's own monthly budget, set by an admin; without a row the
-- server's default (AGENTD_TENANT_MONTHLY_BUDGET) applies. 0: none.
CREATE TABLE tenant_budgets (
    tenant_id  text        PRIMARY KEY,
    monthly    numeric     NOT NULL,
    updated_by text,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A run's cost counts its sub-agents' runs, found through their parent.
CREATE INDEX runs_children ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter',
        'client_tool_calls', 'budget_exceeded'));

-- +goose Down
UPDATE runs SET terminal_reason = 'model_error' WHERE terminal_reason = 'budget_exceeded';
ALTER TABLE runs DROP CONSTRAINT runs_terminal_reason_check,
    ADD CONSTRAINT runs_terminal_reason_check CHECK (terminal_reason IN ('completed', 'max_steps', 'cancelled',
        'timed_out_total', 'timed_out_step', 'model_error', 'tool_error', 'context_overflow', 'interrupted',
        'storage_error', 'no_progress', 'tool_limit', 'loop_detected', 'max_output_tokens', 'content_filter',
        'client_tool_calls'));
DROP INDEX runs_children;
DROP TABLE tenant_budgets;
DROP TABLE tenant_spend;
DROP TABLE model_calls;
