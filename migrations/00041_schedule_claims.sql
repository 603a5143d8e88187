-- +goose Up
-- A claim on a due schedule (docs/schedules.md): an instance claims due
-- schedules in a short transaction, composes each slot's run outside any
-- transaction, then fires the slot in a transaction that checks the claim
-- is still its own (claim_id) and next_at unchanged. claimed_until is the
-- claim's lease: past it, another instance may claim the schedule, which
-- sets a new claim_id and so voids the first claim. The claiming instance
-- extends the lease of the claims it works on, found by their claim_id.
ALTER TABLE schedules ADD COLUMN claim_id uuid, ADD COLUMN claimed_until timestamptz;
CREATE INDEX schedules_claimed ON schedules (claim_id) WHERE claim_id IS NOT NULL;

-- +goose Down
DROP INDEX schedules_claimed;
ALTER TABLE schedules DROP COLUMN claim_id, DROP COLUMN claimed_until;
