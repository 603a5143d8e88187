-- +goose Up
-- The operator's policy decision on a call (allow, deny, require_approval),
-- when a policy decided.
ALTER TABLE tool_calls ADD COLUMN policy jsonb;

-- +goose Down
ALTER TABLE tool_calls DROP COLUMN policy;
