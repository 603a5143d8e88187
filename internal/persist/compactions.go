package persist

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

const compactionColumns = `id, conversation_id, run_id, step_id, covers_to_seq, messages_covered, summary,
	tokens_before, tokens_after, input_tokens, output_tokens, created_at`

func scanCompaction(row pgx.Row) (agentd.Compaction, error) {
	var c agentd.Compaction
	err := row.Scan(&c.ID, &c.ConversationID, &c.RunID, &c.StepID, &c.CoversToSeq, &c.MessagesCovered, &c.Summary,
		&c.TokensBefore, &c.TokensAfter, &c.InputTokens, &c.OutputTokens, &c.CreatedAt)
	return c, translate(err)
}

// CompactionInsert commits a compaction, with the executor's other writes.
type CompactionInsert struct {
	agentd.Compaction
}

func (o CompactionInsert) queue(b *batch) error {
	c := o.Compaction
	b.exec("insert compaction", `INSERT INTO compactions (id, conversation_id, run_id, step_id, covers_to_seq,
		messages_covered, summary, tokens_before, tokens_after, input_tokens, output_tokens)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, c.ID, c.ConversationID, c.RunID, c.StepID, c.CoversToSeq,
		c.MessagesCovered, c.Summary, c.TokensBefore, c.TokensAfter, c.InputTokens, c.OutputTokens)
	b.exec("reset compaction failures", `UPDATE conversations SET compaction_failures = 0
		WHERE id = $1 AND compaction_failures <> 0`, c.ConversationID)
	return nil
}

// CompactionFailed counts a failed compaction of a conversation.
type CompactionFailed struct {
	ConversationID string
}

func (o CompactionFailed) queue(b *batch) error {
	b.exec("count compaction failure", `UPDATE conversations SET compaction_failures = compaction_failures + 1
		WHERE id = $1`, o.ConversationID)
	return nil
}

// latestCompaction is the query of a conversation's latest compaction.
const latestCompaction = `SELECT ` + compactionColumns + ` FROM compactions WHERE conversation_id = $1
	ORDER BY covers_to_seq DESC, created_at DESC LIMIT 1`

// CompactionLatest returns the latest compaction of a conversation, or
// ErrNotFound when it has none.
func (s *Store) CompactionLatest(ctx context.Context, conversationID string) (agentd.Compaction, error) {
	return scanCompaction(s.pool.QueryRow(ctx, latestCompaction, conversationID))
}

// ContextWindow says what the model is sent of a conversation's messages:
// the seq up to which its latest compaction stands for them (0: none), and
// the seq of its first completed user message, which is always sent.
func (s *Store) ContextWindow(ctx context.Context, conversationID string) (coversTo, firstUser int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
		coalesce((SELECT covers_to_seq FROM compactions WHERE conversation_id = $1 ORDER BY covers_to_seq DESC LIMIT 1), 0),
		coalesce((SELECT min(seq) FROM messages WHERE conversation_id = $1 AND role = 'user' AND status = 'completed'), 0)`,
		conversationID).Scan(&coversTo, &firstUser)
	return coversTo, firstUser, translate(err)
}
