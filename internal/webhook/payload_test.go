package webhook_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/webhook"
)

// TestPayloadInTheDispatch: the dispatch of the outbox, on a store of one
// connection, builds each delivery's payload (webhook.Payload) through the
// dispatching transaction: the run as GET /runs/{id} shows it, with its
// cost from the ledger. (A payload read on another connection would wait
// for the one the transaction holds, and the dispatch would time out.) A
// row whose run is gone is dispatched with no delivery.
func TestPayloadInTheDispatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	store := persisttest.Open(t, persist.Config{URL: f.url, MaxConns: 1})
	ctx := context.Background()
	run, _, err := store.RunCreate(ctx, persist.RunCreateParams{TenantID: "t1", Model: "fake",
		Params: agentd.RunParams{MaxSteps: 1, Metadata: json.RawMessage(`{"k":"v"}`)},
		Input:  []agentd.InputMessage{{Role: agentd.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	hook := f.subscribe(t, "t1", "https://hooks.example/in", webhook.NewSecret())
	conn, err := pgx.Connect(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO model_calls (tenant_id, run_id, step_seq, n, kind, model, provider,
			input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens, cost)
		VALUES ('t1', $1, 1, 1, 'step', 'fake', 'openai', 100, 40, 10, 20, 5, 0.25)`, run.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (run_id, tenant_id, event_type, seq) VALUES ($1, 't1', 'run.completed', 7)`,
		run.ID); err != nil {
		t.Fatal(err)
	}
	gone := f.stop(t, "t1", agentd.EventRunCompleted) // an outbox row without its run
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := store.OutboxDispatch(dctx, 10, webhook.Payload)
	if err != nil || n != 2 {
		t.Fatalf("dispatched %d rows: %v", n, err)
	}
	dels, err := store.WebhookDeliveries(ctx, "t1", hook.ID, "", 10)
	if err != nil || len(dels) != 1 || dels[0].RunID != run.ID {
		t.Fatalf("deliveries %+v %v, want one of run %s (none of %s)", dels, err, run.ID, gone)
	}
	stored, err := store.RunGet(ctx, "t1", run.ID)
	if err != nil {
		t.Fatal(err)
	}
	view := stored.View()
	view.Cost, view.Usage.CacheWriteTokens = 0.25, 10
	want, _ := json.Marshal(map[string]any{"type": agentd.EventRunCompleted, "data": map[string]any{"run": view}})
	var got, wanted map[string]any
	if err := json.Unmarshal(dels[0].Payload, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(want, &wanted)
	if delete(got, "timestamp"); !reflect.DeepEqual(got, wanted) {
		t.Fatalf("payload\n%s\nwant\n%s", dels[0].Payload, want)
	}
}
