package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
)

// TestWebhooks: agentctl subscribes a URL (printing its secret once),
// shows and lists it, lists its deliveries once a run ended, redelivers
// one, and deletes it; a subscription without events is a usage error.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("webhook-signature") != "" {
			got.Add(1)
		}
	}))
	defer recv.Close()
	u, _ := url.Parse(recv.URL)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	base := newServer(t, "AGENTD_SECRET_KEY="+base64.StdEncoding.EncodeToString(key), "AGENTD_WEBHOOK_ALLOW_HOSTS="+u.Host)
	if r := ctl(t, base, "webhooks", "create", "-url", recv.URL); r.code != exitError {
		t.Fatalf("webhooks create without -events: %s", r)
	}
	r := ctl(t, base, "webhooks", "create", "-url", recv.URL, "-events", "run.completed,run.failed")
	if r.code != exitOK || !strings.Contains(r.stdout, "whsec_") || !strings.Contains(r.stdout, "run.completed,run.failed") {
		t.Fatalf("webhooks create: %s", r)
	}
	r = ctl(t, base, "-o", "json", "webhooks", "list")
	var p client.Page[client.Webhook]
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || len(p.Data) != 1 || p.Data[0].Secret != nil {
		t.Fatalf("webhooks list: %v %s", err, r)
	}
	id := p.Data[0].ID
	if r := ctl(t, base, "webhooks", "get", id); r.code != exitOK || strings.Contains(r.stdout, "whsec_") {
		t.Fatalf("webhooks get: %s", r)
	}
	if r := ctl(t, base, "runs", "create", "-wait", "/say hi"); r.code != exitOK {
		t.Fatalf("runs create: %s", r)
	}
	var deliveries client.Page[client.Delivery]
	for deadline := time.Now().Add(20 * time.Second); got.Load() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no delivery arrived")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = ctl(t, base, "-o", "json", "webhooks", "deliveries", id)
		if err := json.Unmarshal([]byte(r.stdout), &deliveries); err != nil {
			t.Fatalf("webhooks deliveries: %v %s", err, r)
		}
		if len(deliveries.Data) == 1 && deliveries.Data[0].Status == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %s", r)
		}
	}
	if r := ctl(t, base, "webhooks", "deliveries", id); r.code != exitOK || !strings.Contains(r.stdout, "200 in") {
		t.Fatalf("webhooks deliveries: %s", r)
	}
	if r := ctl(t, base, "webhooks", "redeliver", id, deliveries.Data[0].ID); r.code != exitOK || !strings.Contains(r.stdout, "due again") {
		t.Fatalf("webhooks redeliver: %s", r)
	}
	if r := ctl(t, base, "webhooks", "disable", id); r.code != exitOK || !strings.Contains(r.stdout, "disabled by its tenant") {
		t.Fatalf("webhooks disable: %s", r)
	}
	if r := ctl(t, base, "webhooks", "enable", id); r.code != exitOK || strings.Contains(r.stdout, "disabled") {
		t.Fatalf("webhooks enable: %s", r)
	}
	if r := ctl(t, base, "webhooks", "delete", id); r.code != exitOK {
		t.Fatalf("webhooks delete: %s", r)
	}
	if r := ctl(t, base, "webhooks", "get", id); r.code != exitError || !strings.Contains(r.stderr, "webhook_not_found") {
		t.Fatalf("webhooks get of a deleted one: %s", r)
	}
}
