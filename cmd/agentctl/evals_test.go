package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// evalServer starts agentd with agent helper at version 1 ("Be exact.")
// and 2 ("Be quick."), and dataset smoke: case prompt passes when the
// instructions hold "Be exact." (the fake model answers "/system" with
// its system prompt), case quiet passes under every version. Version 2
// so regresses on prompt, and passes half of its runs.
func evalServer(t *testing.T) (string, *client.Client) {
	t.Helper()
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "helper", Instructions: "Be exact."}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateAgent(ctx, "helper", client.AgentDefinition{Instructions: "Be quick."}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Datasets().Create(ctx, client.NewDataset{Name: "smoke", Cases: []client.NewCase{
		{ID: "prompt", Name: "follows the prompt", Input: "/system", Checks: []client.Check{{Type: agentd.CheckContains, Value: "Be exact."}}},
		{ID: "quiet", Input: "Say hi.\n/say hi", Checks: []client.Check{{Type: agentd.CheckEquals, Value: "hi"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return base, c
}

// TestEvalGate: agentctl eval run waits for the evaluation and gates on
// it: version 2 regresses on a case version 1 passed, so the run exits 1
// with the regression printed first (the case, the versions' pass rates,
// the failed check's reason) and the failed cases after; with
// -allow-regressions (and a candidate that passes) it exits 0; with
// -fail-under above version 2's pass rate it exits 1 again; -o json
// prints the report as the API answers it. eval show, ls and cancel read
// and cancel evaluations; usage errors and the API's exit 2.
func TestEvalGate(t *testing.T) {
	t.Parallel()
	base, _ := evalServer(t)
	run := []string{"eval", "run", "-agent", "helper", "-version", "2", "-baseline", "1", "-dataset", "smoke", "-poll", "100ms"}

	r := ctl(t, base, run...)
	reg := strings.Index(r.stdout, "REGRESSIONS: 1")
	if r.code != exitFailed || reg < 0 || !strings.Contains(r.stdout, "prompt (follows the prompt)  version 2: passed 0%, baseline 100%") ||
		!strings.Contains(r.stdout, `contains: the answer does not hold "Be exact."`) || strings.Index(r.stdout, "FAILED CASES:") < reg ||
		!strings.Contains(r.stdout, "1 (baseline)") || !strings.Contains(r.stderr, "gate failed: 1 regression") {
		t.Fatalf("a regression: %s", r)
	}
	if !regexp.MustCompile(`(?m)^2 +2 +1 +50% +50% +50% +0 `).MatchString(r.stdout) {
		t.Errorf("version 2's totals: %s", r.stdout)
	}

	cand := filepath.Join(t.TempDir(), "candidate.json")
	if err := os.WriteFile(cand, []byte(`{"instructions": "Be exact. And kind."}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, base, append(run, "-allow-regressions", "-candidate", cand, "-repeat", "2")...)
	if r.code != exitOK || !strings.Contains(r.stdout, "REGRESSIONS: 1") || !strings.Contains(r.stdout, "candidate") ||
		!strings.Contains(r.stderr, "gate passed") {
		t.Fatalf("-allow-regressions: %s", r)
	}
	r = ctl(t, base, append(run, "-allow-regressions", "-fail-under", "0.9")...)
	if r.code != exitFailed || !strings.Contains(r.stderr, "version 2 passed 50% of its runs, under 90%") {
		t.Fatalf("-fail-under 0.9: %s", r)
	}
	r = ctl(t, base, append(run, "-version", "1", "-allow-regressions", "-fail-under", "0.5")...)
	if r.code != exitOK {
		t.Fatalf("-fail-under 0.5: %s", r)
	}

	r = ctl(t, base, append([]string{"-o", "json"}, run...)...)
	var e client.Eval
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || r.code != exitFailed || e.Status != agentd.EvalCompleted ||
		e.Report == nil || len(e.Report.Regressions) != 1 || e.Report.Regressions[0].CaseID != "prompt" {
		t.Fatalf("-o json: %v %s", err, r)
	}

	if r := ctl(t, base, "eval", "show", e.ID); r.code != exitOK || !strings.Contains(r.stdout, "REGRESSIONS: 1") ||
		!strings.Contains(r.stdout, "status:") {
		t.Fatalf("show: %s", r)
	}
	if r := ctl(t, base, "eval", "ls", "-limit", "2"); r.code != exitOK || !strings.Contains(r.stdout, e.ID) ||
		!strings.Contains(r.stdout, "smoke v1") || !strings.Contains(r.stdout, "-cursor") {
		t.Fatalf("ls: %s", r)
	}
	if r := ctl(t, base, "eval", "cancel", e.ID); r.code != exitError || !strings.Contains(r.stderr, "evaluation_ended") {
		t.Fatalf("cancel an ended evaluation: %s", r)
	}
	if r := ctl(t, base, "eval", "run", "-agent", "helper", "-dataset", "smoke"); r.code != exitError || !strings.Contains(r.stderr, "-version") {
		t.Fatalf("no version: %s", r)
	}
	if r := ctl(t, base, append(run, "-fail-under", "90")...); r.code != exitError || !strings.Contains(r.stderr, "from 0 to 1") {
		t.Fatalf("-fail-under 90: %s", r)
	}
	if r := ctl(t, base, "eval", "run", "-agent", "helper", "-version", "7", "-dataset", "smoke"); r.code != exitError ||
		!strings.Contains(r.stderr, "versions[0]") {
		t.Fatalf("an unknown version: %s", r)
	}
}

// TestEvalCancelled: an evaluation that agentctl eval cancel cancels
// while agentctl eval run waits for it ends that wait with exit 3.
func TestEvalCancelled(t *testing.T) {
	t.Parallel()
	base, c := evalServer(t)
	ctx := context.Background()
	if _, err := c.Datasets().Create(ctx, client.NewDataset{Name: "slow", Cases: []client.NewCase{
		{ID: "slow", Input: "/stream 40 500\n/say late"},
	}}); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	ch := background(base, &out, "eval", "run", "-agent", "helper", "-version", "1,2", "-dataset", "slow", "-poll", "100ms")
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no evaluation started")
		}
		if p, err := c.Evals().List(ctx, 1, ""); err == nil && len(p.Data) == 1 {
			id = p.Data[0].ID
		}
	}
	if r := ctl(t, base, "eval", "cancel", id); r.code != exitOK || !strings.Contains(r.stdout, "cancelled") {
		t.Fatalf("cancel: %s", r)
	}
	if r := await(t, ch); r.code != exitCancelled || !strings.Contains(r.stderr, "was cancelled") || !strings.Contains(r.stdout, id) {
		t.Fatalf("eval run of a cancelled evaluation: %s", r)
	}
}
