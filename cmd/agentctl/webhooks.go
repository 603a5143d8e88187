package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// webhooksCreate: agentctl webhooks create -url URL -events TYPES
// [-secret S] [-description D].
func webhooksCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks create", "-url URL -events TYPES [-secret S] [-description D]",
		"Subscribe a URL to events of the tenant's runs and schedules: each is POSTed there,\n"+
			"signed as Standard Webhooks says. It prints the webhook with its signing secret,\n"+
			"which no later command shows.")
	u := f.String("url", "", "where deliveries are POSTed: a `URL`")
	events := f.String("events", "", "comma-separated event `TYPES`, among "+strings.Join(eventNames(), ", "))
	secret := f.String("secret", "", "the signing `secret` (whsec_...; default: the server makes one)")
	descr := f.String("description", "", "a `description`")
	if _, code, ok := f.parse(args, 0, 0); !ok {
		return code
	}
	if *u == "" || *events == "" {
		return f.usageError("-url and -events are required")
	}
	w := client.NewWebhook{URL: *u, Secret: *secret, Description: *descr}
	for _, e := range strings.Split(*events, ",") {
		w.Events = append(w.Events, agentd.EventType(strings.TrimSpace(e)))
	}
	hook, err := a.c.CreateWebhook(ctx, w)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printWebhook(hook)
}

func eventNames() []string {
	var out []string
	for _, t := range agentd.WebhookEventTypes() {
		out = append(out, string(t))
	}
	return out
}

// webhooksGet: agentctl webhooks get ID.
func webhooksGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks get", "ID", "Show a webhook (never its secret).")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	hook, err := a.c.GetWebhook(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printWebhook(hook)
}

// webhooksEnable: agentctl webhooks enable ID.
func webhooksEnable(ctx context.Context, a *app, args []string) int {
	return a.webhookEnable(ctx, "webhooks enable",
		"Enable a webhook disabled by hand or after its attempts failed for long, its failures forgotten.", args, true)
}

// webhooksDisable: agentctl webhooks disable ID.
func webhooksDisable(ctx context.Context, a *app, args []string) int {
	return a.webhookEnable(ctx, "webhooks disable",
		"Disable a webhook: its deliveries end failed, unattempted, until it is enabled.", args, false)
}

func (a *app) webhookEnable(ctx context.Context, name, help string, args []string, enabled bool) int {
	f := a.newFlags(name, "ID", help)
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	hook, err := a.c.EnableWebhook(ctx, pos[0], enabled)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printWebhook(hook)
}

// webhooksList: agentctl webhooks list [-limit N] [-cursor C].
func webhooksList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks list", "[-limit N] [-cursor C]", "List the tenant's webhooks, oldest first.")
	pg := f.pages("webhooks")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.ListWebhooks(ctx, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "URL", "EVENTS", "CREATED")
	for _, w := range p.Data {
		row(tw, w.ID, w.URL, joinEvents(w.Events), when(&w.CreatedAt))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

func joinEvents(types []agentd.EventType) string {
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// webhooksDelete: agentctl webhooks delete ID.
func webhooksDelete(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks delete", "ID", "Delete a webhook and its deliveries, those pending too.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if err := a.c.DeleteWebhook(ctx, pos[0]); err != nil {
		return a.fail(ctx, err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "deleted webhook %s\n", pos[0])
	}
	return exitOK
}

// webhooksDeliveries: agentctl webhooks deliveries [-limit N] [-cursor C] ID.
func webhooksDeliveries(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks deliveries", "[-limit N] [-cursor C] ID",
		"List a webhook's deliveries, newest first, with the status code and latency of each attempt.")
	pg := f.pages("deliveries")
	pos, code, ok := pg.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := a.c.WebhookDeliveries(ctx, pos[0], *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "EVENT", "RUN", "STATUS", "ATTEMPTS")
	for _, d := range p.Data {
		var tries []string
		for _, at := range d.Attempts {
			what := "-"
			if at.StatusCode != nil {
				what = fmt.Sprint(*at.StatusCode)
			}
			tries = append(tries, fmt.Sprintf("%s in %dms", what, at.LatencyMS))
		}
		run := "-"
		if d.RunID != nil {
			run = *d.RunID
		}
		row(tw, d.ID, string(d.EventType), run, string(d.Status), strings.Join(tries, ", "))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// webhooksRedeliver: agentctl webhooks redeliver ID DELIVERY_ID.
func webhooksRedeliver(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("webhooks redeliver", "ID DELIVERY_ID",
		"Deliver again, now, under the same webhook-id: a receiver that saw it can tell.")
	pos, code, ok := f.parse(args, 2, 2)
	if !ok {
		return code
	}
	d, err := a.c.Redeliver(ctx, pos[0], pos[1])
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(d)
	}
	fmt.Fprintf(a.stdout, "delivery %s is due again\n", d.ID)
	return exitOK
}

// printWebhook writes a webhook, with its secret when the server showed
// it (only as it was created).
func (a *app) printWebhook(w *client.Webhook) int {
	if a.json {
		return a.printJSON(w)
	}
	k := newKV(a.stdout)
	k.line("id", w.ID)
	k.line("url", w.URL)
	k.line("events", joinEvents(w.Events))
	if w.Description != "" {
		k.line("description", w.Description)
	}
	if w.Secret != nil {
		k.line("secret", *w.Secret+"  (shown only now: keep it)")
	}
	k.line("created", when(&w.CreatedAt))
	k.line("created_by", w.CreatedBy)
	if !w.Enabled && w.DisabledReason != nil {
		k.line("disabled", when(w.DisabledAt)+": "+*w.DisabledReason)
	}
	k.flush()
	return exitOK
}
