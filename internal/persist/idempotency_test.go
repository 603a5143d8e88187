package persist_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestIdempotencyKeyLeftClaimed: a key whose request left neither a
// response nor a freed key (the database went away between the request
// and its IdempotencyAbandon) holds its retries off while it may still be
// in flight, and is claimed again once it is older than IdempotencyStale.
func TestIdempotencyKeyLeftClaimed(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	if _, fresh, err := s.IdempotencyBegin(ctx, "default", "k", "h1"); err != nil || !fresh {
		t.Fatalf("first begin: fresh %v, %v", fresh, err)
	}
	rec, fresh, err := s.IdempotencyBegin(ctx, "default", "k", "h1")
	if err != nil || fresh || rec.Done {
		t.Fatalf("begin while in flight: fresh %v done %v, %v", fresh, rec.Done, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - $1::interval - interval '1 second'`,
		persist.IdempotencyStale); err != nil {
		t.Fatal(err)
	}
	if _, fresh, err := s.IdempotencyBegin(ctx, "default", "k", "h1"); err != nil || !fresh {
		t.Fatalf("begin after the key went stale: fresh %v, %v", fresh, err)
	}
	// A key that holds a response is never claimed again, however old.
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET status = 200, content_type = 'application/json',
		response = '{}', created_at = now() - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	if rec, fresh, err := s.IdempotencyBegin(ctx, "default", "k", "h1"); err != nil || fresh || !rec.Done || rec.Status != 200 {
		t.Fatalf("begin of an answered key: fresh %v done %v status %d, %v", fresh, rec.Done, rec.Status, err)
	}
}
