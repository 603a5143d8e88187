package persist_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// dueSchedule stores a schedule of tenant t1 whose first slot, a whole
// second, passed a moment ago.
func dueSchedule(t *testing.T, s *persist.Store, name string) agentd.Schedule {
	t.Helper()
	sc, err := s.ScheduleCreate(context.Background(), agentd.Schedule{TenantID: "t1", Name: name, Cron: "@every 1s",
		Timezone: "UTC", Run: []byte(`{"input":"hi"}`), Overlap: agentd.OverlapAllow, CatchUp: agentd.CatchUpSkip,
		NextAt: time.Now().Add(-time.Second).Truncate(time.Second), CreatedBy: "key:a"})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// slotRun is a plan that starts the due slot's run and moves next_at on
// by step (0: leaves it, as a faulty planner would).
func slotRun(step time.Duration, pause time.Duration) func(context.Context, persist.DueSchedule) (persist.SlotPlan, error) {
	return func(_ context.Context, d persist.DueSchedule) (persist.SlotPlan, error) {
		time.Sleep(pause) // widen the window in which firers overlap
		p := agentd.RunParams{MaxSteps: 1, Schedule: &agentd.ScheduleRef{ID: d.ID, Slot: d.NextAt}}
		return persist.SlotPlan{NextAt: d.NextAt.Add(step), Run: &persist.RunCreateParams{TenantID: d.TenantID, Model: "fake",
			Params: p, Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "hi"}}, Actor: d.CreatedBy}}, nil
	}
}

// fireDue claims the due schedules (at most 10) and fires each as plan
// says, as a scheduler does: the plan is made outside any transaction. It
// returns the runs created, by schedule, and the first error of a firing;
// a claim found lost is skipped.
func fireDue(ctx context.Context, s *persist.Store, plan func(context.Context, persist.DueSchedule) (persist.SlotPlan, error)) (map[string]agentd.Run, error) {
	due, err := s.ScheduleClaim(ctx, persist.ScheduleClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		return nil, err
	}
	runs := map[string]agentd.Run{}
	var first error
	for _, d := range due {
		p, err := plan(ctx, d)
		if err == nil {
			var res persist.FireResult
			if res, err = s.ScheduleFire(ctx, persist.ScheduleFireParams{Due: d, Plan: p}); res.Run != nil {
				runs[d.ID] = *res.Run
			}
		}
		if err != nil && !errors.Is(err, persist.ErrClaimLost) && first == nil {
			first = err
		}
	}
	return runs, first
}

// TestScheduleOneRunPerSlot: firers that claim and fire the same due
// schedules at once (as instances do) create one run per slot between
// them, each slot fired once; and a slot fired again (a planner that did not advance the
// schedule) is refused by the unique key of (schedule, slot), creating
// nothing.
func TestScheduleOneRunPerSlot(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	a, b := dueSchedule(t, s, "a"), dueSchedule(t, s, "b")
	// Each round makes every firer try the same due slots; next_at moves
	// on by a second a round, to a slot that is due still, until now.
	var wg sync.WaitGroup
	var mu sync.Mutex
	fired := map[string]int{}
	for range 8 {
		wg.Go(func() {
			for range 6 {
				runs, err := fireDue(ctx, s, slotRun(10*time.Millisecond, 20*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for id := range runs {
					fired[id]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, sc := range []agentd.Schedule{a, b} {
		runs, err := s.ScheduleRuns(ctx, "t1", sc.ID, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		slots := map[time.Time]int{}
		for _, r := range runs {
			if r.Params.Schedule == nil || r.Params.Schedule.ID != sc.ID {
				t.Fatalf("run %s does not name its schedule: %+v", r.ID, r.Params.Schedule)
			}
			slots[r.Params.Schedule.Slot.UTC()]++
		}
		for slot, n := range slots {
			if n != 1 {
				t.Errorf("schedule %s slot %s has %d runs", sc.Name, slot, n)
			}
		}
		if len(runs) == 0 || len(runs) != fired[sc.ID] {
			t.Errorf("schedule %s: %d runs, %d reported fired", sc.Name, len(runs), fired[sc.ID])
		}
	}

	// The key holds where the lock does not: a slot fired twice.
	c := dueSchedule(t, s, "c")
	if _, err := fireDue(ctx, s, slotRun(0, 0)); err != nil {
		t.Fatal(err)
	}
	_, err := fireDue(ctx, s, slotRun(0, 0))
	if !errors.Is(err, agentd.ErrConflict) {
		t.Fatalf("a slot fired twice: %v", err)
	}
	if runs, _ := s.ScheduleRuns(ctx, "t1", c.ID, nil, 10); len(runs) != 1 {
		t.Fatalf("slot fired twice made %d runs", len(runs))
	}
	var n int
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM runs WHERE schedule_id = $1`, c.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("runs of the schedule: %d %v", n, err)
	}
}

// TestScheduleClaimLost: a live claim keeps a schedule from the other
// claimers; a claim whose lease ran out is taken over, and the first
// claim's firing then writes nothing (ErrClaimLost), nor does a firing
// after a change of the schedule voided its claim; the claim that holds
// fires the slot, once.
func TestScheduleClaimLost(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	sc := dueSchedule(t, s, "a")
	claim := func(lease time.Duration) []persist.DueSchedule {
		t.Helper()
		due, err := s.ScheduleClaim(ctx, persist.ScheduleClaimParams{Limit: 10, Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		return due
	}
	fire := func(d persist.DueSchedule) (persist.FireResult, error) {
		t.Helper()
		p, _ := slotRun(time.Second, 0)(ctx, d)
		return s.ScheduleFire(ctx, persist.ScheduleFireParams{Due: d, Plan: p})
	}
	first := claim(50 * time.Millisecond)
	if len(first) != 1 || first[0].ID != sc.ID || first[0].Claim == "" {
		t.Fatalf("claimed %+v", first)
	}
	if again := claim(time.Minute); len(again) != 0 {
		t.Fatalf("a held schedule claimed again: %+v", again)
	}
	time.Sleep(100 * time.Millisecond)
	second := claim(time.Minute)
	if len(second) != 1 || second[0].Claim == first[0].Claim {
		t.Fatalf("a claim past its lease was not taken over: %+v", second)
	}
	if res, err := fire(first[0]); !errors.Is(err, persist.ErrClaimLost) || res.Run != nil {
		t.Fatalf("the lapsed claim fired: %+v %v", res, err)
	}
	if _, err := s.ScheduleUpdate(ctx, "t1", sc.ID, func(*agentd.Schedule) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if res, err := fire(second[0]); !errors.Is(err, persist.ErrClaimLost) || res.Run != nil {
		t.Fatalf("a claim voided by a change fired: %+v %v", res, err)
	}
	third := claim(time.Minute)
	if len(third) != 1 {
		t.Fatalf("the schedule is not due after its claims were lost: %+v", third)
	}
	res, err := fire(third[0])
	if err != nil || res.Run == nil {
		t.Fatalf("the claim that holds: %+v %v", res, err)
	}
	if _, err := fire(third[0]); !errors.Is(err, persist.ErrClaimLost) {
		t.Fatalf("a claim fired twice: %v", err)
	}
	if runs, err := s.ScheduleRuns(ctx, "t1", sc.ID, nil, 10); err != nil || len(runs) != 1 {
		t.Fatalf("runs of the schedule: %d %v", len(runs), err)
	}
}

// TestScheduleSettlePauses: the ends of a schedule's runs are counted in
// the order of their slots; a completed run sets the failures to zero,
// and failures in a row up to the limit pause the schedule, saying why.
func TestScheduleSettlePauses(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	sc := dueSchedule(t, s, "failing")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	end := func(status agentd.RunStatus) string {
		t.Helper()
		runs, err := fireDue(ctx, s, slotRun(100*time.Millisecond, 0))
		if err != nil || runs[sc.ID].ID == "" {
			t.Fatalf("fire: %+v %v", runs, err)
		}
		id := runs[sc.ID].ID
		if _, err := conn.Exec(ctx, `UPDATE runs SET status = $2, terminal_reason = 'timed_out_total', finished_at = now()
			WHERE id = $1`, id, status); err != nil {
			t.Fatal(err)
		}
		return id
	}
	settle := func() []agentd.Schedule {
		t.Helper()
		paused, err := s.ScheduleSettle(ctx, persist.ScheduleSettleParams{Limit: 10, MaxFailures: 2})
		if err != nil {
			t.Fatal(err)
		}
		return paused
	}
	end(agentd.StatusTimedOut)
	end(agentd.StatusCompleted)
	last := end(agentd.StatusFailed)
	if p := settle(); len(p) != 0 {
		t.Fatalf("paused after one failure since a completed run: %+v", p)
	}
	got, err := s.ScheduleGet(ctx, "t1", sc.ID)
	if err != nil || got.ConsecutiveFailures != 1 || got.Paused || len(got.LastRuns) != 3 || got.LastRuns[0].RunID != last {
		t.Fatalf("after timed out, completed, failed: %+v %v", got, err)
	}
	last = end(agentd.StatusTimedOut)
	paused := settle()
	if len(paused) != 1 || !paused[0].Paused || paused[0].ConsecutiveFailures != 2 ||
		!strings.HasPrefix(paused[0].PausedReason, "2 consecutive runs failed; last: "+last) {
		t.Fatalf("not paused after two failures in a row: %+v", paused)
	}
	if runs, err := fireDue(ctx, s, slotRun(time.Second, 0)); err != nil || len(runs) != 0 {
		t.Fatalf("a paused schedule fired: %+v %v", runs, err)
	}
}
