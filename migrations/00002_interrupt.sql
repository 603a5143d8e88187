-- +goose Up
-- Set when the client of a run's stream went away and the run asked to be
-- interrupted then (on_disconnect: interrupt); the executor stops at its next
-- safe point and the run becomes interrupted.
ALTER TABLE runs ADD COLUMN interrupt_requested_at timestamptz;

-- +goose Down
ALTER TABLE runs DROP COLUMN interrupt_requested_at;
