package persist

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// Webhooks out: a tenant's subscriptions, the deliveries the outbox's rows
// become (OutboxDispatch), and their attempts (DeliveryClaim,
// DeliveryRecord).

const webhookColumns = `id::text, tenant_id, url, events, sealed_secret, description, coalesce(created_by, ''), created_at,
	disabled_at, coalesce(disabled_reason, '')`

func scanWebhook(row pgx.Row) (agentd.Webhook, error) {
	var w agentd.Webhook
	var events []string
	err := row.Scan(&w.ID, &w.TenantID, &w.URL, &events, &w.SealedSecret, &w.Description, &w.Actor, &w.CreatedAt,
		&w.DisabledAt, &w.DisabledReason)
	for _, e := range events {
		w.Events = append(w.Events, agentd.EventType(e))
	}
	return w, notFound(translate(err), agentd.ErrWebhookNotFound)
}

// WebhookCreate stores a tenant's new subscription (w.ID: "" makes one).
func (s *Store) WebhookCreate(ctx context.Context, w agentd.Webhook) (agentd.Webhook, error) {
	if w.ID == "" {
		w.ID = uuid.NewString()
	}
	return scanWebhook(s.pool.QueryRow(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, sealed_secret, description, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+webhookColumns,
		w.ID, w.TenantID, w.URL, eventNames(w.Events), w.SealedSecret, w.Description, nullIfEmpty(w.Actor)))
}

// WebhookGet returns a tenant's subscription, or ErrWebhookNotFound.
func (s *Store) WebhookGet(ctx context.Context, tenantID, id string) (agentd.Webhook, error) {
	return scanWebhook(s.pool.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = $1 AND id = $2`,
		tenantID, id))
}

// WebhookList returns a page of a tenant's subscriptions, oldest first:
// limit of them after the one of id after ("": from the first).
func (s *Store) WebhookList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Webhook, error) {
	return queryAll(ctx, s.pool, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks
		WHERE tenant_id = $1 AND ($2 = '' OR (created_at, id) > (SELECT created_at, id FROM webhooks WHERE id = nullif($2, '')::uuid))
		ORDER BY created_at, id LIMIT $3`, tenantID, after, limit)
}

// WebhookEnable enables a tenant's subscription, with a clean slate of
// failures, or disables it for reason (one disabled already keeps its
// time and reason). ErrWebhookNotFound: none.
func (s *Store) WebhookEnable(ctx context.Context, tenantID, id string, enabled bool, reason string) (agentd.Webhook, error) {
	return scanWebhook(s.pool.QueryRow(ctx, `UPDATE webhooks SET
			failing_since = CASE WHEN $3 THEN NULL ELSE failing_since END,
			disabled_at = CASE WHEN $3 THEN NULL ELSE coalesce(disabled_at, now()) END,
			disabled_reason = CASE WHEN $3 THEN NULL ELSE coalesce(disabled_reason, $4) END
		WHERE tenant_id = $1 AND id = $2 RETURNING `+webhookColumns, tenantID, id, enabled, reason))
}

// WebhookDelete deletes a tenant's subscription and its deliveries, those
// still pending too. ErrWebhookNotFound: none.
func (s *Store) WebhookDelete(ctx context.Context, tenantID, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return agentd.ErrWebhookNotFound
	}
	return nil
}

func eventNames(types []agentd.EventType) []string {
	out := make([]string, 0, len(types))
	for _, t := range types {
		out = append(out, string(t))
	}
	return out
}

// outboxDue takes up to $1 outbox rows not dispatched yet, oldest first,
// skipping those another instance dispatches; with each, the run's own
// webhook, if it has one, and for a run that completed the parameters
// that say whether memory is extracted from it (extractParams).
const outboxDue = `SELECT o.run_id::text, o.tenant_id, o.event_type, o.seq, o.created_at,
		coalesce(r.params->'webhook'->>'url', ''), coalesce(r.params->'webhook'->>'sealed_secret', ''),
		CASE WHEN o.event_type = 'run.completed' THEN ` + extractParams + ` END, coalesce(r.params ? 'eval', false)
	FROM outbox o LEFT JOIN runs r ON r.id = o.run_id
	WHERE o.dispatched_at IS NULL ORDER BY o.created_at LIMIT $1 FOR UPDATE OF o SKIP LOCKED`

// dueEntry is an outbox row to dispatch, with its run's own webhook, and
// for a run that completed what of its parameters extraction reads.
type dueEntry struct {
	e           agentd.OutboxEntry
	url, sealed string
	params      []byte
	eval        bool // an evaluation's run: the tenant's subscriptions are not told
}

func scanDue(row pgx.Row) (dueEntry, error) {
	var d dueEntry
	err := row.Scan(&d.e.RunID, &d.e.TenantID, &d.e.EventType, &d.e.Seq, &d.e.CreatedAt, &d.url, &d.sealed, &d.params, &d.eval)
	return d, err
}

// OutboxDispatch turns up to limit outbox rows that no instance has
// dispatched into their deliveries (one per subscription of the run's
// tenant that wants the row's event type, and one to the run's own
// webhook) and, for a run that completed and asked for it, its memory
// extraction job, in one transaction that marks the rows dispatched: each
// row once, whatever instances run or die. payload reads the runs through that
// transaction (txRuns): no other connection is used while it holds the
// rows. It returns how many rows it dispatched.
func (s *Store) OutboxDispatch(ctx context.Context, limit int, payload agentd.PayloadFunc) (int, error) {
	var n int
	err := s.tx(ctx, func(tx pgx.Tx) error {
		due, err := queryAll(ctx, tx, scanDue, outboxDue, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		tenants := make([]string, 0, len(due))
		for _, d := range due {
			tenants = append(tenants, d.e.TenantID)
		}
		hooks, err := webhooksOf(ctx, tx, tenants)
		if err != nil {
			return err
		}
		var b batch
		for _, d := range due {
			if err := queueDeliveries(ctx, tx, &b, d, hooks[d.e.TenantID], payload); err != nil {
				return err
			}
			if err := queueExtraction(&b, d); err != nil {
				return err
			}
			b.exec("dispatch outbox row", `UPDATE outbox SET dispatched_at = now() WHERE run_id = $1 AND seq = $2`,
				d.e.RunID, d.e.Seq)
		}
		n = len(due)
		return b.send(ctx, tx)
	})
	return n, err
}

// queueDeliveries queues the deliveries of d: to each of hooks that wants
// its event type, and to its run's own webhook.
func queueDeliveries(ctx context.Context, tx pgx.Tx, b *batch, d dueEntry, hooks []agentd.Webhook, payload agentd.PayloadFunc) error {
	type target struct{ webhookID, url, sealed string }
	var targets []target
	if d.eval {
		hooks = nil
	}
	for _, w := range hooks {
		if w.Wants(d.e.EventType) {
			targets = append(targets, target{w.ID, w.URL, w.SealedSecret})
		}
	}
	if d.url != "" {
		targets = append(targets, target{"", d.url, d.sealed})
	}
	if len(targets) == 0 {
		return nil
	}
	body, ok, err := payload(ctx, txRuns{tx}, d.e)
	if err != nil || !ok {
		return err
	}
	for _, t := range targets {
		b.exec("insert delivery", insertDelivery, uuid.NewString(), d.e.TenantID, nullIfEmpty(t.webhookID), t.url, t.sealed,
			d.e.EventType, d.e.RunID, d.e.Seq, body)
	}
	return nil
}

// txRuns reads runs through a transaction, for a delivery's payload.
type txRuns struct{ tx pgx.Tx }

var _ agentd.RunReader = txRuns{}

// RunGet returns a tenant's run; ErrRunNotFound.
func (r txRuns) RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error) {
	run, err := scanRun(r.tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	return run, notFound(err, agentd.ErrRunNotFound)
}

// RunCosts is Store.RunCosts, in the transaction.
func (r txRuns) RunCosts(ctx context.Context, ids []string) (map[string]agentd.RunCost, error) {
	return runCosts(ctx, r.tx, ids)
}

// webhooksOf returns the subscriptions of the tenants, by tenant.
func webhooksOf(ctx context.Context, tx pgx.Tx, tenants []string) (map[string][]agentd.Webhook, error) {
	list, err := queryAll(ctx, tx, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = ANY($1)`, tenants)
	if err != nil {
		return nil, err
	}
	out := map[string][]agentd.Webhook{}
	for _, w := range list {
		out[w.TenantID] = append(out[w.TenantID], w)
	}
	return out, nil
}

// insertDelivery is one delivery, due now.
const insertDelivery = `INSERT INTO webhook_deliveries
	(id, tenant_id, webhook_id, url, sealed_secret, event_type, run_id, seq, payload)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// notifyTenant writes, in tx, a delivery of an event that is not a run's
// stop (a schedule's pausing itself) to each subscription of the tenant
// that wants its type: {"type", "timestamp", "data"}.
func notifyTenant(ctx context.Context, tx pgx.Tx, tenantID, eventType string, data any) error {
	hooks, err := webhooksOf(ctx, tx, []string{tenantID})
	if err != nil {
		return err
	}
	var payload []byte
	for _, w := range hooks[tenantID] {
		if !w.Wants(agentd.EventType(eventType)) {
			continue
		}
		if payload == nil {
			if payload, err = agentd.DeliveryPayload(agentd.EventType(eventType), time.Now(), data); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, insertDelivery, uuid.NewString(), tenantID, w.ID, w.URL, w.SealedSecret, eventType,
			nil, nil, payload); err != nil {
			return err
		}
	}
	return nil
}

const deliveryColumns = `id::text, tenant_id, coalesce(webhook_id::text, ''), url, sealed_secret, event_type,
	coalesce(run_id::text, ''), coalesce(seq, 0), payload, status, attempts, next_attempt_at, horizon_from, created_at, finished_at`

func scanDelivery(row pgx.Row) (agentd.Delivery, error) {
	var d agentd.Delivery
	err := row.Scan(&d.ID, &d.TenantID, &d.WebhookID, &d.URL, &d.SealedSecret, &d.EventType, &d.RunID, &d.Seq, &d.Payload,
		&d.Status, &d.Attempts, &d.NextAttempt, &d.HorizonFrom, &d.CreatedAt, &d.FinishedAt)
	return d, notFound(translate(err), agentd.ErrWebhookNotFound)
}

// claimCandidates locks up to $1 due deliveries, taking tenants in turn
// (the first due of each tenant, then the second, ...) and, within a
// tenant, its URLs in turn, so that one tenant's backlog or one slow URL
// does not keep the others waiting; the longest due first within a turn.
// It leaves out the URLs $2 and the tenants $3 (the instance has enough
// attempts under way to them), those past $4 in their URL's queue (the
// claim takes no more to one URL), those of disabled subscriptions (made
// after failDisabled's statement looked: failDisabled ends them on the
// next claim), and those another instance holds.
const claimCandidates = `WITH due AS (
		SELECT id, tenant_id, next_attempt_at,
			row_number() OVER (PARTITION BY tenant_id, url ORDER BY next_attempt_at, id) AS in_url
		FROM webhook_deliveries d
		WHERE status = 'pending' AND next_attempt_at <= now() AND url <> ALL($2) AND tenant_id <> ALL($3)
			AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = d.webhook_id AND w.disabled_at IS NOT NULL)
	), turns AS (
		SELECT id, next_attempt_at,
			row_number() OVER (PARTITION BY tenant_id ORDER BY in_url, next_attempt_at, id) AS turn
		FROM due WHERE in_url <= $4
	)
	SELECT d.id::text, d.tenant_id, d.url FROM webhook_deliveries d JOIN turns t ON t.id = d.id
	WHERE d.status = 'pending' AND d.next_attempt_at <= now()
	ORDER BY t.turn, t.next_attempt_at LIMIT $1 FOR UPDATE OF d SKIP LOCKED`

// failDisabled ends the due deliveries of disabled subscriptions as
// failed, without an attempt (the subscription's view says why), skipping
// those another instance holds.
const failDisabled = `UPDATE webhook_deliveries SET status = 'failed', finished_at = now()
	WHERE id IN (SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND w.disabled_at IS NOT NULL
		FOR UPDATE OF d SKIP LOCKED)`

// DeliveryClaim takes up to p.Max due deliveries, tenants in turn, no
// more to one URL than p.PerURL allows beside p.Busy and no more of one
// tenant's than p.PerTenant allows beside p.TenantBusy, in one
// transaction (one connection, what the instance's workers make in a
// tick): it counts each one's attempt and pushes its next attempt past
// p.Lease, so that an instance that dies during the attempt leaves it due
// again then.
func (s *Store) DeliveryClaim(ctx context.Context, p agentd.DeliveryClaim) ([]agentd.Delivery, error) {
	full, fullTenants := []string{}, []string{}
	for u, n := range p.Busy {
		if n >= p.PerURL {
			full = append(full, u)
		}
	}
	for tenant, n := range p.TenantBusy {
		if p.PerTenant > 0 && n >= p.PerTenant {
			fullTenants = append(fullTenants, tenant)
		}
	}
	var out []agentd.Delivery
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, failDisabled); err != nil {
			return err
		}
		type candidate struct{ id, tenant, url string }
		cands, err := queryAll(ctx, tx, func(row pgx.Row) (candidate, error) {
			var c candidate
			return c, row.Scan(&c.id, &c.tenant, &c.url)
		}, claimCandidates, 4*p.Max, full, fullTenants, p.PerURL)
		if err != nil || len(cands) == 0 {
			return err
		}
		held, heldTenant := map[string]int{}, map[string]int{}
		var ids []string
		for _, c := range cands {
			if len(ids) < p.Max && p.Busy[c.url]+held[c.url] < p.PerURL &&
				(p.PerTenant <= 0 || p.TenantBusy[c.tenant]+heldTenant[c.tenant] < p.PerTenant) {
				held[c.url]++
				heldTenant[c.tenant]++
				ids = append(ids, c.id)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		out, err = queryAll(ctx, tx, scanDelivery, `UPDATE webhook_deliveries
			SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
			WHERE id = ANY($1::uuid[]) RETURNING `+deliveryColumns, ids, p.Lease.Seconds())
		return err
	})
	return out, err
}

// DeliveryRecord records an attempt of a delivery and where that leaves
// it, unless the delivery changed since it was claimed (it was redelivered,
// or deleted with its webhook). A delivered attempt clears its
// subscription's failures; a failed one marks when they began, and
// disables the subscription once they have lasted r.DisableAfter:
// disabled says that this attempt disabled it.
func (s *Store) DeliveryRecord(ctx context.Context, r agentd.DeliveryResult) (disabled bool, err error) {
	status, next := agentd.DeliveryFailed, any(nil)
	switch {
	case r.Delivered:
		status = agentd.DeliveryDelivered
	case !r.RetryAt.IsZero():
		status, next = agentd.DeliveryPending, r.RetryAt
	}
	a := r.Attempt
	err = s.tx(ctx, func(tx pgx.Tx) error {
		var webhookID *string
		err := tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = $3,
				next_attempt_at = coalesce($4, next_attempt_at), finished_at = CASE WHEN $3 <> 'pending' THEN now() END
			WHERE id = $1 AND attempts = $2 AND status = 'pending' RETURNING webhook_id::text`,
			r.ID, a.N, status, next).Scan(&webhookID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, n, started_at, status_code, latency_ms, error)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, r.ID, a.N, a.StartedAt, nullIfZero(a.StatusCode),
			a.Latency.Milliseconds(), nullIfEmpty(a.Error)); err != nil {
			return err
		}
		switch {
		case webhookID == nil:
			return nil
		case r.Delivered:
			_, err = tx.Exec(ctx, `UPDATE webhooks SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL`,
				*webhookID)
			return err
		}
		if r.DisableAfter <= 0 {
			_, err = tx.Exec(ctx, `UPDATE webhooks SET failing_since = $2 WHERE id = $1 AND failing_since IS NULL`,
				*webhookID, a.StartedAt)
			return err
		}
		err = tx.QueryRow(ctx, `UPDATE webhooks SET failing_since = coalesce(failing_since, $2),
				disabled_at = CASE WHEN disabled_at IS NULL AND coalesce(failing_since, $2) <= now() - make_interval(secs => $3)
					THEN now() ELSE disabled_at END,
				disabled_reason = CASE WHEN disabled_at IS NULL AND coalesce(failing_since, $2) <= now() - make_interval(secs => $3)
					THEN $4 ELSE disabled_reason END
			WHERE id = $1
			RETURNING disabled_at IS NOT NULL AND disabled_at = now()`,
			*webhookID, a.StartedAt, r.DisableAfter.Seconds(), r.DisableReason).Scan(&disabled)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // deleted meanwhile
		}
		return err
	})
	return disabled, translate(err)
}

func nullIfZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// WebhookDeliveries returns a page of a webhook's deliveries, newest
// first, with their attempts: limit of them before the one of id before
// ("": from the newest).
func (s *Store) WebhookDeliveries(ctx context.Context, tenantID, webhookID, before string, limit int) ([]agentd.Delivery, error) {
	list, err := queryAll(ctx, s.pool, scanDelivery, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE tenant_id = $1 AND webhook_id = $2
			AND ($3 = '' OR (created_at, id) < (SELECT created_at, id FROM webhook_deliveries WHERE id = nullif($3, '')::uuid))
		ORDER BY created_at DESC, id DESC LIMIT $4`, tenantID, webhookID, before, limit)
	if err != nil {
		return nil, err
	}
	return list, s.attemptsOf(ctx, list)
}

// RunDeliveries returns the deliveries of a run's events, oldest first,
// with their attempts.
func (s *Store) RunDeliveries(ctx context.Context, tenantID, runID string) ([]agentd.Delivery, error) {
	list, err := queryAll(ctx, s.pool, scanDelivery, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE tenant_id = $1 AND run_id = $2 ORDER BY created_at, id`, tenantID, runID)
	if err != nil {
		return nil, err
	}
	return list, s.attemptsOf(ctx, list)
}

// attemptsOf fills the attempts of the deliveries of list.
func (s *Store) attemptsOf(ctx context.Context, list []agentd.Delivery) error {
	if len(list) == 0 {
		return nil
	}
	ids := make([]string, len(list))
	at := map[string]int{}
	for i, d := range list {
		ids[i], at[d.ID] = d.ID, i
	}
	type attempt struct {
		id string
		a  agentd.DeliveryAttempt
	}
	attempts, err := queryAll(ctx, s.pool, func(row pgx.Row) (attempt, error) {
		var x attempt
		var code *int
		var ms int64
		var msg *string
		err := row.Scan(&x.id, &x.a.N, &x.a.StartedAt, &code, &ms, &msg)
		if code != nil {
			x.a.StatusCode = *code
		}
		if msg != nil {
			x.a.Error = *msg
		}
		x.a.Latency = time.Duration(ms) * time.Millisecond
		return x, err
	}, `SELECT delivery_id::text, n, started_at, status_code, latency_ms, error FROM webhook_attempts
		WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, n`, ids)
	for _, x := range attempts {
		list[at[x.id]].Log = append(list[at[x.id]].Log, x.a)
	}
	return translate(err)
}

// DeliveryRedeliver makes a webhook's delivery due now, whatever became of
// it, with a new horizon of retries; its id (the receiver's webhook-id)
// stays. ErrWebhookNotFound: no such delivery.
func (s *Store) DeliveryRedeliver(ctx context.Context, tenantID, webhookID, id string) (agentd.Delivery, error) {
	return scanDelivery(s.pool.QueryRow(ctx, `UPDATE webhook_deliveries
		SET status = 'pending', next_attempt_at = now(), horizon_from = now(), finished_at = NULL
		WHERE tenant_id = $1 AND webhook_id = $2 AND id = $3 RETURNING `+deliveryColumns, tenantID, webhookID, id))
}
