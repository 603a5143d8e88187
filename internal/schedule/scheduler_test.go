package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// TestPlan: what a due slot does, by catch-up and overlap policy: on
// time it starts its run; with the slot after it passed too, catch_up skip
// starts none and one starts the latest missed slot's; an enqueue slot
// that waited for a run that ended after it starts all the same; while
// the previous run is open, skip starts none; a template that no longer
// builds fails the slot. The next slot is always after now.
func TestPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 10, 300_000_000, time.UTC)
	at := func(sec int) time.Time { return time.Date(2026, 1, 1, 12, 0, sec, 0, time.UTC) }
	due := func(next time.Time, overlap agentd.ScheduleOverlap, catchUp agentd.ScheduleCatchUp) persist.DueSchedule {
		return persist.DueSchedule{Now: now, Schedule: agentd.Schedule{ID: "s1", TenantID: "t1", Cron: "@every 1s", Timezone: "UTC",
			NextAt: next, Overlap: overlap, CatchUp: catchUp, CreatedBy: "key:a"}}
	}
	ended := at(9)
	for _, c := range []struct {
		name     string
		d        persist.DueSchedule
		specErr  error
		slot     time.Time // zero: no run
		next     time.Time
		failed   bool
		prevOpen bool
	}{
		{name: "on time", d: due(at(10), agentd.OverlapSkip, agentd.CatchUpSkip), slot: at(10), next: at(11)},
		{name: "missed, skip", d: due(at(5), agentd.OverlapSkip, agentd.CatchUpSkip), next: at(11)},
		{name: "missed, one", d: due(at(5), agentd.OverlapSkip, agentd.CatchUpOne), slot: at(10), next: at(11)},
		{name: "open, skip", d: due(at(10), agentd.OverlapSkip, agentd.CatchUpSkip), prevOpen: true, next: at(11)},
		{name: "open, allow", d: due(at(10), agentd.OverlapAllow, agentd.CatchUpSkip), prevOpen: true, slot: at(10), next: at(11)},
		{name: "enqueue waited", d: func() persist.DueSchedule {
			d := due(at(5), agentd.OverlapEnqueue, agentd.CatchUpSkip)
			d.PrevFinishedAt = &ended
			return d
		}(), slot: at(5), next: at(11)},
		{name: "no longer builds", d: due(at(10), agentd.OverlapSkip, agentd.CatchUpSkip), specErr: errors.New("tools: gone"),
			failed: true, next: at(11)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{Composer: ComposerFunc(func(context.Context, agentd.Schedule) (agentd.RunCreate, error) {
				return agentd.RunCreate{Spec: agentd.RunSpec{Model: "fake", Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "hi"}}}}, c.specErr
			})})
			c.d.PrevOpen = c.prevOpen
			p, err := s.plan(context.Background(), c.d)
			if err != nil {
				t.Fatal(err)
			}
			if !p.NextAt.Equal(c.next) || (p.Error != "") != c.failed {
				t.Fatalf("plan %+v, want next %v, failed %v", p, c.next, c.failed)
			}
			switch {
			case c.slot.IsZero() && p.Run != nil:
				t.Fatalf("a run for slot %v", p.Run.Params.Schedule.Slot)
			case !c.slot.IsZero() && (p.Run == nil || !p.Run.Params.Schedule.Slot.Equal(c.slot) || p.Run.Actor != "key:a"):
				t.Fatalf("run %+v, want one for slot %v", p.Run, c.slot)
			}
		})
	}
}

// TestParseTiming: @every takes whole seconds, at least one; a time zone
// comes from timezone only; 5 fields are read in the time zone.
func TestParseTiming(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct{ cron, tz, field string }{
		{"@every 0s", "", "cron"}, {"@every 500ms", "", "cron"}, {"@every 1500ms", "", "cron"}, {"@every -5s", "", "cron"},
		{"@every soon", "", "cron"}, {"", "", "cron"}, {"* * *", "", "cron"}, {"TZ=UTC * * * * *", "", "cron"},
		{"* * * * *", "Nowhere/Else", "timezone"}, {"* * * * *", "Local", "timezone"},
	} {
		_, err := agentd.ParseTiming(bad.cron, bad.tz)
		var te *agentd.TimingError
		if !errors.As(err, &te) || te.Field != bad.field {
			t.Errorf("%q in %q: %v, want an error naming %s", bad.cron, bad.tz, err, bad.field)
		}
	}
	tm, err := agentd.ParseTiming("0 9 * * *", "Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	if got := tm.Next(time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("9:00 in Tokyo after 00:30 UTC: %v", got)
	}
	every, err := agentd.ParseTiming("@every 2s", "")
	if err != nil {
		t.Fatal(err)
	}
	latest, next := every.Latest(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC))
	if !latest.Equal(time.Date(2026, 1, 1, 0, 0, 6, 0, time.UTC)) || !next.Equal(time.Date(2026, 1, 1, 0, 0, 8, 0, time.UTC)) {
		t.Errorf("latest %v next %v", latest, next)
	}
}
