package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestServicesStopBeforeStartAndTwice: the store's services (group
// commit, retention, the replica sampler without a replica) stop safely
// before they start and twice, and do not start again once stopped.
func TestServicesStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	for name, svc := range map[string]interface {
		Start(context.Context) error
		Stop(context.Context) error
	}{"group commit": s.GroupCommit(1, 64), "retention": s.Retention(time.Hour, time.Hour, nil), "replica sampler": s.ReplicaSampler()} {
		for i, err := range []error{svc.Stop(ctx), svc.Start(ctx), svc.Stop(ctx)} {
			if err != nil {
				t.Errorf("%s: call %d: %v", name, i, err)
			}
		}
	}
	if s.DeferTicks() != 0 {
		t.Fatal("group commit started after its Stop")
	}
	g := s.GroupCommit(1, 64, persist.DeferTick(time.Hour))
	if err := g.Start(ctx); err != nil || s.DeferTicks() != time.Hour {
		t.Fatalf("group commit start: %v, tick %v", err, s.DeferTicks())
	}
	for range 2 {
		if err := g.Stop(ctx); err != nil || s.DeferTicks() != 0 {
			t.Fatalf("group commit stop: %v, tick %v", err, s.DeferTicks())
		}
	}
}

// TestRetentionService: the service's first pass runs at once, and later
// ones every interval, until Stop.
func TestRetentionService(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	// old makes a conversation whose one run ended two hours ago.
	old := func() string {
		t.Helper()
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m",
			Params: agentd.RunParams{MaxSteps: 3}, Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunCancel(ctx, "t", r.ID, "local"); err != nil {
			t.Fatal(err)
		}
		exec := func(sql, id string) {
			t.Helper()
			if _, err := db.Exec(ctx, sql, id); err != nil {
				t.Fatal(err)
			}
		}
		exec(`UPDATE runs SET created_at = now() - interval '2h', finished_at = now() - interval '2h' WHERE id = $1`, r.ID)
		exec(`UPDATE conversations SET created_at = now() - interval '2h', updated_at = now() - interval '2h' WHERE id = $1`,
			r.ConversationID)
		return r.ConversationID
	}
	gone := func(conv string) bool {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM conversations WHERE id = $1`, conv).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}
	wait := func(conv string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !gone(conv); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("conversation %s not removed", conv)
			}
		}
	}
	first := old()
	r := s.Retention(time.Hour, 100*time.Millisecond, nil)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wait(first)
	wait(old()) // a later pass
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	after := old()
	time.Sleep(300 * time.Millisecond) // three intervals
	if gone(after) {
		t.Fatal("a pass ran after Stop")
	}
}
