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

// TestDeltaFenceKeepsUpdatedAt: a write that only appends events (a
// streamed delta) moves the run's last seq but not its updated_at, unless
// updated_at is a second old; a new step moves it (migration 00031, which
// keeps a delta's WAL record to the bytes of the seq).
func TestDeltaFenceKeepsUpdatedAt(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	f := claimedRuns(t, s, 1)[0]
	delta := []agentd.EventIn{agentd.EventOf(1, agentd.MessageDeltaData{Text: "x"})}
	head := func() agentd.RunHead {
		t.Helper()
		h, err := s.RunHead(ctx, f.RunID)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	exec := func(ops ...persist.Op) {
		t.Helper()
		if _, err := s.Exec(ctx, f, delta, ops...); err != nil {
			t.Fatal(err)
		}
	}

	exec(persist.StepInsert{ID: agentd.NewID(), RunID: f.RunID, Seq: 1})
	stepped := head()
	exec()
	exec()
	if h := head(); !h.UpdatedAt.Equal(stepped.UpdatedAt) || h.LastEventSeq != stepped.LastEventSeq+2 {
		t.Fatalf("after two deltas: updated_at %v (was %v), last seq %d (was %d)",
			h.UpdatedAt, stepped.UpdatedAt, h.LastEventSeq, stepped.LastEventSeq)
	}

	// A second old, a delta moves it.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE runs SET updated_at = updated_at - interval '2 seconds' WHERE id = $1`, f.RunID); err != nil {
		t.Fatal(err)
	}
	old := head().UpdatedAt
	exec()
	if h := head(); !h.UpdatedAt.After(old.Add(time.Second)) {
		t.Fatalf("a delta after a second: updated_at %v, was %v", h.UpdatedAt, old)
	}

	// A new step moves it at once.
	moved := head().UpdatedAt
	exec(persist.StepInsert{ID: agentd.NewID(), RunID: f.RunID, Seq: 2})
	if h := head(); !h.UpdatedAt.After(moved) || h.StepCount != 2 {
		t.Fatalf("a new step: updated_at %v, was %v, step count %d", h.UpdatedAt, moved, h.StepCount)
	}
}
