package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// extractionOf waits, through c, until the extraction job of run has
// ended, and returns it.
func extractionOf(t *testing.T, c *client.Client, run string) client.MemoryExtraction {
	t.Helper()
	ctx := testCtx(t)
	for {
		page, err := c.Memory().Extractions(ctx, run, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) > 1 {
			t.Fatalf("run %s has %d extraction jobs", run, len(page.Data))
		}
		if len(page.Data) == 1 && (page.Data[0].Status == agentd.ExtractionDone || page.Data[0].Status == agentd.ExtractionFailed) {
			return page.Data[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s's extraction did not end: %+v", run, page.Data)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestExtractionAfterRun: a run of an agent whose definition asks for
// memory.extract completes at once, and then the server's extraction
// model (AGENTD_MEMORY_EXTRACT_MODEL, priced in the models file) writes
// what its turn said to remember into the run's user's namespace, with the
// run as its source, listed by GET /memory/extractions; its cost is the
// run's. A run that asked for no extraction has no job.
func TestExtractionAfterRun(t *testing.T) {
	t.Parallel()
	s := setup(t, withEnv("AGENTD_MEMORY_EXTRACT_MODEL", "small"),
		withModelsFile(`{"models": {"small": {"context_window": 0, "prices": {"input": 1000000, "output": 1000000}}}}`))
	c, ctx := s.Client, testCtx(t)
	if _, err := c.CreateAgentJSON(ctx, json.RawMessage(`{"name": "concierge", "instructions": "You help.",
		"memory": {"search": [["users", "{{user}}"]],
			"extract": {"namespace": ["users", "{{user}}", "notes"], "instructions": "Keep where the traveller lives."}}}`)); err != nil {
		t.Fatal(err)
	}
	r, err := c.CreateRun(ctx, client.CreateRun{Agent: "concierge", User: "ann",
		Input: "I moved to Porto.\n/remember home=Porto\n/say Noted."})
	if err != nil {
		t.Fatal(err)
	}
	if r = runEnded(t, c, r.ID); r.Status != agentd.StatusCompleted || r.OutputText == nil || *r.OutputText != "Noted." {
		t.Fatalf("the run: %+v", r)
	}
	x := extractionOf(t, c, r.ID)
	if x.Status != agentd.ExtractionDone || x.Model == nil || *x.Model != "small" || x.Items != 1 ||
		x.Namespace.String() != "users/ann/notes" || x.Attempts != 1 {
		t.Fatalf("the extraction: %+v", x)
	}
	if got, err := c.Memory().Extraction(ctx, x.ID); err != nil || got.ID != x.ID {
		t.Fatalf("the extraction by id: %v %+v", err, got)
	}
	it, err := c.Memory().Get(ctx, []string{"users", "ann", "notes"}, "home", nil)
	if err != nil || it.Value != "Porto" || it.Source != agentd.MemoryFromExtraction || it.ExtractedFrom != r.ID ||
		it.Actor != "agent:concierge" || it.Version != 1 {
		t.Fatalf("the item: %v %+v", err, it)
	}
	if r, err = c.GetRun(ctx, r.ID); err != nil || r.Cost <= 0 {
		t.Fatalf("the run's cost with its extraction's: %v %+v", err, r)
	}
	plain, err := c.CreateRun(ctx, client.CreateRun{Input: "/remember home=Lyon"})
	if err != nil {
		t.Fatal(err)
	}
	runEnded(t, c, plain.ID)
	time.Sleep(300 * time.Millisecond) // past a dispatch of the outbox
	if page, err := c.Memory().Extractions(ctx, plain.ID, 0, ""); err != nil || len(page.Data) != 0 {
		t.Fatalf("a run without extract: %v %+v", err, page)
	}
}

// TestExtractionExactlyOnceAcrossSIGKILL: the instance that holds a run's
// extraction is killed (SIGKILL) while the model is answering it; another
// instance takes the job over once its lease ends and writes it: each
// item has one version, and the ledger one extraction call, the second
// attempt's (the first one's write never happened).
func TestExtractionExactlyOnceAcrossSIGKILL(t *testing.T) {
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_MEMORY_EXTRACT_TIMEOUT=3s", "AGENTD_LOG_LEVEL=info"}
	a := startChild(t, env)
	body := `{"input": "I moved to Porto and went vegetarian.\n/remember home=Porto\n/remember diet=vegetarian\n` +
		`/extract-delay 2000\n/say Noted.", "memory": {"search": [["users", "ann"]], "extract": {"namespace": ["users", "ann"]}}}`
	resp, err := http.Post("http://"+a.addr+"/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var run struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	job := waitExtraction(t, store, run.ID, func(x agentd.MemoryExtraction) bool { return x.Status == agentd.ExtractionRunning })
	time.Sleep(500 * time.Millisecond) // the model is answering: its answer takes 2 s
	a.kill(t)
	killed := time.Now()
	b := startChild(t, env)
	job = waitExtraction(t, store, run.ID, func(x agentd.MemoryExtraction) bool { return x.Status == agentd.ExtractionDone })
	t.Logf("taken over and done %v after the SIGKILL (lease 4.5 s)", time.Since(killed).Round(time.Millisecond))
	if job.Attempts != 2 || job.Items != 2 || job.LeasedBy != "" || job.Error != "" || job.FinishedAt == nil {
		t.Fatalf("the job: %+v", job)
	}
	c := client.New("http://" + b.addr)
	for key, want := range map[string]string{"home": "Porto", "diet": "vegetarian"} {
		versions, err := c.Memory().Versions(testCtx(t), []string{"users", "ann"}, key, 0, "")
		if err != nil || len(versions.Data) != 1 || versions.Data[0].Value != want || versions.Data[0].ExtractedFrom != run.ID {
			t.Fatalf("%s's versions: %v %+v", key, err, versions)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var calls, n int
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(n), 0) FROM model_calls WHERE run_id = $1 AND kind = 'extraction'`,
		run.ID).Scan(&calls, &n); err != nil || calls != 1 || n != 2 {
		t.Fatalf("the ledger's extraction calls: %v, %d (n %d)", err, calls, n)
	}
}

// waitExtraction waits until run's extraction job holds cond.
func waitExtraction(t *testing.T, store *persist.Store, run string, cond func(agentd.MemoryExtraction) bool) agentd.MemoryExtraction {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := store.MemoryExtractionList(context.Background(), agentd.MemoryExtractionList{Tenant: "default", RunID: run})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && cond(list[0]) {
			return list[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s's extraction: %+v", run, list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
