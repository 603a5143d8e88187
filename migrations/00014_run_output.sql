-- +goose Up
-- A completed run keeps its answer: the parts of its final assistant
-- message.
ALTER TABLE runs ADD COLUMN output jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN output;
