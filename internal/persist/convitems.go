package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// This file holds the writes of a conversation's messages made outside any
// run (OpenAI's Conversations API adds items and deletes them). They take
// the conversation's row lock first, as a run's creation and resume do
// (createInConversation, RunResume), and refuse a conversation with a run
// in flight: nothing can then write to it until they commit, so a message
// added here is numbered after everything of the turns before it and a
// run that starts later loads it, and no run ever loses one of its
// messages while it executes.

// ConversationCreateWith stores a new conversation of a tenant with its
// first messages (completed, of no run, numbered from 1), in one
// transaction, and returns both.
func (s *Store) ConversationCreateWith(ctx context.Context, tenantID string, metadata json.RawMessage,
	msgs []agentd.InputMessage) (agentd.Conversation, []agentd.Message, error) {
	if len(metadata) == 0 {
		metadata = json.RawMessage(`{}`)
	}
	var c agentd.Conversation
	var stored []agentd.Message
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		if c, err = scanConversation(tx.QueryRow(ctx, `INSERT INTO conversations (id, tenant_id, title, metadata)
			VALUES ($1, $2, '', $3) RETURNING `+conversationColumns, newID(), tenantID, []byte(metadata))); err != nil {
			return fmt.Errorf("create conversation: %w", err)
		}
		stored, err = appendMessages(ctx, tx, c.ID, msgs)
		return err
	})
	if err != nil {
		return agentd.Conversation{}, nil, err
	}
	return c, stored, nil
}

// MessagesAppend appends msgs to a tenant's conversation outside any run:
// completed, of no run, numbered after its last message, all in one
// transaction. It returns them as stored, in order.
//
// ErrConversationNotFound: none of the tenant's has id; a *BusyError: a
// run of it is in flight (queued, running or waiting for a client); a
// *PendingCallsError (Missing, MissingApprovals): its latest run ended at
// client tool calls (ReasonClientToolCalls) that wait for their outputs or
// approvals, which the next run must bring, right after the calls.
func (s *Store) MessagesAppend(ctx context.Context, tenantID, conversationID string, msgs []agentd.InputMessage) ([]agentd.Message, error) {
	var stored []agentd.Message
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := lockIdle(ctx, tx, tenantID, conversationID); err != nil {
			return err
		}
		// A call waiting for its output is named by its call id, one
		// waiting for an approval by its tool call id.
		rows, err := tx.Query(ctx, `SELECT tc.status, tc.call_id, tc.id::text FROM tool_calls tc
			JOIN steps s ON s.id = tc.step_id JOIN runs r ON r.id = s.run_id
			WHERE r.conversation_id = $1 AND r.terminal_reason = 'client_tool_calls'
			AND tc.status IN ('awaiting_client', 'awaiting_approval')
			ORDER BY s.seq, tc.position`, conversationID)
		if err != nil {
			return fmt.Errorf("pending client calls: %w", err)
		}
		perr := &agentd.PendingCallsError{}
		for rows.Next() {
			var status agentd.CallStatus
			var callID, id string
			if err := rows.Scan(&status, &callID, &id); err != nil {
				rows.Close()
				return translate(err)
			}
			if status == agentd.CallAwaitingClient {
				perr.Missing = append(perr.Missing, callID)
			} else {
				perr.MissingApprovals = append(perr.MissingApprovals, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("pending client calls: %w", translate(err))
		}
		if !perr.Empty() {
			return perr
		}
		stored, err = appendMessages(ctx, tx, conversationID, msgs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return stored, nil
}

// MessageDelete removes a message of a tenant's conversation, outside any
// run, and returns the conversation. keep is given the message as stored
// and says what of it stays: nothing (nil or empty: the row goes) or the
// parts that replace its content; an error of keep refuses the delete and
// is returned as it is.
//
// Every compaction whose summary stands for the message (covers_to_seq at
// or past its seq) goes with it, so that the model is never sent a summary
// of what was deleted: the conversation's next run compacts again if it
// outgrows its window. The other messages keep their seq: a seq names one
// message for good (a client's cursor stays valid), and the conversation's
// numbers have a gap where the message was.
//
// ErrConversationNotFound: none of the tenant's has conversationID;
// ErrNotFound: it has no message messageID; a *BusyError: a run of it is
// in flight.
func (s *Store) MessageDelete(ctx context.Context, tenantID, conversationID, messageID string,
	keep func(agentd.Message) ([]agentd.Part, error)) (agentd.Conversation, error) {
	var c agentd.Conversation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := lockIdle(ctx, tx, tenantID, conversationID); err != nil {
			return err
		}
		m, err := scanMessage(tx.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages
			WHERE conversation_id = $1 AND id = $2`, conversationID, messageID))
		if err != nil {
			return err
		}
		parts, err := keep(m)
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			_, err = tx.Exec(ctx, `DELETE FROM messages WHERE conversation_id = $1 AND seq = $2`, conversationID, m.Seq)
		} else {
			var content []byte
			if content, err = json.Marshal(parts); err != nil {
				return fmt.Errorf("encode message: %w", err)
			}
			_, err = tx.Exec(ctx, `UPDATE messages SET content = $3 WHERE conversation_id = $1 AND seq = $2`,
				conversationID, m.Seq, content)
		}
		if err != nil {
			return fmt.Errorf("delete message: %w", translate(err))
		}
		if _, err := tx.Exec(ctx, `DELETE FROM compactions WHERE conversation_id = $1 AND covers_to_seq >= $2`,
			conversationID, m.Seq); err != nil {
			return fmt.Errorf("drop compactions: %w", translate(err))
		}
		c, err = scanConversation(tx.QueryRow(ctx, `UPDATE conversations SET updated_at = now() WHERE id = $1
			RETURNING `+conversationColumns, conversationID))
		return err
	})
	if err != nil {
		return agentd.Conversation{}, err
	}
	return c, nil
}

// lockIdle locks a tenant's conversation, as a run's creation does
// (makeRoom), and checks that no run of it is in flight.
// ErrConversationNotFound, or a *BusyError naming the first run in flight.
func lockIdle(ctx context.Context, tx pgx.Tx, tenantID, conversationID string) (agentd.Conversation, error) {
	c, err := scanConversation(tx.QueryRow(ctx, `SELECT `+conversationColumns+` FROM conversations
		WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, conversationID, tenantID))
	if err != nil {
		return c, fmt.Errorf("lock conversation: %w", notFound(err, agentd.ErrConversationNotFound))
	}
	var busy string
	err = tx.QueryRow(ctx, `SELECT id FROM runs WHERE conversation_id = $1
		AND status IN ('queued', 'running', 'requires_action') ORDER BY id LIMIT 1`, conversationID).Scan(&busy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, nil
	case err != nil:
		return c, fmt.Errorf("busy check: %w", translate(err))
	}
	return c, &agentd.BusyError{RunID: busy}
}

// appendMessages appends msgs to a conversation whose row the transaction
// holds (locked, or inserted by it), numbered from its counter on in
// their order, in one statement, and returns them as stored, in order.
func appendMessages(ctx context.Context, tx pgx.Tx, conversationID string, msgs []agentd.InputMessage) ([]agentd.Message, error) {
	ids := make([]string, len(msgs))
	roles := make([]string, len(msgs))
	contents := make([]string, len(msgs))
	for i, m := range msgs {
		b, err := json.Marshal(inputParts(m))
		if err != nil {
			return nil, fmt.Errorf("encode message: %w", err)
		}
		ids[i], roles[i], contents[i] = newID(), string(m.Role), string(b)
	}
	stored, err := queryAll(ctx, tx, scanMessage, `WITH n AS (
			UPDATE conversations SET next_seq = next_seq + $2, updated_at = now() WHERE id = $1
			RETURNING next_seq - $2 AS first
		)
		INSERT INTO messages (id, conversation_id, run_id, seq, role, content, status)
		SELECT m.id::uuid, $1, NULL, (n.first + m.k - 1)::int, m.role, m.content::jsonb, 'completed'
		FROM n, unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS m (id, role, content, k)
		RETURNING `+messageColumns, conversationID, len(msgs), ids, roles, contents)
	if err != nil {
		return nil, fmt.Errorf("append messages: %w", err)
	}
	if len(stored) != len(msgs) {
		return nil, fmt.Errorf("append messages: %d of %d stored: %w", len(stored), len(msgs), agentd.ErrConversationNotFound)
	}
	slices.SortFunc(stored, func(a, b agentd.Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return stored, nil
}

// inputParts is the content an input message is stored with, as a run's
// input is (queueRun): a text; the output of a call; or an assistant's
// text and calls.
func inputParts(m agentd.InputMessage) []agentd.Part {
	switch {
	case m.Role == agentd.RoleTool:
		return []agentd.Part{{Type: agentd.PartToolResult, ToolCallID: m.ToolCallID, Content: m.Content}}
	case len(m.ToolCalls) > 0:
		var parts []agentd.Part
		if m.Content != "" {
			parts = append(parts, agentd.Part{Type: agentd.PartText, Text: m.Content})
		}
		for _, tc := range m.ToolCalls {
			parts = append(parts, agentd.Part{Type: agentd.PartToolCall, ID: tc.ID, Name: tc.Name,
				Arguments: cmp.Or(tc.Arguments, "{}")})
		}
		return parts
	}
	return []agentd.Part{{Type: agentd.PartText, Text: m.Content}}
}
