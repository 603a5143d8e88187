package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// Events are stored in parts (migration 00007): a run_events row keeps the
// seq, type, step and data of an event, and its time as created_at; the
// envelope a client receives, {"seq":…,"type":…,"run_id":…,"step":…,"at":…,
// "data":…}, is put back together when the event is read (envelope).

// eventRow is an event ready to insert.
type eventRow struct {
	runID string
	seq   int64 // 0 when SQL numbers it
	typ   agentd.EventType
	step  int
	at    time.Time
	data  string // JSON
}

// event is the row as EventsAfter reads it back, once committed.
func (r eventRow) event() agentd.Event {
	return agentd.Event{RunID: r.runID, Seq: r.seq, Type: r.typ, CreatedAt: r.at,
		Data: envelope(r.seq, string(r.typ), r.runID, r.step, formatEventTime(r.at), []byte(r.data))}
}

// eventTime is the time of events written now: to the microsecond, as the
// database keeps it, so that a read puts back the "at" a client was sent.
func eventTime() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func newEventRow(runID string, seq int64, ev agentd.EventIn, at time.Time) (eventRow, error) {
	b, err := json.Marshal(ev.Data)
	if err != nil {
		return eventRow{}, fmt.Errorf("encode event %s: %w", ev.Type(), err)
	}
	return eventRow{runID: runID, seq: seq, typ: ev.Type(), step: ev.Step, at: at, data: string(b)}, nil
}

// envelope puts an event's envelope together, byte for byte as
// encoding/json writes the struct {Seq, Type, RunID, Step, At, Data}.
func envelope(seq int64, typ, runID string, step int, at string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(typ)+len(runID)+len(at)+64)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"run_id":`...)
	b = appendJSONString(b, runID)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `,"at":`...)
	b = appendJSONString(b, at)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// formatEventTime is an event's "at".
func formatEventTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// appendJSONString appends s as encoding/json writes it: quoted as is when
// nothing in it needs escaping (event types, ids and times never do).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// buildEvents numbers evs after seq last.
func buildEvents(rows []eventRow, runID string, last int64, evs []agentd.EventIn, at time.Time) ([]eventRow, error) {
	for i, ev := range evs {
		r, err := newEventRow(runID, last+int64(i)+1, ev, at)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// eventArrays are the columns of event rows, as arrays for unnest.
type eventArrays struct {
	types []string
	steps []int32
	datas []string
	ats   []time.Time
}

// eventColumns returns the type, step, data and time of each row.
func eventColumns(rows []eventRow) eventArrays {
	c := eventArrays{types: make([]string, len(rows)), steps: make([]int32, len(rows)),
		datas: make([]string, len(rows)), ats: make([]time.Time, len(rows))}
	for i, r := range rows {
		c.types[i], c.steps[i], c.datas[i], c.ats[i] = string(r.typ), int32(r.step), r.data, r.at
	}
	return c
}

// queueEvents queues the insert of rows, of one run or many, as one
// statement.
func queueEvents(b *batch, rows []eventRow) {
	if len(rows) == 0 {
		return
	}
	ids := make([]string, len(rows))
	seqs := make([]int64, len(rows))
	for i, r := range rows {
		ids[i], seqs[i] = r.runID, r.seq
	}
	c := eventColumns(rows)
	// The run ids go as text[], as in commitPipelined.
	b.exec("append events", `INSERT INTO run_events (run_id, seq, type, step, data, created_at)
		SELECT r, s, t, n, d::json, a FROM unnest($1::text[]::uuid[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::timestamptz[])
		AS e(r, s, t, n, d, a)`, ids, seqs, c.types, c.steps, c.datas, c.ats)
}

// appendEvents inserts evs after seq last and returns the new last seq. The
// caller holds the run's row lock and updates runs.last_event_seq.
func appendEvents(ctx context.Context, tx pgx.Tx, runID string, last int64, evs []agentd.EventIn) (int64, error) {
	rows, err := buildEvents(nil, runID, last, evs, eventTime())
	if err != nil {
		return 0, err
	}
	var b batch
	queueEvents(&b, rows)
	if err := b.send(ctx, tx); err != nil {
		return 0, err
	}
	return last + int64(len(evs)), nil
}

// EventsAfter returns up to limit events of a run after seq, in order.
func (s *Store) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	return queryEvents(ctx, s.pool, runID, after, limit)
}

// EventsReplay is EventsAfter for a replay of stored events: with a read
// replica that is fresh, they are read there, and only what it has not yet
// replayed from the primary. Events are exact either way: a run's events
// are committed in seq order, so the replica holds a prefix of each log,
// and a page it answers short of limit is completed from the primary.
func (s *Store) EventsReplay(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	r := s.replica
	if r == nil || !r.fresh.Load() {
		return s.EventsAfter(ctx, runID, after, limit)
	}
	evs, err := queryEvents(ctx, r.pool, runID, after, limit)
	if err != nil {
		r.failed(ctx, err)
		if ctx.Err() != nil {
			return nil, err
		}
		return s.EventsAfter(ctx, runID, after, limit)
	}
	r.reads.Add(1)
	if len(evs) == limit {
		return evs, nil
	}
	if len(evs) > 0 {
		after = evs[len(evs)-1].Seq
	}
	rest, err := queryEvents(ctx, s.pool, runID, after, limit-len(evs))
	if err != nil {
		return nil, err
	}
	return append(evs, rest...), nil
}

// queryEvents reads up to limit events of a run after seq on q, in order.
func queryEvents(ctx context.Context, q querier, runID string, after int64, limit int) ([]agentd.Event, error) {
	return queryAll(ctx, q, func(row pgx.Row) (agentd.Event, error) {
		var e agentd.Event
		var step int
		var at string
		var data []byte
		err := row.Scan(&e.RunID, &e.Seq, &e.Type, &step, &at, &data, &e.CreatedAt)
		if at == "" { // not a row from before migration 00007
			at = formatEventTime(e.CreatedAt)
		}
		e.Data = envelope(e.Seq, string(e.Type), e.RunID, step, at, data)
		return e, translate(err)
	}, `SELECT run_id, seq, type, step, coalesce(legacy_at, ''), data, created_at FROM run_events
		WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, runID, after, limit)
}
