package persist_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestUnstoredPurge: the sweeper's pass deletes, with their conversations,
// the runs not to be kept that ended before the grace, and leaves alone
// those still in flight, those that ended within it, and stored runs.
func TestUnstoredPurge(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	create := func(unstored bool) agentd.Run {
		t.Helper()
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "t", Model: "m",
			Params: agentd.RunParams{MaxSteps: 3, Unstored: unstored}, Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	end := func(r agentd.Run, ago time.Duration) {
		t.Helper()
		if _, err := s.RunCancel(ctx, "t", r.ID, "local"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE runs SET finished_at = now() - $2::interval WHERE id = $1`, r.ID, ago.String()); err != nil {
			t.Fatal(err)
		}
	}
	old, recent, inFlight, stored := create(true), create(true), create(true), create(false)
	end(old, 2*time.Minute)
	end(recent, time.Second)
	end(stored, time.Hour)

	deleted, err := s.UnstoredPurge(ctx, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{old.ID}) {
		t.Fatalf("deleted %v, want only %s", deleted, old.ID)
	}
	if _, err := s.RunGet(ctx, "t", old.ID); !errors.Is(err, agentd.ErrRunNotFound) {
		t.Fatalf("the purged run: %v", err)
	}
	if _, err := s.ConversationGet(ctx, "t", old.ConversationID); !errors.Is(err, agentd.ErrConversationNotFound) {
		t.Fatalf("the purged run's conversation: %v", err)
	}
	var messages int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM messages WHERE conversation_id = $1`, old.ConversationID).Scan(&messages); err != nil {
		t.Fatal(err)
	}
	if messages != 0 {
		t.Fatalf("%d messages of the purged conversation are left", messages)
	}
	for _, r := range []agentd.Run{recent, inFlight, stored} {
		if _, err := s.RunGet(ctx, "t", r.ID); err != nil {
			t.Fatalf("run %s (unstored %v) should be kept: %v", r.ID, r.Params.Unstored, err)
		}
	}
	// Once past the grace, the recent one goes too.
	if deleted, err = s.UnstoredPurge(ctx, 0, 10); err != nil || !slices.Equal(deleted, []string{recent.ID}) {
		t.Fatalf("second pass deleted %v (%v), want %s", deleted, err, recent.ID)
	}
}
