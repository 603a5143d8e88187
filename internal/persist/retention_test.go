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

// TestRetentionPass: a pass removes the conversations whose runs all ended
// before the horizon, with everything of theirs, and old idempotency keys;
// it never touches a conversation with a run in progress or newer than the
// horizon, nor any of that conversation's history and events.
func TestRetentionPass(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// ended makes a conversation's run that ended (cancelled) age ago.
	ended := func(conv string, age time.Duration) agentd.Run {
		t.Helper()
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m", ConversationID: conv,
			Params: agentd.RunParams{MaxSteps: 3, IfBusy: "enqueue"}, Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunCancel(ctx, "t", r.ID, "local"); err != nil {
			t.Fatal(err)
		}
		exec(`UPDATE runs SET created_at = now() - $2::interval, finished_at = now() - $2::interval WHERE id = $1`, r.ID, age.String())
		exec(`UPDATE conversations SET created_at = now() - $2::interval, updated_at = now() - $2::interval WHERE id = $1`,
			r.ConversationID, age.String())
		return r
	}
	old := ended("", 3*time.Hour)   // removed
	mixed := ended("", 3*time.Hour) // kept: a newer run below
	ended(mixed.ConversationID, 10*time.Minute)
	recent := ended("", 10*time.Minute) // kept
	live, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m",
		Params: agentd.RunParams{MaxSteps: 3}, Input: []agentd.InputMessage{{Role: "user", Content: "still going"}}})
	if err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE runs SET created_at = now() - interval '3 hours' WHERE id = $1`, live.ID) // queued for long: kept
	exec(`UPDATE conversations SET created_at = now() - interval '3 hours', updated_at = now() - interval '3 hours' WHERE id = $1`, live.ConversationID)
	exec(`INSERT INTO idempotency_keys (tenant_id, key, request_hash, created_at) VALUES ('t', 'old', 'h', now() - interval '3 hours'), ('t', 'new', 'h', now())`)
	// Deliveries: one finished long ago (removed), one finished now and one
	// pending since long ago (kept).
	exec(`INSERT INTO webhook_deliveries (id, tenant_id, url, sealed_secret, event_type, payload, status, finished_at, created_at)
		VALUES (gen_random_uuid(), 't', 'https://x', 's', 'run.completed', '{}', 'delivered', now() - interval '3 hours', now() - interval '3 hours'),
		(gen_random_uuid(), 't', 'https://x', 's', 'run.completed', '{}', 'failed', now(), now() - interval '3 hours'),
		(gen_random_uuid(), 't', 'https://x', 's', 'run.completed', '{}', 'pending', NULL, now() - interval '3 hours')`)

	kept := []string{mixed.ConversationID, recent.ConversationID, live.ConversationID}
	before := map[string]int{}
	for _, c := range kept {
		before[c] = count(`SELECT count(*) FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE conversation_id = $1)`, c)
	}
	st, err := s.RetentionPass(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if st.Conversations != 1 || st.Runs != 1 || st.IdempotencyKeys != 1 || st.Deliveries != 1 {
		t.Fatalf("the pass removed %+v, want 1 conversation, 1 run, 1 key, 1 delivery", st)
	}
	if n := count(`SELECT count(*) FROM webhook_deliveries`); n != 2 {
		t.Fatalf("%d deliveries left, want 2", n)
	}
	if n := count(`SELECT count(*) FROM conversations WHERE id = $1`, old.ConversationID) +
		count(`SELECT count(*) FROM runs WHERE id = $1`, old.ID) +
		count(`SELECT count(*) FROM run_events WHERE run_id = $1`, old.ID) +
		count(`SELECT count(*) FROM messages WHERE conversation_id = $1`, old.ConversationID); n != 0 {
		t.Fatalf("%d rows of the old conversation are left", n)
	}
	for _, c := range kept {
		if n := count(`SELECT count(*) FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE conversation_id = $1)`, c); n != before[c] || n == 0 {
			t.Fatalf("conversation %s has %d events, had %d", c, n, before[c])
		}
		if count(`SELECT count(*) FROM messages WHERE conversation_id = $1`, c) == 0 {
			t.Fatalf("conversation %s lost its messages", c)
		}
	}
	if count(`SELECT count(*) FROM runs WHERE conversation_id = $1`, mixed.ConversationID) != 2 {
		t.Fatal("the old run of a conversation with a newer one was removed")
	}
	if count(`SELECT count(*) FROM idempotency_keys WHERE key = 'new'`) != 1 {
		t.Fatal("a new idempotency key was removed")
	}
	// A second pass finds nothing more.
	if st, err := s.RetentionPass(ctx, time.Now().Add(-time.Hour)); err != nil || st != (persist.RetentionStats{}) {
		t.Fatalf("the second pass: %+v %v", st, err)
	}
}

// BenchmarkRetentionPass measures a pass over conversations of one ended
// run each (its input message and 3 events), and reports its cost per
// 100,000 runs removed.
func BenchmarkRetentionPass(b *testing.B) {
	s, url := persisttest.New(b)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	const runs = 5000
	var total time.Duration
	removed := 0
	for b.Loop() {
		b.StopTimer()
		for range runs {
			r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m", Params: agentd.RunParams{MaxSteps: 3},
				Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunCancel(ctx, "t", r.ID, "local"); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := db.Exec(ctx, `UPDATE runs SET created_at = now() - interval '2 days', finished_at = now() - interval '2 days'`); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE conversations SET created_at = now() - interval '2 days', updated_at = now() - interval '2 days'`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		st, err := s.RetentionPass(ctx, time.Now().Add(-24*time.Hour))
		total += time.Since(start)
		if err != nil || st.Runs != runs {
			b.Fatalf("removed %+v: %v", st, err)
		}
		removed += st.Runs
	}
	b.ReportMetric(total.Seconds()/float64(removed)*100000, "s/100k-runs")
}
