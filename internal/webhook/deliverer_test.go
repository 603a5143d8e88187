package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/webhook"
)

// receiver is an endpoint that verifies each request's signature with the
// Standard Webhooks library and answers the codes of fail first, then 200.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	fail   map[string]int // by run id: how many more attempts to answer 500
	seen   []string       // webhook-id of each verified request
	bodies map[string]string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	wh, err := standardwebhooks.NewWebhook(rc.secret)
	if err != nil {
		rc.t.Error(err)
	}
	if err := wh.Verify(body, r.Header); err != nil {
		rc.t.Errorf("signature: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seen = append(rc.seen, id)
	if prev, ok := rc.bodies[id]; ok && prev != string(body) {
		rc.t.Errorf("delivery %s sent another body on a retry", id)
	}
	rc.bodies[id] = string(body)
	var p struct {
		Data struct {
			Run struct {
				ID string `json:"id"`
			} `json:"run"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		rc.t.Error(err)
	}
	if rc.fail[p.Data.Run.ID] > 0 {
		rc.fail[p.Data.Run.ID]--
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) ids() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.seen)
}

type fixture struct {
	store *persist.Store
	url   string
	box   *secrets.Box
}

func newFixture(t *testing.T) fixture {
	url := persisttest.NewDatabase(t)
	box, err := secrets.New(make([]byte, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return fixture{store: persisttest.Open(t, persist.Config{URL: url}), url: url, box: box}
}

// subscribe subscribes url to run.completed for tenant, under secret.
func (f fixture) subscribe(t *testing.T, tenant, url, secret string) agentd.Webhook {
	sealed, err := webhook.Seal(f.box, tenant, secret)
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.store.WebhookCreate(context.Background(), agentd.Webhook{TenantID: tenant, URL: url,
		Events: []agentd.EventType{agentd.EventRunCompleted}, SealedSecret: sealed})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// stop writes an outbox row as a run's end does: a run of tenant's, ended
// with event type typ.
func (f fixture) stop(t *testing.T, tenant string, typ agentd.EventType, failFirst ...*receiver) string {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := uuid.NewString()
	for _, rc := range failFirst {
		rc.mu.Lock()
		rc.fail[id] = 2
		rc.mu.Unlock()
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (run_id, tenant_id, event_type, seq) VALUES ($1, $2, $3, 7)`,
		id, tenant, typ); err != nil {
		t.Fatal(err)
	}
	return id
}

var _ webhook.Store = (*persist.Store)(nil)

func payload(_ context.Context, _ agentd.RunReader, e agentd.OutboxEntry) (json.RawMessage, bool, error) {
	b, err := agentd.DeliveryPayload(e.EventType, e.CreatedAt, map[string]any{"run": map[string]string{"id": e.RunID}})
	return b, true, err
}

func (f fixture) start(t *testing.T, cfg webhook.Config) *webhook.Deliverer {
	cfg.Store, cfg.Box, cfg.Payload = f.store, f.box, payload
	cfg.Backoff, cfg.Tick = max(cfg.Backoff, 20*time.Millisecond), 10*time.Millisecond
	d := webhook.New(cfg)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return d
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeliveriesAreSignedRetriedAndOnce: two deliverers (two instances)
// share the outbox; each stop a subscription wants reaches its receiver,
// signed, once delivered; a receiver that answers 500 twice gets the same
// webhook-id and body three times, and the deliveries list shows the
// three attempts; an event type the subscription does not want, and
// another tenant's stop, send nothing.
func TestDeliveriesAreSignedRetriedAndOnce(t *testing.T) {
	f := newFixture(t)
	secret := webhook.NewSecret()
	rc := &receiver{t: t, secret: secret, fail: map[string]int{}, bodies: map[string]string{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	hook := f.subscribe(t, "acme", srv.URL, secret)
	f.start(t, webhook.Config{})
	f.start(t, webhook.Config{})

	var runs []string
	for range 5 {
		runs = append(runs, f.stop(t, "acme", agentd.EventRunCompleted))
	}
	f.stop(t, "acme", agentd.EventRunFailed)     // not wanted
	f.stop(t, "rival", agentd.EventRunCompleted) // not acme's
	ctx := context.Background()
	var list []agentd.Delivery
	waitFor(t, "five deliveries delivered", func() bool {
		var err error
		if list, err = f.store.WebhookDeliveries(ctx, "acme", hook.ID, "", 100); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range list {
			if d.Status == agentd.DeliveryDelivered {
				n++
			}
		}
		return n == 5
	})
	if len(list) != 5 || len(rc.ids()) != 5 {
		t.Fatalf("%d deliveries, %d requests; want 5 and 5 (one per run, however many instances)", len(list), len(rc.ids()))
	}
	for _, d := range list {
		if !slices.Contains(runs, d.RunID) || len(d.Log) != 1 || d.Log[0].StatusCode != http.StatusNoContent {
			t.Errorf("delivery %+v: want one of the five runs, one attempt answered 204", d)
		}
	}

	// A receiver that fails twice.
	run := f.stop(t, "acme", agentd.EventRunCompleted, rc)
	var ds []agentd.Delivery
	waitFor(t, "the sixth delivery", func() bool {
		var err error
		if ds, err = f.store.RunDeliveries(ctx, "acme", run); err != nil {
			t.Fatal(err)
		}
		return len(ds) == 1 && ds[0].Status != agentd.DeliveryPending
	})
	d := ds[0]
	if d.Status != agentd.DeliveryDelivered || len(d.Log) != 3 {
		t.Fatalf("delivery %+v: want delivered at its third attempt", d)
	}
	codes := []int{}
	for _, a := range d.Log {
		codes = append(codes, a.StatusCode)
	}
	count := 0
	for _, id := range rc.ids() {
		if id == d.ID {
			count++
		}
	}
	if count != 3 || !slices.Equal(codes, []int{500, 500, 204}) {
		t.Fatalf("%d requests with webhook-id %s for attempts %v", count, d.ID, codes)
	}
	t.Logf("attempts of the retried delivery: %v", codes)
}

// TestSlowEndpointAndHorizon: an endpoint that never answers holds at
// most PerURL of an instance's workers, so another tenant's endpoint gets
// its deliveries meanwhile; one that always fails is marked failed once
// the horizon is over, and a redelivery makes it due again under its id.
func TestSlowEndpointAndHorizon(t *testing.T) {
	f := newFixture(t)
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	var failing sync.Map
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failing.Store(r.Header.Get(webhook.HeaderID), true)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	secret := webhook.NewSecret()
	rc := &receiver{t: t, secret: secret, fail: map[string]int{}, bodies: map[string]string{}}
	fast := httptest.NewServer(rc)
	defer fast.Close()
	f.subscribe(t, "slow", slow.URL, secret)
	dead := f.subscribe(t, "down", down.URL, secret)
	f.subscribe(t, "fast", fast.URL, secret)
	f.start(t, webhook.Config{Workers: 3, PerURL: 2, Timeout: time.Minute, Horizon: 300 * time.Millisecond})

	for range 10 {
		f.stop(t, "slow", agentd.EventRunCompleted)
	}
	time.Sleep(100 * time.Millisecond) // the slow endpoint's attempts are under way
	for range 5 {
		f.stop(t, "fast", agentd.EventRunCompleted)
	}
	f.stop(t, "down", agentd.EventRunCompleted)
	waitFor(t, "the fast endpoint's five deliveries", func() bool { return len(rc.ids()) == 5 })

	ctx := context.Background()
	var list []agentd.Delivery
	waitFor(t, "the failing delivery to give up", func() bool {
		list, _ = f.store.WebhookDeliveries(ctx, "down", dead.ID, "", 10)
		return len(list) == 1 && list[0].Status == agentd.DeliveryFailed
	})
	attempts := len(list[0].Log)
	if attempts < 2 || list[0].Log[0].StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("failed delivery's attempts %+v: want at least two, answered 503", list[0].Log)
	}
	again, err := f.store.DeliveryRedeliver(ctx, "down", dead.ID, list[0].ID)
	if err != nil || again.Status != agentd.DeliveryPending || again.ID != list[0].ID {
		t.Fatalf("redeliver: %+v, %v", again, err)
	}
	if _, err := f.store.DeliveryRedeliver(ctx, "fast", dead.ID, list[0].ID); err != agentd.ErrWebhookNotFound {
		t.Fatalf("another tenant's redelivery: %v, want ErrWebhookNotFound", err)
	}
	waitFor(t, "the redelivery's attempts", func() bool {
		list, _ = f.store.WebhookDeliveries(ctx, "down", dead.ID, "", 10)
		return list[0].Status == agentd.DeliveryFailed && len(list[0].Log) > attempts
	})
	n := 0
	failing.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d webhook-ids reached the failing endpoint; want 1 (the same across retries and the redelivery)", n)
	}
}
