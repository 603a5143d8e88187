package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

const stepColumns = `id, run_id, seq, status, coalesce(finish_reason, ''), coalesce(transition, ''), model_attempts,
	input_tokens, output_tokens, cached_input_tokens, reasoning_tokens, error, started_at, finished_at, coalesce(model, '')`

func scanStep(row pgx.Row) (agentd.Step, error) {
	var s agentd.Step
	err := row.Scan(&s.ID, &s.RunID, &s.Seq, &s.Status, &s.FinishReason, &s.Transition, &s.ModelAttempts,
		&s.Usage.InputTokens, &s.Usage.OutputTokens, &s.Usage.CachedInputTokens, &s.Usage.ReasoningTokens,
		&s.Error, &s.StartedAt, &s.FinishedAt, &s.Model)
	return s, translate(err)
}

const callColumns = `id, run_id, step_id, position, call_id, name, arguments, idempotency_key, effect, status,
	result, error, attempts, created_at, finished_at, policy`

func scanCall(row pgx.Row) (agentd.ToolCall, error) {
	var c agentd.ToolCall
	err := row.Scan(&c.ID, &c.RunID, &c.StepID, &c.Position, &c.CallID, &c.Name, &c.Arguments, &c.IdempotencyKey,
		&c.Effect, &c.Status, &c.Result, &c.Error, &c.Attempts, &c.CreatedAt, &c.FinishedAt, &c.Policy)
	return c, translate(err)
}

// attemptColumns are read from tool_attempts aliased a (joined with tool_calls c).
const attemptColumns = `a.id, a.tool_call_id, a.n, a.status, a.error, a.worker, a.epoch, a.started_at, a.finished_at,
	coalesce(a.arguments_sha256, ''), coalesce(a.result_sha256, '')`

func scanAttempt(row pgx.Row) (agentd.Attempt, error) {
	var a agentd.Attempt
	err := row.Scan(&a.ID, &a.ToolCallID, &a.N, &a.Status, &a.Error, &a.Worker, &a.Epoch, &a.StartedAt, &a.FinishedAt,
		&a.ArgumentsSHA256, &a.ResultSHA256)
	return a, translate(err)
}

const messageColumns = `id, conversation_id, coalesce(run_id::text, ''), seq, role, content, status, created_at`

func scanMessage(row pgx.Row) (agentd.Message, error) {
	var m agentd.Message
	var content []byte
	if err := row.Scan(&m.ID, &m.ConversationID, &m.RunID, &m.Seq, &m.Role, &content, &m.Status, &m.CreatedAt); err != nil {
		return agentd.Message{}, translate(err)
	}
	if err := json.Unmarshal(content, &m.Content); err != nil {
		return agentd.Message{}, fmt.Errorf("decode message %s: %w", m.ID, err)
	}
	return m, nil
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, q querier, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	return collectRows(rows, err, scan)
}

// collectRows scans every row of rows (the result of a query that returned
// err) with scan, and closes rows.
func collectRows[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, translate(rows.Err())
}

// RunStateLoad reads the committed state of a run, in one round trip and
// one snapshot.
func (s *Store) RunStateLoad(ctx context.Context, runID string) (agentd.RunState, error) {
	const lastStep = `(SELECT id FROM steps WHERE run_id = $1 ORDER BY seq DESC LIMIT 1)`
	b := &pgx.Batch{}
	b.Queue(`SELECT `+runColumns+` FROM runs WHERE id = $1`, runID)
	// Numbered messages only: a pending one (the input of a run queued
	// behind this one) is not part of the conversation yet.
	b.Queue(`SELECT `+messageColumns+` FROM messages WHERE conversation_id = (SELECT conversation_id FROM runs WHERE id = $1)
		AND seq < $2 AND status = 'completed' ORDER BY seq`, runID, PendingSeq)
	b.Queue(`SELECT `+stepColumns+` FROM steps WHERE run_id = $1 ORDER BY seq`, runID)
	b.Queue(`SELECT `+callColumns+` FROM tool_calls WHERE step_id = `+lastStep+` ORDER BY position`, runID)
	b.Queue(`SELECT `+attemptColumns+`
		FROM tool_attempts a JOIN tool_calls c ON c.id = a.tool_call_id
		WHERE c.step_id = `+lastStep+` ORDER BY c.position, a.n`, runID)
	// Counted step by step, through tool_calls_step_position: a join lets
	// the planner read the whole of tool_calls.
	b.Queue(`SELECT coalesce(sum((SELECT count(*) FROM tool_calls t WHERE t.step_id = s.id)), 0)::bigint
		FROM steps s WHERE s.run_id = $1`, runID)
	// The conversation's compaction state, in one row: its failures in a
	// row, and its latest compaction's columns (NULL without one).
	// With the number of its last message, whatever its status (an aborted
	// input is not in Messages, and keeps its number).
	b.Queue(`SELECT v.compaction_failures, (SELECT coalesce(max(seq), 0) FROM messages
			WHERE conversation_id = v.id AND seq < `+strconv.Itoa(PendingSeq)+`), c.* FROM conversations v
		LEFT JOIN LATERAL (`+strings.Replace(latestCompaction, "$1", "v.id", 1)+`) c ON true
		WHERE v.id = (SELECT conversation_id FROM runs WHERE id = $1)`, runID)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var st agentd.RunState
	var err error
	if st.Run, err = scanRun(br.QueryRow()); err != nil {
		return st, err
	}
	if st.Messages, err = scanAll(br, scanMessage); err != nil {
		return st, fmt.Errorf("load messages: %w", err)
	}
	if st.Steps, err = scanAll(br, scanStep); err != nil {
		return st, fmt.Errorf("load steps: %w", err)
	}
	if st.Calls, err = scanAll(br, scanCall); err != nil {
		return st, fmt.Errorf("load tool calls: %w", err)
	}
	if st.Attempts, err = scanAll(br, scanAttempt); err != nil {
		return st, fmt.Errorf("load attempts: %w", err)
	}
	if err := br.QueryRow().Scan(&st.CallCount); err != nil {
		return st, fmt.Errorf("count tool calls: %w", translate(err))
	}
	var c struct {
		ID, ConversationID, RunID, StepID, Summary              *string
		CoversToSeq, MessagesCovered, TokensBefore, TokensAfter *int
		InputTokens, OutputTokens                               *int64
		CreatedAt                                               *time.Time
	}
	if err := br.QueryRow().Scan(&st.CompactionFailures, &st.MessageSeq, &c.ID, &c.ConversationID, &c.RunID, &c.StepID, &c.CoversToSeq,
		&c.MessagesCovered, &c.Summary, &c.TokensBefore, &c.TokensAfter, &c.InputTokens, &c.OutputTokens, &c.CreatedAt); err != nil {
		return st, fmt.Errorf("load compaction: %w", translate(err))
	}
	if c.ID != nil {
		st.Compaction = &agentd.Compaction{ID: *c.ID, ConversationID: *c.ConversationID, RunID: *c.RunID, StepID: *c.StepID,
			CoversToSeq: *c.CoversToSeq, MessagesCovered: *c.MessagesCovered, Summary: *c.Summary, TokensBefore: *c.TokensBefore,
			TokensAfter: *c.TokensAfter, InputTokens: *c.InputTokens, OutputTokens: *c.OutputTokens, CreatedAt: *c.CreatedAt}
	}
	return st, nil
}

// scanAll reads the next result of a batch with scan.
func scanAll[T any](br pgx.BatchResults, scan func(pgx.Row) (T, error)) ([]T, error) {
	rows, err := br.Query()
	return collectRows(rows, err, scan)
}

// StepsList returns a run's steps with their calls and attempts, in order.
func (s *Store) StepsList(ctx context.Context, runID string) ([]agentd.StepDetail, error) {
	steps, err := queryAll(ctx, s.pool, scanStep, `SELECT `+stepColumns+` FROM steps WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("list steps: %w", err)
	}
	calls, err := queryAll(ctx, s.pool, scanCall, `SELECT `+callColumns+` FROM tool_calls
		WHERE step_id IN (SELECT id FROM steps WHERE run_id = $1) ORDER BY created_at, position`, runID)
	if err != nil {
		return nil, fmt.Errorf("list tool calls: %w", err)
	}
	attempts, err := queryAll(ctx, s.pool, scanAttempt, `SELECT `+attemptColumns+` FROM tool_attempts a JOIN tool_calls c ON c.id = a.tool_call_id
		WHERE c.step_id IN (SELECT id FROM steps WHERE run_id = $1) ORDER BY a.n`, runID)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	byCall := map[string][]agentd.Attempt{}
	for _, a := range attempts {
		byCall[a.ToolCallID] = append(byCall[a.ToolCallID], a)
	}
	byStep := map[string][]agentd.CallDetail{}
	for _, c := range calls {
		byStep[c.StepID] = append(byStep[c.StepID], agentd.CallDetail{ToolCall: c, Attempts: byCall[c.ID]})
	}
	out := make([]agentd.StepDetail, len(steps))
	for i, st := range steps {
		out[i] = agentd.StepDetail{Step: st, Calls: byStep[st.ID]}
	}
	return out, nil
}

// ConversationGet returns a tenant's conversation; ErrConversationNotFound
// when there is none.
func (s *Store) ConversationGet(ctx context.Context, tenantID, id string) (agentd.Conversation, error) {
	var c agentd.Conversation
	err := s.pool.QueryRow(ctx, `SELECT id, tenant_id, title, metadata, created_at, updated_at FROM conversations
		WHERE id = $1 AND tenant_id = $2`, id, tenantID).Scan(&c.ID, &c.TenantID, &c.Title, &c.Metadata, &c.CreatedAt, &c.UpdatedAt)
	return c, notFound(translate(err), agentd.ErrConversationNotFound)
}

// MessagesList returns a conversation's messages after seq, in order: the
// input of runs queued behind the run in flight comes last, pending, with
// its provisional seqs (PendingSeq on), as it will be sent to the model
// once its run starts.
func (s *Store) MessagesList(ctx context.Context, conversationID string, after, limit int) ([]agentd.Message, error) {
	return queryAll(ctx, s.pool, scanMessage, `SELECT `+messageColumns+` FROM messages
		WHERE conversation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, conversationID, after, limit)
}

const headColumns = `id::text, status, step_count, last_event_seq, updated_at`

func scanHead(row pgx.Row) (agentd.RunHead, error) {
	var h agentd.RunHead
	err := row.Scan(&h.RunID, &h.Status, &h.StepCount, &h.LastEventSeq, &h.UpdatedAt)
	return h, translate(err)
}

// RunHead returns the head of run id; ErrNotFound when there is none.
func (s *Store) RunHead(ctx context.Context, id string) (agentd.RunHead, error) {
	return scanHead(s.pool.QueryRow(ctx, `SELECT `+headColumns+` FROM runs WHERE id = $1`, id))
}

// RunHeads returns the heads of the runs ids that exist, in one query: the
// streams of an instance poll their runs with it.
func (s *Store) RunHeads(ctx context.Context, ids []string) ([]agentd.RunHead, error) {
	return queryAll(ctx, s.pool, scanHead, `SELECT `+headColumns+` FROM runs WHERE id = ANY($1::text[]::uuid[])`, ids)
}

// CallKey names a tool call by what the model asked: its tool and
// arguments (compared as JSON values).
type CallKey struct {
	Name      string
	Arguments string
}

// CallRepeats is what a run already did of one CallKey: how many calls it
// made of it, and their statuses, newest first.
type CallRepeats struct {
	Count  int
	Latest []agentd.CallStatus
}

// ToolCallRepeats returns, for each key, the run's calls of it, in one
// query. Arguments are compared as JSON values (key order and spacing
// aside); arguments that are not JSON match nothing.
func (s *Store) ToolCallRepeats(ctx context.Context, runID string, keys []CallKey) ([]CallRepeats, error) {
	out := make([]CallRepeats, len(keys))
	names := make([]string, 0, len(keys))
	want := make([]any, len(keys))
	isJSON := make([]bool, len(keys))
	for i, k := range keys {
		names = append(names, k.Name)
		isJSON[i] = json.Unmarshal([]byte(k.Arguments), &want[i]) == nil
	}
	rows, err := s.pool.Query(ctx, `SELECT name, arguments::text, status FROM tool_calls
		WHERE run_id = $1 AND name = ANY($2) ORDER BY created_at DESC, position DESC`, runID, names)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, args string
		var st agentd.CallStatus
		if err := rows.Scan(&name, &args, &st); err != nil {
			return nil, translate(err)
		}
		var got any
		if json.Unmarshal([]byte(args), &got) != nil {
			continue
		}
		for i, k := range keys {
			if isJSON[i] && k.Name == name && reflect.DeepEqual(want[i], got) {
				out[i].Count++
				out[i].Latest = append(out[i].Latest, st)
			}
		}
	}
	return out, translate(rows.Err())
}
