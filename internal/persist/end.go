package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// RunEnd sets a run's status as it stops (a terminal status, interrupted,
// or requires_action) and writes its outbox row, in the transaction that
// appends the event that says so (agentd.RunEndEvent, or
// run.requires_action), which must be the last of the run's events in it.
// It is the one way every path writes a run's stop: the executor queues it
// with its last write (Exec), and a cancel or an interrupt of a run nobody
// executes writes it through endNow. The lease is released with it.
type RunEnd struct {
	ID             string
	Status         agentd.RunStatus
	Reason         agentd.Reason
	Error          *agentd.ErrorDetail
	RequiredAction *agentd.RequiredAction // with requires_action
	Output         []agentd.Part          // with completed: the final assistant message's parts
	// Actor is who asked for the end (a cancel), when a client did: the
	// run's cancelled_by.
	Actor string

	// lastSeq is the run's last event seq with the end's event, when the
	// write is not fenced (endNow); 0: the fence moved it.
	lastSeq int64
}

// endRun is the statement of RunEnd: the run's row; its conversation's
// counter, moved past the messages its executor numbered itself
// (MessageInsert.Seq: found through the conversation's key, below the
// pending messages of the runs queued behind it); and its outbox row at the
// run's last event seq, that of the event that says it stopped.
var endRun = `WITH ended AS (
		UPDATE runs SET status = $2, terminal_reason = nullif($3, ''), error = $4, required_action = $5,
			lease_owner = NULL, lease_expires_at = NULL, interrupt_requested_at = NULL, stall_claims = 0,
			finished_at = CASE WHEN $6 THEN now() END, output = $7,
			cancel_requested_at = CASE WHEN $2 = 'cancelled' THEN coalesce(cancel_requested_at, now()) ELSE cancel_requested_at END,
			cancelled_by = coalesce($8, cancelled_by),
			last_event_seq = coalesce($9, last_event_seq), updated_at = now()
		WHERE id = $1
		RETURNING id, tenant_id, conversation_id, last_event_seq
	),
	counted AS (
		UPDATE conversations c SET next_seq = m.next, updated_at = now()
		FROM ended, LATERAL (SELECT max(seq) + 1 AS next FROM messages
			WHERE conversation_id = ended.conversation_id AND seq < ` + strconv.Itoa(PendingSeq) + `) m
		WHERE c.id = ended.conversation_id AND m.next > c.next_seq
	)
	INSERT INTO outbox (run_id, tenant_id, event_type, seq) SELECT id, tenant_id, $10, last_event_seq FROM ended`

func (o RunEnd) queue(b *batch) error {
	told := o.Status.StopEvent()
	if told == "" {
		return fmt.Errorf("end run %s: %s is no stop", o.ID, o.Status)
	}
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return err
	}
	action, err := jsonOrNull(o.RequiredAction)
	if err != nil {
		return err
	}
	var output []byte
	if o.Output != nil {
		if output, err = json.Marshal(o.Output); err != nil {
			return err
		}
	}
	var last *int64
	if o.lastSeq > 0 {
		last = &o.lastSeq
	}
	b.exec("end run", endRun, o.ID, o.Status, o.Reason, errJSON, action, o.Status.Stopped(), output,
		nullIfEmpty(o.Actor), last, told)
	if o.Status == agentd.StatusCancelled || o.Status == agentd.StatusInterrupted {
		b.exec("abort unanswered input", abortUnanswered, o.ID)
	}
	if o.Status == agentd.StatusRequiresAction {
		b.exec("pause the total timeout", pauseBudget, o.ID)
	}
	return nil
}

// endNow ends r, a run nobody executes whose row the caller has locked in
// tx: it appends evs, the last of them the end's event, and writes end, in
// one round trip. It returns the run's new last event seq.
func endNow(ctx context.Context, tx pgx.Tx, r agentd.Run, evs []agentd.EventIn, end RunEnd) (int64, error) {
	rows, err := buildEvents(nil, r.ID, r.LastEventSeq, evs, eventTime())
	if err != nil {
		return 0, err
	}
	var b batch
	queueEvents(&b, rows)
	end.ID, end.lastSeq = r.ID, r.LastEventSeq+int64(len(evs))
	if err := end.queue(&b); err != nil {
		return 0, err
	}
	if err := b.send(ctx, tx); err != nil {
		return 0, err
	}
	return end.lastSeq, nil
}

// OutboxOf returns run runID's outbox rows, in seq order.
func (s *Store) OutboxOf(ctx context.Context, runID string) ([]agentd.OutboxEntry, error) {
	return queryAll(ctx, s.pool, func(row pgx.Row) (agentd.OutboxEntry, error) {
		var o agentd.OutboxEntry
		err := row.Scan(&o.RunID, &o.TenantID, &o.EventType, &o.Seq, &o.CreatedAt)
		return o, translate(err)
	}, `SELECT run_id::text, tenant_id, event_type, seq, created_at FROM outbox WHERE run_id = $1 ORDER BY seq`, runID)
}
