package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// Bounds of one request of cases: a file of more is sent in several, each
// a version of the dataset.
const (
	batchCases = 200
	batchBytes = 768 << 10
)

// readCases reads a file of cases, one JSON object a line (JSONL; blank
// lines skipped), from path ("-": standard input).
func readCases(f *cmdFlags, path string) ([]json.RawMessage, int, bool) {
	var in io.Reader = f.a.stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(f.a.stderr, "agentctl %s: %v\n", f.name, err)
			return nil, exitError, false
		}
		defer file.Close()
		in = file
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var out []json.RawMessage
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) || line[0] != '{' {
			return nil, f.usageError(fmt.Sprintf("%s:%d is not a case: a JSON object on one line", path, n)), false
		}
		out = append(out, bytes.Clone(line))
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(f.a.stderr, "agentctl %s: read %s: %v\n", f.name, path, err)
		return nil, exitError, false
	}
	return out, exitOK, true
}

// batches splits cases into requests of at most batchCases cases and
// about batchBytes bytes.
func batches(cases []json.RawMessage) [][]json.RawMessage {
	var out [][]json.RawMessage
	var cur []json.RawMessage
	size := 0
	for _, c := range cases {
		if len(cur) > 0 && (len(cur) == batchCases || size+len(c) > batchBytes) {
			out, cur, size = append(out, cur), nil, 0
		}
		cur, size = append(cur, c), size+len(c)+1
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// datasetsCreate: agentctl datasets create [-description D] NAME [FILE].
func datasetsCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets create", "[-description D] NAME [FILE]",
		"Make dataset NAME with the cases of FILE (\"-\": standard input), one JSON object a line:\n"+
			"{\"input\": \"...\", \"checks\": [...]}, or {\"from_run\": \"RUN_ID\", \"at_step\": N} to capture a run,\n"+
			"or a case as \"datasets show -jsonl\" prints it. Without FILE, the dataset is empty. A file\n"+
			"too large for one request is sent in several, each a version.")
	desc := f.String("description", "", "what the dataset is for")
	pos, code, ok := f.parse(args, 1, 2)
	if !ok {
		return code
	}
	var cases []json.RawMessage
	if len(pos) == 2 {
		if cases, code, ok = readCases(f, pos[1]); !ok {
			return code
		}
	}
	parts := batches(cases)
	body := map[string]any{"name": pos[0], "description": *desc}
	if len(parts) > 0 {
		body["cases"] = parts[0]
	}
	raw, _ := json.Marshal(body)
	d, err := a.c.Datasets().CreateJSON(ctx, raw)
	for i := 1; err == nil && i < len(parts); i++ {
		d, err = a.c.Datasets().AddCasesJSON(ctx, pos[0], parts[i])
	}
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printDataset(d)
}

// datasetsList: agentctl datasets ls [-limit N] [-cursor C].
func datasetsList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets ls", "[-limit N] [-cursor C]", "List the tenant's datasets, at their latest versions, by name.")
	pg := f.pages("datasets")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.Datasets().List(ctx, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "NAME", "VERSION", "CASES", "CHANGED", "BY", "DESCRIPTION")
	for _, d := range p.Data {
		row(tw, d.Name, itoa(d.Version), itoa(d.CaseCount), when(&d.CreatedAt), d.CreatedBy, shorten(d.Description, 50))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// datasetsShow: agentctl datasets show [-version N] [-jsonl] NAME.
func datasetsShow(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets show", "[-version N] [-jsonl] NAME",
		"Show a dataset (its latest version, or version N) and its cases. -jsonl prints the cases\n"+
			"alone, one a line, as \"datasets create\" and \"datasets add-case -file\" read them.")
	version := f.Int("version", 0, "the `version` to show (default: the latest)")
	jsonl := f.Bool("jsonl", false, "print the cases, whole, one JSON object a line")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *version < 0 {
		return f.usageError("-version must not be negative")
	}
	d, err := a.c.Datasets().Get(ctx, pos[0], *version)
	if err != nil {
		return a.fail(ctx, err)
	}
	var cases []client.Case
	for cursor := ""; ; {
		p, err := a.c.Datasets().Cases(ctx, pos[0], d.Version, 100, cursor)
		if err != nil {
			return a.fail(ctx, err)
		}
		cases = append(cases, p.Data...)
		if !p.HasMore || p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	switch {
	case *jsonl:
		for _, c := range cases {
			b, _ := json.Marshal(c)
			fmt.Fprintf(a.stdout, "%s\n", b)
		}
		return exitOK
	case a.json:
		return a.printJSON(struct {
			Dataset *client.Dataset `json:"dataset"`
			Cases   []client.Case   `json:"cases"`
		}{d, cases})
	}
	a.printDataset(d)
	fmt.Fprintln(a.stdout)
	tw := newTable(a.stdout)
	row(tw, "ID", "KIND", "ADDED", "CHECKS", "STUBS", "STARTS FROM")
	for _, c := range cases {
		row(tw, c.ID, string(c.Kind), "v"+itoa(c.AddedIn), checksText(c.Checks), itoa(len(c.Stubs)), startText(c))
	}
	tw.Flush()
	return exitOK
}

// checksText names a case's checks by type.
func checksText(checks []client.Check) string {
	var types []string
	for _, c := range checks {
		types = append(types, string(c.Type))
	}
	return strings.Join(types, ",")
}

// startText says what a case starts from.
func startText(c client.Case) string {
	var input string
	if len(c.Input) > 0 && string(c.Input) != "null" {
		var text string
		if json.Unmarshal(c.Input, &text) == nil {
			input = shorten(text, 50)
		} else {
			var msgs []json.RawMessage
			_ = json.Unmarshal(c.Input, &msgs)
			input = fmt.Sprintf("%d messages", len(msgs))
		}
	}
	if c.Kind != agentd.CaseFromRun || c.Recorded == nil {
		return input
	}
	s := fmt.Sprintf("%d recorded messages", len(c.Recorded.Messages))
	if c.FromRun != nil && c.AtStep != nil {
		s = fmt.Sprintf("run %s after step %d (%s)", *c.FromRun, *c.AtStep, s)
	}
	if input != "" {
		s += ", then " + input
	}
	return s
}

// datasetsAddCase: agentctl datasets add-case [flags] NAME.
func datasetsAddCase(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets add-case", "[flags] NAME",
		"Add a case to dataset NAME, in its next version: captured from a run (-from-run: its\n"+
			"conversation up to the end of -at-step, its tool results and files, copied, so that the case\n"+
			"works after the run is deleted), or an input (-input), or the cases of -file (JSONL).")
	fromRun := f.String("from-run", "", "capture the case from this `run`")
	atStep := f.Int("at-step", -1, "with -from-run: the `step` to start after (0: the run's input; default: its last completed step)")
	input := f.String("input", "", "the case's input, a user message (with -from-run: the message after the copied ones)")
	id := f.String("id", "", "the case's `id` (default: a new one)")
	name := f.String("name", "", "a label for the case")
	file := f.String("file", "", "add the cases of this JSONL `file` (\"-\": standard input) instead")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	ds := a.c.Datasets()
	var d *client.Dataset
	var err error
	switch {
	case *file != "" && (*fromRun != "" || *input != "" || *id != "" || *name != ""):
		return f.usageError("-file adds the file's cases: give no other case flag")
	case *file != "":
		cases, code, ok := readCases(f, *file)
		if !ok {
			return code
		}
		if len(cases) == 0 {
			return f.usageError(*file + " holds no case")
		}
		for _, part := range batches(cases) {
			if d, err = ds.AddCasesJSON(ctx, pos[0], part); err != nil {
				break
			}
		}
	case *fromRun == "" && *input == "":
		return f.usageError("give -from-run, -input or -file")
	default:
		c := client.NewCase{ID: *id, Name: *name, Input: *input, FromRun: *fromRun}
		if *atStep >= 0 {
			c.AtStep = atStep
		}
		d, err = ds.AddCases(ctx, pos[0], c)
	}
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printDataset(d)
}

// datasetsRemoveCase: agentctl datasets rm-case NAME CASE_ID.
func datasetsRemoveCase(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets rm-case", "NAME CASE_ID",
		"Remove a case from dataset NAME, in its next version; the versions before keep it.")
	pos, code, ok := f.parse(args, 2, 2)
	if !ok {
		return code
	}
	d, err := a.c.Datasets().RemoveCase(ctx, pos[0], pos[1])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printDataset(d)
}

// datasetsRemove: agentctl datasets rm NAME.
func datasetsRemove(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("datasets rm", "NAME", "Delete a dataset and its cases, every version.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if err := a.c.Datasets().Delete(ctx, pos[0]); err != nil {
		return a.fail(ctx, err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "deleted dataset %s\n", pos[0])
	}
	return exitOK
}

// printDataset writes one version of a dataset.
func (a *app) printDataset(d *client.Dataset) int {
	if a.json {
		return a.printJSON(d)
	}
	k := newKV(a.stdout)
	k.line("name", d.Name)
	k.line("version", fmt.Sprintf("%d (latest %d)", d.Version, d.LatestVersion))
	k.line("change", fmt.Sprintf("%s %s", d.Change, shorten(strings.Join(d.ChangedCases, ", "), 80)))
	k.line("cases", itoa(d.CaseCount))
	k.line("description", d.Description)
	k.line("metadata", compactJSON(d.Metadata))
	k.line("created", when(&d.CreatedAt))
	k.line("created_by", d.CreatedBy)
	k.flush()
	return exitOK
}
