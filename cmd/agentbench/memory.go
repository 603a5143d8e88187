package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// The memory phase's user, agents and memory: memoryItems items in the
// user's namespace, each memoryValueBytes of text, which together fill the
// pinned memory a run is given to within a few bytes of its cap
// (agentd.MaxPinnedMemoryBytes counts an item's namespace, key and value,
// and 4 bytes more).
const (
	memoryUser       = "bench-user"
	memoryItems      = 40
	memoryValueBytes = 382
	memoryClients    = 16
)

// memoryVariant is one of the memory phase's two agents.
type memoryVariant struct {
	name, agent string
}

var (
	memoryPinned = memoryVariant{"pinned", "bench-pinned"}
	memoryPlain  = memoryVariant{"plain", "bench-plain"}
)

// memoryTally is what a variant's runs did and cost, summed over its
// slices.
type memoryTally struct {
	runs, failed int
	lat          []time.Duration
	elapsed      time.Duration
	agentd       time.Duration
	backends     time.Duration // of its database's backends
	cpu          cpuReading    // PostgreSQL's, the fake model's and the machine's, used meanwhile
	cost         dbCost
	model        modelReceived
	modelKnown   bool
	// owned is its database's, read back from the WAL; own when every
	// slice's could be.
	owned ownCost
	own   bool
}

// memoryRig is what the memory phase measures with: agentd, its database,
// the fake model (when in a process of the benchmark's), and what keeps
// the database's WAL until it is read.
type memoryRig struct {
	o         options
	srv       *agentdProcess
	url, fake string
	keeper    *walKeeper
	shown     map[memoryVariant]bool // variants whose WAL breakdown was printed
}

// benchMemory measures what pinned memory adds to a run, in one run of the
// same build: agentd (cmd/server) on a database of its own, calling the
// fake model in its child process (fake, when given; else agentd's
// built-in one); memoryItems items of the user's namespace put through
// PUT /memory/items, about 16 KiB of text, the cap of pinned memory; two
// agents alike but for memory, one pinning the user's namespace
// ({"pinned": [["users", "{{user}}"]]}) and one without memory. Each run
// is the answers phase's 3-step run (model, calculator, model) for the
// user, POST /runs with "stream": true followed to its end, at 16
// clients, the two agents alternated (pinned, plain, plain, pinned; with
// -quick once each). Per run of each: agentd's, PostgreSQL's (all of it,
// and its database's backends'), the fake model's and the machine's CPU,
// write transactions, WAL, and the requests and bytes the fake model
// received, and its database's own write transactions and WAL, read back
// with pg_walinspect as the steer phase does (steercost.go); then the
// ratios of the pinned run to the plain one. The target is agentd's CPU:
// pinned memory costs a run at most half again.
func benchMemory(ctx context.Context, o options, fake string) ([]metric, error) {
	srv, url, stop, err := phaseAgentd(ctx, o, "memory", fake, 64)
	if err != nil {
		return nil, err
	}
	defer stop()

	if err := memorySetUp(srv.base); err != nil {
		return nil, err
	}
	pinned, err := memoryPinnedItems(srv.base)
	if err != nil {
		return nil, err
	}
	order := []memoryVariant{memoryPinned, memoryPlain, memoryPlain, memoryPinned}
	slice := o.duration / 2
	if o.quick {
		order, slice = order[:2], o.duration
	}
	// Warm up both: the first runs of a new server and database cost more.
	warm := max(slice/4, 500*time.Millisecond)
	for _, v := range []memoryVariant{memoryPinned, memoryPlain} {
		if _, failed := pathRuns(ctx, []string{srv.base}, memoryClients, warm, "stream", oneWordRun, v.fields()); failed > 0 {
			return nil, fmt.Errorf("%s: %d runs failed while warming up", v.name, failed)
		}
	}
	if conn, err := pgx.Connect(ctx, url); err == nil {
		_, _ = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
		conn.Close(ctx)
	}
	rig := &memoryRig{o: o, srv: srv, url: url, fake: fake, keeper: keepWAL(ctx, url), shown: map[memoryVariant]bool{}}
	defer rig.keeper.close()
	tallies := map[memoryVariant]*memoryTally{memoryPinned: {modelKnown: true, own: true}, memoryPlain: {modelKnown: true, own: true}}
	before, err := readCounters(ctx, url)
	if err != nil {
		return nil, err
	}
	for _, v := range order {
		if before, err = rig.measure(ctx, tallies[v], v, slice, before); err != nil {
			return nil, err
		}
	}
	ms := []metric{{"memory", "pinned memory items given to each run", "items", float64(pinned), nil}}
	return append(ms, memoryMetrics(o, fake, tallies)...), nil
}

// fields are what a run of v names beside its input.
func (v memoryVariant) fields() map[string]any {
	return map[string]any{"agent": v.agent, "user": memoryUser}
}

// measure makes runs of v for d and adds what they did and cost to t; the
// database's counters are read before (given) and after (returned).
func (r *memoryRig) measure(ctx context.Context, t *memoryTally, v memoryVariant, d time.Duration, before dbCounters) (dbCounters, error) {
	o, srv, url, fake := r.o, r.srv, r.url, r.fake
	var model0 modelReceived
	var modelErr error
	if fake != "" {
		model0, modelErr = fakeReceived(fake)
	}
	backends0 := backendsCPU(ctx, url)
	agentd0, machine0 := processCPU(srv.pid), o.cpu.read()
	start := time.Now()
	lat, failed := pathRuns(ctx, []string{srv.base}, memoryClients, d, "stream", oneWordRun, v.fields())
	elapsed := time.Since(start)
	agentd, machine := processCPU(srv.pid)-agentd0, o.cpu.read()
	backends := backendsSince(backends0, backendsCPU(ctx, url))
	var model1 modelReceived
	if fake != "" && modelErr == nil {
		model1, modelErr = fakeReceived(fake)
	}
	after, cost, err := costSince(ctx, o.out, "memory", url, before)
	if err != nil {
		return after, err
	}
	owned, own := ownWAL(ctx, url, before.wal, after.wal)
	if !r.shown[v] {
		r.shown[v] = true
		ownBreakdown(ctx, o.out, url, before.wal, after.wal, float64(max(len(lat), 1)), "run, "+v.name)
	}
	r.keeper.release(ctx, after.wal)
	t.owned.writeTx += owned.writeTx
	t.owned.wal += owned.wal
	t.owned.fpi += owned.fpi
	t.own = t.own && own
	t.runs += len(lat)
	t.failed += failed
	t.lat = append(t.lat, lat...)
	t.elapsed += elapsed
	t.agentd += agentd
	t.backends += backends
	t.cpu.postgres += machine.postgres - machine0.postgres
	t.cpu.fake += machine.fake - machine0.fake
	t.cpu.machine += machine.machine - machine0.machine
	t.cost.writeTx += cost.writeTx
	t.cost.commits += cost.commits
	t.cost.wal += cost.wal
	t.modelKnown = t.modelKnown && fake != "" && modelErr == nil
	t.model.Requests += model1.Requests - model0.Requests
	t.model.Bytes += model1.Bytes - model0.Bytes
	fmt.Fprintf(o.out, "  memory: %s: %d runs in %.1fs (%d failed); agentd %.2f ms, %.2f tx, %.0f B WAL per run\n",
		v.name, len(lat), elapsed.Seconds(), failed, msOf(agentd)/float64(max(len(lat), 1)),
		float64(cost.writeTx)/float64(max(len(lat), 1)), float64(cost.wal)/float64(max(len(lat), 1)))
	return after, nil
}

// memoryPerRun is a variant's figures per run that its ratios are made of.
type memoryPerRun struct {
	agentd, postgres, backends, machine, writeTx, wal, modelBytes float64
	ownWriteTx, ownWAL                                            float64 // its database's, full-page images aside
}

// memoryMetrics gives the figures of both variants per run, and the ratios
// of the pinned run to the plain one.
func memoryMetrics(o options, fake string, tallies map[memoryVariant]*memoryTally) []metric {
	var ms []metric
	add := func(name, unit string, v float64, t *target) { ms = append(ms, metric{"memory", name, unit, v, t}) }
	const level = ", 16 clients"
	got := map[memoryVariant]memoryPerRun{}
	own := tallies[memoryPinned].own && tallies[memoryPlain].own
	for _, v := range []memoryVariant{memoryPinned, memoryPlain} {
		t := tallies[v]
		n := float64(max(t.runs, 1))
		tag := ", " + v.name + level
		p50, p99 := percentiles(t.lat)
		pr := memoryPerRun{agentd: msOf(t.agentd) / n, writeTx: float64(t.cost.writeTx) / n, wal: float64(t.cost.wal) / n}
		add("runs/s"+tag, "runs/s", float64(t.runs)/max(t.elapsed.Seconds(), 1e-9), nil)
		add("failed runs"+tag, "runs", float64(t.failed), noneEver())
		add("run latency p50"+tag, "ms", msOf(p50), nil)
		add("run latency p99"+tag, "ms", msOf(p99), nil)
		add("agentd CPU per run"+tag, "ms", pr.agentd, nil)
		if o.cpu.postmaster > 0 {
			pr.postgres, pr.backends = msOf(t.cpu.postgres)/n, msOf(t.backends)/n
			add("PostgreSQL CPU per run"+tag, "ms", pr.postgres, nil)
			add("PostgreSQL CPU per run, its database's backends"+tag, "ms", pr.backends, nil)
		}
		if o.cpu.fakePID > 0 && fake != "" {
			add("fake model CPU per run"+tag, "ms", msOf(t.cpu.fake)/n, nil)
		}
		if t.cpu.machine > 0 {
			pr.machine = msOf(t.cpu.machine) / n
			add("machine CPU per run"+tag, "ms", pr.machine, nil)
		}
		add("write transactions per run"+tag, "tx", pr.writeTx, nil)
		add("commits per run"+tag, "commits", float64(t.cost.commits)/n, nil)
		add("WAL per run"+tag, "B", pr.wal, nil)
		if own {
			pr.ownWriteTx, pr.ownWAL = float64(t.owned.writeTx)/n, float64(t.owned.wal-t.owned.fpi)/n
			add("write transactions per run, its database's"+tag, "tx", pr.ownWriteTx, nil)
			add("WAL per run, its database's, full-page images aside"+tag, "B", pr.ownWAL, nil)
		}
		if t.modelKnown {
			pr.modelBytes = float64(t.model.Bytes) / n
			add("model requests per run"+tag, "requests", float64(t.model.Requests)/n, nil)
			add("model request bytes per run"+tag, "B", pr.modelBytes, nil)
		}
		got[v] = pr
	}
	pinned, plain := got[memoryPinned], got[memoryPlain]
	ratio := func(name string, a, b float64, t *target) {
		if a > 0 && b > 0 {
			add(name+" per run, pinned to plain"+level, "x", a/b, t)
		}
	}
	ratio("agentd CPU", pinned.agentd, plain.agentd, atMost(1.5))
	ratio("PostgreSQL CPU", pinned.postgres, plain.postgres, nil)
	ratio("its database's backends' CPU", pinned.backends, plain.backends, nil)
	ratio("machine CPU", pinned.machine, plain.machine, nil)
	ratio("write transactions", pinned.writeTx, plain.writeTx, nil)
	ratio("WAL", pinned.wal, plain.wal, nil)
	ratio("write transactions, its database's,", pinned.ownWriteTx, plain.ownWriteTx, nil)
	ratio("WAL, its database's, full-page images aside,", pinned.ownWAL, plain.ownWAL, nil)
	ratio("model request bytes", pinned.modelBytes, plain.modelBytes, nil)
	if pinned.modelBytes > 0 && plain.modelBytes > 0 {
		add("model request bytes per run, pinned less plain"+level, "B", pinned.modelBytes-plain.modelBytes, nil)
	}
	return ms
}

// memorySetUp puts the user's memory and makes the two agents: alike but
// for the pinned agent's memory.
func memorySetUp(base string) error {
	namespace := []string{"users", memoryUser}
	for i := range memoryItems {
		item := map[string]any{"namespace": namespace, "key": fmt.Sprintf("fact-%02d", i), "value": memoryValue(i)}
		if err := sendJSON(http.MethodPut, base+"/memory/items", item); err != nil {
			return err
		}
	}
	const instructions = "You help the user with sums. Answer in one word when you can."
	if err := sendJSON(http.MethodPost, base+"/agents", map[string]any{"name": memoryPinned.agent, "instructions": instructions,
		"memory": map[string]any{"pinned": [][]string{{"users", "{{user}}"}}}}); err != nil {
		return err
	}
	return sendJSON(http.MethodPost, base+"/agents", map[string]any{"name": memoryPlain.agent, "instructions": instructions})
}

// memoryValue is the text of the user's item i: memoryValueBytes of
// sentences of words drawn from memoryWords, the same for every i on
// every run. Drawn, not repeated: PostgreSQL compresses what it stores of
// a run's pinned memory, and text that repeats itself would make its WAL
// look cheaper than a user's notes are.
func memoryValue(i int) string {
	rng := rand.New(rand.NewPCG(uint64(i), 42))
	var b strings.Builder
	fmt.Fprintf(&b, "Note %d.", i)
	for b.Len() < memoryValueBytes {
		for k := range 6 + rng.IntN(8) {
			w := memoryWords[rng.IntN(len(memoryWords))]
			if k == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(" " + w)
		}
		fmt.Fprintf(&b, " %d.", rng.IntN(1000))
	}
	return b.String()[:memoryValueBytes]
}

// memoryWords are the words of the user's notes.
var memoryWords = strings.Fields(`aisle seat window flight train hotel room breakfast early late morning evening
	prefers avoids likes dislikes always never usually sometimes books asks wants needs keeps sends
	lisbon porto lyon berlin madrid frankfurt airport station connection layover direct overnight
	allergic peanuts gluten vegetarian coffee tea water quiet floor high low bicycle bag luggage
	invoice receipt finance company address team manager budget limit card points member gold
	meeting client conference visit weekend holiday family children partner dog parking taxi
	rental car electric shuttle lounge upgrade refund change cancel deadline reminder calendar`)

// memoryPinnedItems makes one run of the pinned agent, POST /runs then its
// events to the end, and returns how many items its view (GET /runs/{id})
// says it was given; a run that did not complete is an error.
func memoryPinnedItems(base string) (int, error) {
	resp, err := postRunWith(base, oneWordRun, false, memoryPinned.fields())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var run struct {
		ID           string
		Status       string
		PinnedMemory []agentd.PinnedView `json:"pinned_memory"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil || run.ID == "" {
		return 0, fmt.Errorf("POST /runs: %d: %v", resp.StatusCode, err)
	}
	ev, err := client.Get(base + "/runs/" + run.ID + "/events")
	if err != nil {
		return 0, err
	}
	defer ev.Body.Close()
	if ev.StatusCode != http.StatusNoContent { // 204: it had ended already
		if _, err := follow(ev.Body, nil); err != nil {
			return 0, err
		}
	}
	view, err := client.Get(base + "/runs/" + run.ID)
	if err != nil {
		return 0, err
	}
	defer view.Body.Close()
	if err := json.NewDecoder(view.Body).Decode(&run); err != nil {
		return 0, fmt.Errorf("GET /runs/%s: %d: %v", run.ID, view.StatusCode, err)
	}
	if run.Status != string(agentd.StatusCompleted) {
		return 0, fmt.Errorf("the pinned agent's run ended %s", run.Status)
	}
	return len(run.PinnedMemory), nil
}

// sendJSON sends body to url with method and wants a 2xx answer.
func sendJSON(method, url string, body any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s %s: %d: %s", method, url, resp.StatusCode, msg)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
