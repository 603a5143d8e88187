-- +goose Up
-- A message is read by its conversation and seq, never by its id alone (ids
-- are UUIDv7s the server makes, unique by construction), so the primary key
-- is (conversation_id, seq) and the id has no index of its own: one index
-- entry fewer per message.
ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages DROP CONSTRAINT messages_conversation_seq,
    ADD CONSTRAINT messages_pkey PRIMARY KEY (conversation_id, seq);

-- +goose Down
ALTER TABLE messages DROP CONSTRAINT messages_pkey,
    ADD CONSTRAINT messages_conversation_seq UNIQUE (conversation_id, seq);
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (id);
