-- +goose Up
-- Webhooks out. A tenant's subscriptions (POST /webhooks) name a URL, the
-- event types it wants and its signing secret (sealed). Each outbox row is
-- dispatched once (dispatched_at, in the transaction that writes its
-- deliveries): a delivery per subscription that wants its event type, and
-- one for the run's own webhook URL; the partial index finds the rows not
-- dispatched yet, few at any time. A delivery's id is the webhook-id its
-- receiver deduplicates by, the same for each of its attempts; its payload
-- and its sealed secret are copied into it, so that every attempt sends
-- the same bytes under the same key. Instances share the due deliveries
-- with SKIP LOCKED: a claim pushes next_attempt_at past the attempt's
-- timeout, so that an instance's death leaves the delivery due again.
-- Neither table has a foreign key to runs: a delivery outlives its run.
ALTER TABLE outbox ADD COLUMN dispatched_at timestamptz;
UPDATE outbox SET dispatched_at = now();
CREATE INDEX outbox_undispatched ON outbox (created_at) WHERE dispatched_at IS NULL;

CREATE TABLE webhooks (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL,
    url           text NOT NULL,
    events        text[] NOT NULL,
    sealed_secret text NOT NULL,
    description   text NOT NULL DEFAULT '',
    created_by    text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL,
    webhook_id      uuid REFERENCES webhooks ON DELETE CASCADE, -- NULL: the run's own webhook
    url             text NOT NULL,
    sealed_secret   text NOT NULL,
    event_type      text NOT NULL,
    run_id          uuid,
    seq             bigint,
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    horizon_from    timestamptz NOT NULL DEFAULT now(), -- retries stop a horizon after it (its creation, or a redelivery)
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_of ON webhook_deliveries (webhook_id, created_at DESC, id) WHERE webhook_id IS NOT NULL;
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE webhook_attempts (
    delivery_id uuid NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
    n           int NOT NULL,
    started_at  timestamptz NOT NULL,
    status_code int,
    latency_ms  int NOT NULL,
    error       text,
    PRIMARY KEY (delivery_id, n)
);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP INDEX outbox_undispatched;
ALTER TABLE outbox DROP COLUMN dispatched_at;
