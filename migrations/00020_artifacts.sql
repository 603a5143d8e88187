-- +goose Up
-- A tool result too large to show the model whole is kept here as it was;
-- the call's result is a preview that names the artifact. One per call.
CREATE TABLE artifacts (
    id              uuid PRIMARY KEY,
    tenant_id       text NOT NULL,
    conversation_id uuid NOT NULL REFERENCES conversations (id),
    run_id          uuid NOT NULL REFERENCES runs (id),
    tool_call_id    uuid NOT NULL UNIQUE REFERENCES tool_calls (id),
    media_type      text NOT NULL,
    size            bigint NOT NULL,
    sha256          text NOT NULL,
    content         bytea NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX artifacts_conversation ON artifacts (conversation_id);
CREATE INDEX artifacts_run ON artifacts (run_id);

-- +goose Down
DROP TABLE artifacts;
