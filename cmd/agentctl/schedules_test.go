package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
)

// TestSchedules: agentctl makes a schedule from a file, shows and lists
// it, lists the runs its slots start, pauses, resumes and deletes it.
func TestSchedules(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	file := filepath.Join(t.TempDir(), "schedule.json")
	if err := os.WriteFile(file, []byte(`{"name": "tick", "cron": "@every 1s", "run": {"input": "/say tick"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, base, "-o", "json", "schedules", "create", file)
	var s client.Schedule
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != exitOK || s.ID == "" {
		t.Fatalf("schedules create: %v %s", err, r)
	}
	if r := ctl(t, base, "schedules", "get", s.ID); r.code != exitOK || !strings.Contains(r.stdout, "@every 1s (UTC)") {
		t.Fatalf("schedules get: %s", r)
	}
	if r := ctl(t, base, "schedules", "list"); r.code != exitOK || !strings.Contains(r.stdout, s.ID) || !strings.Contains(r.stdout, "active") {
		t.Fatalf("schedules list: %s", r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := ctl(t, base, "-o", "json", "schedules", "runs", s.ID)
		var p client.Page[client.Run]
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != exitOK {
			t.Fatalf("schedules runs: %v %s", err, r)
		}
		if len(p.Data) > 0 {
			// The table names each run's slot, as the JSON does.
			r := ctl(t, base, "schedules", "runs", s.ID)
			slot := p.Data[len(p.Data)-1].ScheduledFor
			if r.code != exitOK || !strings.HasPrefix(r.stdout, "SLOT") || slot == nil ||
				!strings.Contains(r.stdout, slot.Local().Format("2006-01-02 15:04:05")+"  "+p.Data[len(p.Data)-1].ID) {
				t.Fatalf("schedules runs: %s", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the schedule started no run")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := ctl(t, base, "schedules", "pause", s.ID); r.code != exitOK || !strings.Contains(r.stdout, "paused") {
		t.Fatalf("schedules pause: %s", r)
	}
	if r := ctl(t, base, "schedules", "resume", s.ID); r.code != exitOK || !strings.Contains(r.stdout, "active, next") {
		t.Fatalf("schedules resume: %s", r)
	}
	if r := ctl(t, base, "schedules", "delete", s.ID); r.code != exitOK {
		t.Fatalf("schedules delete: %s", r)
	}
	if r := ctl(t, base, "schedules", "get", s.ID); r.code != exitError || !strings.Contains(r.stderr, "schedule_not_found") {
		t.Fatalf("schedules get of a deleted one: %s", r)
	}
}
