package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/webhook"
)

// TestStopDrainsThenCuts: Stop lets an attempt under way finish and be
// recorded within its context (the endpoint is not sent it again), and
// cuts one that outlasts it, leaving it pending for its lease to bring
// back; stopping twice, or before starting, is safe.
func TestStopDrainsThenCuts(t *testing.T) {
	f := newFixture(t)
	secret := webhook.NewSecret()
	var mu sync.Mutex
	arrived := map[string]int{} // by webhook-id
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.Header.Get(webhook.HeaderID)]++
		wait := release
		mu.Unlock()
		select {
		case <-wait:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer slow.Close()
	hook := f.subscribe(t, "acme", slow.URL, secret)
	cfg := webhook.Config{Store: f.store, Box: f.box, Payload: payload, Tick: 10 * time.Millisecond, Timeout: time.Minute}

	never := webhook.New(cfg)
	if err := never.Stop(context.Background()); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := never.Start(context.Background()); err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	if err := never.Stop(context.Background()); err != nil {
		t.Fatalf("stop after stop: %v", err)
	}

	under := func(n int) {
		t.Helper()
		waitFor(t, "attempts under way", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(arrived) == n
		})
	}
	ctx := context.Background()
	deliveries := func() []agentd.Delivery {
		t.Helper()
		list, err := f.store.WebhookDeliveries(ctx, "acme", hook.ID, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	// Drained: the endpoint answers 200 ms after Stop began.
	d := webhook.New(cfg)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f.stop(t, "acme", agentd.EventRunCompleted)
	under(1)
	first := release
	time.AfterFunc(200*time.Millisecond, func() { close(first) })
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Stop(sctx); err != nil {
		t.Fatalf("stop while an attempt drains: %v", err)
	}
	if list := deliveries(); len(list) != 1 || list[0].Status != agentd.DeliveryDelivered {
		t.Fatalf("after a drained stop: %+v, want the delivery delivered", list)
	}
	if err := d.Stop(sctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	// Cut: an endpoint that does not answer within the stop's context.
	mu.Lock()
	release = make(chan struct{})
	defer close(release)
	mu.Unlock()
	d = webhook.New(cfg)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f.stop(t, "acme", agentd.EventRunCompleted)
	under(2)
	sctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := d.Stop(sctx)
	if err == nil || !strings.Contains(err.Error(), "cut 1 delivery attempts") {
		t.Fatalf("stop past its context: %v, want one attempt cut", err)
	}
	if err2 := d.Stop(ctx); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("second stop: %v, want what the first said", err2)
	}
	pending := 0
	for _, dl := range deliveries() {
		if dl.Status == agentd.DeliveryPending && len(dl.Log) == 0 {
			pending++
		}
	}
	if pending != 1 {
		t.Fatalf("after a cut: %+v, want one delivery pending with no attempt recorded", deliveries())
	}
}
