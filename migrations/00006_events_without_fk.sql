-- +goose Up
-- run_events rows are only ever written in the transaction that fences their
-- run (it updates the run's row first), and runs are never deleted, so the
-- foreign key proves nothing the writer does not; its check cost a query and
-- a row-lock WAL record per write transaction, on the hottest insert path.
-- Without it, old events can also be moved out or dropped by time
-- (partitioning, retention) without touching runs.
ALTER TABLE run_events DROP CONSTRAINT run_events_run_id_fkey;

-- +goose Down
ALTER TABLE run_events ADD CONSTRAINT run_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES runs (id);
