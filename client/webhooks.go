package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"

	"github.com/agentd/agentd"
)

// Webhook is a subscription of the tenant's (POST /webhooks); Secret is
// set only in what CreateWebhook returns.
type Webhook = agentd.WebhookView

// Delivery is one event on its way to a webhook's URL, with its attempts.
type Delivery = agentd.DeliveryView

// NewWebhook is a POST /webhooks request: the URL, the event types to
// deliver there (agentd.WebhookEventTypes), and the signing secret
// (empty: the server makes one, which the answer shows once).
type NewWebhook struct {
	URL         string             `json:"url"`
	Events      []agentd.EventType `json:"events"`
	Secret      string             `json:"secret,omitempty"`
	Description string             `json:"description,omitempty"`
}

// RunWebhook is CreateRun's webhook: the URL the run's stops are
// delivered to, signed under Secret (whsec_...; NewWebhookSecret makes
// one). With no Secret, the server makes one and shows it once, in its
// answer to the creation: CreateRun writes it into Secret then (a replay
// of the creation does not show it again).
type RunWebhook struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// NewWebhookSecret returns a new signing secret in the form Standard
// Webhooks writes one: whsec_ and the base64 of 32 random bytes.
func NewWebhookSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// CreateWebhook subscribes a URL to the tenant's events; the Webhook it
// returns holds the secret, which no later read shows.
func (c *Client) CreateWebhook(ctx context.Context, w NewWebhook) (*Webhook, error) {
	var out Webhook
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/webhooks", body: w}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWebhook reads a subscription (without its secret).
func (c *Client) GetWebhook(ctx context.Context, id string) (*Webhook, error) {
	var out Webhook
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/webhooks/" + esc(id)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWebhooks reads a page of the tenant's subscriptions, oldest first.
func (c *Client) ListWebhooks(ctx context.Context, limit int, cursor string) (*Page[Webhook], error) {
	var page Page[Webhook]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/webhooks", query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// DeleteWebhook deletes a subscription and its deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/webhooks/" + esc(id)}, nil)
	return err
}

// EnableWebhook enables a subscription (PATCH /webhooks/{id}), one the
// server disabled after its attempts failed for long or one the tenant
// disabled, forgetting its failures; enabled false disables it.
func (c *Client) EnableWebhook(ctx context.Context, id string, enabled bool) (*Webhook, error) {
	var out Webhook
	body := struct {
		Enabled bool `json:"enabled"`
	}{enabled}
	if _, err := c.do(ctx, request{method: http.MethodPatch, path: "/webhooks/" + esc(id), body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WebhookDeliveries reads a page of a subscription's deliveries, newest
// first, with their attempts.
func (c *Client) WebhookDeliveries(ctx context.Context, id string, limit int, cursor string) (*Page[Delivery], error) {
	var page Page[Delivery]
	req := request{method: http.MethodGet, path: "/webhooks/" + esc(id) + "/deliveries", query: pageQuery(limit, cursor)}
	if _, err := c.do(ctx, req, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Redeliver makes a delivery due again, under its id.
func (c *Client) Redeliver(ctx context.Context, webhookID, deliveryID string) (*Delivery, error) {
	var out Delivery
	req := request{method: http.MethodPost, path: "/webhooks/" + esc(webhookID) + "/deliveries/" + esc(deliveryID) + "/redeliver"}
	if _, err := c.do(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunDeliveries reads the deliveries of a run's events.
func (c *Client) RunDeliveries(ctx context.Context, runID string) ([]Delivery, error) {
	var out struct {
		Data []Delivery `json:"data"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + esc(runID) + "/deliveries"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
