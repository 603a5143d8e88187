package persist

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// fence builds the call of agentd_fence (migration 00007) for the requests
// of one executor transaction: one entry per run and epoch, sorted by run so
// that committers lock runs in the same order, with the counters the
// requests' ops move and the events they append. The function takes each
// column as an array; the builder keeps them side by side.
type fence struct {
	runs   fenceRuns
	events fenceEvents
	at     time.Time
	index  map[fenceKey]int // a run and epoch's position in runs
	last   map[string]int64 // each run's last event seq after the commit, read back
	of     [][]int          // of[i]: the positions in events of run i's events; nil when nobody is told
	notify bool             // the call also notifies ChannelEvents of each run's last seq
}

type fenceKey struct {
	id    string
	epoch int64
}

// fenceRuns are the run columns of agentd_fence.
type fenceRuns struct {
	ids                        []string
	epochs                     []int64
	ns                         []int64 // events appended
	steps                      []int32 // the step count reached
	in, out, cached, reasoning []int64 // tokens added
}

// fenceEvents are the event columns of agentd_fence. Events are numbered in
// SQL, after the seqs the fence reserved: the k-th of a run's events in this
// write follows the run's last seq.
type fenceEvents struct {
	run   []int32 // 1-based position of the run in fenceRuns
	k     []int64
	types []string
	steps []int32
	datas []string
	ats   []time.Time
}

// newFence gathers the runs, counters and events of reqs, at time at; with
// publish, it also keeps where each run's events are, for publish.
func newFence(reqs []*execReq, at time.Time, publish bool) (*fence, error) {
	f := &fence{at: at, index: map[fenceKey]int{}}
	for _, r := range reqs {
		f.index[fenceKey{r.f.RunID, r.f.Epoch}] = 0
	}
	keys := slices.SortedFunc(maps.Keys(f.index), func(a, b fenceKey) int {
		return cmp.Or(strings.Compare(a.id, b.id), cmp.Compare(a.epoch, b.epoch))
	})
	n := len(keys)
	f.runs = fenceRuns{ids: make([]string, n), epochs: make([]int64, n), ns: make([]int64, n), steps: make([]int32, n),
		in: make([]int64, n), out: make([]int64, n), cached: make([]int64, n), reasoning: make([]int64, n)}
	if publish {
		f.of = make([][]int, n)
	}
	for i, k := range keys {
		f.index[k] = i
		f.runs.ids[i], f.runs.epochs[i] = k.id, k.epoch
	}
	for _, r := range reqs {
		i := f.index[fenceKey{r.f.RunID, r.f.Epoch}]
		for _, op := range r.ops {
			if c, ok := op.(runCounter); ok {
				f.count(i, c)
			}
		}
		for _, ev := range r.evs {
			if err := f.add(i, ev); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// count adds what op moves to run i's counters.
func (f *fence) count(i int, op runCounter) {
	step, u := op.counts()
	f.runs.steps[i] = max(f.runs.steps[i], int32(step))
	f.runs.in[i] += u.InputTokens
	f.runs.out[i] += u.OutputTokens
	f.runs.cached[i] += u.CachedInputTokens
	f.runs.reasoning[i] += u.ReasoningTokens
}

// add appends ev to run i's events.
func (f *fence) add(i int, ev agentd.EventIn) error {
	row, err := newEventRow(f.runs.ids[i], 0, ev, f.at)
	if err != nil {
		return err
	}
	f.runs.ns[i]++
	e := &f.events
	if f.of != nil {
		f.of[i] = append(f.of[i], len(e.run))
	}
	e.run = append(e.run, int32(i+1))
	e.k = append(e.k, f.runs.ns[i])
	e.types = append(e.types, string(row.typ))
	e.steps = append(e.steps, int32(row.step))
	e.datas = append(e.datas, row.data)
	e.ats = append(e.ats, row.at)
	return nil
}

// queue queues the call on b; its result, each run's last seq, is read into
// f.last.
func (f *fence) queue(b *batch) {
	r, e := &f.runs, &f.events
	f.last = make(map[string]int64, len(r.ids))
	// Ids go as text[]: pgx has no binary encoding of a string as a uuid,
	// and building the error that says so before it falls back to text cost
	// 1% of a step's CPU.
	sql := `SELECT fenced_run, fenced_seq FROM agentd_fence($1::text[]::uuid[], $2::bigint[], $3::bigint[], $4::int[],
			$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::int[], $10::bigint[], $11::text[], $12::int[],
			$13::text[], $14::timestamptz[])`
	args := []any{r.ids, r.epochs, r.ns, r.steps, r.in, r.out, r.cached, r.reasoning, e.run, e.k, e.types, e.steps, e.datas, e.ats}
	if f.notify {
		// The notification of each run, "run_id:last_seq", sent at the
		// commit; pg_notify returns nothing that is read.
		sql = `SELECT f.fenced_run, f.fenced_seq, pg_notify($15, f.fenced_run::text || ':' || f.fenced_seq::text)::text
			FROM agentd_fence($1::text[]::uuid[], $2::bigint[], $3::bigint[], $4::int[],
			$5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::int[], $10::bigint[], $11::text[], $12::int[],
			$13::text[], $14::timestamptz[]) AS f`
		args = append(args, ChannelEvents)
	}
	b.query("fence", sql, args,
		func(rows pgx.Rows) error {
			var id string
			var seq int64
			var void *string
			scan := []any{&id, &seq}
			if f.notify {
				scan = append(scan, &void)
			}
			_, err := pgx.ForEachRow(rows, scan, func() error {
				f.last[id] = seq
				return nil
			})
			return err
		})
}

// settle sets each request's last event seq, once committed: a run's seqs
// were taken in request order.
func (f *fence) settle(reqs []*execReq) {
	next := make(map[string]int64, len(f.runs.ids))
	for i, id := range f.runs.ids {
		next[id] = f.last[id] - f.runs.ns[i]
	}
	for _, r := range reqs {
		next[r.f.RunID] += int64(len(r.evs))
		r.last = next[r.f.RunID]
	}
}

// publish hands each run's committed events to pub, as EventsAfter puts
// them together from their rows.
func (f *fence) publish(pub Publisher) {
	f.each(pub.PublishedEvents)
}

// publishNotified is publish for a commit that notified its runs itself.
func (f *fence) publishNotified(pub NotifiedPublisher) {
	f.each(pub.PublishedNotified)
}

// each calls tell with each run's committed events.
func (f *fence) each(tell func(runID string, evs []agentd.Event)) {
	atText := formatEventTime(f.at)
	e := &f.events
	for i, id := range f.runs.ids {
		n := f.runs.ns[i]
		if n == 0 {
			continue
		}
		evs := make([]agentd.Event, len(f.of[i]))
		for k, j := range f.of[i] {
			seq := f.last[id] - n + int64(k) + 1
			evs[k] = agentd.Event{RunID: id, Seq: seq, Type: agentd.EventType(e.types[j]), CreatedAt: f.at,
				Data: envelope(seq, e.types[j], id, int(e.steps[j]), atText, []byte(e.datas[j]))}
		}
		tell(id, evs)
	}
}

// Fence identifies a worker's claim on a run: writes made under it commit
// only while the run's epoch is still Epoch.
type Fence struct {
	RunID  string
	Epoch  int64
	Worker string
}
