package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/webhook"
)

// Webhooks out: a tenant subscribes URLs to the events of its runs (POST
// /webhooks), and a run may name a URL of its own (POST /runs "webhook");
// internal/webhook delivers them from the outbox.

// WebhookStore keeps the subscriptions and their deliveries.
type WebhookStore interface {
	WebhookCreate(ctx context.Context, w agentd.Webhook) (agentd.Webhook, error)
	WebhookGet(ctx context.Context, tenantID, id string) (agentd.Webhook, error)
	WebhookList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Webhook, error)
	// WebhookEnable enables a subscription (forgetting its failures), or
	// disables it for reason; ErrWebhookNotFound.
	WebhookEnable(ctx context.Context, tenantID, id string, enabled bool, reason string) (agentd.Webhook, error)
	WebhookDelete(ctx context.Context, tenantID, id string) error
	WebhookDeliveries(ctx context.Context, tenantID, webhookID, before string, limit int) ([]agentd.Delivery, error)
	DeliveryRedeliver(ctx context.Context, tenantID, webhookID, id string) (agentd.Delivery, error)
	RunDeliveries(ctx context.Context, tenantID, runID string) ([]agentd.Delivery, error)
}

// Webhooks configures webhooks out; a nil Store leaves their routes
// answering 501 and POST /runs refusing "webhook".
type Webhooks struct {
	Store WebhookStore
	// Box seals the signing secrets; without a key, nothing can be
	// subscribed.
	Box *secrets.Box
	// AllowHosts are the loopback or private ip:ports subscriptions may
	// target (AGENTD_WEBHOOK_ALLOW_HOSTS); public hosts need no listing.
	AllowHosts []string
}

// HeaderWebhookSecret carries, in the answer to the POST /runs that
// created a run with a "webhook" URL and no secret, the secret its
// deliveries are signed with: only then.
const HeaderWebhookSecret = "Webhook-Secret"

// Webhook problem codes.
const (
	CodeWebhookNotFound     = "webhook_not_found"    // 404: no such webhook (or delivery of it) for this tenant
	CodeWebhookLimit        = "webhook_limit"        // 409: the tenant has as many webhooks as a tenant may
	CodeWebhooksUnavailable = "webhooks_unavailable" // 501: the server delivers no webhooks
)

var (
	errWebhookNotFound = newError(http.StatusNotFound, CodeWebhookNotFound, "Webhook not found",
		"the tenant has no webhook (or delivery) of this id")
	errNoWebhooks = newError(http.StatusNotImplemented, CodeWebhooksUnavailable, "Webhooks unavailable",
		"this server delivers no webhooks")
)

// Bounds of subscriptions.
const (
	maxWebhooks       = 50 // per tenant
	maxWebhookURL     = 2048
	maxWebhookDescr   = 1024
	defaultHookLimit  = 20
	maxHookLimit      = 100
	cursorWebhooks    = "webhooks"
	cursorDeliveries  = "deliveries"
	webhookSecretHelp = "the server has no AGENTD_SECRET_KEY to keep signing secrets under: its operator sets one"
)

// webhookRequest is the body of POST /webhooks.
type webhookRequest struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Secret      *string  `json:"secret"`
	Description *string  `json:"description"`
}

// checkWebhookURL refuses a URL deliveries cannot be made to: not an
// absolute http(s) URL, too long, or one the egress rule forbids.
func (s *server) checkWebhookURL(field, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return fieldError(field, "is required: the URL deliveries are POSTed to")
	case len(raw) > maxWebhookURL:
		return fieldError(field, "must be at most %d bytes", maxWebhookURL)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
		return fieldError(field, "must be an absolute http or https URL without credentials")
	}
	if err := tools.CheckEgressOf(raw, s.webhooks.AllowHosts, "AGENTD_WEBHOOK_ALLOW_HOSTS"); err != nil {
		return fieldError(field, "%v", err)
	}
	return nil
}

// secretOf is the signing secret a request gives (checked), or a new one.
func secretOf(field string, given *string) (string, error) {
	if given == nil {
		return webhook.NewSecret(), nil
	}
	if err := webhook.CheckSecret(*given); err != nil {
		return "", fieldError(field, "%v", err)
	}
	return *given, nil
}

// webhookCreate answers POST /webhooks: 201 with the subscription and its
// secret, shown only here.
func (s *server) webhookCreate(w http.ResponseWriter, r *http.Request) error {
	if s.webhooks.Store == nil {
		return errNoWebhooks
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	var req webhookRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	hook, secret, err := s.webhookOf(r.Context(), req)
	if err != nil {
		return err
	}
	if hook, err = s.webhooks.Store.WebhookCreate(r.Context(), hook); err != nil {
		return err
	}
	v := hook.View()
	v.Secret = &secret
	w.Header().Set("Location", "/webhooks/"+hook.ID)
	s.writeJSON(w, r, http.StatusCreated, v)
	return nil
}

// webhookOf checks a POST /webhooks body into a subscription of the
// request's tenant, its secret sealed; it returns the secret too.
func (s *server) webhookOf(ctx context.Context, req webhookRequest) (agentd.Webhook, string, error) {
	var hook agentd.Webhook
	if req.URL == nil {
		return hook, "", fieldError("url", "is required: the URL deliveries are POSTed to")
	}
	if err := s.checkWebhookURL("url", *req.URL); err != nil {
		return hook, "", err
	}
	if len(req.Events) == 0 {
		return hook, "", fieldError("events", "is required: the event types to deliver, among %s", eventTypeList())
	}
	for i, e := range req.Events {
		if !slices.Contains(agentd.WebhookEventTypes(), agentd.EventType(e)) || slices.Contains(req.Events[:i], e) {
			return hook, "", fieldError(fmt.Sprintf("events[%d]", i), "must be one of %s, once", eventTypeList())
		}
		hook.Events = append(hook.Events, agentd.EventType(e))
	}
	if req.Description != nil && len(*req.Description) > maxWebhookDescr {
		return hook, "", fieldError("description", "must be at most %d bytes", maxWebhookDescr)
	}
	secret, err := secretOf("secret", req.Secret)
	if err != nil {
		return hook, "", err
	}
	if !s.webhooks.Box.HasKey() {
		return hook, "", fieldError("secret", webhookSecretHelp)
	}
	tenant := TenantFromContext(ctx)
	if have, err := s.webhooks.Store.WebhookList(ctx, tenant, "", maxWebhooks); err != nil {
		return hook, "", err
	} else if len(have) >= maxWebhooks {
		return hook, "", newError(http.StatusConflict, CodeWebhookLimit, "Too many webhooks",
			fmt.Sprintf("a tenant has at most %d webhooks: delete one first", maxWebhooks))
	}
	sealed, err := webhook.Seal(s.webhooks.Box, tenant, secret)
	if err != nil {
		return hook, "", err
	}
	hook.ID, hook.TenantID, hook.URL, hook.SealedSecret = uuid.NewString(), tenant, *req.URL, sealed
	hook.Actor = ActorFromContext(ctx)
	if req.Description != nil {
		hook.Description = *req.Description
	}
	return hook, secret, nil
}

func eventTypeList() string {
	return fmt.Sprintf("%q", agentd.WebhookEventTypes())
}

// webhookFor reads the route's {id}: the request's tenant's subscription.
func (s *server) webhookFor(r *http.Request) (agentd.Webhook, error) {
	if s.webhooks.Store == nil {
		return agentd.Webhook{}, errNoWebhooks
	}
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return agentd.Webhook{}, errWebhookNotFound
	}
	hook, err := s.webhooks.Store.WebhookGet(r.Context(), TenantFromContext(r.Context()), id.String())
	if errors.Is(err, agentd.ErrWebhookNotFound) {
		return hook, errWebhookNotFound
	}
	return hook, err
}

// webhookGet answers GET /webhooks/{id}.
func (s *server) webhookGet(w http.ResponseWriter, r *http.Request) error {
	hook, err := s.webhookFor(r)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, hook.View())
	return nil
}

// webhookUpdateRequest is the body of PATCH /webhooks/{id}.
type webhookUpdateRequest struct {
	Enabled *bool `json:"enabled"`
}

// reasonTenantDisabled is the reason of a subscription its tenant
// disabled.
const reasonTenantDisabled = "disabled by its tenant"

// webhookUpdate answers PATCH /webhooks/{id}: 200 with the subscription,
// enabled (its failures forgotten) or disabled as the body says.
func (s *server) webhookUpdate(w http.ResponseWriter, r *http.Request) error {
	hook, err := s.webhookFor(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req webhookUpdateRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if req.Enabled == nil {
		return fieldError("enabled", "is required: true enables the webhook, false disables it")
	}
	hook, err = s.webhooks.Store.WebhookEnable(r.Context(), hook.TenantID, hook.ID, *req.Enabled, reasonTenantDisabled)
	if errors.Is(err, agentd.ErrWebhookNotFound) {
		return errWebhookNotFound
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, hook.View())
	return nil
}

// webhookList answers GET /webhooks: the tenant's subscriptions, oldest
// first.
func (s *server) webhookList(w http.ResponseWriter, r *http.Request) error {
	if s.webhooks.Store == nil {
		return errNoWebhooks
	}
	limit, after, err := pageParams(r.URL.Query(), cursorWebhooks, defaultHookLimit, maxHookLimit)
	if err != nil {
		return err
	}
	list, err := s.webhooks.Store.WebhookList(r.Context(), TenantFromContext(r.Context()), after, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, agentd.Webhook.View,
		func(h agentd.Webhook) string { return encodeCursor(cursorWebhooks, h.ID) }))
	return nil
}

// pageParams reads a page's limit (def when absent, at most max) and the
// position its cursor (one of list's) names ("": the first page).
func pageParams(q url.Values, list string, def, max int) (limit int, position string, err error) {
	if limit, err = intParam(q, "limit", def, 1, max); err != nil {
		return 0, "", err
	}
	if v := q.Get("cursor"); v != "" {
		if position, err = decodeCursor(v, list); err != nil {
			return 0, "", err
		}
	}
	return limit, position, nil
}

// webhookDelete answers DELETE /webhooks/{id}: 204; its deliveries go
// with it, those pending too.
func (s *server) webhookDelete(w http.ResponseWriter, r *http.Request) error {
	hook, err := s.webhookFor(r)
	if err != nil {
		return err
	}
	if err := s.webhooks.Store.WebhookDelete(r.Context(), hook.TenantID, hook.ID); err != nil &&
		!errors.Is(err, agentd.ErrWebhookNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deliveryList answers GET /webhooks/{id}/deliveries: its deliveries,
// newest first, with their attempts.
func (s *server) deliveryList(w http.ResponseWriter, r *http.Request) error {
	hook, err := s.webhookFor(r)
	if err != nil {
		return err
	}
	limit, before, err := pageParams(r.URL.Query(), cursorDeliveries, defaultHookLimit, maxHookLimit)
	if err != nil {
		return err
	}
	list, err := s.webhooks.Store.WebhookDeliveries(r.Context(), hook.TenantID, hook.ID, before, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, agentd.Delivery.View,
		func(d agentd.Delivery) string { return encodeCursor(cursorDeliveries, d.ID) }))
	return nil
}

// deliveryRedeliver answers POST
// /webhooks/{id}/deliveries/{delivery_id}/redeliver: 202 with the
// delivery, due now under its id.
func (s *server) deliveryRedeliver(w http.ResponseWriter, r *http.Request) error {
	hook, err := s.webhookFor(r)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(chi.URLParam(r, "delivery_id"))
	if err != nil {
		return errWebhookNotFound
	}
	d, err := s.webhooks.Store.DeliveryRedeliver(r.Context(), hook.TenantID, hook.ID, id.String())
	if errors.Is(err, agentd.ErrWebhookNotFound) {
		return errWebhookNotFound
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, d.View())
	return nil
}

// runDeliveries answers GET /runs/{id}/deliveries: the deliveries of the
// run's events, to its own webhook and to the tenant's subscriptions.
func (s *server) runDeliveries(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runFor(r)
	if err != nil {
		return err
	}
	if s.webhooks.Store == nil {
		return errNoWebhooks
	}
	list, err := s.webhooks.Store.RunDeliveries(r.Context(), run.TenantID, run.ID)
	if err != nil {
		return err
	}
	out := struct {
		Data []agentd.DeliveryView `json:"data"`
	}{Data: make([]agentd.DeliveryView, 0, len(list))}
	for _, d := range list {
		out.Data = append(out.Data, d.View())
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// runWebhookRequest is POST /runs "webhook": a URL, or {"url", "secret"}.
type runWebhookRequest struct {
	URL    *string `json:"url"`
	Secret *string `json:"secret"`
}

// runWebhook reads POST /runs "webhook" (field: its name, with its
// prefix) into the run's webhook, its secret sealed; generated is the
// secret when the request gave none (to be shown once). Nil: none.
func (s *server) runWebhook(ctx context.Context, field string, raw json.RawMessage) (hook *agentd.RunWebhook,
	generated string, err error) {
	if isNull(raw) {
		return nil, "", nil
	}
	if s.webhooks.Store == nil {
		return nil, "", fieldError(field, "this server delivers no webhooks")
	}
	var req runWebhookRequest
	if err := json.Unmarshal(raw, &req.URL); err != nil {
		if err := decodeStrict(raw, &req, field+"."); err != nil {
			return nil, "", fieldError(field, "must be a URL, or an object of url and secret")
		}
	}
	if req.URL == nil {
		return nil, "", fieldError(field+".url", "is required: the URL the run's deliveries are POSTed to")
	}
	if err := s.checkWebhookURL(field, *req.URL); err != nil {
		return nil, "", err
	}
	secret, err := secretOf(field+".secret", req.Secret)
	if err != nil {
		return nil, "", err
	}
	if !s.webhooks.Box.HasKey() {
		return nil, "", fieldError(field, webhookSecretHelp)
	}
	sealed, err := webhook.Seal(s.webhooks.Box, TenantFromContext(ctx), secret)
	if err != nil {
		return nil, "", err
	}
	if req.Secret == nil {
		generated = secret
	}
	return &agentd.RunWebhook{URL: *req.URL, SealedSecret: sealed}, generated, nil
}
