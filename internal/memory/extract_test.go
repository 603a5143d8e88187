package memory_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// extractBundle is what an extraction test needs: a store, the fake model
// behind the real adapter, priced models, and a registry.
type extractBundle struct {
	store    *persist.Store
	url      string
	fake     *fakellm.Server
	model    llm.Model
	profiles *compact.Profiles
	emb      memory.Embedder
	reg      *prometheus.Registry
}

func extractSetup(t *testing.T) extractBundle {
	t.Helper()
	store, url := persisttest.New(t)
	fake := fakellm.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	// One token of input costs 1, of output 2: a call's cost is its
	// tokens, as the fake counts them.
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"small": {"context_window": 0,
		"prices": {"input": 1000000, "output": 2000000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := compact.LoadProfiles(models)
	if err != nil {
		t.Fatal(err)
	}
	return extractBundle{store: store, url: url, fake: fake, profiles: profiles, reg: prometheus.NewRegistry(),
		model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "fake"}),
		emb:   memory.NewOpenAI(memory.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "fake", Model: "fake-embed", Dimensions: 32})}
}

// start starts an extractor of b's, stopped when the test ends.
func (b extractBundle) start(t *testing.T, attempts int) *memory.Extractor {
	t.Helper()
	x := memory.NewExtractor(memory.ExtractConfig{Store: b.store, Model: b.model, Profiles: b.profiles, Embedder: b.emb,
		DefaultModel: "small", Workers: 4, Attempts: attempts, Backoff: 20 * time.Millisecond, Tick: 20 * time.Millisecond,
		Timeout: 10 * time.Second, Registerer: b.reg})
	if err := x.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := x.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return x
}

// completed makes a run of agent (none: "") that asked for extraction to
// ns, was given input, and completed answering output; and dispatches
// the outbox, which makes its job.
func (b extractBundle) completed(t *testing.T, agent, input, output string, ns ...string) agentd.Run {
	t.Helper()
	ctx := context.Background()
	p := agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyReject, Memory: &agentd.RunMemory{Search: [][]string{ns},
		Extract: &agentd.RunMemoryExtract{Namespace: ns, Instructions: "Keep where the user lives."}}}
	if agent != "" {
		p.Agent = &agentd.AgentRef{Name: agent, Version: 1}
	}
	st, _, err := b.store.RunCreateState(ctx, persist.RunCreateParams{TenantID: "acme", Model: "m", Params: p,
		Actor: "key:creator", Input: []agentd.InputMessage{{Role: "user", Content: input}},
		ClaimFor: &persist.ClaimFor{Worker: "w", TTL: time.Minute, StepID: agentd.NewID()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Exec(ctx, persist.Fence{RunID: st.Run.ID, Epoch: st.Run.Epoch, Worker: "w"},
		[]agentd.EventIn{agentd.RunEndEvent(1, agentd.StatusCompleted, agentd.ReasonCompleted, nil, "")},
		persist.RunEnd{ID: st.Run.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted,
			Output: []agentd.Part{{Type: agentd.PartText, Text: output}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.OutboxDispatch(ctx, 100, func(context.Context, agentd.RunReader, agentd.OutboxEntry) (json.RawMessage, bool, error) {
		return nil, false, nil
	}); err != nil {
		t.Fatal(err)
	}
	return st.Run
}

// ended waits until run's extraction job has ended, and returns it.
func (b extractBundle) ended(t *testing.T, run string) agentd.MemoryExtraction {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := b.store.MemoryExtractionList(context.Background(), agentd.MemoryExtractionList{Tenant: "acme", RunID: run})
		if err != nil || len(list) != 1 {
			t.Fatalf("the run's jobs: %v %+v", err, list)
		}
		if x := list[0]; x.Status == agentd.ExtractionDone || x.Status == agentd.ExtractionFailed {
			return x
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not end: %+v", list[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ledger is the extraction rows of run's calls: n and cost of each.
func (b extractBundle) ledger(t *testing.T, run string) map[int]float64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT n, cost::float8 FROM model_calls WHERE run_id = $1 AND kind = 'extraction'
		AND step_seq = 0 AND model = 'small' AND tenant_id = 'acme'`, run)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]float64{}
	var n int
	var cost float64
	if _, err := pgx.ForEachRow(rows, []any{&n, &cost}, func() error { out[n] = cost; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExtractorWritesWithProvenance: a completed run's extraction asks
// the model (through the real adapter) with the extraction prompt, the
// run's instructions, the namespace's items and the run's turn, and
// writes what it answers as versions of source extraction, extracted
// from the run, by its agent, embedded; an item already holding its value
// is not written again; the call is in the ledger, kind extraction, at its
// price; the metrics count it.
func TestExtractorWritesWithProvenance(t *testing.T) {
	t.Parallel()
	b := extractSetup(t)
	ctx := context.Background()
	ns := agentd.Namespace{"users", "ann"}
	if _, err := b.store.MemoryPut(ctx, "acme", agentd.MemoryWrite{Namespace: ns, Key: "diet", Value: "vegetarian",
		Source: agentd.MemoryFromAPI}); err != nil {
		t.Fatal(err)
	}
	run := b.completed(t, "concierge", "I moved to Porto.\n/remember home=Porto\n/remember diet=vegetarian", "Noted.", ns...)
	b.start(t, 3)
	x := b.ended(t, run.ID)
	if x.Status != agentd.ExtractionDone || x.Items != 1 || x.Attempts != 1 || x.Model != "small" || x.Error != "" {
		t.Fatalf("the job: %+v", x)
	}
	it, err := b.store.MemoryGet(ctx, "acme", ns, "home", agentd.MemoryRead{})
	if err != nil || it.Value != "Porto" || it.Version != 1 || it.Source != agentd.MemoryFromExtraction ||
		it.ExtractedFrom != run.ID || it.Actor != "agent:concierge" || len(it.Embedding) != 32 {
		t.Fatalf("the item written: %v %+v", err, it)
	}
	if d, err := b.store.MemoryGet(ctx, "acme", ns, "diet", agentd.MemoryRead{}); err != nil || d.Version != 1 ||
		d.Source != agentd.MemoryFromAPI {
		t.Fatalf("the item unchanged: %v %+v", err, d)
	}
	reqs := b.fake.Requests()
	if len(reqs) != 1 || reqs[0].Model != "small" || string(reqs[0].ResponseFormat) != `{"type":"json_object"}` {
		t.Fatalf("the model's requests: %+v", reqs)
	}
	var system, user struct{ Content string }
	_ = json.Unmarshal(reqs[0].Sent[0], &system)
	_ = json.Unmarshal(reqs[0].Sent[1], &user)
	if !strings.Contains(system.Content, fakellm.ExtractionMarker) || !strings.HasPrefix(system.Content, memory.ExtractionPrompt) ||
		!strings.Contains(system.Content, "Keep where the user lives.") {
		t.Fatalf("the system prompt: %q", system.Content)
	}
	for _, want := range []string{"Remembered now in users/ann:\n- diet: vegetarian\n", "[user]\nI moved to Porto.", "[assistant]\nNoted."} {
		if !strings.Contains(user.Content, want) {
			t.Fatalf("the turn sent lacks %q: %q", want, user.Content)
		}
	}
	u := reqs[0].Usage
	if got := b.ledger(t, run.ID); len(got) != 1 || got[1] != float64(u.PromptTokens+2*u.CompletionTokens) {
		t.Fatalf("ledger %v, the fake's usage %+v", got, u)
	}
	if n := counted(t, b.reg, "agentd_memory_extractions_total", "done"); n != 1 {
		t.Fatalf("done: %v", n)
	}
}

// counted is the value of the counter name's series of label value v.
func counted(t *testing.T, reg *prometheus.Registry, name, v string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == v {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestExtractorRetries: a model that fails (500) is asked again after a
// backoff until it answers, and the job is written once; an answer that
// is no JSON is retried too, and its call stays in the ledger; a model
// that always fails fails the job after the cap of attempts, with its
// error, writing nothing.
func TestExtractorRetries(t *testing.T) {
	t.Parallel()
	b := extractSetup(t)
	ctx := context.Background()
	// Each in a namespace of its own: the fake fails a request the first
	// N times it sees it, and one's items would change another's.
	flaky := b.completed(t, "", "/remember home=Lyon\n/extract-fail 500 2", "ok", "users", "bo")
	invalid := b.completed(t, "", "/remember pet=cat\n/extract-fail invalid 1", "ok", "users", "cy")
	broken := b.completed(t, "", "/remember job=nurse\n/extract-fail 500", "ok", "users", "di")
	b.start(t, 3)
	if x := b.ended(t, flaky.ID); x.Status != agentd.ExtractionDone || x.Attempts != 3 || x.Items != 1 {
		t.Fatalf("the flaky model's job: %+v", x)
	}
	if got := b.ledger(t, flaky.ID); len(got) != 1 || got[3] == 0 {
		t.Fatalf("the flaky model's ledger (its 500s answered nothing): %v", got)
	}
	if x := b.ended(t, invalid.ID); x.Status != agentd.ExtractionDone || x.Attempts != 2 {
		t.Fatalf("the invalid answer's job: %+v", x)
	}
	if got := b.ledger(t, invalid.ID); len(got) != 2 || got[1] == 0 || got[2] == 0 {
		t.Fatalf("the invalid answer's ledger: %v", got)
	}
	x := b.ended(t, broken.ID)
	if x.Status != agentd.ExtractionFailed || x.Attempts != 3 || !strings.Contains(x.Error, "500") || x.FinishedAt == nil {
		t.Fatalf("the broken model's job: %+v", x)
	}
	if _, err := b.store.MemoryGet(ctx, "acme", agentd.Namespace{"users", "di"}, "job", agentd.MemoryRead{}); err == nil {
		t.Fatal("the failed job wrote its item")
	}
	for key, want := range map[string]string{"users/bo home": "Lyon", "users/cy pet": "cat"} {
		path, key, _ := strings.Cut(key, " ")
		versions, err := b.store.MemoryVersions(ctx, "acme", agentd.ParseNamespace(path), key, agentd.MemoryRead{})
		if err != nil || len(versions) != 1 || versions[0].Value != want {
			t.Fatalf("%s's versions: %v %+v", key, err, versions)
		}
	}
	for outcome, want := range map[string]float64{"done": 2, "retried": 5, "failed": 1} {
		if n := counted(t, b.reg, "agentd_memory_extractions_total", outcome); n != want {
			t.Errorf("%s: %v, want %v", outcome, n, want)
		}
	}
}

// TestExtractorsShareJobs: two extractors on one database make each of
// many jobs once: every item has one version.
func TestExtractorsShareJobs(t *testing.T) {
	t.Parallel()
	b := extractSetup(t)
	ctx := context.Background()
	var runs []agentd.Run
	for i := range 12 {
		runs = append(runs, b.completed(t, "", "/remember k=v\n/extract-delay 20", "ok", "users", "u"+string(rune('a'+i))))
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.start(t, 3)
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if x := b.ended(t, r.ID); x.Status != agentd.ExtractionDone || x.Attempts != 1 {
			t.Fatalf("job of %s: %+v", r.ID, x)
		}
		ns := agentd.Namespace(r.Params.Memory.Extract.Namespace)
		versions, err := b.store.MemoryVersions(ctx, "acme", ns, "k", agentd.MemoryRead{})
		if err != nil || len(versions) != 1 {
			t.Fatalf("%s's versions: %v %+v", ns, err, versions)
		}
	}
	if calls := b.fake.Calls(); calls != len(runs) {
		t.Fatalf("the model was asked %d times for %d jobs", calls, len(runs))
	}
}

// TestExtractorStopCuts: Stop lets an attempt under way finish until its
// context ends, then cuts it and says so; the cut attempt wrote nothing,
// and another extractor takes the job over once its lease ends (half as
// long again as the timeout) and writes it once. Stopping twice is safe.
func TestExtractorStopCuts(t *testing.T) {
	t.Parallel()
	b := extractSetup(t)
	ctx := context.Background()
	run := b.completed(t, "", "/remember home=Oslo\n/extract-delay 1500", "ok", "users", "eve")
	cfg := memory.ExtractConfig{Store: b.store, Model: b.model, Profiles: b.profiles, DefaultModel: "small",
		Timeout: 2 * time.Second, Tick: 20 * time.Millisecond, Backoff: 20 * time.Millisecond}
	first := memory.NewExtractor(cfg)
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for b.fake.Calls() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := first.Stop(stop); err == nil || !strings.Contains(err.Error(), "cut 1 memory extractions") {
		t.Fatalf("stop: %v", err)
	}
	if err := first.Stop(ctx); err == nil {
		t.Fatal("the second stop forgot the first's cut")
	}
	if _, err := b.store.MemoryGet(ctx, "acme", agentd.Namespace{"users", "eve"}, "home", agentd.MemoryRead{}); err == nil {
		t.Fatal("the cut attempt wrote its item")
	}
	second := memory.NewExtractor(cfg)
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer second.Stop(ctx)
	if x := b.ended(t, run.ID); x.Status != agentd.ExtractionDone || x.Attempts != 2 || x.Items != 1 {
		t.Fatalf("the job taken over: %+v", x)
	}
}
