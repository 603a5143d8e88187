package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestSchedules: against a real server, a schedule is made, listed, read,
// fires runs that name it, is paused and resumed, and deleted; a bad cron
// is a problem naming the field.
func TestSchedules(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	ctx := context.Background()
	c := client.New("http://" + addr)

	if _, err := c.CreateSchedule(ctx, client.ScheduleDefinition{Name: "bad", Cron: "@every 0s", Run: json.RawMessage(`{"input":"hi"}`)}); !client.IsCode(err, "invalid_field") {
		t.Fatalf("a bad cron: %v", err)
	}
	s, err := c.CreateSchedule(ctx, client.ScheduleDefinition{Name: "tick", Cron: "@every 1s", Run: json.RawMessage(`{"input":"/say tick"}`)})
	if err != nil || s.NextAt == nil || s.Paused || s.Overlap != agentd.OverlapSkip {
		t.Fatalf("create: %+v %v", s, err)
	}
	if page, err := c.ListSchedules(ctx, 0, ""); err != nil || len(page.Data) != 1 || page.Data[0].ID != s.ID {
		t.Fatalf("list: %+v %v", page, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var runs *client.Page[client.Run]
	for runs == nil || len(runs.Data) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the schedule fired no run")
		}
		time.Sleep(100 * time.Millisecond)
		if runs, err = c.ScheduleRuns(ctx, s.ID, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if r := runs.Data[0]; r.ScheduleID == nil || *r.ScheduleID != s.ID || r.ScheduledFor == nil {
		t.Fatalf("the slot's run: %+v", r)
	}
	if all, err := c.ListRuns(ctx, client.ListRuns{ScheduleID: s.ID}); err != nil || len(all.Data) < len(runs.Data) {
		t.Fatalf("runs of the schedule in GET /runs: %+v %v", all, err)
	}
	if p, err := c.PauseSchedule(ctx, s.ID); err != nil || !p.Paused || p.NextAt != nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if r, err := c.ResumeSchedule(ctx, s.ID); err != nil || r.Paused || r.NextAt == nil {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if got, err := c.GetSchedule(ctx, s.ID); err != nil || got.Name != "tick" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := c.DeleteSchedule(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, s.ID); !client.IsCode(err, "schedule_not_found") {
		t.Fatalf("deleted: %v", err)
	}
}
