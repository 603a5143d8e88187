package persist_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestReadReplica runs the store against a primary and a real streaming
// standby: the lists that may lag and the replay of events are served by
// the standby while it keeps up; a replay is exact even when the standby
// has not yet replayed the run (the page is completed from the primary);
// a standby whose replay is paused past the maximum lag, or that is down,
// serves nothing, and every read is still answered, by the primary; and
// it serves again once it has caught up.
func TestReadReplica(t *testing.T) {
	t.Parallel()
	pair := persisttest.NewPair(t)
	s := persisttest.Open(t, persist.Config{URL: pair.PrimaryURL(), ReplicaURL: pair.StandbyURL(),
		ReplicaMaxLag: 2 * time.Second, MaxConns: 8})
	ctx := context.Background()
	sampler := s.ReplicaSampler()
	if s.ReplicaFresh() {
		t.Fatal("the replica is fresh before its lag was measured")
	}
	if err := sampler.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sampler.Stop(ctx) })
	waitFresh := func(want bool, why string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for s.ReplicaFresh() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the replica's freshness is not %v after 20s", why, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	create := func() agentd.Run {
		t.Helper()
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
			Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q"}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// listed lists the tenant's runs as a listing may, and says whether
	// the replica answered.
	listed := func() (ids []string, fromReplica bool) {
		t.Helper()
		before := s.ReplicaReads()
		runs, err := s.RunList(ctx, agentd.RunListParams{TenantID: "default", Limit: 100, MayLag: true})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids, s.ReplicaReads() > before
	}
	replayed := func(id string, limit int) (evs []agentd.Event, fromReplica bool) {
		t.Helper()
		before := s.ReplicaReads()
		var after int64
		for {
			page, err := s.EventsReplay(ctx, id, after, limit)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			evs = append(evs, page...)
			if len(page) < limit {
				return evs, s.ReplicaReads() > before
			}
			after = page[len(page)-1].Seq
		}
	}
	stored := func(id string) []agentd.Event {
		t.Helper()
		evs, err := s.EventsAfter(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	same := func(a, b []agentd.Event) bool {
		return slices.EqualFunc(a, b, func(x, y agentd.Event) bool { return x.Seq == y.Seq && string(x.Data) == string(y.Data) })
	}

	waitFresh(true, "a standby that keeps up")
	first := create()
	pair.WaitReplayed()
	if ids, replica := listed(); !replica || !slices.Contains(ids, first.ID) {
		t.Fatalf("a fresh replica's list: from the replica %v, %d runs, want the first run", replica, len(ids))
	}
	if evs, replica := replayed(first.ID, 1); !replica || !same(evs, stored(first.ID)) || len(evs) == 0 {
		t.Fatalf("replay of the first run from a fresh replica: from the replica %v, %d events, want the %d stored",
			replica, len(evs), len(stored(first.ID)))
	}
	// An exact list is the primary's.
	before := s.ReplicaReads()
	if _, err := s.RunList(ctx, agentd.RunListParams{TenantID: "default", Limit: 10}); err != nil || s.ReplicaReads() != before {
		t.Fatalf("a list that may not lag went to the replica (%v)", err)
	}

	// Behind, but within the maximum lag: the replica still serves, and a
	// replay of a run it has not replayed is completed from the primary.
	pair.PauseReplay()
	second := create()
	if evs, replica := replayed(second.ID, 100); !replica || !same(evs, stored(second.ID)) || len(evs) == 0 {
		t.Fatalf("replay of a run the replica lacks: from the replica %v, %d events, want the %d stored",
			replica, len(evs), len(stored(second.ID)))
	}
	// Past it, the primary answers everything.
	waitFresh(false, "a standby whose replay is paused while the primary writes")
	if ids, replica := listed(); replica || !slices.Contains(ids, second.ID) {
		t.Fatalf("a lagging replica's list: from the replica %v, want the primary's, with the second run", replica)
	}
	if evs, replica := replayed(second.ID, 100); replica || !same(evs, stored(second.ID)) {
		t.Fatalf("replay with a lagging replica: from the replica %v, %d events", replica, len(evs))
	}
	pair.ResumeReplay()
	waitFresh(true, "a standby that caught up")

	// Down: reads go to the primary, at once if a read fails there.
	pair.StopStandby()
	third := create()
	if ids, _ := listed(); !slices.Contains(ids, third.ID) {
		t.Fatal("with the replica down, the list lacks the third run")
	}
	waitFresh(false, "a standby that is down")
	if evs, replica := replayed(third.ID, 100); replica || !same(evs, stored(third.ID)) {
		t.Fatalf("replay with the replica down: from the replica %v, %d events", replica, len(evs))
	}
	pair.StartStandby()
	waitFresh(true, "a standby started again")
	pair.WaitReplayed()
	if ids, replica := listed(); !replica || !slices.Contains(ids, third.ID) {
		t.Fatalf("after the standby's restart: from the replica %v, want the third run", replica)
	}
}

// BenchmarkReplayLoad replays stored runs (500 events each, in pages of
// 100, as a stream's catch-up reads them) with and without a read replica,
// and reports the primary's CPU per replay (primary-cpu-µs/op): what the
// replica takes off the primary on a replay-heavy workload.
func BenchmarkReplayLoad(b *testing.B) {
	pair := persisttest.NewPair(b)
	primary := persisttest.Open(b, persist.Config{URL: pair.PrimaryURL(), MaxConns: 16})
	ctx := context.Background()
	const runs, events = 40, 500
	var ids []string
	for range runs {
		r, _, err := primary.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
			Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q"}}})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	pool, err := pgx.Connect(ctx, pair.PrimaryURL())
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(ctx)
	if _, err := pool.Exec(ctx, `INSERT INTO run_events (run_id, seq, type, step, data)
		SELECT r.id, r.last_event_seq + g, 'message.delta', 1, json_build_object('text', repeat('x', 200))
		FROM runs r, generate_series(1, $1) g`, events); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE runs SET last_event_seq = last_event_seq + $1`, events); err != nil {
		b.Fatal(err)
	}
	pair.WaitReplayed()
	withReplica := persisttest.Open(b, persist.Config{URL: pair.PrimaryURL(), ReplicaURL: pair.StandbyURL(), MaxConns: 16})
	if err := withReplica.ReplicaSampler().Start(ctx); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		store *persist.Store
	}{{"primary", primary}, {"replica", withReplica}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.name == "replica" {
				for !withReplica.ReplicaFresh() {
					time.Sleep(10 * time.Millisecond)
				}
			}
			cpu := pair.PrimaryCPU()
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := ids[int(n.Add(1))%len(ids)]
					var after int64
					for {
						page, err := bc.store.EventsReplay(ctx, id, after, 100)
						if err != nil {
							b.Error(err)
							return
						}
						if len(page) < 100 {
							break
						}
						after = page[len(page)-1].Seq
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((pair.PrimaryCPU()-cpu).Microseconds())/float64(b.N), "primary-cpu-µs/op")
		})
	}
}
