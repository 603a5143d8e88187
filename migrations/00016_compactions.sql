-- +goose Up
-- A compaction replaces, in what the model is sent, the messages of a
-- conversation up to covers_to_seq (all but its first user message) by a
-- summary the model wrote. The messages themselves stay.
CREATE TABLE compactions (
    id               uuid PRIMARY KEY,
    conversation_id  uuid NOT NULL REFERENCES conversations (id),
    run_id           uuid NOT NULL REFERENCES runs (id),
    step_id          uuid NOT NULL,
    covers_to_seq    integer NOT NULL,
    messages_covered integer NOT NULL,
    summary          text NOT NULL,
    tokens_before    integer NOT NULL,
    tokens_after     integer NOT NULL,
    input_tokens     bigint NOT NULL DEFAULT 0,
    output_tokens    bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX compactions_conversation ON compactions (conversation_id, covers_to_seq DESC);

-- +goose Down
DROP TABLE compactions;
