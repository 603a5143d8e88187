package persist

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/lifecycle"
)

// RetentionStats says what a retention pass removed.
type RetentionStats struct {
	Conversations   int
	Runs            int
	IdempotencyKeys int
	Deliveries      int // webhook deliveries that had finished (delivered or failed)
}

// retentionBatch is how many conversations one transaction of a pass
// removes: small, so that each holds its locks briefly.
const retentionBatch = 50

// RetentionPass removes what ended before horizon: every conversation
// none of whose runs is in progress or newer than horizon (by its end, or
// its creation while it has not ended), with everything that belongs to it
// (runs, steps, tool calls and attempts, events, messages, compactions,
// artifacts); the idempotency keys recorded before horizon; and the
// webhook deliveries that finished before it, with their attempts. A
// conversation with a run newer than horizon keeps all its history. It
// works in transactions of at most 50 conversations, oldest first, and
// skips rows another transaction holds (a run being created or resumed):
// it never waits for a lock a running run needs.
func (s *Store) RetentionPass(ctx context.Context, horizon time.Time) (RetentionStats, error) {
	var st RetentionStats
	after := "00000000-0000-0000-0000-000000000000"
	for {
		var ids []string
		var runs int
		from := after
		after = "" // set when a full batch says there may be more
		err := s.tx(ctx, func(tx pgx.Tx) error {
			var err error
			ids, err = queryAll(ctx, tx, scanString, `SELECT c.id::text FROM conversations c
				WHERE c.id > $1::uuid AND c.created_at < $2 AND c.updated_at < $2
				  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.conversation_id = c.id
				    AND (r.finished_at IS NULL OR r.finished_at >= $2))
				ORDER BY c.id LIMIT $3 FOR UPDATE SKIP LOCKED`, from, horizon, retentionBatch)
			if err != nil || len(ids) == 0 {
				return err
			}
			if len(ids) == retentionBatch {
				after = ids[len(ids)-1]
			}
			// With the conversations locked, no run can be created in them.
			// Their runs are locked and checked again: one resumed or
			// locked since the select keeps its conversation.
			if ids, err = s.stillOld(ctx, tx, ids, horizon); err != nil || len(ids) == 0 {
				return err
			}
			const runsOf = `(SELECT id FROM runs WHERE conversation_id = ANY($1::uuid[]))`
			for _, q := range []string{
				`DELETE FROM artifacts WHERE conversation_id = ANY($1::uuid[])`,
				`DELETE FROM tool_attempts WHERE tool_call_id IN (SELECT id FROM tool_calls WHERE run_id IN ` + runsOf + `)`,
				`DELETE FROM tool_calls WHERE run_id IN ` + runsOf,
				`DELETE FROM steps WHERE run_id IN ` + runsOf,
				`DELETE FROM run_events WHERE run_id IN ` + runsOf,
				`DELETE FROM outbox WHERE run_id IN ` + runsOf,
				`DELETE FROM messages WHERE conversation_id = ANY($1::uuid[])`,
				`DELETE FROM compactions WHERE conversation_id = ANY($1::uuid[])`,
			} {
				if _, err := tx.Exec(ctx, q, ids); err != nil {
					return fmt.Errorf("retention: %w", translate(err))
				}
			}
			tag, err := tx.Exec(ctx, `DELETE FROM runs WHERE conversation_id = ANY($1::uuid[])`, ids)
			if err != nil {
				return fmt.Errorf("retention: %w", translate(err))
			}
			runs = int(tag.RowsAffected())
			if _, err := tx.Exec(ctx, `DELETE FROM conversations WHERE id = ANY($1::uuid[])`, ids); err != nil {
				return fmt.Errorf("retention: %w", translate(err))
			}
			return nil
		})
		if err != nil {
			return st, err
		}
		st.Conversations += len(ids)
		st.Runs += runs
		if after == "" {
			break
		}
	}
	var err error
	if st.IdempotencyKeys, err = s.deleteOld(ctx, "idempotency keys", `DELETE FROM idempotency_keys WHERE ctid IN (
		SELECT ctid FROM idempotency_keys WHERE created_at < $1 LIMIT 1000 FOR UPDATE SKIP LOCKED)`, horizon); err != nil {
		return st, err
	}
	st.Deliveries, err = s.deleteOld(ctx, "webhook deliveries", `DELETE FROM webhook_deliveries WHERE id IN (
		SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < $1 LIMIT 1000 FOR UPDATE SKIP LOCKED)`,
		horizon)
	return st, err
}

// deleteOld runs del, a DELETE of at most 1000 rows older than horizon,
// until it deletes fewer, and returns how many rows it deleted.
func (s *Store) deleteOld(ctx context.Context, what, del string, horizon time.Time) (int, error) {
	n := 0
	for {
		tag, err := s.pool.Exec(ctx, del, horizon)
		if err != nil {
			return n, fmt.Errorf("retention: %s: %w", what, translate(err))
		}
		n += int(tag.RowsAffected())
		if tag.RowsAffected() < 1000 {
			return n, nil
		}
	}
}

// stillOld returns those of the conversations ids, which the caller has
// locked, whose runs all ended before horizon, as the runs are once
// locked too; a conversation with a run another transaction holds is
// left for a later pass.
func (s *Store) stillOld(ctx context.Context, tx pgx.Tx, ids []string, horizon time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT conversation_id::text, finished_at IS NOT NULL AND finished_at < $2
		FROM runs WHERE conversation_id = ANY($1::uuid[]) FOR UPDATE SKIP LOCKED`, ids, horizon)
	if err != nil {
		return nil, translate(err)
	}
	locked := map[string]int{}
	keep := map[string]bool{}
	for rows.Next() {
		var conv string
		var old bool
		if err := rows.Scan(&conv, &old); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		locked[conv]++
		if !old {
			keep[conv] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	counts, err := tx.Query(ctx, `SELECT conversation_id::text, count(*) FROM runs
		WHERE conversation_id = ANY($1::uuid[]) GROUP BY conversation_id`, ids)
	if err != nil {
		return nil, translate(err)
	}
	for counts.Next() {
		var conv string
		var n int
		if err := counts.Scan(&conv, &n); err != nil {
			counts.Close()
			return nil, translate(err)
		}
		if n != locked[conv] {
			keep[conv] = true // a run of it is held: not now
		}
	}
	counts.Close()
	if err := counts.Err(); err != nil {
		return nil, translate(err)
	}
	out := ids[:0]
	for _, id := range ids {
		if !keep[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// Retention runs a RetentionPass between Start and Stop: the first at
// once, then one every interval, each removing what ended longer ago than
// keep. A pass under way at Stop is cancelled: its transaction under way
// rolls back (what the transactions before it removed stays removed).
type Retention struct {
	*lifecycle.Periodic
}

// Retention returns the service that runs retention passes on s every
// interval, removing what ended longer ago than keep; passes are logged
// to log when they removed something, or failed.
func (s *Store) Retention(keep, interval time.Duration, log *slog.Logger) *Retention {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Retention{lifecycle.NewPeriodic("retention pass", interval, func(ctx context.Context) {
		start := time.Now()
		st, err := s.RetentionPass(ctx, start.Add(-keep))
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("retention pass", "error", err)
		case st.Conversations+st.IdempotencyKeys+st.Deliveries > 0:
			log.Info("retention pass", "conversations", st.Conversations, "runs", st.Runs,
				"idempotency_keys", st.IdempotencyKeys, "webhook_deliveries", st.Deliveries,
				"took", time.Since(start).Round(time.Millisecond))
		}
	})}
}
