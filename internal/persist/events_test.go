package persist_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/migrations"
)

// Events stored before migration 00007 hold their whole envelope; after it,
// in parts. Down and up again, a client reads the same bytes as before, and
// an event written by the earlier code (its "at" to the nanosecond) keeps
// its own.
func TestEventsReadTheSameAcrossTheCompactingMigration(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	ctx := context.Background()
	s, err := persist.Open(ctx, persist.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := createRun(t, s, "")
	c, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w1"}
	if _, err := s.Exec(ctx, f, []agentd.EventIn{agentd.EventOf(1, agentd.MessageDeltaData{Text: "<hi> & \"bye\""}),
		agentd.EventOf(1, agentd.StepCompletedData{})}); err != nil {
		t.Fatal(err)
	}
	before, err := s.EventsAfter(ctx, r.ID, 0, 100)
	if err != nil || len(before) != 5 {
		t.Fatalf("events: %v %d", err, len(before))
	}
	s.Close()

	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 6); err != nil {
		t.Fatalf("down: %v", err)
	}
	// The earlier layout: the whole envelope in data.
	rows := readData(t, db, r.ID)
	for i, e := range before {
		if rows[i] != string(e.Data) {
			t.Fatalf("event %d after down:\n%s\nwant\n%s", e.Seq, rows[i], e.Data)
		}
	}
	legacy := `{"seq":6,"type":"run.completed","run_id":"` + r.ID + `","step":1,"at":"2026-11-29T23:13:02.325376157Z","data":{"reason":"completed","status":"completed"}}`
	if _, err := db.ExecContext(ctx, `INSERT INTO run_events (run_id, seq, type, data) VALUES ($1, 6, 'run.completed', $2)`, r.ID, legacy); err != nil {
		t.Fatal(err)
	}
	if err := persist.Migrate(ctx, url); err != nil {
		t.Fatalf("up: %v", err)
	}
	s, err = persist.Open(ctx, persist.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := s.EventsAfter(ctx, r.ID, 0, 100)
	if err != nil || len(after) != 6 {
		t.Fatalf("events after up: %v %d", err, len(after))
	}
	for i, e := range before {
		if string(after[i].Data) != string(e.Data) {
			t.Fatalf("event %d after up:\n%s\nwant\n%s", e.Seq, after[i].Data, e.Data)
		}
	}
	if string(after[5].Data) != legacy {
		t.Fatalf("legacy event:\n%s\nwant\n%s", after[5].Data, legacy)
	}
}

func readData(t *testing.T, db *sql.DB, runID string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT data::text FROM run_events WHERE run_id = $1 ORDER BY seq`, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}
