package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestEvalAcrossSIGKILL kills the instance that drives an evaluation
// while its runs stream; another instance completes it with every run
// made once and scored once.
func TestEvalAcrossSIGKILL(t *testing.T) {
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_LEASE_TTL=1s"}
	a := startChild(t, env)
	base := "http://" + a.addr
	postJSON(t, base+"/agents", `{"name": "helper", "instructions": "Be exact.", "tools": ["calculator"]}`, http.StatusCreated, &map[string]any{})
	var cases []string
	for i := range 12 {
		cases = append(cases, fmt.Sprintf(`{"id": "c%d", "input": "/call calculator {\"expression\": \"%d*2\"}\n/stream 6 150\n/say %d",
			"checks": [{"type": "equals", "value": "%d"}, {"type": "called", "tool": "calculator"}]}`, i, i, i*2, i*2))
	}
	postJSON(t, base+"/datasets", `{"name": "doubles", "cases": [`+strings.Join(cases, ",")+`]}`, http.StatusCreated, &map[string]any{})
	var ev struct{ ID, Status string }
	postJSON(t, base+"/evals", `{"agent": "helper", "versions": [1], "dataset": "doubles", "repeat": 2, "concurrency": 6}`,
		http.StatusCreated, &ev)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(q string) int {
		var n int
		if err := conn.QueryRow(ctx, q, ev.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for end := time.Now().Add(30 * time.Second); count(`SELECT count(*) FROM eval_runs WHERE eval_id = $1 AND scored_at IS NOT NULL`) < 4; {
		if time.Now().After(end) {
			t.Fatal("the evaluation scored no runs")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.kill(t)
	killed := time.Now()
	made, scored := count(`SELECT count(*) FROM eval_runs WHERE eval_id = $1 AND run_id IS NOT NULL`),
		count(`SELECT count(*) FROM eval_runs WHERE eval_id = $1 AND scored_at IS NOT NULL`)
	b := startChild(t, env)
	var got struct {
		Status       string
		Runs, Scored int
		Report       struct{ Versions []struct{ Runs, Passed int } }
	}
	for end := time.Now().Add(60 * time.Second); got.Status != "completed"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the evaluation did not complete: %+v", got)
		}
		resp, err := http.Get("http://" + b.addr + "/evals/" + ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed with %d of 24 runs made and %d scored; completed %v after", made, scored, time.Since(killed).Round(time.Millisecond))
	if made == 24 && scored == 24 {
		t.Fatal("the kill came after the evaluation's end: it proved nothing")
	}
	evalRuns := count(`SELECT count(*) FROM runs WHERE params->'eval'->>'id' = $1`)
	if got.Runs != 24 || got.Scored != 24 || evalRuns != 24 || len(got.Report.Versions) != 1 ||
		got.Report.Versions[0].Runs != 24 || got.Report.Versions[0].Passed != 24 {
		t.Fatalf("after the kill: %+v, %d runs made in all", got, evalRuns)
	}
}

// TestEvalInTheViewer drives the viewer's evaluation pages in headless
// Chromium: the list, then an evaluation of version 2 against version 1
// whose report shows the totals, the one case version 2 broke as a
// regression with why it failed, a link to the failing run and to the
// comparison with the baseline's run, and every case by version.
func TestEvalInTheViewer(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t)
	postJSON(t, s.URL+"/agents", `{"name": "helper", "instructions": "Be exact.", "tools": ["calculator"]}`, http.StatusCreated, &map[string]any{})
	req, _ := http.NewRequest("PUT", s.URL+"/agents/helper", strings.NewReader(`{"instructions": "Be quick.", "tools": ["calculator"]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("version 2: %d", resp.StatusCode)
	}
	postJSON(t, s.URL+"/datasets", `{"name": "support", "cases": [
		{"id": "prompt", "name": "follows the prompt", "input": "/system", "checks": [{"type": "contains", "value": "Be exact."}]},
		{"id": "calc", "input": "/call calculator {\"expression\": \"6*7\"}\n/say 42", "checks": [{"type": "equals", "value": "42"}]}]}`,
		http.StatusCreated, &map[string]any{})
	var ev struct{ ID string }
	postJSON(t, s.URL+"/evals", `{"agent": "helper", "versions": [2], "baseline": 1, "dataset": "support"}`, http.StatusCreated, &ev)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	ui := s.URL + "/ui/"
	pageOpen(t, ctx, ui+"#/evals", "the evaluations page", `document.querySelectorAll('#evals tr').length === 2`)
	if rows := pageRows(t, ctx, `#evals tr`); !strings.Contains(rows[1], "helper | 1 (baseline), 2 | support v1 |") {
		t.Fatalf("the evaluations read %q", rows)
	}
	pageClick(t, ctx, `#evals a`, "the evaluation's page",
		`document.querySelector('#eval-totals') && document.body.innerText.includes('4 of 4 runs scored')`)
	totals := pageRows(t, ctx, `#eval-totals tr`)
	if len(totals) != 3 || !strings.HasPrefix(totals[1], "1 (baseline) | 100% | 2 / 2 |") || !strings.HasPrefix(totals[2], "2 | 50% | 1 / 2 |") {
		t.Fatalf("the totals read %q", totals)
	}
	regs := pageRows(t, ctx, `#regressions tr.regression`)
	if len(regs) != 1 || !strings.HasPrefix(regs[0], "prompt (follows the prompt) | 2 | 100% | 0% | contains:") {
		t.Fatalf("the regressions read %q", regs)
	}
	if cases := pageRows(t, ctx, `#eval-cases tr[data-case]`); len(cases) != 2 || !strings.Contains(cases[0], "fail") {
		t.Fatalf("the cases read %q", cases)
	}
	screenshot(t, ctx, "eval-report.jpg")
	pageClick(t, ctx, `#regressions a.run-link`, "the failing run's page",
		`document.querySelector('#evaluation a') && document.querySelector('#evaluation').textContent.includes('case prompt')`)
	pageClick(t, ctx, `#evaluation a`, "back to the evaluation", `document.querySelector('#regressions a.compare')`)
	pageClick(t, ctx, `#regressions a.compare`, "the comparison with the baseline",
		`document.querySelector('#compare-steps') && location.hash.startsWith('#/compare/')`)
}
