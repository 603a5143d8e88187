package persist

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// AuditPageSize is how many events one AuditEvents call reads: an export
// of a run of thousands of steps goes page by page, never holding its
// whole log.
const AuditPageSize = 500

// AuditEventTypes are the event types a run's audit export reads: the
// decisions and effects and who made them. Text deltas, step boundaries
// and the like are left out, in the query itself.
var AuditEventTypes = []agentd.EventType{
	agentd.EventRunCreated, agentd.EventRunResumed, agentd.EventMessageCompleted, agentd.EventToolCallCreated,
	agentd.EventToolAttemptStarted, agentd.EventToolCallCompleted, agentd.EventToolCallReused, agentd.EventToolCallUnknown,
	agentd.EventToolCallRetryAllowed, agentd.EventToolCallApproved, agentd.EventRunRequiresAction,
	agentd.EventRunCompleted, agentd.EventRunFailed, agentd.EventRunCancelled, agentd.EventRunTimedOut,
	agentd.EventRunInterrupted,
}

// AuditEvents returns the next page of run runID's audit: up to
// AuditPageSize events of AuditEventTypes after seq after and up to seq
// through, in order (as EventsAfter returns them), and the tool calls
// whose attempts those events start, each with all of its attempts (their
// receipts and outcomes, as they are now). A page shorter than
// AuditPageSize is the last.
func (s *Store) AuditEvents(ctx context.Context, runID string, after, through int64) ([]agentd.Event, []agentd.CallDetail, error) {
	types := make([]string, len(AuditEventTypes))
	for i, t := range AuditEventTypes {
		types[i] = string(t)
	}
	evs, err := queryAll(ctx, s.pool, scanAuditEvent, `SELECT run_id, seq, type, step, coalesce(legacy_at, ''), data, created_at
		FROM run_events WHERE run_id = $1 AND seq > $2 AND seq <= $3 AND type = ANY($4)
		ORDER BY seq LIMIT $5`, runID, after, through, types, AuditPageSize)
	if err != nil {
		return nil, nil, fmt.Errorf("read the run's events: %w", err)
	}
	ids, err := attemptedCalls(evs)
	if err != nil || len(ids) == 0 {
		return evs, nil, err
	}
	calls, err := queryAll(ctx, s.pool, scanCall, `SELECT `+callColumns+` FROM tool_calls
		WHERE id = ANY($1::text[]::uuid[]) ORDER BY created_at, position`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read the attempted calls: %w", err)
	}
	attempts, err := queryAll(ctx, s.pool, scanAttempt, `SELECT `+attemptColumns+` FROM tool_attempts a
		JOIN tool_calls c ON c.id = a.tool_call_id WHERE a.tool_call_id = ANY($1::text[]::uuid[]) ORDER BY a.n`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read the attempts: %w", err)
	}
	byCall := map[string][]agentd.Attempt{}
	for _, a := range attempts {
		byCall[a.ToolCallID] = append(byCall[a.ToolCallID], a)
	}
	out := make([]agentd.CallDetail, len(calls))
	for i, c := range calls {
		out[i] = agentd.CallDetail{ToolCall: c, Attempts: byCall[c.ID]}
	}
	return evs, out, nil
}

// scanAuditEvent reads an event as EventsAfter does: its envelope put back
// together, byte for byte as it was sent.
func scanAuditEvent(row pgx.Row) (agentd.Event, error) {
	var e agentd.Event
	var step int
	var at string
	var data []byte
	if err := row.Scan(&e.RunID, &e.Seq, &e.Type, &step, &at, &data, &e.CreatedAt); err != nil {
		return e, translate(err)
	}
	if at == "" { // not a row from before migration 00007
		at = formatEventTime(e.CreatedAt)
	}
	e.Data = envelope(e.Seq, string(e.Type), e.RunID, step, at, data)
	return e, nil
}

// attemptedCalls lists, once each, the tool calls whose attempts the
// tool_attempt.started events of evs start.
func attemptedCalls(evs []agentd.Event) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Type != agentd.EventToolAttemptStarted {
			continue
		}
		var env struct {
			Data agentd.ToolAttemptStartedData `json:"data"`
		}
		if err := json.Unmarshal(e.Data, &env); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", e.Seq, err)
		}
		if id := env.Data.ToolCallID; !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}
