package client_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestWebhooks: against a real server, a subscription made with the SDK
// (its secret shown once) and a run's own webhook with a secret the SDK
// made both get the run's end, verified with the Standard Webhooks
// library; the SDK lists the deliveries and their attempts.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	secrets := map[string]string{} // by path
	got := map[string]int{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		wh, err := standardwebhooks.NewWebhook(secrets[r.URL.Path])
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got[r.URL.Path]++
	}))
	defer recv.Close()
	u, _ := url.Parse(recv.URL)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t), "AGENTD_SECRET_KEY="+base64.StdEncoding.EncodeToString(key),
		"AGENTD_WEBHOOK_ALLOW_HOSTS="+u.Host)
	ctx := context.Background()
	c := client.New("http://" + addr)

	if _, err := c.CreateWebhook(ctx, client.NewWebhook{URL: recv.URL + "/sub"}); !client.IsCode(err, "invalid_field") {
		t.Fatalf("a webhook without events: %v", err)
	}
	hook, err := c.CreateWebhook(ctx, client.NewWebhook{URL: recv.URL + "/sub", Events: []agentd.EventType{agentd.EventRunCompleted}})
	if err != nil || hook.Secret == nil {
		t.Fatalf("create: %+v %v", hook, err)
	}
	mu.Lock()
	secrets["/sub"], secrets["/own"] = *hook.Secret, client.NewWebhookSecret()
	own := secrets["/own"]
	mu.Unlock()
	if again, err := c.GetWebhook(ctx, hook.ID); err != nil || again.Secret != nil {
		t.Fatalf("get: %+v %v (want no secret)", again, err)
	}
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/say hi", Webhook: &client.RunWebhook{URL: recv.URL + "/own", Secret: own},
		Wait: 10 * time.Second})
	if err != nil || run.Status != agentd.StatusCompleted || run.Webhook == nil || *run.Webhook != recv.URL+"/own" {
		t.Fatalf("run: %+v %v", run, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n, m := got["/sub"], got["/own"]
		mu.Unlock()
		if n == 1 && m == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries received: %d to the subscription, %d to the run's own; want 1 and 1", n, m)
		}
	}
	// The receiver's answer is recorded once it reaches the server.
	var page *client.Page[client.Delivery]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if page, err = c.WebhookDeliveries(ctx, hook.ID, 0, ""); err != nil || len(page.Data) != 1 ||
			page.Data[0].Status != agentd.DeliveryPending || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(page.Data) != 1 || page.Data[0].Status != agentd.DeliveryDelivered || len(page.Data[0].Attempts) != 1 {
		t.Fatalf("deliveries: %+v %v", page, err)
	}
	if ds, err := c.RunDeliveries(ctx, run.ID); err != nil || len(ds) != 2 {
		t.Fatalf("the run's deliveries: %+v %v", ds, err)
	}
	if d, err := c.Redeliver(ctx, hook.ID, page.Data[0].ID); err != nil || d.ID != page.Data[0].ID {
		t.Fatalf("redeliver: %+v %v", d, err)
	}
	// A run's own webhook without a secret: the server makes one, which
	// CreateRun writes into the RunWebhook.
	made := &client.RunWebhook{URL: recv.URL + "/made"}
	mu.Lock() // the delivery waits for the secret to be known
	other, err := c.CreateRun(ctx, client.CreateRun{Input: "/say hi", Webhook: made})
	if err != nil || !strings.HasPrefix(made.Secret, "whsec_") {
		mu.Unlock()
		t.Fatalf("a run's webhook without a secret: %+v %v, secret %q", other, err, made.Secret)
	}
	secrets["/made"] = made.Secret
	mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := got["/made"]
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries to a webhook whose secret the server made, want 1", n)
		}
	}
	if w, err := c.EnableWebhook(ctx, hook.ID, false); err != nil || w.Enabled || w.DisabledAt == nil ||
		w.DisabledReason == nil {
		t.Fatalf("disable: %+v %v", w, err)
	}
	if w, err := c.EnableWebhook(ctx, hook.ID, true); err != nil || !w.Enabled || w.DisabledAt != nil {
		t.Fatalf("enable: %+v %v", w, err)
	}
	if err := c.DeleteWebhook(ctx, hook.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWebhook(ctx, hook.ID); !client.IsCode(err, "webhook_not_found") {
		t.Fatalf("get after delete: %v", err)
	}
}
