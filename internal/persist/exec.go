package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// RunClaim claims the oldest claimable run for worker: a queued run whose
// conversation has nothing else in flight, or a running run whose lease
// expired. It bumps the run's epoch, sets the lease and, on the first claim,
// the run's deadline from its total timeout. ErrNotFound: nothing to claim.
func (s *Store) RunClaim(ctx context.Context, worker string, ttl time.Duration) (Claim, error) {
	var c Claim
	row := s.pool.QueryRow(ctx, `WITH `+s.claimCTE+` SELECT prev_status, `+numberInput+`, `+runColumns+` FROM claimed`,
		worker, ttl.Milliseconds(), 0)
	r, err := scanRun(scanPrefix{row, []any{&c.PrevStatus, &c.InputNumbered}})
	c.Run = r
	return c, err
}

// RunClaimStart is RunClaim that, on a run's first claim, also starts its
// first step in the same transaction: the step's row (running) and the
// events of agentd.FirstStep, which the executor would otherwise commit in a
// write of its own right after. Claim.StartedStep names the step.
func (s *Store) RunClaimStart(ctx context.Context, worker string, ttl time.Duration) (Claim, error) {
	return s.claimStart(ctx, s.claimCTE, worker, ttl)
}

// RunClaimStartID is RunClaimStart of one queued run, by its id: the
// run is claimed only if it is still queued, its conversation has nothing
// before it in flight, and its tenant is below Config.TenantRunsInProgress.
// It costs a few index probes where RunClaimStart's search reads every
// claimable run; the engine claims so the runs it queued itself, in the
// order it accepted them. ErrNotFound: the run is not claimable now.
func (s *Store) RunClaimStartID(ctx context.Context, worker string, ttl time.Duration, id string) (Claim, error) {
	return s.claimStart(ctx, s.claimIDCTE, worker, ttl, id)
}

// claimStart runs RunClaimStart's statement with the claim cte; extra are
// its arguments after the statement's own eight ($9 on).
func (s *Store) claimStart(ctx context.Context, cte, worker string, ttl time.Duration, extra ...any) (Claim, error) {
	sql, args, err := claimStartStatement(cte, worker, ttl, extra...)
	if err != nil {
		return Claim{}, err
	}
	return scanClaim(s.pool.QueryRow(ctx, sql, args...))
}

// claimStartStatement is RunClaimStart's statement with the claim cte, and
// its arguments.
func claimStartStatement(cte, worker string, ttl time.Duration, extra ...any) (string, []any, error) {
	evs, err := buildEvents(nil, "", 0, agentd.FirstStepEvents(worker), eventTime())
	if err != nil {
		return "", nil, err
	}
	cols := eventColumns(evs)
	// The claim moves the run's last seq past the step's events; they are
	// numbered after the seq it had.
	args := append([]any{worker, ttl.Milliseconds(), len(evs), newID(), cols.types, cols.steps, cols.datas, cols.ats}, extra...)
	return `WITH ` + cte + `,
		step AS (
			INSERT INTO steps (id, run_id, seq, status, model_attempts)
			SELECT $4, id, 1, 'running', 1 FROM claimed WHERE fresh
			RETURNING id
		),
		events AS (
			INSERT INTO run_events (run_id, seq, type, step, data, created_at)
			SELECT claimed.id, claimed.last_event_seq - $3 + e.k, e.t, e.n, e.d::json, e.a
			FROM claimed, unnest($5::text[], $6::int[], $7::text[], $8::timestamptz[]) WITH ORDINALITY AS e(t, n, d, a, k)
			WHERE fresh
		)
		SELECT prev_status, coalesce((SELECT id::text FROM step), ''), ` + numberInput + `, ` + runColumns + ` FROM claimed`, args, nil
}

func scanClaim(row pgx.Row) (Claim, error) {
	var c Claim
	r, err := scanRun(scanPrefix{row, []any{&c.PrevStatus, &c.StartedStep, &c.InputNumbered}})
	c.Run = r
	return c, err
}

// ClaimNext claims a queued run by its id, as RunClaimStartID does, in the
// transaction of the write it goes with: a worker whose run stops claims
// the next run of its engine's queue in the stop's own transaction, after
// the stop (so that the stopped run no longer counts against its
// conversation or its tenant), and needs no transaction of its own for it.
// Make one with Store.ClaimNext; once the write committed, Claimed reports
// the claim. That the run is not claimable makes no write fail: the claim
// is then not made, as when a write that carried it failed for any other
// reason, or the server refused the claim itself (the write is then made
// again without it).
type ClaimNext struct {
	id, worker, cte string
	ttl             time.Duration
	claim           Claim
	claimed         bool
}

// ClaimNext is the op that claims queued run id for worker with a lease of
// ttl, in the transaction of the write that carries it.
func (s *Store) ClaimNext(id, worker string, ttl time.Duration) *ClaimNext {
	return &ClaimNext{id: id, worker: worker, cte: s.claimIDCTE, ttl: ttl}
}

// ID is the run the op claims.
func (o *ClaimNext) ID() string { return o.id }

// Claimed reports the claim the committed write made, if it made one.
func (o *ClaimNext) Claimed() (Claim, bool) { return o.claim, o.claimed }

func (o *ClaimNext) queue(b *batch) error {
	o.claim, o.claimed = Claim{}, false
	sql, args, err := claimStartStatement(o.cte, o.worker, o.ttl, o.id)
	if err != nil {
		return err
	}
	b.query("claim next run", sql, args, func(rows pgx.Rows) error {
		defer rows.Close()
		if rows.Next() {
			c, err := scanClaim(rows)
			if err != nil {
				return err
			}
			o.claim = c
		}
		return rows.Err()
	})
	return nil
}

// settle keeps the claim only once its transaction committed.
func (o *ClaimNext) settle() { o.claimed = o.claim.ID != "" }

// claimCTE claims a run ($1 worker, $2 lease TTL in ms) as the CTE claimed,
// with the run's columns, its status before (prev_status), and fresh: $3 is
// the number of events that start the first step of a run claimed for the
// first time (epoch 0, at least one step allowed), 0 to start nothing; the
// run's step count and event seq are then moved for the step and its events.
//
// The claim is fair between tenants: it takes the oldest claimable run of
// the tenant with the fewest running runs, so that one tenant's queue delays
// another's runs by at most one run each. With a cap on a tenant's runs in
// progress (Config.TenantRunsInProgress, written into the SQL as %d), a
// queued run of a tenant at its cap is left queued; a takeover is always
// allowed (the run is already counted). The cap is checked without a lock:
// instances that claim at the same moment may each take one run past it.
const claimCTE = claimSearch + claimUpdate

// claimIDCTE is claimCTE of the queued run $9 only (see RunClaimStartID):
// the tenant's running runs are counted only with a cap. The conversation's
// runs are read through runs_conversation alone (OFFSET 0 keeps the planner
// from combining it with the partial indexes on status, whose dead entries
// a busy table has thousands of).
const claimIDCTE = `prev AS (
		SELECT q.id AS prev_id, q.status AS prev_status, q.input_pending AS was_pending FROM runs q
		WHERE q.id = $9 AND q.status = 'queued'
		AND (%[1]d <= 0 OR (SELECT count(*) FROM runs b WHERE b.status IN ('queued', 'running')
			AND b.status = 'running' AND b.tenant_id = q.tenant_id) < %[1]d)
		AND NOT EXISTS (SELECT 1 FROM (SELECT id, status, queue_seq FROM runs WHERE conversation_id = q.conversation_id OFFSET 0) o
			WHERE o.id <> q.id AND (o.status IN ('running', 'requires_action') OR (o.status = 'queued' AND o.queue_seq < q.queue_seq)))
		FOR UPDATE OF q SKIP LOCKED
	),` + claimUpdate

// claimSearch finds the run claimCTE claims, as prev.
const claimSearch = `busy AS (
		SELECT tenant_id, count(*) FILTER (WHERE status = 'running') AS n
		FROM runs WHERE status IN ('queued', 'running') GROUP BY tenant_id
	),
	prev AS (
		SELECT q.id AS prev_id, q.status AS prev_status, q.input_pending AS was_pending FROM runs q JOIN busy b ON b.tenant_id = q.tenant_id
		WHERE (q.status = 'queued' OR (q.status = 'running' AND q.lease_expires_at < now()))
		AND (%[1]d <= 0 OR q.status = 'running' OR b.n < %[1]d)
		AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.conversation_id = q.conversation_id AND o.id <> q.id
			AND (o.status IN ('running', 'requires_action') OR (o.status = 'queued' AND o.queue_seq < q.queue_seq)))
		ORDER BY b.n, q.created_at
		LIMIT 1
		FOR UPDATE OF q SKIP LOCKED
	),`

// numberInput, in a claim's result, numbers the claimed run's input if it
// is still pending (a run queued behind another of its conversation, see
// MessageInsert.pending), after every message of the conversation, in the
// claim's own statement: a claim that fails leaves it pending. Only such a
// run (input_pending, which the claim clears) costs anything more
// (migration 00026).
var numberInput = `CASE WHEN claimed.was_pending THEN agentd_number_input(claimed.id, claimed.conversation_id, ` +
	strconv.Itoa(PendingSeq) + `) ELSE 0 END`

// claimUpdate claims the run prev names.
const claimUpdate = `
	claimed AS (
		UPDATE runs SET status = 'running', epoch = epoch + 1, lease_owner = $1,
			stall_claims = stall_claims + CASE WHEN status = 'running' THEN 1 ELSE 0 END,
			lease_expires_at = now() + $2 * interval '1 millisecond',
			started_at = coalesce(started_at, now()),
			deadline_at = coalesce(deadline_at, CASE WHEN (params->'timeouts'->>'total_ms')::bigint > 0
				THEN now() + (params->'timeouts'->>'total_ms')::bigint * interval '1 millisecond' END),
			step_count = CASE WHEN $3::int > 0 AND epoch = 0 AND (params->>'max_steps')::int > 0 THEN 1 ELSE step_count END,
			last_event_seq = last_event_seq + CASE WHEN epoch = 0 AND (params->>'max_steps')::int > 0 THEN $3::int ELSE 0 END,
			input_pending = false, updated_at = now()
		FROM prev WHERE id = prev.prev_id
		RETURNING runs.*, prev.prev_status, $3::int > 0 AND epoch = 1 AND step_count = 1 AND (params->>'max_steps')::int > 0 AS fresh,
			prev.was_pending
	)`

// Claim is a run just claimed, with the status it had before the claim
// (queued for a new or resumed run, running for one taken over).
type Claim struct {
	agentd.Run
	PrevStatus agentd.RunStatus
	// StartedStep is the id of the first step, when RunClaimStart started
	// it with the claim.
	StartedStep string
	// InputNumbered is how many messages of the run's input the claim
	// numbered: those of a run queued behind another, pending until now.
	InputNumbered int
}

// LeaseState is what a lease extension learns of the run.
type LeaseState struct {
	CancelRequested    bool
	InterruptRequested bool
	InputsPending      bool
}

// LeaseExtend extends the lease of the run held under f and reports whether
// a cancel or an interrupt was requested. ErrLeaseLost: the run moved on to
// another epoch.
func (s *Store) LeaseExtend(ctx context.Context, f Fence, ttl time.Duration) (LeaseState, error) {
	var st LeaseState
	err := s.pool.QueryRow(ctx, `UPDATE runs SET lease_expires_at = now() + $3 * interval '1 millisecond'
		WHERE id = $1 AND epoch = $2 AND status = 'running'
		RETURNING cancel_requested_at IS NOT NULL, interrupt_requested_at IS NOT NULL, inputs_pending > 0`,
		f.RunID, f.Epoch, ttl.Milliseconds()).Scan(&st.CancelRequested, &st.InterruptRequested, &st.InputsPending)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrLeaseLost
	}
	return st, translate(err)
}

// LeaseRelease hands a running run back so that a peer can claim it at once.
func (s *Store) LeaseRelease(ctx context.Context, f Fence) error {
	tag, err := s.pool.Exec(ctx, `UPDATE runs SET lease_owner = NULL, lease_expires_at = now() - interval '1 millisecond',
		stall_claims = 0, updated_at = now() WHERE id = $1 AND epoch = $2 AND status = 'running'`, f.RunID, f.Epoch)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	_, err = s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, f.RunID)
	return translate(err)
}

// Op is one write of an executor transaction (see Exec).
type Op interface {
	queue(b *batch) error
}

// runCounter is an op that also moves its run's counters (step count,
// usage); the fence applies them, so that a write updates the run's row once.
type runCounter interface {
	counts() (step int, usage agentd.Usage)
}

// Exec runs ops and appends evs in one transaction fenced by f: the fence
// checks that the run's epoch is still f.Epoch (holding the run's row lock, so
// that event seqs stay gapless), and nothing commits otherwise (ErrLeaseLost).
// The transaction is one pipelined round trip (see commitPipelined). It
// returns the run's last event seq.
func (s *Store) Exec(ctx context.Context, f Fence, evs []agentd.EventIn, ops ...Op) (int64, error) {
	if c := s.group.Load(); c != nil {
		return s.execGrouped(ctx, c, f, evs, ops)
	}
	r := &execReq{f: f, evs: evs, ops: ops}
	if err := s.commitAlone(ctx, r, false); err != nil {
		return 0, err
	}
	return r.last, nil
}

// StepInsert starts a step (status running).
type StepInsert struct {
	ID, RunID  string
	Seq        int
	Transition agentd.Transition
	Model      string // "": the run's model
}

func (o StepInsert) queue(b *batch) error {
	b.exec("insert step", `INSERT INTO steps (id, run_id, seq, status, transition, model_attempts, model)
		VALUES ($1, $2, $3, 'running', nullif($4, ''), 1, nullif($5, ''))`, o.ID, o.RunID, o.Seq, o.Transition, o.Model)
	return nil
}

// counts: the run's step count goes up to the step's seq.
func (o StepInsert) counts() (int, agentd.Usage) { return o.Seq, agentd.Usage{} }

// StepReask records that a step's model call is made again (after a retry or
// a recovery), with why.
type StepReask struct {
	ID         string
	Transition agentd.Transition
}

func (o StepReask) queue(b *batch) error {
	b.exec("re-ask step", `UPDATE steps SET transition = $2, model_attempts = model_attempts + 1, status = 'running'
		WHERE id = $1`, o.ID, o.Transition)
	return nil
}

// StepFallback moves a step's model calls to Model, the next of its run's
// fallback chain, and counts the call it makes there.
type StepFallback struct {
	ID, Model string
}

func (o StepFallback) queue(b *batch) error {
	b.exec("fall back", `UPDATE steps SET model = $2, transition = 'model_fallback', model_attempts = model_attempts + 1,
		status = 'running' WHERE id = $1`, o.ID, o.Model)
	return nil
}

// StepUpdate sets a step's status and what came with it. Usage is added to
// the step's counters, and to its run's (by the fence of the write).
type StepUpdate struct {
	ID           string
	Status       agentd.StepStatus
	FinishReason agentd.FinishReason // kept when empty
	Transition   agentd.Transition   // kept when empty
	Usage        agentd.Usage
	Error        *agentd.ErrorDetail // nil: kept
	Finished     bool
}

func (o StepUpdate) queue(b *batch) error {
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return fmt.Errorf("encode step error: %w", err)
	}
	b.exec("update step", `UPDATE steps SET status = $2,
		finish_reason = coalesce(nullif($3, ''), finish_reason), transition = coalesce(nullif($4, ''), transition),
		input_tokens = input_tokens + $5, output_tokens = output_tokens + $6,
		cached_input_tokens = cached_input_tokens + $7, reasoning_tokens = reasoning_tokens + $8,
		error = coalesce($9::jsonb, error), finished_at = CASE WHEN $10 THEN now() ELSE finished_at END
		WHERE id = $1`, o.ID, o.Status, o.FinishReason, o.Transition,
		o.Usage.InputTokens, o.Usage.OutputTokens, o.Usage.CachedInputTokens, o.Usage.ReasoningTokens, errJSON, o.Finished)
	return nil
}

// counts: the step's usage is added to the run's.
func (o StepUpdate) counts() (int, agentd.Usage) { return 0, o.Usage }

// MessageInsert appends a message to a conversation, numbered Seq, or
// when Seq is 0 after the conversation's last one by its counter.
type MessageInsert struct {
	ID, ConversationID, RunID string
	Role                      agentd.Role
	Content                   []agentd.Part
	Status                    agentd.MessageStatus
	// Seq, when set, is the message's number, given by its writer, and the
	// conversation's counter is not moved: a new conversation's input,
	// inserted with its counter already past it; or a running run's own
	// message, numbered by its executor after the last message of the
	// run's state (nobody else numbers a conversation's messages while its
	// run runs), whose stop moves the counter past them (RunEnd).
	Seq int
	// pending: the message is the input of a run queued behind another
	// run of its conversation. It is stored pending, numbered from
	// PendingSeq on, and gets its place (and Status) when its run is
	// claimed (numberInput), after everything of the runs before it.
	pending bool
}

// PendingSeq is where the provisional numbers of pending messages begin:
// the input of a run queued behind another run of its conversation is
// numbered from here, in the order the runs were accepted, so that it
// reads after every message of the turns before it until its run starts
// and numbers it for good. Numbered messages stay below it (a conversation
// would need a billion messages to reach it).
const PendingSeq = 1 << 30

// Message is the message as the insert stores it, numbered seq in its
// conversation (its time aside), for a RunState kept in memory.
func (o MessageInsert) Message(seq int) agentd.Message {
	return agentd.Message{ID: o.ID, ConversationID: o.ConversationID, RunID: o.RunID, Seq: seq, Role: o.Role,
		Content: o.Content, Status: o.Status}
}

func (o MessageInsert) queue(b *batch) error {
	content, err := json.Marshal(o.Content)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	var runID *string
	if o.RunID != "" {
		runID = &o.RunID
	}
	if o.Seq > 0 {
		b.exec("insert message", `INSERT INTO messages (id, conversation_id, run_id, seq, role, content, status)
			VALUES ($1, $2, $3, $7, $4, $5, $6)`, o.ID, o.ConversationID, runID, o.Role, content, o.Status, o.Seq)
		return nil
	}
	if o.pending {
		// Numbered after the conversation's other pending messages, under
		// the conversation's row lock, which the creation holds: the
		// counter is left to the claim.
		b.exec("insert pending message", `INSERT INTO messages (id, conversation_id, run_id, seq, role, content, status)
			SELECT $1, $2, $3, coalesce(max(seq) + 1, $6), $4, $5, 'pending'
			FROM messages WHERE conversation_id = $2 AND seq >= $6`,
			o.ID, o.ConversationID, runID, o.Role, content, PendingSeq)
		return nil
	}
	b.exec("insert message", `WITH n AS (
			UPDATE conversations SET next_seq = next_seq + 1, updated_at = now() WHERE id = $2 RETURNING next_seq - 1 AS seq
		)
		INSERT INTO messages (id, conversation_id, run_id, seq, role, content, status)
		SELECT $1, $2, $3, n.seq, $4, $5, $6 FROM n`, o.ID, o.ConversationID, runID, o.Role, content, o.Status)
	return nil
}

// ToolCallInsert plans a tool call of a step.
type ToolCallInsert struct {
	ID, RunID, StepID string
	Position          int
	CallID, Name      string
	Arguments         json.RawMessage
	IdempotencyKey    string
	Effect            agentd.Effect
	Status            agentd.CallStatus   // planned (the default), awaiting_approval, awaiting_client, or failed (denied)
	Error             *agentd.ErrorDetail // for a call that failed as it was planned (a policy denied it)
	Policy            json.RawMessage     // the policy decision on the call, when a policy decided
}

// Call is the tool call as the insert stores it (its time aside), for a
// RunState kept in memory.
func (o ToolCallInsert) Call() agentd.ToolCall {
	c := agentd.ToolCall{ID: o.ID, RunID: o.RunID, StepID: o.StepID, Position: o.Position, CallID: o.CallID, Name: o.Name,
		Arguments: o.Arguments, IdempotencyKey: o.IdempotencyKey, Effect: o.Effect, Status: cmp.Or(o.Status, agentd.CallPlanned),
		Policy: o.Policy}
	if o.Error != nil {
		c.Error = mustJSON(o.Error)
	}
	return c
}

func (o ToolCallInsert) queue(b *batch) error {
	status := cmp.Or(o.Status, agentd.CallPlanned)
	if o.Error == nil && o.Policy == nil {
		b.exec("insert tool call", `INSERT INTO tool_calls (id, run_id, step_id, position, call_id, name, arguments,
			idempotency_key, effect, status) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			o.ID, o.RunID, o.StepID, o.Position, o.CallID, o.Name, []byte(o.Arguments), o.IdempotencyKey, o.Effect, status)
		return nil
	}
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return err
	}
	var policy []byte
	if o.Policy != nil {
		policy = o.Policy
	}
	b.exec("insert tool call", `INSERT INTO tool_calls (id, run_id, step_id, position, call_id, name, arguments,
		idempotency_key, effect, status, error, policy, finished_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, CASE WHEN $13 THEN now() END)`,
		o.ID, o.RunID, o.StepID, o.Position, o.CallID, o.Name, []byte(o.Arguments), o.IdempotencyKey, o.Effect, status,
		errJSON, policy, status.Final())
	return nil
}

// AttemptStart records attempt N of a tool call as running, before the tool
// is invoked.
type AttemptStart struct {
	ID, ToolCallID string
	N              int
	Worker         string
	Epoch          int64
	// ArgumentsSHA256 is the receipt's hash of the arguments the tool is
	// given (hex; empty: none kept).
	ArgumentsSHA256 string
}

func (o AttemptStart) queue(b *batch) error {
	// The attempt is inserted only if its call is there to be updated.
	b.exec("start attempt", `WITH c AS (
			UPDATE tool_calls SET status = 'running', attempts = $3 WHERE id = $2 RETURNING id
		)
		INSERT INTO tool_attempts (id, tool_call_id, n, status, worker, epoch, arguments_sha256)
		SELECT $1, c.id, $3, 'running', $4, $5, nullif($6, '') FROM c`, o.ID, o.ToolCallID, o.N, o.Worker, o.Epoch,
		o.ArgumentsSHA256)
	return nil
}

// AttemptFinish records how an attempt ended.
type AttemptFinish struct {
	ID     string
	Status agentd.AttemptStatus
	Error  *agentd.ErrorDetail
	// ResultSHA256 is the receipt's hash of the result the tool returned
	// (hex; empty: it returned none, or none is kept).
	ResultSHA256 string
}

func (o AttemptFinish) queue(b *batch) error {
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return err
	}
	b.exec("finish attempt", `UPDATE tool_attempts SET status = $2, error = $3, finished_at = now(),
		result_sha256 = coalesce(nullif($4, ''), result_sha256) WHERE id = $1`,
		o.ID, o.Status, errJSON, o.ResultSHA256)
	return nil
}

// ToolCallFinish records a tool call's outcome.
type ToolCallFinish struct {
	ID     string
	Status agentd.CallStatus
	Result json.RawMessage
	Error  *agentd.ErrorDetail
}

func (o ToolCallFinish) queue(b *batch) error {
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return err
	}
	var result []byte
	if len(o.Result) > 0 {
		result = o.Result
	}
	b.exec("finish tool call", `UPDATE tool_calls SET status = $2, result = $3, error = $4,
		finished_at = CASE WHEN $5 THEN now() END WHERE id = $1`,
		o.ID, o.Status, result, errJSON, o.Status.Final())
	return nil
}

// AttemptsClose closes the attempts of a run left running when it fails
// without finishing them (storage_error, no_progress): they become unknown,
// since their tool may have run; a side-effect call under one becomes
// unknown too, and any other is planned again, for a resume to attempt.
type AttemptsClose struct {
	RunID string
	Error agentd.ErrorDetail // why, on each attempt
}

func (o AttemptsClose) queue(b *batch) error {
	errJSON, err := json.Marshal(o.Error)
	if err != nil {
		return fmt.Errorf("encode attempt error: %w", err)
	}
	b.exec("close attempts", `WITH a AS (
			UPDATE tool_attempts SET status = 'unknown', error = $2, finished_at = now()
			WHERE status = 'running' AND tool_call_id IN (
				SELECT c.id FROM tool_calls c JOIN steps s ON s.id = c.step_id WHERE s.run_id = $1)
			RETURNING tool_call_id
		)
		UPDATE tool_calls SET status = CASE WHEN effect = 'side_effect' THEN 'unknown' ELSE 'planned' END
		WHERE id IN (SELECT tool_call_id FROM a) AND status = 'running'`, o.RunID, errJSON)
	return nil
}

// jsonOrNull returns v as JSON, or nil (SQL NULL) when v is nil.
func jsonOrNull[T any](v *T) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return b, nil
}
