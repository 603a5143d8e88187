package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"
)

// Webhook is a tenant's subscription (POST /webhooks): the events of its
// runs (and schedules) that it wants POSTed to its URL, signed under its
// secret as Standard Webhooks says. The secret is kept sealed under the
// server's key and shown once, when it is created.
type Webhook struct {
	ID           string
	TenantID     string
	URL          string
	Events       []EventType
	SealedSecret string
	Description  string
	Actor        string
	CreatedAt    time.Time
	// DisabledAt is when the subscription was disabled (nil: it is
	// enabled), DisabledReason why: every attempt failed for too long, or
	// its tenant disabled it. Its deliveries are not attempted meanwhile.
	DisabledAt     *time.Time
	DisabledReason string
}

// RunWebhook is the webhook URL one run was created with (POST /runs
// "webhook"): the run's stops are POSTed there as to a subscription that
// wants every one of them, signed under SealedSecret's secret.
type RunWebhook struct {
	URL          string `json:"url"`
	SealedSecret string `json:"sealed_secret"`
}

// The event types a webhook may subscribe to: a run's stops (the outbox's
// event types) and a schedule's pausing itself.
const EventSchedulePaused EventType = "schedule.paused"

// WebhookEventTypes lists every event type a webhook may subscribe to.
func WebhookEventTypes() []EventType {
	return append(OutboxEventTypes(), EventSchedulePaused)
}

// Wants reports whether w subscribes to events of type t.
func (w Webhook) Wants(t EventType) bool { return slices.Contains(w.Events, t) }

// DeliveryPayload is the body of a delivery of an event of type t that
// happened at at: {"type", "timestamp", "data"}.
func DeliveryPayload(t EventType, at time.Time, data any) ([]byte, error) {
	return json.Marshal(struct {
		Type      EventType `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      any       `json:"data"`
	}{t, at.UTC(), data})
}

// Delivery is one event on its way to one URL: its ID is the webhook-id
// that its receiver deduplicates by, the same for each attempt, and
// Payload the bytes every attempt sends.
type Delivery struct {
	ID           string
	TenantID     string
	WebhookID    string // "": the run's own webhook
	URL          string
	SealedSecret string
	EventType    EventType
	RunID        string // "": not a run's event
	Seq          int64
	Payload      json.RawMessage
	Status       DeliveryStatus
	Attempts     int
	NextAttempt  time.Time
	HorizonFrom  time.Time // retries stop a horizon after it
	CreatedAt    time.Time
	FinishedAt   *time.Time
	Log          []DeliveryAttempt // with a delivery read for the API
}

// DeliveryClaim says which due deliveries an instance takes for its
// workers.
type DeliveryClaim struct {
	// Max is how many at most (the instance's free workers).
	Max int
	// PerURL caps the attempts under way to one URL; Busy are the
	// instance's attempts under way, by URL.
	PerURL int
	Busy   map[string]int
	// PerTenant caps the attempts under way of one tenant's deliveries
	// (0: no cap); TenantBusy are the instance's attempts under way, by
	// tenant.
	PerTenant  int
	TenantBusy map[string]int
	// Lease is how long a claimed delivery is left alone by every
	// instance: longer than an attempt takes.
	Lease time.Duration
}

// DeliveryResult is the outcome of a delivery's attempt: delivered, to be
// tried again at RetryAt, or (neither) failed for good.
type DeliveryResult struct {
	ID        string
	Attempt   DeliveryAttempt
	Delivered bool
	RetryAt   time.Time // zero: no retry
	// DisableAfter is how long every attempt to the delivery's
	// subscription must have failed, this one included, for the
	// subscription to be disabled, with DisableReason; 0: never.
	DisableAfter  time.Duration
	DisableReason string
}

// PayloadFunc is the body of the deliveries of an outbox row: the event
// and the run's view, as the API shows it (webhook.Payload). It reads the
// run through runs, which the dispatcher binds to the transaction that
// holds the outbox row, so that no other connection is used meanwhile.
// ok false: there is nothing to deliver (the run is gone: it was not to
// be stored).
type PayloadFunc func(ctx context.Context, runs RunReader, e OutboxEntry) (payload json.RawMessage, ok bool, err error)

// RunReader reads what a delivery's payload shows of a run.
type RunReader interface {
	// RunGet returns a tenant's run; ErrRunNotFound.
	RunGet(ctx context.Context, tenantID, id string) (Run, error)
	// RunCosts returns the costs of the runs, by run ID (a run without
	// model calls has none).
	RunCosts(ctx context.Context, ids []string) (map[string]RunCost, error)
}

// DeliveryAttempt is one POST of a delivery: the status its receiver
// answered (0: none, Error says why), and how long it took.
type DeliveryAttempt struct {
	N          int
	StartedAt  time.Time
	StatusCode int
	Latency    time.Duration
	Error      string
}

// DeliveryStatus is where a delivery is: pending (due now or later),
// delivered (a 2xx answered it), or failed (no 2xx before it gave up).
type DeliveryStatus string

// Delivery statuses.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// DeliveryStatuses lists every delivery status.
func DeliveryStatuses() []DeliveryStatus {
	return []DeliveryStatus{DeliveryPending, DeliveryDelivered, DeliveryFailed}
}

// ErrWebhookNotFound: the tenant has no such webhook (or delivery).
var ErrWebhookNotFound = errors.New("webhook not found")

// WebhookView is a subscription as the API shows it; Secret only in the
// answer that created it.
type WebhookView struct {
	Object      string      `json:"object"` // ObjectWebhook
	ID          string      `json:"id"`
	URL         string      `json:"url"`
	Events      []EventType `json:"events"`
	Description string      `json:"description"`
	Secret      *string     `json:"secret"`
	CreatedBy   string      `json:"created_by"`
	CreatedAt   time.Time   `json:"created_at"`
	// Enabled is false once the webhook is disabled, at DisabledAt, for
	// DisabledReason.
	Enabled        bool       `json:"enabled"`
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason *string    `json:"disabled_reason"`
}

// DeliveryView is a delivery as the API shows it, with its attempts.
type DeliveryView struct {
	Object        string                `json:"object"` // ObjectWebhookDelivery
	ID            string                `json:"id"`
	WebhookID     *string               `json:"webhook_id"`
	URL           string                `json:"url"`
	EventType     EventType             `json:"event_type"`
	RunID         *string               `json:"run_id"`
	Status        DeliveryStatus        `json:"status"`
	NextAttemptAt *time.Time            `json:"next_attempt_at"` // pending only
	CreatedAt     time.Time             `json:"created_at"`
	FinishedAt    *time.Time            `json:"finished_at"`
	Attempts      []DeliveryAttemptView `json:"attempts"`
}

// DeliveryAttemptView is one attempt as the API shows it.
type DeliveryAttemptView struct {
	N          int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	StatusCode *int      `json:"status_code"`
	LatencyMS  int64     `json:"latency_ms"`
	Error      *string   `json:"error"`
}

// Object types of webhooks' views.
const (
	ObjectWebhook         = "webhook"
	ObjectWebhookDelivery = "webhook.delivery"
)

// View is w as the API shows it, without its secret.
func (w Webhook) View() WebhookView {
	v := WebhookView{Object: ObjectWebhook, ID: w.ID, URL: w.URL, Events: w.Events, Description: w.Description,
		CreatedBy: w.Actor, CreatedAt: w.CreatedAt, Enabled: w.DisabledAt == nil, DisabledAt: w.DisabledAt}
	if w.DisabledAt != nil {
		v.DisabledReason = &w.DisabledReason
	}
	return v
}

// View is d as the API shows it.
func (d Delivery) View() DeliveryView {
	v := DeliveryView{Object: ObjectWebhookDelivery, ID: d.ID, URL: d.URL, EventType: d.EventType, Status: d.Status,
		CreatedAt: d.CreatedAt, FinishedAt: d.FinishedAt, Attempts: []DeliveryAttemptView{}}
	if d.WebhookID != "" {
		v.WebhookID = &d.WebhookID
	}
	if d.RunID != "" {
		v.RunID = &d.RunID
	}
	if d.Status == DeliveryPending {
		v.NextAttemptAt = &d.NextAttempt
	}
	for _, a := range d.Log {
		av := DeliveryAttemptView{N: a.N, StartedAt: a.StartedAt, LatencyMS: a.Latency.Milliseconds()}
		if a.StatusCode != 0 {
			av.StatusCode = &a.StatusCode
		}
		if a.Error != "" {
			av.Error = &a.Error
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}
