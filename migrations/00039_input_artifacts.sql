-- +goose Up
-- The images and files of a run's input are artifacts too, stored once in
-- the transaction that creates the run and its messages; a message's part
-- names its artifact (artifact_id), never holds its bytes. Such an
-- artifact belongs to the run whose input it was and to no tool call.
ALTER TABLE artifacts ALTER COLUMN tool_call_id DROP NOT NULL;

-- +goose Down
DELETE FROM artifacts WHERE tool_call_id IS NULL;
ALTER TABLE artifacts ALTER COLUMN tool_call_id SET NOT NULL;
