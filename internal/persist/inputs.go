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

// Inputs of a run under way (steering): see migration 00045.

const inputColumns = `id::text, run_id::text, n, source, CASE WHEN at_once THEN 'now' ELSE 'next' END, content, status,
	coalesce(step, 0), coalesce(reason, ''), coalesce(carried_to::text, ''), coalesce(created_by, ''), created_at, applied_at`

func scanInput(row pgx.Row) (agentd.RunInput, error) {
	var in agentd.RunInput
	var content []byte
	err := row.Scan(&in.ID, &in.RunID, &in.N, &in.Source, &in.When, &content, &in.Status, &in.Step, &in.Reason,
		&in.CarriedTo, &in.CreatedBy, &in.CreatedAt, &in.AppliedAt)
	if err != nil {
		return in, translate(err)
	}
	if err := json.Unmarshal(content, &in.Messages); err != nil {
		return in, fmt.Errorf("decode input %s: %w", in.ID, err)
	}
	return in, nil
}

// InputAccept commits an input to run p.RunID, with its input.accepted
// event, and tells the run's executor, wherever it runs: the input is
// then never lost (its run applies it, or says it ended without it). The
// run must be queued, running or waiting for a decision; one that ended
// gives a *agentd.RunEndedError. An idempotency key already used for the
// same request returns that input and created=false; for another request,
// ErrIdempotencyMismatch. Past p.MaxPending pending inputs it gives a
// *agentd.TooManyInputsError.
func (s *Store) InputAccept(ctx context.Context, p agentd.InputCreate) (in agentd.RunInput, created bool, err error) {
	var rows []eventRow
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		in, created, rows, err = acceptLocked(ctx, tx, p)
		return err
	})
	if errors.Is(err, errDuplicateKey) {
		return s.inputByKey(ctx, p)
	}
	if err != nil {
		return agentd.RunInput{}, false, err
	}
	s.publishInput(p.RunID, rows)
	return in, created, nil
}

// acceptLocked is InputAccept in tx, in two round trips: one statement
// locks the run's row, checks that it takes input, and counts the input
// (its n, its events, its pending count); a batch stores it, its events
// and the notification. An idempotency key used already fails the insert
// (errDuplicateKey: the caller reads that input), or is found when the
// run no longer takes input. It returns the input's events once committed
// (nil when it found the input of the key).
func acceptLocked(ctx context.Context, tx pgx.Tx, p agentd.InputCreate) (agentd.RunInput, bool, []eventRow, error) {
	nevs := 1
	if p.Hook != nil {
		nevs = 2
	}
	var last int64
	var step int
	in := agentd.RunInput{ID: newID(), RunID: p.RunID, Source: p.Source, When: cmp.Or(p.When, agentd.InputNext), Status: agentd.InputPending,
		CreatedBy: p.Actor}
	err := tx.QueryRow(ctx, `UPDATE runs SET inputs_n = inputs_n + 1, inputs_pending = inputs_pending + 1,
			last_event_seq = last_event_seq + $3, updated_at = now()
		WHERE id = $1 AND tenant_id = $2 AND status IN ('queued', 'running', 'requires_action') AND ($4 = 0 OR inputs_pending < $4)
		RETURNING inputs_n, last_event_seq, step_count, now()`, p.RunID, p.TenantID, nevs, p.MaxPending).Scan(&in.N, &last, &step, &in.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if p.IdempotencyKey != "" {
			// A replay, after its run ended, is answered as before.
			if in, ok, err := inputByKeyIn(ctx, tx, p); ok || err != nil {
				return in, false, nil, err
			}
		}
		return agentd.RunInput{}, false, nil, whyNoInput(ctx, tx, p)
	}
	if err != nil {
		return agentd.RunInput{}, false, nil, translate(err)
	}
	var b batch
	for _, m := range p.Messages {
		parts, arts := userContent(p.RunID, m)
		for _, a := range arts {
			_ = a.queue(&b) // never fails
		}
		in.Messages = append(in.Messages, agentd.InputMessageView{Role: cmp.Or(m.Role, agentd.RoleUser), Content: parts})
	}
	content, err := json.Marshal(in.Messages)
	if err != nil {
		return agentd.RunInput{}, false, nil, fmt.Errorf("encode input: %w", err)
	}
	b.exec("insert input", `INSERT INTO run_inputs (id, run_id, tenant_id, n, source, at_once, content, idempotency_key, request_hash,
			created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, in.ID, p.RunID, p.TenantID, in.N, in.Source,
		in.When == agentd.InputNow, content, nullIfEmpty(p.IdempotencyKey), nullIfEmpty(p.RequestHash), nullIfEmpty(p.Actor), in.CreatedAt)
	evs := []agentd.EventIn{agentd.EventOf(step, agentd.InputAcceptedData{
		Actor: p.Actor, InputID: in.ID, Messages: in.Messages, N: in.N, Source: in.Source, When: in.When})}
	if p.Hook != nil {
		h := *p.Hook
		h.InputID = in.ID
		evs = append(evs, agentd.EventOf(step, h))
	}
	rows, err := buildEvents(nil, p.RunID, last-int64(nevs), evs, eventTime())
	if err != nil {
		return agentd.RunInput{}, false, nil, err
	}
	queueEvents(&b, rows)
	payload := p.RunID + InputPayload
	if in.When == agentd.InputNow {
		payload = p.RunID + InputNowPayload
	}
	b.exec("notify", `SELECT pg_notify($1, $2)`, ChannelCancel, payload)
	if err := b.send(ctx, tx); err != nil {
		if isUnique(err) {
			return agentd.RunInput{}, false, nil, errDuplicateKey
		}
		return agentd.RunInput{}, false, nil, translate(err)
	}
	return in, true, rows, nil
}

// whyNoInput is why run p.RunID took no input: it is not the tenant's, it
// ended, or it holds as many pending inputs as it may.
func whyNoInput(ctx context.Context, tx pgx.Tx, p agentd.InputCreate) error {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2`, p.RunID, p.TenantID))
	switch {
	case err != nil:
		return notFound(err, agentd.ErrRunNotFound)
	case !agentd.Steerable(r.Status):
		return &agentd.RunEndedError{RunID: r.ID, ConversationID: r.ConversationID, Status: r.Status}
	}
	return &agentd.TooManyInputsError{Pending: r.InputsPending, Max: p.MaxPending}
}

// publishInput hands the events of an input, once committed, to the
// publisher.
func (s *Store) publishInput(runID string, rows []eventRow) {
	if s.pub == nil || len(rows) == 0 {
		return
	}
	evs := make([]agentd.Event, len(rows))
	for i, r := range rows {
		evs[i] = r.event()
	}
	s.pub.PublishedEvents(runID, evs)
}

// InputPayload and InputNowPayload mark a ChannelCancel notification that
// tells a run's executor of an input: "<run id>:input", or
// "<run id>:input-now" for one that cuts the model call under way.
const (
	InputPayload    = ":input"
	InputNowPayload = ":input-now"
)

// userContent is the stored content of a user message of an input, and
// the artifacts of its images and files.
func userContent(runID string, m agentd.InputMessage) ([]agentd.Part, []ArtifactInsert) {
	if len(m.Parts) == 0 {
		return []agentd.Part{{Type: agentd.PartText, Text: m.Content}}, nil
	}
	return inputContent(runID, m)
}

func isUnique(err error) bool {
	return errors.Is(translate(err), agentd.ErrConflict)
}

// inputByKey returns the input of p's idempotency key, after its insert
// lost a race for the key.
func (s *Store) inputByKey(ctx context.Context, p agentd.InputCreate) (agentd.RunInput, bool, error) {
	in, ok, err := inputByKeyIn(ctx, s.pool, p)
	if err == nil && !ok {
		err = fmt.Errorf("input with idempotency key vanished: %w", agentd.ErrConflict)
	}
	return in, false, err
}

// inputByKeyIn finds the input of p's tenant and idempotency key: ok, and
// ErrIdempotencyMismatch when it was another request.
func inputByKeyIn(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, p agentd.InputCreate) (agentd.RunInput, bool, error) {
	var hash, tenantRun string
	in, err := scanInput(scanPrefix{q.QueryRow(ctx, `SELECT coalesce(request_hash, ''), run_id::text, `+inputColumns+`
		FROM run_inputs WHERE tenant_id = $1 AND idempotency_key = $2`, p.TenantID, p.IdempotencyKey), []any{&hash, &tenantRun}})
	switch {
	case errors.Is(err, agentd.ErrNotFound):
		return agentd.RunInput{}, false, nil
	case err != nil:
		return agentd.RunInput{}, false, err
	case hash != p.RequestHash:
		return in, true, agentd.ErrIdempotencyMismatch
	}
	return in, true, nil
}

// InputsPending returns run runID's pending inputs, in the order it
// accepted them.
func (s *Store) InputsPending(ctx context.Context, runID string) ([]agentd.RunInput, error) {
	return queryAll(ctx, s.pool, scanInput, `SELECT `+inputColumns+` FROM run_inputs
		WHERE run_id = $1 AND status = 'pending' ORDER BY n`, runID)
}

// InputList returns run runID's inputs, in the order it accepted them;
// with open, only those pending or unapplied and not carried.
func (s *Store) InputList(ctx context.Context, runID string, open bool) ([]agentd.RunInput, error) {
	return queryAll(ctx, s.pool, scanInput, `SELECT `+inputColumns+` FROM run_inputs
		WHERE run_id = $1 AND (NOT $2 OR status = 'pending' OR (status = 'unapplied' AND carried_to IS NULL)) ORDER BY n`, runID, open)
}

// InputsApply marks a running run's pending inputs IDs applied before step
// Step, in the executor's write that inserts their messages. The write
// fails with agentd.ErrInputsChanged when one of them is no longer
// pending (nobody but the run's executor applies them).
type InputsApply struct {
	RunID string
	IDs   []string
	Step  int
}

func (o InputsApply) queue(b *batch) error {
	b.exec("apply inputs", `SELECT agentd_inputs_apply($1, $2::text[]::uuid[], $3)`, o.RunID, o.IDs, o.Step)
	return nil
}

// InputsSettle goes with an executor's write that stops its run: the run
// must have Expected inputs pending, no more, so that an input accepted
// since the executor last read them is not passed over; with Unapplied,
// the run ends for good and those pending are marked unapplied for
// Reason. A count other than Expected fails the write with
// agentd.ErrInputsChanged.
type InputsSettle struct {
	RunID     string
	Expected  int
	Unapplied bool
	Reason    agentd.Reason
}

func (o InputsSettle) queue(b *batch) error {
	b.exec("check inputs", `SELECT agentd_inputs_check($1, $2)`, o.RunID, o.Expected)
	if o.Unapplied && o.Expected > 0 {
		b.exec("unapply inputs", unapplyInputs, o.RunID, string(o.Reason))
	}
	return nil
}

// unapplyInputs marks run $1's pending inputs unapplied for reason $2.
const unapplyInputs = `WITH u AS (
		UPDATE run_inputs SET status = 'unapplied', reason = $2 WHERE run_id = $1 AND status = 'pending' RETURNING 1
	)
	UPDATE runs SET inputs_unapplied = inputs_unapplied + (SELECT count(*) FROM u), inputs_pending = 0 WHERE id = $1`

// unapplyLocked marks the pending inputs of run r, which ends for reason
// and whose row the caller locked, unapplied, and returns their events.
func unapplyLocked(ctx context.Context, tx pgx.Tx, r agentd.Run, reason agentd.Reason) ([]agentd.EventIn, error) {
	if r.InputsPending == 0 {
		return nil, nil
	}
	type unapplied struct {
		id string
		n  int
	}
	ins, err := queryAll(ctx, tx, func(row pgx.Row) (unapplied, error) {
		var u unapplied
		err := row.Scan(&u.id, &u.n)
		return u, translate(err)
	}, `UPDATE run_inputs SET status = 'unapplied', reason = $2 WHERE run_id = $1 AND status = 'pending' RETURNING id::text, n`,
		r.ID, string(reason))
	if err != nil {
		return nil, fmt.Errorf("unapply inputs: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET inputs_unapplied = inputs_unapplied + $2, inputs_pending = 0 WHERE id = $1`,
		r.ID, len(ins)); err != nil {
		return nil, fmt.Errorf("unapply inputs: %w", translate(err))
	}
	slices.SortFunc(ins, func(a, b unapplied) int { return a.n - b.n })
	evs := make([]agentd.EventIn, 0, len(ins))
	for _, u := range ins {
		evs = append(evs, agentd.EventOf(r.StepCount, agentd.InputUnappliedData{InputID: u.id, N: u.n, Reason: reason}))
	}
	return evs, nil
}

// carry marks the unapplied inputs the run takes over (RunCreateParams.
// Carry) carried to it, under its conversation's lock.
func (c *creation) carry(ctx context.Context, tx pgx.Tx) error {
	cr := c.p.Carry
	if cr == nil || len(cr.IDs) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, `UPDATE run_inputs SET carried_to = $3 WHERE run_id = $1 AND id = ANY($2::uuid[])
		AND status = 'unapplied' AND carried_to IS NULL`, cr.RunID, cr.IDs, c.runID)
	if err != nil {
		return fmt.Errorf("carry inputs: %w", translate(err))
	}
	if int(tag.RowsAffected()) != len(cr.IDs) {
		return fmt.Errorf("carry inputs of run %s: %w", cr.RunID, agentd.ErrInputsChanged)
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET inputs_unapplied = greatest(inputs_unapplied - $2, 0) WHERE id = $1`,
		cr.RunID, len(cr.IDs)); err != nil {
		return fmt.Errorf("carry inputs: %w", translate(err))
	}
	return nil
}

// RunOfConversation returns the run a message to a tenant's conversation
// goes to: the first of its runs in flight (queued, running or waiting for
// a decision), else its latest run; agentd.ErrRunNotFound when it has
// none, agentd.ErrConversationNotFound when there is no such
// conversation.
func (s *Store) RunOfConversation(ctx context.Context, tenantID, conversationID string) (agentd.Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE conversation_id = $1 AND tenant_id = $2
		ORDER BY status IN ('queued', 'running', 'requires_action') DESC,
			CASE WHEN status IN ('queued', 'running', 'requires_action') THEN id END, id DESC LIMIT 1`, conversationID, tenantID))
	if err == nil || !errors.Is(err, agentd.ErrNotFound) {
		return r, err
	}
	if _, err := s.ConversationGet(ctx, tenantID, conversationID); err != nil {
		return agentd.Run{}, err
	}
	return agentd.Run{}, agentd.ErrRunNotFound
}

// InputByKey returns the input a tenant's idempotency key made: ok, and
// ErrIdempotencyMismatch when it was made for a request other than hash.
func (s *Store) InputByKey(ctx context.Context, tenantID, key, hash string) (agentd.RunInput, bool, error) {
	return inputByKeyIn(ctx, s.pool, agentd.InputCreate{TenantID: tenantID, IdempotencyKey: key, RequestHash: hash})
}

// RunByKey returns the run a tenant's idempotency key made: ok, and
// ErrIdempotencyMismatch when it was made for a request other than hash.
func (s *Store) RunByKey(ctx context.Context, tenantID, key, hash string) (agentd.Run, bool, error) {
	return s.runByKey(ctx, RunCreateParams{TenantID: tenantID, IdempotencyKey: key, RequestHash: hash})
}

// InputsCount counts run runID's inputs from source.
func (s *Store) InputsCount(ctx context.Context, runID string, source agentd.InputSource) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM run_inputs WHERE run_id = $1 AND source = $2`, runID, source).Scan(&n)
	return n, translate(err)
}

// reported marks the detached child run whose end the run reports
// (RunCreateParams.ReportOf) reported, under its row lock.
func (c *creation) reported(ctx context.Context, tx pgx.Tx) error {
	if c.p.ReportOf == "" {
		return nil
	}
	tag, err := tx.Exec(ctx, `UPDATE runs SET reported_at = now() WHERE id = $1 AND reported_at IS NULL`, c.p.ReportOf)
	if err != nil {
		return fmt.Errorf("mark child run reported: %w", translate(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("child run %s was reported already: %w", c.p.ReportOf, agentd.ErrInputsChanged)
	}
	return nil
}

// ChildrenUnreported returns up to limit detached child runs that ended and
// have not reported back yet: those of run parentID, or of any run when it
// is empty (the sweeper's).
func (s *Store) ChildrenUnreported(ctx context.Context, parentID string, limit int) ([]agentd.Run, error) {
	return queryAll(ctx, s.pool, scanRun, `SELECT `+runColumns+` FROM runs ch
		WHERE reported_at IS NULL AND (params->'parent'->>'detached') = 'true' AND `+childEnded+`
		AND ($1::uuid IS NULL OR parent_run_id = $1) ORDER BY finished_at, id LIMIT $2`, nullIfEmpty(parentID), limit)
}

// ChildReport reports the end of detached child run childID to run
// target as input p (keyed by the child), and marks the child reported,
// in one transaction under the child's row lock: once, whoever reports.
// done is false when it was reported already. An ended target gives a
// *agentd.RunEndedError, as InputAccept does.
func (s *Store) ChildReport(ctx context.Context, childID string, p agentd.InputCreate) (in agentd.RunInput, done bool, err error) {
	var rows []eventRow
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var reported *time.Time
		if err := tx.QueryRow(ctx, `SELECT reported_at FROM runs WHERE id = $1 FOR UPDATE`, childID).Scan(&reported); err != nil {
			return notFound(translate(err), agentd.ErrRunNotFound)
		}
		if reported != nil {
			return nil
		}
		var err error
		if in, _, rows, err = acceptLocked(ctx, tx, p); err != nil {
			return err
		}
		done = true
		_, err = tx.Exec(ctx, `UPDATE runs SET reported_at = now() WHERE id = $1`, childID)
		return translate(err)
	})
	if err != nil {
		return agentd.RunInput{}, false, err
	}
	s.publishInput(p.RunID, rows)
	return in, done, nil
}

// ChildReportDropped marks detached child run childID reported without a
// report: its parent was cancelled, which cancelled it, and nobody waits
// for its end.
func (s *Store) ChildReportDropped(ctx context.Context, childID string) error {
	_, err := s.pool.Exec(ctx, `UPDATE runs SET reported_at = now() WHERE id = $1 AND reported_at IS NULL`, childID)
	return translate(err)
}
