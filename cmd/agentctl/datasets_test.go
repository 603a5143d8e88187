package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// TestDatasets: agentctl makes a dataset from a JSONL file of cases (one
// captured from a run), lists and shows it, adds cases (captured from a
// run, or an input), removes one, shows an older version, prints the
// cases as JSONL that make the same cases again, sends a file too large
// for one request in several, and deletes it; errors of the API and of
// usage exit 2.
func TestDatasets(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()
	src := createRun(t, c, client.CreateRun{Input: "/call clock {}\n/say It is late."})
	if r, err := c.WaitRun(ctx, src.ID, 10*time.Second); err != nil || r.Status != agentd.StatusCompleted {
		t.Fatalf("the source run: %+v %v", r, err)
	}
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	file := write("smoke.jsonl",
		`{"id": "greet", "input": "hello", "checks": [{"type": "contains", "value": "hi"}]}`,
		``,
		`{"id": "late", "from_run": "`+src.ID+`", "at_step": 1, "checks": [{"type": "called", "tool": "clock"}]}`,
		`{"id": "sum", "input": "2+2?", "stubs": [{"tool": "calculator", "result": {"value": 4}}]}`)
	if r := ctl(t, base, "datasets", "create", "-description", "smoke tests", "smoke", file); r.code != exitOK ||
		!strings.Contains(r.stdout, "1 (latest 1)") || !strings.Contains(r.stdout, "cases:") || !strings.Contains(r.stdout, "smoke tests") {
		t.Fatalf("create: %s", r)
	}
	if r := ctl(t, base, "datasets", "ls"); r.code != exitOK || !strings.Contains(r.stdout, "smoke") {
		t.Fatalf("ls: %s", r)
	}
	if r := ctl(t, base, "datasets", "show", "smoke"); r.code != exitOK || !strings.Contains(r.stdout, "greet") ||
		!strings.Contains(r.stdout, "run "+src.ID+" after step 1") || !strings.Contains(r.stdout, "contains") {
		t.Fatalf("show: %s", r)
	}
	if r := ctl(t, base, "datasets", "add-case", "-from-run", src.ID, "smoke"); r.code != exitError ||
		!strings.Contains(r.stderr, "invalid_field") || !strings.Contains(r.stderr, "input") {
		t.Fatalf("add-case from the run's answer without an input: %s", r)
	}
	if r := ctl(t, base, "datasets", "add-case", "-from-run", src.ID, "-at-step", "0", "-id", "replay", "smoke"); r.code != exitOK ||
		!strings.Contains(r.stdout, "2 (latest 2)") || !strings.Contains(r.stdout, "replay") {
		t.Fatalf("add-case from the run's input: %s", r)
	}
	if r := ctl(t, base, "datasets", "add-case", "-input", "hi", "-id", "hi", "smoke"); r.code != exitOK || !strings.Contains(r.stdout, "3 (latest 3)") {
		t.Fatalf("add-case with an input: %s", r)
	}
	if r := ctl(t, base, "datasets", "rm-case", "smoke", "hi"); r.code != exitOK || !strings.Contains(r.stdout, "4 (latest 4)") {
		t.Fatalf("rm-case: %s", r)
	}
	if r := ctl(t, base, "datasets", "rm-case", "smoke", "hi"); r.code != exitError || !strings.Contains(r.stderr, "dataset_case_not_found") {
		t.Fatalf("rm-case again: %s", r)
	}
	r := ctl(t, base, "-o", "json", "datasets", "show", "-version", "1", "smoke")
	var v1 struct {
		Dataset client.Dataset `json:"dataset"`
		Cases   []client.Case  `json:"cases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v1); err != nil || v1.Dataset.Version != 1 || len(v1.Cases) != 3 {
		t.Fatalf("show -version 1: %v %s", err, r)
	}

	r = ctl(t, base, "datasets", "show", "-jsonl", "smoke")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(lines) != 4 {
		t.Fatalf("show -jsonl: %s", r)
	}
	if r := ctl(t, base, "datasets", "create", "copy", write("copy.jsonl", lines...)); r.code != exitOK {
		t.Fatalf("create from the printed cases: %s", r)
	}
	again := ctl(t, base, "datasets", "show", "-jsonl", "copy")
	if strip(t, again.stdout) != strip(t, r.stdout) {
		t.Fatalf("the copy's cases differ:\n%s\nnot\n%s", again.stdout, r.stdout)
	}

	var many []string
	for i := range 250 {
		many = append(many, fmt.Sprintf(`{"id": "c%d", "input": "case %d"}`, i, i))
	}
	if r := ctl(t, base, "datasets", "create", "many", write("many.jsonl", many...)); r.code != exitOK ||
		!strings.Contains(r.stdout, "2 (latest 2)") || !strings.Contains(r.stdout, "250") {
		t.Fatalf("create from a file of 250 cases: %s", r)
	}

	if r := ctl(t, base, "datasets", "rm", "smoke"); r.code != exitOK || !strings.Contains(r.stdout, "deleted dataset smoke") {
		t.Fatalf("rm: %s", r)
	}
	if r := ctl(t, base, "datasets", "show", "smoke"); r.code != exitError || !strings.Contains(r.stderr, "dataset_not_found") {
		t.Fatalf("show after rm: %s", r)
	}
	if r := ctl(t, base, "datasets", "add-case", "copy"); r.code != exitError || !strings.Contains(r.stderr, "-from-run") {
		t.Fatalf("add-case without a case: %s", r)
	}
	if r := ctl(t, base, "datasets", "create", "bad", write("bad.jsonl", `{"input": "ok"}`, `not json`)); r.code != exitError ||
		!strings.Contains(r.stderr, "bad.jsonl:2") {
		t.Fatalf("create from a bad file: %s", r)
	}
}

// strip is a JSONL of cases without what differs between two datasets
// that hold the same cases: when and by which version each was added.
func strip(t *testing.T, jsonl string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		var c map[string]any
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		delete(c, "created_at")
		delete(c, "added_in")
		b, _ := json.Marshal(c)
		out = append(out, string(b))
	}
	return strings.Join(out, "\n")
}
