package webhook_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/webhook"
)

// lockedBuffer is a log's output, written by the deliverer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFailingWebhookIsDisabledAndReenabled: a subscription every attempt
// to which fails for DisableAfter is disabled (a log line, the metric,
// its time and reason in its view); its deliveries then end failed
// without an attempt; enabled again, it is delivered to, and a delivery
// that failed meanwhile can be redelivered.
func TestFailingWebhookIsDisabledAndReenabled(t *testing.T) {
	f := newFixture(t)
	var up atomic.Bool
	var requests sync.Map // webhook-id: how many requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := requests.LoadOrStore(r.Header.Get(webhook.HeaderID), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	hook := f.subscribe(t, "acme", srv.URL, webhook.NewSecret())
	reg := prometheus.NewRegistry()
	var logs lockedBuffer
	f.start(t, webhook.Config{DisableAfter: 300 * time.Millisecond, Horizon: time.Minute, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()

	first := f.stop(t, "acme", agentd.EventRunCompleted)
	waitFor(t, "the webhook to be disabled", func() bool {
		w, err := f.store.WebhookGet(ctx, "acme", hook.ID)
		if err != nil {
			t.Fatal(err)
		}
		hook = w
		return w.DisabledAt != nil
	})
	v := hook.View()
	if v.Enabled || v.DisabledReason == nil || !strings.Contains(*v.DisabledReason, "answered 503") {
		t.Fatalf("disabled webhook's view: enabled %v, reason %v; want false, the last attempt's error", v.Enabled,
			v.DisabledReason)
	}
	if n := counter(t, reg, "agentd_webhooks_disabled_total"); n != 1 {
		t.Fatalf("agentd_webhooks_disabled_total %v, want 1", n)
	}
	if !strings.Contains(logs.String(), "webhook disabled") || !strings.Contains(logs.String(), hook.ID) {
		t.Fatalf("no log line of the disabling in:\n%s", logs.String())
	}

	// Disabled: the retrying delivery and a new one end failed, the new
	// one never attempted.
	second := f.stop(t, "acme", agentd.EventRunCompleted)
	var ds []agentd.Delivery
	waitFor(t, "both deliveries to end failed", func() bool {
		var err error
		if ds, err = f.store.WebhookDeliveries(ctx, "acme", hook.ID, "", 10); err != nil {
			t.Fatal(err)
		}
		return len(ds) == 2 && ds[0].Status == agentd.DeliveryFailed && ds[1].Status == agentd.DeliveryFailed
	})
	if ds[0].RunID != second || len(ds[0].Log) != 0 {
		t.Fatalf("the delivery made while disabled: %+v; want failed without an attempt", ds[0])
	}
	if _, ok := requests.Load(ds[0].ID); ok {
		t.Fatal("the endpoint got a delivery made while its webhook was disabled")
	}

	// Enabled again: a new delivery and a redelivery reach it.
	up.Store(true)
	if hook, err := f.store.WebhookEnable(ctx, "acme", hook.ID, true, ""); err != nil || hook.DisabledAt != nil {
		t.Fatalf("enable: %+v, %v", hook, err)
	}
	third := f.stop(t, "acme", agentd.EventRunCompleted)
	if _, err := f.store.DeliveryRedeliver(ctx, "acme", hook.ID, ds[0].ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redelivery and the new delivery", func() bool {
		var err error
		if ds, err = f.store.WebhookDeliveries(ctx, "acme", hook.ID, "", 10); err != nil {
			t.Fatal(err)
		}
		delivered := map[string]bool{}
		for _, d := range ds {
			delivered[d.RunID] = d.Status == agentd.DeliveryDelivered
		}
		return delivered[second] && delivered[third] && !delivered[first]
	})
	w, err := f.store.WebhookGet(ctx, "acme", hook.ID)
	if err != nil || !w.View().Enabled || w.View().DisabledReason != nil {
		t.Fatalf("re-enabled webhook: %+v, %v", w.View(), err)
	}
	if n := counter(t, reg, "agentd_webhooks_disabled_total"); n != 1 {
		t.Fatalf("agentd_webhooks_disabled_total %v after the re-enabling, want 1", n)
	}
}

// counter is the value of the counter name in reg (0: none yet).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
