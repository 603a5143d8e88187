-- +goose Up
-- The model a step's calls go to, when it is not the run's own: a run
-- with a fallback chain (POST /runs "models") moves a step to the next
-- model when the one before keeps failing, and the step keeps that
-- choice across a takeover. NULL is the run's model.
ALTER TABLE steps ADD COLUMN model text;

-- +goose Down
ALTER TABLE steps DROP COLUMN model;
