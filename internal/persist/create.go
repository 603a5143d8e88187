package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// RunCreateParams are the inputs of RunCreate.
type RunCreateParams struct {
	TenantID       string
	ConversationID string // empty: start a new conversation
	Model          string
	Params         agentd.RunParams
	Input          []agentd.InputMessage
	IdempotencyKey string // optional
	RequestHash    string // fingerprint of the request, compared on a repeated key
	Actor          string // who asked (the credential's actor); optional
	// RejectOverQuota refuses the run with ErrQuotaExceeded, rather than
	// queueing it, when its tenant has Config.TenantRunsInProgress runs
	// running.
	RejectOverQuota bool
	// ClaimFor, when set, claims the new run for a worker in the same
	// transaction, if it can start at once (its conversation has nothing
	// else in flight): the run is created running at epoch 1 with the
	// worker's lease, and its first step started (see RunClaimStart), so
	// that no claim follows. The run returned then has status running and
	// the worker as its lease owner.
	ClaimFor *ClaimFor
	// Tree, when set, bounds the run tree a sub-agent's child joins: the
	// creation fails with a *agentd.TreeLimitError when it would pass
	// either bound.
	Tree *TreeBounds
	// Carry, ReportOf and Hook: see agentd.RunCreate.
	Carry    *agentd.InputCarry
	ReportOf string
	Hook     *agentd.HookCalledData
	// QueuedBy names the worker that will claim the run if it is created
	// queued: the wake-up sent to every instance's ChannelRuns says so
	// (NotifyPayload), and that worker need not search for it.
	QueuedBy string
}

// TreeBounds bound the run tree a child run joins: the runs of the tree
// whose root is Root (the root included), and the open children of its
// parent, Parent. A zero bound is no bound.
type TreeBounds struct {
	Root, Parent         string
	MaxRuns, MaxChildren int
}

// CreateOf is the store's parameters of the domain's run create c: the
// one conversion every creation path (a door's, a schedule's slot, a
// sub-agent's child) goes through. The run is refused over its tenant's
// quota when its spec says on_quota reject.
func CreateOf(c agentd.RunCreate) RunCreateParams {
	return RunCreateParams{TenantID: c.TenantID, ConversationID: c.Spec.ConversationID, Model: c.Spec.Model,
		Params: c.Spec.Params, Input: c.Spec.Input, IdempotencyKey: c.IdempotencyKey, RequestHash: c.RequestHash,
		Actor: c.Actor, RejectOverQuota: c.Spec.OnQuota == agentd.OnQuotaReject, Carry: c.Carry,
		ReportOf: c.ReportOf, Hook: c.Hook}
}

// NotifyPayload is the payload of ChannelRuns for run id queued by worker
// (see RunCreateParams.QueuedBy; empty: by none).
func NotifyPayload(id, worker string) string {
	if worker == "" {
		return id
	}
	return id + " " + worker
}

// ClaimFor is a worker that takes a new run at creation.
type ClaimFor struct {
	Worker string
	TTL    time.Duration
	StepID string // the id of the run's first step
}

// RunCreate commits a run, its conversation (when new), its input messages and
// its run.created event in one transaction, and wakes the workers. With an
// idempotency key already used for the same request, it returns the first run
// and created=false; for another request, ErrIdempotencyMismatch. A busy
// conversation gives a *BusyError when IfBusy is "reject" (or empty); an
// unknown one ErrConversationNotFound.
func (s *Store) RunCreate(ctx context.Context, p RunCreateParams) (run agentd.Run, created bool, err error) {
	st, created, err := s.RunCreateState(ctx, p)
	return st.Run, created, err
}

// RunCreateState is RunCreate that also returns what it knows of the new
// run's state without reading it back: the conversation's messages when it
// started the conversation (nil when the conversation existed), and the first
// step when p.ClaimFor claimed the run. A run found by its idempotency key
// comes with its row only.
//
// A run of a new conversation without an idempotency key conflicts with
// nothing, and is created in one pipelined round trip (createAlone);
// otherwise a transaction locks the conversation and applies if_busy
// (createInConversation).
func (s *Store) RunCreateState(ctx context.Context, p RunCreateParams) (agentd.RunState, bool, error) {
	if p.IdempotencyKey != "" {
		if r, ok, err := s.runByKey(ctx, p); ok || err != nil {
			return agentd.RunState{Run: r}, false, err
		}
	}
	if err := s.overQuota(ctx, s.pool, p); err != nil {
		return agentd.RunState{}, false, err
	}
	if s.tenantCap > 0 {
		p.ClaimFor = nil // the claim enforces the cap
	}
	c, err := newCreation(p)
	if err != nil {
		return agentd.RunState{}, false, err
	}
	if p.ConversationID == "" && p.IdempotencyKey == "" {
		err = s.createAlone(ctx, c)
	} else {
		err = s.createInConversation(ctx, c)
	}
	if errors.Is(err, errDuplicateKey) {
		r, ok, err := s.runByKey(ctx, p)
		if err == nil && !ok {
			err = fmt.Errorf("run with idempotency key vanished: %w", agentd.ErrConflict)
		}
		return agentd.RunState{Run: r}, false, err
	}
	if err != nil {
		return agentd.RunState{}, false, err
	}
	s.published(c.cancelled)
	if s.pub != nil {
		s.pub.PublishedEvents(c.state.Run.ID, c.events())
	}
	return c.state, true, nil
}

// overQuota refuses, with ErrQuotaExceeded, a run that asks to be refused
// over its tenant's quota (p.RejectOverQuota) when the tenant has as many
// runs running as Config.TenantRunsInProgress allows.
func (s *Store) overQuota(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, p RunCreateParams) error {
	if !p.RejectOverQuota || s.tenantCap <= 0 {
		return nil
	}
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'running'`,
		p.TenantID).Scan(&n); err != nil {
		return translate(err)
	}
	if n >= s.tenantCap {
		return agentd.ErrQuotaExceeded
	}
	return nil
}

// errDuplicateKey: the run's idempotency key was taken while it was created.
var errDuplicateKey = errors.New("duplicate idempotency key")

// creation is one run being created.
type creation struct {
	p         RunCreateParams
	runID     string
	params    []byte           // p.Params as JSON
	state     agentd.RunState  // what the creation knows of the run, once committed
	cancelled map[string]int64 // runs ended by if_busy: interrupt, and their last seq
	rows      []eventRow       // the run's events, numbered from 1
}

// events returns the run's events, once committed, as EventsAfter reads
// them back.
func (c *creation) events() []agentd.Event {
	evs := make([]agentd.Event, len(c.rows))
	for i, r := range c.rows {
		evs[i] = r.event()
	}
	return evs
}

func newCreation(p RunCreateParams) (*creation, error) {
	params, err := json.Marshal(p.Params)
	if err != nil {
		return nil, fmt.Errorf("encode params: %w", err)
	}
	return &creation{p: p, runID: newID(), params: params, cancelled: map[string]int64{}}, nil
}

// createAlone creates a run of a new conversation, which has nothing in
// flight, without an idempotency key: one pipelined round trip, one
// implicit transaction.
func (s *Store) createAlone(ctx context.Context, c *creation) error {
	if err := c.answerPending(ctx, nil); err != nil {
		return err
	}
	var b batch
	convID := c.queueConversation(&b)
	if err := c.queueRun(&b, convID, room{idle: true}); err != nil {
		return err
	}
	return translate(b.send(ctx, s.pool))
}

// createInConversation creates a run in a transaction that locks its
// conversation (an existing one, or a new one when the run has an
// idempotency key) and applies if_busy when a run is in flight there.
func (s *Store) createInConversation(ctx context.Context, c *creation) error {
	return s.tx(ctx, func(tx pgx.Tx) error { return c.createIn(ctx, tx) })
}

// createIn creates the run in tx (createInConversation's transaction, or
// the one of a schedule's firing): it locks the run's conversation when it
// has one, applies if_busy, and queues the run's rows.
func (c *creation) createIn(ctx context.Context, tx pgx.Tx) error {
	clear(c.cancelled)
	if err := c.withinTree(ctx, tx); err != nil {
		return err
	}
	var b batch
	convID, rm := c.p.ConversationID, room{idle: true}
	if convID == "" {
		convID = c.queueConversation(&b)
	} else {
		var err error
		if rm, err = c.makeRoom(ctx, tx); err != nil {
			return err
		}
	}
	if err := c.answerPending(ctx, tx); err != nil {
		return err
	}
	if err := c.carry(ctx, tx); err != nil {
		return err
	}
	if err := c.reported(ctx, tx); err != nil {
		return err
	}
	if err := c.queueRun(&b, convID, rm); err != nil {
		return err
	}
	return b.send(ctx, tx)
}

// withinTree refuses the creation of a child run past its tree's bounds
// (c.p.Tree). The tree's creations are serialised by a transaction lock on
// its root's id, so that children made at once, on any instances, cannot
// pass a bound together; its runs are counted down from the root through
// runs_children, and the parent's open children through
// runs_open_children.
func (c *creation) withinTree(ctx context.Context, tx pgx.Tx) error {
	t := c.p.Tree
	if t == nil || (t.MaxRuns <= 0 && t.MaxChildren <= 0) {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('agentd.tree:' || $1, 0))`, t.Root); err != nil {
		return fmt.Errorf("lock run tree: %w", err)
	}
	var runs, open int
	if err := tx.QueryRow(ctx, `WITH RECURSIVE tree(id) AS (
			SELECT $1::uuid UNION ALL SELECT r.id FROM runs r JOIN tree ON r.parent_run_id = tree.id)
		SELECT (SELECT count(*) FROM tree),
			(SELECT count(*) FROM runs WHERE parent_run_id = $2
				AND status NOT IN ('completed', 'failed', 'cancelled', 'timed_out'))`, t.Root, t.Parent).Scan(&runs, &open); err != nil {
		return fmt.Errorf("count run tree: %w", translate(err))
	}
	if (t.MaxRuns > 0 && runs >= t.MaxRuns) || (t.MaxChildren > 0 && open >= t.MaxChildren) {
		return &agentd.TreeLimitError{Runs: runs, MaxRuns: t.MaxRuns, Children: open, MaxChildren: t.MaxChildren}
	}
	return nil
}

// room is what a creation found in its conversation. idle: nothing was in
// flight, so the run may be claimed at once. behind: a run that may still
// write to the conversation comes first (queued, waiting, or running and
// only asked to stop), possibly mid-turn, between an assistant's calls and
// their results; the new run's input then waits, pending, for its claim
// to number it after everything of that run.
type room struct{ idle, behind bool }

// makeRoom locks the run's existing conversation and applies if_busy when
// it has a run in flight: reject (a *BusyError), enqueue (the run waits
// queued behind it), or interrupt (every run in flight is cancelled; the
// new run starts when the last has stopped, and waits behind those that
// were running).
func (c *creation) makeRoom(ctx context.Context, tx pgx.Tx) (room, error) {
	convID := c.p.ConversationID
	var id string
	err := tx.QueryRow(ctx, `SELECT id FROM conversations WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
		convID, c.p.TenantID).Scan(&id)
	if err != nil {
		return room{}, fmt.Errorf("lock conversation: %w", notFound(translate(err), agentd.ErrConversationNotFound))
	}
	var busy string
	err = tx.QueryRow(ctx, `SELECT id FROM runs WHERE conversation_id = $1
		AND status IN ('queued', 'running', 'requires_action') ORDER BY id LIMIT 1`, convID).Scan(&busy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return room{idle: true}, nil
	case err != nil:
		return room{}, fmt.Errorf("busy check: %w", err)
	}
	switch c.p.Params.IfBusy {
	case agentd.IfBusyEnqueue:
		return room{behind: true}, nil
	case agentd.IfBusyInterrupt:
		busyRuns, err := queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs WHERE conversation_id = $1
			AND status IN ('queued', 'running', 'requires_action') ORDER BY id FOR UPDATE`, convID)
		if err != nil {
			return room{}, fmt.Errorf("interrupt busy runs: %w", err)
		}
		var rm room
		for _, r := range busyRuns {
			last, err := endLocked(ctx, tx, r, agentd.StatusCancelled, agentd.ReasonCancelled, c.p.Actor)
			if err != nil {
				return room{}, fmt.Errorf("interrupt run %s: %w", r.ID, err)
			}
			if last > 0 {
				c.cancelled[r.ID] = last
			}
			// A running run is only flagged: its executor writes until
			// it stops. The others ended here, and write nothing more.
			rm.behind = rm.behind || r.Status == agentd.StatusRunning
		}
		return rm, nil
	}
	return room{}, &agentd.BusyError{RunID: busy}
}

// answerPending checks that the run's input answers the client tool calls
// that its conversation's previous run ended at (ReasonClientToolCalls),
// each once, before any other message, and records each answer on its call
// (succeeded, with the output as its result, decided by the run's actor);
// and the same of the calls that wait for an approval, which the run's
// approvals decide (decideApprovals). Without a transaction (a new conversation), nothing waits: an output in
// the input answers nothing.
func (c *creation) answerPending(ctx context.Context, tx pgx.Tx) error {
	outputs := map[string]string{}
	var order []string
	err := &agentd.PendingCallsError{}
	for i, m := range c.p.Input {
		if m.Role != agentd.RoleTool {
			continue
		}
		if i > len(outputs) {
			// After another message: the output of a call of the input
			// (runspec checked that one precedes it), not a waiting one.
			continue
		}
		if _, dup := outputs[m.ToolCallID]; dup {
			err.Unknown = append(err.Unknown, m.ToolCallID)
		}
		outputs[m.ToolCallID] = m.Content
		order = append(order, m.ToolCallID)
	}
	type call struct{ id, callID string }
	var pending []call
	if tx != nil && c.p.ConversationID != "" {
		rows, qerr := tx.Query(ctx, `SELECT tc.id::text, tc.call_id FROM tool_calls tc
			JOIN steps s ON s.id = tc.step_id JOIN runs r ON r.id = s.run_id
			WHERE r.conversation_id = $1 AND r.terminal_reason = 'client_tool_calls' AND tc.status = 'awaiting_client'
			ORDER BY s.seq, tc.position`, c.p.ConversationID)
		if qerr != nil {
			return fmt.Errorf("pending client calls: %w", qerr)
		}
		for rows.Next() {
			var k call
			if serr := rows.Scan(&k.id, &k.callID); serr != nil {
				rows.Close()
				return serr
			}
			pending = append(pending, k)
		}
		rows.Close()
		if rerr := rows.Err(); rerr != nil {
			return rerr
		}
	}
	waits := map[string]bool{}
	for _, k := range pending {
		waits[k.callID] = true
		if _, ok := outputs[k.callID]; !ok {
			err.Missing = append(err.Missing, k.callID)
		}
	}
	for _, id := range order {
		if !waits[id] {
			err.Unknown = append(err.Unknown, id)
		}
	}
	decided, derr := c.decideApprovals(ctx, tx, err)
	if derr != nil {
		return derr
	}
	if !err.Empty() {
		return err
	}
	if len(decided) > 0 {
		if rerr := c.recordApprovals(ctx, tx, decided); rerr != nil {
			return rerr
		}
	}
	for _, k := range pending {
		result, jerr := json.Marshal(outputs[k.callID])
		if jerr != nil {
			return jerr
		}
		if _, xerr := tx.Exec(ctx, `UPDATE tool_calls SET status = 'succeeded', result = $2, decided_by = $3, finished_at = now()
			WHERE id = $1 AND status = 'awaiting_client'`, k.id, result, nullIfEmpty(c.p.Actor)); xerr != nil {
			return fmt.Errorf("answer client call %s: %w", k.callID, xerr)
		}
	}
	return nil
}

// queueConversation queues the insert of the run's new conversation, and
// returns its id.
func (c *creation) queueConversation(b *batch) string {
	id := newID()
	// Its counter starts past the run's input, which queueRun numbers
	// 1, 2, ... itself.
	b.exec("insert conversation", `INSERT INTO conversations (id, tenant_id, next_seq) VALUES ($1, $2, $3)`,
		id, c.p.TenantID, len(c.p.Input)+1)
	return id
}

// Statements inserting a run: queued, or claimed at creation; with
// ON CONFLICT only for a run with an idempotency key, since only such a
// run can conflict and a speculative insert costs an index probe and a WAL
// record more. [claimed][keyed].
var insertRunSQL = [2][2]string{
	{insertQueuedRun + returnRun, insertQueuedRun + onKeyConflict + returnRun},
	{insertClaimedRun + returnRun, insertClaimedRun + onKeyConflict + returnRun},
}

const (
	insertQueuedRun = `INSERT INTO runs (id, tenant_id, conversation_id, status, model, params,
		idempotency_key, request_hash, last_event_seq, created_by, input_pending)
		VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10)`
	// As RunClaimStart would leave it: running at epoch 1 under the
	// worker's lease, with its first step.
	insertClaimedRun = `INSERT INTO runs (id, tenant_id, conversation_id, status, model, params,
		idempotency_key, request_hash, last_event_seq, epoch, lease_owner, lease_expires_at, started_at,
		deadline_at, step_count, created_by)
		VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, $8, 1, $9, now() + $10 * interval '1 millisecond', now(),
		CASE WHEN $11::bigint > 0 THEN now() + $11::bigint * interval '1 millisecond' END, 1, $12)`
	onKeyConflict = `
		ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`
	returnRun = ` RETURNING ` + runColumns
)

// queueRun queues the run's row, read back into c.state (errDuplicateKey
// when its idempotency key was taken meanwhile), its input messages, its
// events, and its first step when it is claimed here (else the wake-up of
// idle workers), as rm says: claimed only when the conversation is idle,
// its input stored pending, to be numbered by its claim, when it is
// behind another run.
func (c *creation) queueRun(b *batch, convID string, rm room) error {
	p := c.p
	c.state = agentd.RunState{}
	claimed := p.ClaimFor != nil && rm.idle && p.Params.MaxSteps > 0
	at := eventTime()
	evs := []agentd.EventIn{agentd.EventOf(0, agentd.RunCreatedData{Actor: p.Actor, ConversationID: convID, Model: p.Model, Status: agentd.StatusQueued})}
	if p.Hook != nil {
		evs = append(evs, agentd.EventOf(0, *p.Hook))
	}
	if claimed {
		evs = append(evs, agentd.FirstStepEvents(p.ClaimFor.Worker)...)
	}
	rows, err := buildEvents(nil, c.runID, 0, evs, at)
	if err != nil {
		return err
	}
	c.rows = rows
	var key, hash *string
	if p.IdempotencyKey != "" {
		key, hash = &p.IdempotencyKey, &p.RequestHash
	}
	args := []any{c.runID, p.TenantID, convID, p.Model, c.params, key, hash, len(rows)}
	if claimed {
		args = append(args, p.ClaimFor.Worker, p.ClaimFor.TTL.Milliseconds(), p.Params.Timeouts.TotalMS)
	}
	args = append(args, nullIfEmpty(p.Actor))
	if !claimed {
		// Its claim numbers its input (numberInput).
		args = append(args, rm.behind && len(p.Input) > 0)
	}
	b.query("insert run", insertRunSQL[b2i(claimed)][b2i(key != nil)], args, scanNewRun(&c.state.Run))
	if pr := p.Params.Parent; pr != nil {
		// A sub-agent's run: one per call of its parent (runs_parent_tool_call).
		b.exec("name the parent", `UPDATE runs SET parent_run_id = $2, parent_tool_call_id = $3 WHERE id = $1`,
			c.runID, pr.RunID, pr.ToolCallID)
	}
	if sc := p.Params.Schedule; sc != nil {
		// A schedule's run: one per slot (runs_schedule_slot).
		b.exec("name the schedule", `UPDATE runs SET schedule_id = $2, scheduled_for = $3 WHERE id = $1`,
			c.runID, sc.ID, sc.Slot)
	}
	if err := c.queueInput(b, convID, rm); err != nil {
		return err
	}
	if claimed {
		b.exec("start step", `INSERT INTO steps (id, run_id, seq, status, model_attempts) VALUES ($1, $2, 1, 'running', 1)`,
			p.ClaimFor.StepID, c.runID)
		c.state.Steps = []agentd.Step{agentd.FirstStep(c.runID, p.ClaimFor.StepID, at)}
	} else {
		b.exec("notify", `SELECT pg_notify($1, $2)`, ChannelRuns, NotifyPayload(c.runID, p.QueuedBy))
	}
	queueEvents(b, rows)
	return nil
}

// queueInput queues the inserts of the run's input messages, with the
// artifacts of their images and files, as rm says (see queueRun).
func (c *creation) queueInput(b *batch, convID string, rm room) error {
	p := c.p
	for i, m := range p.Input {
		op := MessageInsert{ID: newID(), ConversationID: convID, RunID: c.runID, Role: m.Role,
			Content: []agentd.Part{{Type: agentd.PartText, Text: m.Content}}, Status: agentd.MessageCompleted}
		switch {
		case len(m.Parts) > 0: // texts, images and files: the bytes go to artifacts
			var arts []ArtifactInsert
			op.Content, arts = inputContent(c.runID, m)
			for _, a := range arts {
				_ = a.queue(b) // never fails
			}
		case m.Role == agentd.RoleTool: // an output of a call (answerPending)
			op.Content = []agentd.Part{{Type: agentd.PartToolResult, ToolCallID: m.ToolCallID, Content: m.Content}}
		case len(m.ToolCalls) > 0: // calls the client sends back with its history
			op.Content = nil
			if m.Content != "" {
				op.Content = append(op.Content, agentd.Part{Type: agentd.PartText, Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				op.Content = append(op.Content, agentd.Part{Type: agentd.PartToolCall, ID: tc.ID, Name: tc.Name,
					Arguments: cmp.Or(tc.Arguments, "{}")})
			}
		}
		if len(m.Reasoning) > 0 && m.Role == agentd.RoleAssistant {
			op.Content = append(slices.Clone(m.Reasoning), op.Content...)
		}
		switch {
		case p.ConversationID == "":
			// A new conversation's messages are numbered from 1, and its
			// counter starts past them (queueConversation).
			op.Seq = i + 1
			c.state.Messages = append(c.state.Messages, op.Message(i+1))
		case rm.behind:
			// Behind another run, which may be mid-turn (between a call
			// and its result): numbered when this run is claimed.
			op.pending = true
		}
		if err := op.queue(b); err != nil {
			return err
		}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scanNewRun reads the row of an inserted run into run; errDuplicateKey when
// there is none: its idempotency key was taken meanwhile.
func scanNewRun(run *agentd.Run) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return errDuplicateKey
		}
		r, err := scanRun(rows)
		if err != nil {
			return err
		}
		*run = r
		rows.Close()
		return rows.Err()
	}
}
