package persist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd"
)

// UnstoredPurge deletes, with their conversations, up to limit runs that
// were not to be kept (agentd.RunParams.Unstored) and ended more than
// grace ago, and returns the ids of the runs it deleted. The door that
// created such a run deletes it when it has answered; this catches those
// whose answer never finished (a client gone, an instance killed).
func (s *Store) UnstoredPurge(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	type conv struct{ tenant, id string }
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, conversation_id::text FROM runs
		WHERE (params ->> 'unstored') = 'true' AND finished_at IS NOT NULL
		AND finished_at < now() - $1 * interval '1 millisecond'
		ORDER BY finished_at LIMIT $2`, grace.Milliseconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("unstored runs: %w", translate(err))
	}
	var convs []conv
	for rows.Next() {
		var c conv
		if err := rows.Scan(&c.tenant, &c.id); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		convs = append(convs, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	var deleted []string
	for _, c := range convs {
		ids, err := s.ConversationDelete(ctx, c.tenant, c.id)
		switch {
		case errors.Is(err, agentd.ErrConversationNotFound), errors.Is(err, agentd.ErrConversationBusy):
			// Deleted meanwhile (by its door), or resumed.
		case err != nil:
			return deleted, err
		}
		deleted = append(deleted, ids...)
	}
	return deleted, nil
}
