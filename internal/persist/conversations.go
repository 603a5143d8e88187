package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

const conversationColumns = `id, tenant_id, title, metadata, coalesce(chat_id, ''), created_at, updated_at`

func scanConversation(row pgx.Row) (agentd.Conversation, error) {
	var c agentd.Conversation
	err := row.Scan(&c.ID, &c.TenantID, &c.Title, &c.Metadata, &c.ChatID, &c.CreatedAt, &c.UpdatedAt)
	return c, translate(err)
}

// ConversationForChat returns a tenant's conversation of the chat chatID
// (an AI SDK client's id), creating it, empty, when create is set and there
// is none. ErrConversationNotFound: none, and create is not set.
func (s *Store) ConversationForChat(ctx context.Context, tenantID, chatID string, create bool) (agentd.Conversation, error) {
	get := func() (agentd.Conversation, error) {
		c, err := scanConversation(s.pool.QueryRow(ctx, `SELECT `+conversationColumns+` FROM conversations
			WHERE tenant_id = $1 AND chat_id = $2`, tenantID, chatID))
		return c, notFound(err, agentd.ErrConversationNotFound)
	}
	c, err := get()
	if !create || !errors.Is(err, agentd.ErrConversationNotFound) {
		return c, err
	}
	c, err = scanConversation(s.pool.QueryRow(ctx, `INSERT INTO conversations (id, tenant_id, title, metadata, chat_id)
		VALUES ($1, $2, '', '{}', $3) ON CONFLICT (tenant_id, chat_id) WHERE chat_id IS NOT NULL DO NOTHING
		RETURNING `+conversationColumns, newID(), tenantID, chatID))
	if errors.Is(err, agentd.ErrNotFound) { // created meanwhile
		return get()
	}
	return c, err
}

// ConversationCreate stores a new, empty conversation of a tenant.
func (s *Store) ConversationCreate(ctx context.Context, tenantID, title string, metadata json.RawMessage) (agentd.Conversation, error) {
	if len(metadata) == 0 {
		metadata = json.RawMessage(`{}`)
	}
	return scanConversation(s.pool.QueryRow(ctx, `INSERT INTO conversations (id, tenant_id, title, metadata)
		VALUES ($1, $2, $3, $4) RETURNING `+conversationColumns, newID(), tenantID, title, []byte(metadata)))
}

// ConversationList returns a page of a tenant's conversations, newest
// first; from the read replica when p.MayLag and it is fresh.
func (s *Store) ConversationList(ctx context.Context, p agentd.ConversationListParams) ([]agentd.Conversation, error) {
	var filter []byte
	if len(p.Metadata) > 0 {
		var err error
		if filter, err = json.Marshal(p.Metadata); err != nil {
			return nil, err
		}
	}
	return lagging(ctx, s, p.MayLag, func(q querier) ([]agentd.Conversation, error) {
		return queryAll(ctx, q, scanConversation, `SELECT `+conversationColumns+` FROM conversations
		WHERE tenant_id = $1 AND ($2::jsonb IS NULL OR metadata @> $2::jsonb) AND ($3 = '' OR id < $3::uuid)
		AND ($5 = '' OR chat_id = $5)
		ORDER BY id DESC LIMIT $4`, p.TenantID, filter, p.Before, p.Limit, p.ChatID)
	})
}

// ConversationUpdate sets a tenant's conversation's title and metadata,
// each when not nil. ErrConversationNotFound: none of the tenant's has id.
func (s *Store) ConversationUpdate(ctx context.Context, tenantID, id string, title *string, metadata json.RawMessage) (agentd.Conversation, error) {
	var md []byte
	if metadata != nil {
		md = metadata
	}
	c, err := scanConversation(s.pool.QueryRow(ctx, `UPDATE conversations SET
		title = coalesce($3, title), metadata = coalesce($4::jsonb, metadata), updated_at = now()
		WHERE id = $1 AND tenant_id = $2 RETURNING `+conversationColumns, id, tenantID, title, md))
	return c, notFound(err, agentd.ErrConversationNotFound)
}

// ConversationDelete removes a tenant's conversation and everything under
// it (its messages, its runs with their steps, tool calls, attempts and
// events) in one transaction, and returns the ids of the runs it removed,
// whose streams must end. ErrConversationBusy: a run of it is in progress;
// ErrConversationNotFound: none of the tenant's has id.
func (s *Store) ConversationDelete(ctx context.Context, tenantID, id string) (runIDs []string, err error) {
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var found string
		err := tx.QueryRow(ctx, `SELECT id FROM conversations WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID).Scan(&found)
		if errors.Is(translate(err), agentd.ErrNotFound) {
			return agentd.ErrConversationNotFound
		}
		if err != nil {
			return translate(err)
		}
		var busy bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE conversation_id = $1
			AND status IN ('queued', 'running', 'requires_action'))`, id).Scan(&busy); err != nil {
			return translate(err)
		}
		if busy {
			return agentd.ErrConversationBusy
		}
		const runs = `(SELECT id FROM runs WHERE conversation_id = $1)`
		for _, q := range []string{
			`DELETE FROM artifacts WHERE conversation_id = $1`,
			`DELETE FROM tool_attempts WHERE tool_call_id IN (SELECT id FROM tool_calls WHERE run_id IN ` + runs + `)`,
			`DELETE FROM tool_calls WHERE run_id IN ` + runs,
			`DELETE FROM steps WHERE run_id IN ` + runs,
			`DELETE FROM run_events WHERE run_id IN ` + runs,
			`DELETE FROM outbox WHERE run_id IN ` + runs,
			`DELETE FROM messages WHERE conversation_id = $1`,
			`DELETE FROM compactions WHERE conversation_id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return fmt.Errorf("delete conversation: %w", translate(err))
			}
		}
		if runIDs, err = queryAll(ctx, tx, scanString, `DELETE FROM runs WHERE conversation_id = $1 RETURNING id`, id); err != nil {
			return fmt.Errorf("delete conversation: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM conversations WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete conversation: %w", translate(err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return runIDs, nil
}
