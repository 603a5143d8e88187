-- +goose Up
-- A model call's hold on its tenant's monthly budget (docs/usage.md):
-- before the call is made, the executor holds the call's estimated cost,
-- under a lock of the tenant's budget, if what the month spent and what
-- the calls in flight hold leave room; the write that commits the call's
-- ledger row deletes the hold. So concurrent runs see each other's calls
-- in flight, not only those already in the ledger. A run holds one row at
-- a time (its one call in flight, and what its answered calls of the step
-- cost until their rows commit). A hold counts only while its run is
-- running under the epoch that made it with a live lease: a worker that
-- died mid-call holds nothing once its lease lapses or another worker
-- claims the run, and the next hold of the tenant deletes the row.
CREATE TABLE budget_holds (
    run_id     uuid        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    epoch      bigint      NOT NULL,
    amount     numeric     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX budget_holds_tenant ON budget_holds (tenant_id);

-- +goose Down
DROP TABLE budget_holds;
