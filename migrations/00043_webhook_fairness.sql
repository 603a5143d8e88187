-- +goose Up
-- The claim takes the due deliveries tenants in turn, and each tenant's
-- URLs in turn: it numbers them in each (tenant, URL) queue, which this
-- index gives in order, without sorting however many are due.
CREATE INDEX webhook_deliveries_turns ON webhook_deliveries (tenant_id, url, next_attempt_at, id) WHERE status = 'pending';

-- A subscription whose every attempt has failed for a long time
-- (AGENTD_WEBHOOK_DISABLE_AFTER) is disabled, as Standard Webhooks'
-- senders do: failing_since is the start of the first failed attempt
-- since the last delivered one (NULL: the last one was delivered, or none
-- failed), disabled_at and disabled_reason say when and why it was
-- disabled (NULL: enabled). Deliveries to a disabled subscription end
-- failed as they come due; the tenant re-enables it (PATCH
-- /webhooks/{id}), which clears all three.
ALTER TABLE webhooks ADD COLUMN failing_since timestamptz,
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN disabled_reason text;

-- +goose Down
DROP INDEX webhook_deliveries_turns;
ALTER TABLE webhooks DROP COLUMN failing_since, DROP COLUMN disabled_at, DROP COLUMN disabled_reason;
