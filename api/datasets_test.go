package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// datasetSetup starts the API over an engine whose runs call the
// calculator, with the fake model; opts adjust the API's config.
func datasetSetup(t *testing.T, opts ...func(*api.Config)) *bundle {
	t.Helper()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	fake := httptest.NewServer(fakellm.New())
	t.Cleanup(fake.Close)
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	e := run.New(run.Config{Store: store, Tools: reg, Workers: 2, LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "test"})})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return setupWith(t, store, store, append([]func(*api.Config){func(c *api.Config) { c.Runs, c.Tools = e.Service(), reg }}, opts...)...)
}

// caseList is a page of GET /datasets/{name}/cases.
type caseList struct {
	Data       []agentd.CaseView `json:"data"`
	NextCursor *string           `json:"next_cursor"`
	HasMore    bool              `json:"has_more"`
}

// cases reads every case of a version of a dataset (0: the latest), a
// page of limit at a time, and the raw bytes of each page.
func (b *bundle) cases(name string, version, limit int) ([]agentd.CaseView, []byte) {
	b.t.Helper()
	var out []agentd.CaseView
	var raw []byte
	cursor := ""
	for {
		path := fmt.Sprintf("/datasets/%s/cases?limit=%d", name, limit)
		if version > 0 {
			path += fmt.Sprintf("&version=%d", version)
		}
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := b.do("GET", path, "")
		p := want[caseList](b.t, r, http.StatusOK)
		raw = append(raw, r.body...)
		out = append(out, p.Data...)
		if !p.HasMore {
			return out, raw
		}
		cursor = *p.NextCursor
	}
}

func caseIDs(cs []agentd.CaseView) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestDatasetVersions: each change of a dataset's cases makes a version
// that names its change; every version reads the cases it had, a page at
// a time, after later changes; an unknown version is 404 naming the
// latest; the same Idempotency-Key adds cases once; datasets list by
// name a page at a time; a deleted dataset is 404, and its name taken
// again goes on from its last version, without its old versions.
func TestDatasetVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "support", "description": "refunds",
		"metadata": {"team": "billing"}, "cases": [{"id": "one", "input": "hello", "checks": [{"type": "contains", "value": "hi"}]},
		{"id": "two", "name": "second", "input": [{"role": "user", "content": "hey"}], "variables": {"who": "Ann"}, "user": "u1"}]}`),
		http.StatusCreated)
	if d.Version != 1 || d.LatestVersion != 1 || d.CaseCount != 2 || d.Change != agentd.DatasetCreated ||
		!slices.Equal(d.ChangedCases, []string{"one", "two"}) || d.Description != "refunds" || string(d.Metadata) != `{"team":"billing"}` ||
		d.CreatedBy != "local" {
		t.Fatalf("created: %+v", d)
	}
	r := b.do("POST", "/datasets/support/cases", `{"input": "third", "stubs": [{"tool": "calculator", "match": {"expression": "1+1"}, "result": {"value": 2}}]}`,
		"Idempotency-Key", "add-3")
	v2 := want[agentd.DatasetView](t, r, http.StatusCreated)
	if v2.Version != 2 || v2.CaseCount != 3 || v2.Change != agentd.DatasetCasesAdded || len(v2.ChangedCases) != 1 ||
		r.header.Get("Location") != "/datasets/support/versions/2" {
		t.Fatalf("added: %+v %v", v2, r.header)
	}
	again := b.do("POST", "/datasets/support/cases", `{"input": "third", "stubs": [{"tool": "calculator", "match": {"expression": "1+1"}, "result": {"value": 2}}]}`,
		"Idempotency-Key", "add-3")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, r.body) {
		t.Fatalf("replay: %d %v %s", again.status, again.header, again.body)
	}
	v3 := want[agentd.DatasetView](t, b.do("POST", "/datasets/support/cases", `{"cases": [{"id": "four", "input": "4"}, {"id": "five", "input": "5"}]}`),
		http.StatusCreated)
	v4 := want[agentd.DatasetView](t, b.do("DELETE", "/datasets/support/cases/two", ""), http.StatusOK)
	if v3.Version != 3 || v3.CaseCount != 5 || v4.Version != 4 || v4.CaseCount != 4 || v4.Change != agentd.DatasetCaseRemoved ||
		!slices.Equal(v4.ChangedCases, []string{"two"}) {
		t.Fatalf("v3 %+v, v4 %+v", v3, v4)
	}
	wantProblem(t, b.do("DELETE", "/datasets/support/cases/two", ""), http.StatusNotFound, "dataset_case_not_found")
	wantProblem(t, b.do("POST", "/datasets/support/cases", `{"id": "one", "input": "again"}`), http.StatusConflict, "dataset_case_exists")

	third := v2.ChangedCases[0]
	for version, ids := range map[int][]string{1: {"one", "two"}, 2: {"one", "two", third}, 3: {"one", "two", third, "four", "five"},
		4: {"one", third, "four", "five"}, 0: {"one", third, "four", "five"}} {
		got, _ := b.cases("support", version, 2)
		if !slices.Equal(caseIDs(got), ids) {
			t.Errorf("version %d holds %v, want %v", version, caseIDs(got), ids)
		}
		if version == 0 {
			continue
		}
		v := want[agentd.DatasetView](t, b.do("GET", fmt.Sprintf("/datasets/support/versions/%d", version), ""), http.StatusOK)
		if v.Version != version || v.LatestVersion != 4 || v.CaseCount != len(ids) {
			t.Errorf("version %d: %+v", version, v)
		}
	}
	all, _ := b.cases("support", 3, 100)
	if c := all[1]; *c.Name != "second" || c.Variables["who"] != "Ann" || *c.User != "u1" || c.Kind != agentd.CaseInput || c.AddedIn != 1 ||
		string(c.Input) != `[{"role":"user","content":"hey"}]` || c.Checks == nil || c.CreatedBy != "local" {
		t.Errorf("case two: %+v", c)
	}
	if c := all[0]; len(c.Checks) != 1 || c.Checks[0].Type != agentd.CheckContains || c.Checks[0].Value != "hi" {
		t.Errorf("case one's checks: %+v", c.Checks)
	}
	if c := all[2]; len(c.Stubs) != 1 || c.Stubs[0].Tool != "calculator" || string(c.Stubs[0].Match) != `{"expression":"1+1"}` ||
		string(c.Stubs[0].Result) != `{"value":2}` || c.AddedIn != 2 {
		t.Errorf("case three's stubs: %+v", c)
	}
	p := wantProblem(t, b.do("GET", "/datasets/support/versions/9", ""), http.StatusNotFound, "dataset_not_found")
	if !strings.Contains(p.Detail, "latest is 4") {
		t.Errorf("unknown version: %+v", p)
	}
	wantProblem(t, b.do("GET", "/datasets/support/versions/0", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/datasets/support/cases?version=x", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/datasets/support/cases?cursor=bogus", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("POST", "/datasets", `{"name": "support"}`), http.StatusConflict, "dataset_exists")

	for _, name := range []string{"alpha", "beta", "gamma"} {
		want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "`+name+`"}`), http.StatusCreated)
	}
	var names []string
	for cursor := ""; ; {
		path := "/datasets?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		page := want[struct {
			Data       []agentd.DatasetView `json:"data"`
			NextCursor *string              `json:"next_cursor"`
			HasMore    bool                 `json:"has_more"`
		}](t, b.do("GET", path, ""), http.StatusOK)
		for _, d := range page.Data {
			names = append(names, d.Name)
		}
		if !page.HasMore {
			break
		}
		cursor = *page.NextCursor
	}
	if !slices.Equal(names, []string{"alpha", "beta", "gamma", "support"}) {
		t.Fatalf("datasets listed: %v", names)
	}

	if r := b.do("DELETE", "/datasets/support", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantProblem(t, b.do("GET", "/datasets/support", ""), http.StatusNotFound, "dataset_not_found")
	wantProblem(t, b.do("GET", "/datasets/support/cases", ""), http.StatusNotFound, "dataset_not_found")
	wantProblem(t, b.do("POST", "/datasets/support/cases", `{"input": "x"}`), http.StatusNotFound, "dataset_not_found")
	wantProblem(t, b.do("DELETE", "/datasets/support", ""), http.StatusNotFound, "dataset_not_found")
	d = want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "support", "cases": [{"id": "one", "input": "new"}]}`), http.StatusCreated)
	if d.Version != 5 || d.CaseCount != 1 || d.Description != "" || string(d.Metadata) != "null" {
		t.Fatalf("made again: %+v", d)
	}
	wantProblem(t, b.do("GET", "/datasets/support/versions/2", ""), http.StatusNotFound, "dataset_not_found")
	if got, _ := b.cases("support", 0, 10); len(got) != 1 || string(got[0].Input) != `"new"` {
		t.Fatalf("the new dataset's cases: %+v", got)
	}
}

// pngOf is a w×h PNG image whose pixels are noise (it compresses badly).
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(rnd.Uint32())
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fromRunInput is a run's input of a user message with an image and the
// fake model's directives: a calculator call in steps 1 and 2, then the
// answer (step 3).
func fromRunInput(img []byte) string {
	return `[{"role": "user", "content": [{"type": "text", "text": "/call calculator {\"expression\":\"1+1\"}\n/next\n` +
		`/call calculator {\"expression\":\"2+3\"}\n/say done"}, {"type": "image", "url": "data:image/png;base64,` +
		base64.StdEncoding.EncodeToString(img) + `"}]}]`
}

// TestDatasetCaseFromRun: a case captured from a run at a step holds the
// conversation up to its end as a fork of the run would have it (the
// calls with their recorded results, the user's image with its bytes),
// the calls after it with their results, and the run's variables; step 0
// holds the run's input and every call; the default step is the last
// completed one, which ended with the answer and so needs an input; and
// every case reads the same, byte for byte, after retention deleted the
// run.
func TestDatasetCaseFromRun(t *testing.T) {
	t.Parallel()
	b := datasetSetup(t)
	img := pngOf(t, 8, 8)
	src := b.runDone(`{"input": ` + fromRunInput(img) + `, "metadata": {"k": "v"}}`)
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "captured"}`), http.StatusCreated)
	add := func(body string) agentd.DatasetView {
		t.Helper()
		return want[agentd.DatasetView](t, b.do("POST", "/datasets/captured/cases", body), http.StatusCreated)
	}
	add(`{"id": "at1", "from_run": "` + src.ID + `", "at_step": 1, "variables": {"who": "Ann"},
		"checks": [{"type": "called", "tool": "calculator", "arguments": {"expression": "2+3"}}, {"type": "status", "status": "completed"}]}`)
	add(`{"id": "at0", "from_run": "` + strings.ToUpper(src.ID) + `", "at_step": 0}`)
	p := wantProblem(t, b.do("POST", "/datasets/captured/cases", `{"from_run": "`+src.ID+`"}`), http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "input" || !strings.Contains(p.Detail, "step 3") {
		t.Fatalf("the answer's step without input: %+v", p)
	}
	add(`{"id": "last", "from_run": "` + src.ID + `", "input": "and then?"}`)

	before, raw := b.cases("captured", 0, 10)
	if len(before) != 3 {
		t.Fatalf("cases: %+v", before)
	}
	at1, at0, last := before[0], before[1], before[2]
	if at1.Kind != agentd.CaseFromRun || *at1.FromRun != src.ID || at1.AtStep == nil || *at1.AtStep != 1 || at1.Recorded == nil ||
		at1.Variables["who"] != "Ann" || len(at1.Checks) != 2 {
		t.Fatalf("case at step 1: %+v", at1)
	}
	rec := at1.Recorded
	if rec.Model != "test-model" || rec.AsOf.IsZero() || len(rec.Messages) != 3 {
		t.Fatalf("recorded at step 1: %+v", rec)
	}
	user, call, result := rec.Messages[0], rec.Messages[1], rec.Messages[2]
	var parts []struct{ Type, Text, URL string }
	if err := json.Unmarshal(user.Content, &parts); err != nil || user.Role != agentd.RoleUser || len(parts) != 2 ||
		parts[1].URL != "data:image/png;base64,"+base64.StdEncoding.EncodeToString(img) {
		t.Fatalf("the user's message: %s (%v)", user.Content, err)
	}
	if call.Role != agentd.RoleAssistant || len(call.ToolCalls) != 1 || call.ToolCalls[0].Name != "calculator" ||
		result.Role != agentd.RoleTool || result.ToolCallID != call.ToolCalls[0].ID || !strings.Contains(string(result.Content), "2") {
		t.Fatalf("step 1: %+v %+v", call, result)
	}
	if len(rec.Calls) != 1 || rec.Calls[0].Step != 2 || rec.Calls[0].Tool != "calculator" || !strings.Contains(rec.Calls[0].Arguments, "2+3") ||
		!strings.Contains(rec.Calls[0].Result, "5") {
		t.Fatalf("the calls after step 1: %+v", rec.Calls)
	}
	if *at0.AtStep != 0 || *at0.FromRun != src.ID || len(at0.Recorded.Messages) != 1 || len(at0.Recorded.Calls) != 2 ||
		at0.Recorded.Calls[0].Step != 1 || at0.Recorded.Calls[1].Step != 2 {
		t.Fatalf("case at step 0: %+v", at0.Recorded)
	}
	if *last.AtStep != 3 || len(last.Recorded.Messages) != 6 || len(last.Recorded.Calls) != 0 || string(last.Input) != `"and then?"` {
		t.Fatalf("case at the last step: %+v", last.Recorded)
	}

	// What GET gave may be sent back as it is: it is kept, not captured.
	resent, err := json.Marshal(at1)
	if err != nil {
		t.Fatal(err)
	}
	resent = bytes.Replace(resent, []byte(`"id":"at1"`), []byte(`"id":"resent"`), 1)
	add(string(resent))

	st, err := b.store.RetentionPass(context.Background(), time.Now().Add(time.Minute))
	if err != nil || st.Runs != 1 {
		t.Fatalf("retention: %+v %v", st, err)
	}
	wantProblem(t, b.do("GET", "/runs/"+src.ID, ""), http.StatusNotFound, "run_not_found")
	after, rawAfter := b.cases("captured", 0, 10)
	if len(after) != 4 || !sameCases(before, after[:3]) {
		t.Fatalf("the cases changed when the run was deleted:\nbefore %s\nafter  %s", raw, rawAfter)
	}
	r := after[3]
	r.ID, r.AddedIn, r.CreatedAt = at1.ID, at1.AddedIn, at1.CreatedAt
	if !sameCases([]agentd.CaseView{at1}, []agentd.CaseView{r}) {
		t.Fatalf("the case sent back differs: %+v", after[3])
	}
	p = wantProblem(t, b.do("POST", "/datasets/captured/cases", `{"from_run": "`+src.ID+`", "at_step": 0}`), http.StatusNotFound, "run_not_found")
	if p.Field != "from_run" {
		t.Fatalf("from_run of a deleted run: %+v", p)
	}
}

// sameCases reports whether a and b encode to the same JSON.
func sameCases(a, b []agentd.CaseView) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestDatasetBadInput: a bad dataset or case is 422 invalid_field naming
// the field (400 for a body that is not JSON), never a 500, and nothing
// is stored.
func TestDatasetBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "d"}`), http.StatusCreated)
	run := b.createRun(`{"input": "hello"}`)
	ok := `"input": "hi"`
	for _, tc := range []struct {
		path, body, field string
	}{
		{"/datasets", `{}`, "name"},
		{"/datasets", `{"name": "a b"}`, "name"},
		{"/datasets", `{"name": "x", "bogus": 1}`, "bogus"},
		{"/datasets", `{"name": "x", "description": 5}`, "description"},
		{"/datasets", `{"name": "x", "metadata": [1]}`, "metadata"},
		{"/datasets", `{"name": "x", "cases": {}}`, "cases"},
		{"/datasets", `{"name": "x", "cases": ["hi"]}`, "cases[0]"},
		{"/datasets", `{"name": "x", "cases": [{}]}`, "cases[0].input"},
		{"/datasets", `{"name": "x", "cases": [{"inptu": "hi"}]}`, "cases[0].inptu"},
		{"/datasets", `{"name": "x", "cases": [{"input": ""}]}`, "cases[0].input"},
		{"/datasets", `{"name": "x", "cases": [{"input": [{"role": "robot", "content": "x"}]}]}`, "cases[0].input[0].role"},
		{"/datasets", `{"name": "x", "cases": [{"input": [{"role": "user", "content": [{"type": "image", "url": "ftp://x"}]}]}]}`,
			"cases[0].input[0].content[0].url"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "id": "a b"}]}`, "cases[0].id"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "id": "a"}, {` + ok + `, "id": "a"}]}`, "cases[1].id"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "variables": {"1x": "v"}}]}`, "cases[0].variables"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "user": 5}]}`, "cases[0].user"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "metadata": {"k": "\u0000"}}]}`, "cases[0].metadata"},
		{"/datasets", `{"name": "x", "cases": [{` + ok + `, "at_step": 1}]}`, "cases[0].at_step"},
		{"/datasets", `{"name": "x", "cases": [{"from_run": "nope"}]}`, "cases[0].from_run"},
		{"/datasets", `{"name": "x", "cases": [{"from_run": "` + run.ID + `", "at_step": 7}]}`, "cases[0].at_step"},
		{"/datasets", `{"name": "x", "cases": [{"from_run": "` + run.ID + `", "at_step": -1}]}`, "cases[0].at_step"},
		{"/datasets", `{"name": "x", "cases": [{"recorded": {"as_of": "2026-01-01T00:00:00Z", "messages": [], "calls": []}}]}`,
			"cases[0].recorded.messages"},
		{"/datasets", `{"name": "x", "cases": [{"recorded": {"as_of": "2026-01-01T00:00:00Z", "messages": [{"role": "tool", "content": "1"}]}}]}`,
			"cases[0].recorded.messages[0].tool_call_id"},
		{"/datasets", `{"name": "x", "cases": [{"recorded": {"messages": [{"role": "user", "content": "hi"}], "bogus": 1}}]}`,
			"cases[0].recorded.bogus"},
		{"/datasets", `{"name": "x", "cases": [{"recorded": {"messages": [{"role": "user", "content": "hi"}]}}]}`,
			"cases[0].recorded.as_of"},
		{"/datasets", `{"name": "x", "cases": [{"recorded": {"as_of": "2026-01-01T00:00:00Z", "messages": [{"role": "assistant",
			"tool_calls": [{"id": "c1", "name": "calculator", "arguments": "{}"}]}]}}]}`, "cases[0].recorded.messages"},
		{"/datasets/d/cases", `{"checks": []}`, "input"},
		{"/datasets/d/cases", `{` + ok + `, "checks": {}}`, "checks"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [5]}`, "checks[0]"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "vibes"}]}`, "checks[0].type"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "equals"}]}`, "checks[0].value"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "equals", "value": "x", "pattern": "y"}]}`, "checks[0].pattern"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "equals", "value": 5}]}`, "checks[0].value"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "regex", "pattern": "a("}]}`, "checks[0].pattern"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "json_schema", "schema": {"type": 5}}]}`, "checks[0].schema"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "called", "tool": "x", "count": 0}]}`, "checks[0].count"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "called", "tool": "x", "arguments": [1]}]}`, "checks[0].arguments"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "not_called", "tool": "a b"}]}`, "checks[0].tool"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "status"}]}`, "checks[0]"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "status", "status": "queued"}]}`, "checks[0].status"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "status", "reason": "vibes"}]}`, "checks[0].reason"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "max_steps", "max": 1.5}]}`, "checks[0].max"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "max_cost", "max": -1}]}`, "checks[0].max"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "max_latency_ms", "max": "fast"}]}`, "checks[0].max"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "rubric", "rubric": " "}]}`, "checks[0].rubric"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "rubric", "rubric": "kind", "threshold": 2}]}`, "checks[0].threshold"},
		{"/datasets/d/cases", `{` + ok + `, "checks": [{"type": "webhook", "url": "ftp://x"}]}`, "checks[0].url"},
		{"/datasets/d/cases", `{` + ok + `, "stubs": [{"result": 1}]}`, "stubs[0].tool"},
		{"/datasets/d/cases", `{` + ok + `, "stubs": [{"tool": "x", "result": null}]}`, "stubs[0].result"},
		{"/datasets/d/cases", `{` + ok + `, "stubs": [{"tool": "x", "match": 1, "result": 1}]}`, "stubs[0].match"},
		{"/datasets/d/cases", `{` + ok + `, "stubs": [{"tool": "x", "result": 1, "when": 1}]}`, "stubs[0].when"},
		{"/datasets/d/cases", `{"cases": []}`, "cases"},
		{"/datasets/d/cases", `{"cases": [{` + ok + `}], "input": "x"}`, "cases"},
	} {
		r := b.do("POST", tc.path, tc.body)
		p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != tc.field {
			t.Errorf("%s %s: field %q, want %q (%s)", tc.path, tc.body, p.Field, tc.field, p.Detail)
		}
	}
	for _, body := range []string{`{"name": "x"`, `[1]`, `{"name": "x"} {}`, ``} {
		if r := b.do("POST", "/datasets", body); r.status != http.StatusBadRequest && r.status != http.StatusUnsupportedMediaType {
			t.Errorf("body %q: %d %s", body, r.status, r.body)
		}
	}
	wantProblem(t, b.do("POST", "/datasets/d/cases", `{"input": "hi"}`, "Idempotency-Key", strings.Repeat("k", 256)), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/datasets?after=x", ""), http.StatusBadRequest, "unknown_parameter")
	if d := want[agentd.DatasetView](t, b.do("GET", "/datasets/d", ""), http.StatusOK); d.Version != 1 || d.CaseCount != 0 {
		t.Fatalf("a refused change was stored: %+v", d)
	}
	if r := b.do("GET", "/datasets/x", ""); r.status != http.StatusNotFound {
		t.Fatalf("a refused dataset was stored: %d %s", r.status, r.body)
	}
}

// TestDatasetLimits: more cases than a version may hold, at creation or
// added, and a case past the bytes a case may hold are 422 dataset_limit
// naming the limit; a case captured from a run whose image does not fit
// keeps a text that names it instead.
func TestDatasetLimits(t *testing.T) {
	t.Parallel()
	b := datasetSetup(t, func(c *api.Config) { c.Datasets = api.DatasetLimits{CasesPerDataset: 2, BytesPerCase: 4096} })
	p := wantProblem(t, b.do("POST", "/datasets", `{"name": "d", "cases": [{"input": "1"}, {"input": "2"}, {"input": "3"}]}`),
		http.StatusUnprocessableEntity, "dataset_limit")
	if p.Limit != "cases_per_dataset" {
		t.Fatalf("three cases: %+v", p)
	}
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "d", "cases": [{"input": "1"}]}`), http.StatusCreated)
	want[agentd.DatasetView](t, b.do("POST", "/datasets/d/cases", `{"input": "2"}`), http.StatusCreated)
	if p := wantProblem(t, b.do("POST", "/datasets/d/cases", `{"input": "3"}`), http.StatusUnprocessableEntity, "dataset_limit"); p.Limit != "cases_per_dataset" {
		t.Fatalf("a third case: %+v", p)
	}
	want[agentd.DatasetView](t, b.do("DELETE", "/datasets/d/cases/"+want[agentd.DatasetView](t, b.do("GET", "/datasets/d/versions/1", ""),
		http.StatusOK).ChangedCases[0], ""), http.StatusOK)
	big := strings.Repeat("x", 5000)
	p = wantProblem(t, b.do("POST", "/datasets/d/cases", `{"cases": [{"input": "`+big+`"}]}`), http.StatusUnprocessableEntity, "dataset_limit")
	if p.Limit != "bytes_per_case" || p.Field != "cases[0]" {
		t.Fatalf("a big case: %+v", p)
	}

	img := pngOf(t, 64, 64)
	if len(img) < 4096 {
		t.Fatalf("the image is %d bytes: the test needs it past the case's room", len(img))
	}
	src := b.runDone(`{"input": ` + fromRunInput(img) + `}`)
	want[agentd.DatasetView](t, b.do("POST", "/datasets/d/cases", `{"id": "small", "from_run": "`+src.ID+`", "at_step": 1}`), http.StatusCreated)
	got, _ := b.cases("d", 0, 10)
	c := got[len(got)-1]
	if c.ID != "small" || len(c.Recorded.Messages) != 3 || !strings.Contains(string(c.Recorded.Messages[0].Content), "is left out") ||
		strings.Contains(string(c.Recorded.Messages[0].Content), "base64") {
		t.Fatalf("the captured case: %s", c.Recorded.Messages[0].Content)
	}
}

// TestDatasetTenantsAndScopes: a case cannot be captured from another
// tenant's run (404 run_not_found naming from_run), and capturing one
// needs runs:read beside agents:write.
func TestDatasetTenantsAndScopes(t *testing.T) {
	f := newTenantFixture(t)
	token, row, err := auth.NewKey(tenantA, "a-agents", []auth.Scope{auth.AgentsWrite})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.KeyInsert(context.Background(), row); err != nil {
		t.Fatal(err)
	}
	f.keys["a-agents"] = token
	want[agentd.DatasetView](t, f.do("b", "POST", "/datasets", `{"name": "b-set"}`), http.StatusCreated)
	p := wantProblem(t, f.do("b", "POST", "/datasets/b-set/cases", `{"from_run": "`+f.ended+`", "at_step": 0}`),
		http.StatusNotFound, "run_not_found")
	if p.Field != "from_run" {
		t.Fatalf("B's capture of A's run: %+v", p)
	}
	p = wantProblem(t, f.do("b", "POST", "/datasets", `{"name": "b-other", "cases": [{"from_run": "`+f.ended+`", "at_step": 0}]}`),
		http.StatusNotFound, "run_not_found")
	if p.Field != "cases[0].from_run" {
		t.Fatalf("B's capture of A's run in a new dataset: %+v", p)
	}
	if r := f.do("b", "GET", "/datasets/b-other", ""); r.status != http.StatusNotFound {
		t.Fatalf("the refused dataset was made: %d %s", r.status, r.body)
	}
	want[agentd.DatasetView](t, f.do("a-agents", "POST", "/datasets/a-set/cases", `{"input": "no run read"}`), http.StatusCreated)
	wantProblem(t, f.do("a-agents", "POST", "/datasets/a-set/cases", `{"from_run": "`+f.ended+`", "at_step": 0}`),
		http.StatusForbidden, "insufficient_scope")
	// A's own run is found; it never ran, so that its conversation holds
	// nothing to start from.
	p = wantProblem(t, f.do("a", "POST", "/datasets/a-set/cases", `{"from_run": "`+f.ended+`", "at_step": 0}`),
		http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "from_run" || !strings.Contains(p.Detail, "no completed message") {
		t.Fatalf("A's capture of its own run: %+v", p)
	}
}
