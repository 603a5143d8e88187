-- +goose Up
-- While a run waits for a client's decision, its total timeout is paused:
-- what was left of it is kept here, and deadline_at is the decision's
-- deadline (the run's action timeout) until the decision comes.
ALTER TABLE runs ADD COLUMN budget_left_ms bigint;

-- +goose Down
ALTER TABLE runs DROP COLUMN budget_left_ms;
