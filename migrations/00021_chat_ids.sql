-- +goose Up
-- The id an AI SDK client gives its chat: one conversation per chat and
-- tenant.
ALTER TABLE conversations ADD COLUMN chat_id text;
CREATE UNIQUE INDEX conversations_chat ON conversations (tenant_id, chat_id) WHERE chat_id IS NOT NULL;

-- +goose Down
DROP INDEX conversations_chat;
ALTER TABLE conversations DROP COLUMN chat_id;
