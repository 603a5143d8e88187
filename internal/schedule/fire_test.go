package schedule_test

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/schedule"
)

// everySecond stores tenant's schedule name of @every 1s, which starts a
// run at each slot whatever its previous run does (overlap allow), and
// skips the slots missed (catch_up skip); its first slot is the next whole
// second.
func everySecond(t *testing.T, s *persist.Store, tenant, name string) agentd.Schedule {
	t.Helper()
	sc, err := s.ScheduleCreate(context.Background(), agentd.Schedule{TenantID: tenant, Name: name, Cron: "@every 1s",
		Timezone: "UTC", Run: []byte(`{"input":"hi"}`), Overlap: agentd.OverlapAllow, CatchUp: agentd.CatchUpSkip,
		NextAt: time.Now().Truncate(time.Second).Add(time.Second), CreatedBy: "key:a"})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// spec is a run spec that any slot can start.
func spec() agentd.RunSpec {
	return agentd.RunSpec{Model: "fake", Params: agentd.RunParams{MaxSteps: 1},
		Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "hi"}}}
}

// slotsOf returns the slots of schedule id that have a run, and how many
// runs each has.
func slotsOf(t *testing.T, url, id string) map[time.Time]int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT scheduled_for FROM runs WHERE schedule_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[time.Time]int{}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		slots[at.UTC()]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return slots
}

// TestSlowSpecHoldsNoOtherSlot: the spec of tenant a's schedule takes 6 s
// to make (as when the tenant's new MCP server is slow to connect);
// meanwhile tenant b's @every 1s schedule starts a run at each of its
// slots (one or two may be missed to the machine's own hiccups, not the
// 6 s that a firing holding a transaction across the spec costs).
func TestSlowSpecHoldsNoOtherSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 8 s of slots")
	}
	t.Parallel()
	store, url := persisttest.New(t)
	slow, steady := everySecond(t, store, "a", "slow"), everySecond(t, store, "b", "steady")
	var slowCalls atomic.Int32
	s := schedule.New(schedule.Config{Store: store, Tick: 50 * time.Millisecond,
		Composer: schedule.ComposerFunc(func(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error) {
			if sc.TenantID == "a" && slowCalls.Add(1) == 1 {
				select {
				case <-time.After(6 * time.Second):
				case <-ctx.Done():
					return agentd.RunCreate{}, ctx.Err()
				}
			}
			return agentd.RunCreate{TenantID: sc.TenantID, Spec: spec()}, nil
		})})
	from := time.Now()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	to := time.Now().Add(-time.Second) // the slots that had a second to start
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := 0
	for at := from.Truncate(time.Second).Add(time.Second); !at.After(to); at = at.Add(time.Second) {
		want++
	}
	got := 0
	for at, n := range slotsOf(t, url, steady.ID) {
		if n != 1 {
			t.Errorf("slot %v has %d runs", at, n)
		}
		if !at.After(from) || at.After(to) {
			continue
		}
		got++
	}
	slowSlots := len(slotsOf(t, url, slow.ID))
	t.Logf("tenant b's schedule: runs for %d of its %d slots; tenant a's: %d runs, %d specs made", got, want, slowSlots, slowCalls.Load())
	if slowSlots == 0 {
		t.Fatal("the slow spec's slot never started its run")
	}
	if got < want-2 {
		t.Fatalf("tenant b's schedule started runs for %d of its %d slots while tenant a's spec was made", got, want)
	}
}

// TestTwoSchedulersOneRunPerSlot: two schedulers (as two instances) on
// one database fire every schedule's slots with one run each, and never
// try to start a second run for a slot (a try would be refused by the
// unique key of (schedule, slot), and logged), also when the claims of
// one of them lapse now and then while it makes a slot's spec (its lease
// extensions never reach the database, as an instance cut off from it, and
// its lease is shorter than its slowest spec): the other takes them over.
func TestTwoSchedulersOneRunPerSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 4 s of slots")
	}
	t.Parallel()
	store, url := persisttest.New(t)
	var ids []string
	for _, name := range []string{"a", "b", "c", "d"} {
		ids = append(ids, everySecond(t, store, "t1", name).ID)
	}
	var logs syncBuffer
	var specs atomic.Int32
	scheds := make([]*schedule.Scheduler, 2)
	for i := range scheds {
		var st schedule.Store = persisttest.Open(t, persist.Config{URL: url})
		if i == 1 {
			st = unextended{st}
		}
		scheds[i] = schedule.New(schedule.Config{Store: st, Tick: 20 * time.Millisecond,
			Lease: 80 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Composer: schedule.ComposerFunc(func(ctx context.Context, sc agentd.Schedule) (agentd.RunCreate, error) {
				specs.Add(1)
				time.Sleep(time.Duration(rand.IntN(120)) * time.Millisecond)
				return agentd.RunCreate{TenantID: sc.TenantID, Spec: spec()}, nil
			})})
		if err := scheds[i].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(4 * time.Second)
	for _, s := range scheds {
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	fired := 0
	for _, id := range ids {
		slots := slotsOf(t, url, id)
		for at, n := range slots {
			if n != 1 {
				t.Errorf("schedule %s slot %v has %d runs", id, at, n)
			}
		}
		if len(slots) < 2 {
			t.Errorf("schedule %s fired %d slots in 4 s", id, len(slots))
		}
		fired += len(slots)
	}
	t.Logf("%d slots fired, %d specs made", fired, specs.Load())
	if out := logs.String(); out != "" {
		t.Fatalf("the schedulers logged:\n%s", out)
	}
}

// unextended is a store whose claims' leases are never extended.
type unextended struct{ schedule.Store }

func (unextended) ScheduleExtend(context.Context, []string, time.Duration) error { return nil }

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.b.String())
}
