package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// chargeTool is a tool with a side effect: it counts the calls it was
// given, so that a test sees whether an evaluation made one.
type chargeTool struct{ calls atomic.Int64 }

func (c *chargeTool) Spec() tools.Spec {
	return tools.Spec{Name: "charge", Description: "Charges the customer's card.", Effect: agentd.EffectSideEffect,
		Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)}
}

func (c *chargeTool) Invoke(_ context.Context, call tools.Call) (json.RawMessage, error) {
	c.calls.Add(1)
	return json.RawMessage(`{"charged":true}`), nil
}

// evalSetup is an API over a started engine and an evaluation driver,
// the fake model, and the calculator and charge tools.
func evalSetup(t *testing.T, hookHosts ...string) (*bundle, *chargeTool) {
	t.Helper()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	fake := httptest.NewServer(fakellm.New())
	t.Cleanup(fake.Close)
	charge := &chargeTool{}
	reg, err := tools.NewRegistry(tools.Calculator(), charge)
	if err != nil {
		t.Fatal(err)
	}
	comp := compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "test-model"}, reg), Agents: store,
		Registry: reg, Instructions: store})
	model := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "test"})
	e := startEngine(t, store, run.Config{Tools: reg, Workers: 8, Composer: comp, Model: model})
	d := eval.NewDriver(eval.DriverConfig{Store: store, Composer: comp, Runs: e.Service(), Owner: "test-driver",
		Interval: 50 * time.Millisecond, Judge: model, JudgeModel: "judge-model", Hooks: tools.GuardedClient(hookHosts, nil)})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return setupWith(t, store, store, func(c *api.Config) {
		c.Runs, c.Tools, c.Composer, c.Webhooks.AllowHosts = e.Service(), reg, comp, hookHosts
	}), charge
}

// evalBody is GET /evals/{id}'s answer.
type evalBody struct {
	api.EvalView
	Report eval.Report `json:"report"`
}

// evalDone waits for an evaluation to end and returns it.
func (b *bundle) evalDone(id string) evalBody {
	b.t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		e := want[evalBody](b.t, b.do("GET", "/evals/"+id, ""), http.StatusOK)
		if e.Status != agentd.EvalRunning {
			return e
		}
	}
	b.t.Fatalf("evaluation %s did not end", id)
	return evalBody{}
}

// putAgent saves the next version of agent name (POST /agents for its
// first) with definition body, a JSON object.
func (b *bundle) putAgent(name, body string) {
	b.t.Helper()
	r := b.do("PUT", "/agents/"+name, body)
	if r.status == http.StatusNotFound {
		r = b.do("POST", "/agents", `{"name": "`+name+`", `+strings.TrimPrefix(body, "{"))
	}
	if r.status >= 300 {
		b.t.Fatalf("PUT /agents/%s: %d %s", name, r.status, r.body)
	}
}

// evalCases are the cases of TestEvalRegressions, beside two captured
// from a run: id, input, checks, stubs.
var evalCases = []string{
	`{"id": "prompt", "name": "follows the prompt", "input": "/system", "checks": [{"type": "contains", "value": "Be exact."}]}`,
	`{"id": "calc", "input": "What is 6*7?\n/call calculator {\"expression\": \"6*7\"}\n/say It is 42.",
	  "checks": [{"type": "called", "tool": "calculator", "arguments": {"expression": "6*7"}}, {"type": "equals", "value": "It is 42."}]}`,
	`{"id": "wrong-args", "input": "/call calculator {\"expr\": 1}\n/say I could not.",
	  "checks": [{"type": "status", "status": "completed"}, {"type": "contains", "value": "could not"}]}`,
	`{"id": "out-of-bounds", "input": "/call calculator {\"expression\": \"1\"}\n/next\n/call calculator {\"expression\": \"2\"}\n/next\n/call calculator {\"expression\": \"3\"}\n/say done",
	  "checks": [{"type": "max_steps", "max": 2}]}`,
	`{"id": "slow-model", "input": "/stream 4 400\n/say a slow answer",
	  "checks": [{"type": "status", "status": "completed"}]}`,
	`{"id": "stubbed", "input": "Charge 5.\n/call charge {\"amount\": 5}\n/say Charged.",
	  "stubs": [{"tool": "charge", "match": {"amount": 5}, "result": {"charged": true, "stub": 1}}],
	  "checks": [{"type": "called", "tool": "charge", "arguments": {"amount": 5}, "count": 1}, {"type": "equals", "value": "Charged."}]}`,
	`{"id": "unstubbed", "input": "Charge 9.\n/call charge {\"amount\": 9}\n/say Charged.",
	  "stubs": [{"tool": "charge", "match": {"amount": 5}, "result": {"charged": true}}],
	  "checks": [{"type": "status", "status": "completed"}]}`,
	`{"id": "json", "input": "/say {\"a\": 1}", "checks": [{"type": "json_schema", "schema": {"type": "object", "required": ["a"]}}]}`,
	`{"id": "quiet", "input": "Say hi.\n/say hi", "checks": [{"type": "not_called", "tool": "calculator"}, {"type": "regex", "pattern": "^hi$"}]}`,
}

// TestEvalRegressions runs an evaluation of version 2 of an agent against
// version 1 on eleven cases (inputs and cases captured from a run; a
// wrong-argument call, one past the step ceiling, a slow model that
// version 2's timeout cuts, a stubbed side-effect tool and an unstubbed
// one), twice each: the regressions are exactly the two cases version 2
// broke, no side effect is made, the unstubbed call fails its case by
// name, and each run is scored once.
func TestEvalRegressions(t *testing.T) {
	t.Parallel()
	b, charge := evalSetup(t)
	b.putAgent("helper", `{"instructions": "Be exact.", "tools": ["calculator", "charge"]}`)
	b.putAgent("helper", `{"instructions": "Be quick.", "tools": ["calculator", "charge"], "timeouts": {"total_ms": 700}}`)
	src := b.runDone(`{"input": "Charge 7.\n/call charge {\"amount\": 7}\n/say Charged 7.", "tools": ["charge"]}`)
	before := charge.calls.Load()
	if before != 1 {
		t.Fatalf("the source run charged %d times", before)
	}
	cases := append(slices.Clone(evalCases),
		`{"id": "recorded-0", "from_run": "`+src.ID+`", "at_step": 0,
		  "checks": [{"type": "called", "tool": "charge", "arguments": {"amount": 7}}, {"type": "equals", "value": "Charged 7."}]}`,
		`{"id": "recorded-1", "from_run": "`+src.ID+`", "at_step": 1,
		  "checks": [{"type": "not_called", "tool": "charge"}, {"type": "equals", "value": "Charged 7."}]}`)
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "support", "cases": [`+strings.Join(cases[:len(cases)-2], ",")+`]}`),
		http.StatusCreated)
	for _, c := range cases[len(cases)-2:] {
		want[agentd.DatasetView](t, b.do("POST", "/datasets/support/cases", c), http.StatusCreated)
	}
	created := want[api.EvalView](t, b.do("POST", "/evals",
		`{"agent": "helper", "versions": [2], "baseline": 1, "dataset": "support", "repeat": 2, "concurrency": 8}`), http.StatusCreated)
	if created.Status != agentd.EvalRunning || created.Runs != 11*2*2 || !slices.Equal(created.Versions, []string{"1", "2"}) ||
		created.DatasetVersion != 3 {
		t.Fatalf("created: %+v", created)
	}
	e := b.evalDone(created.ID)
	if e.Status != agentd.EvalCompleted || e.Scored != e.Runs {
		t.Fatalf("evaluation: %+v", e.EvalView)
	}
	if n := charge.calls.Load(); n != before {
		t.Fatalf("the evaluation charged %d times: a side effect", n-before)
	}
	var regressed []string
	for _, r := range e.Report.Regressions {
		regressed = append(regressed, r.CaseID+"@"+r.Version)
		if len(r.Failed) != 2 || r.Baseline != 1 || r.Now != 0 {
			t.Errorf("regression %s: %+v", r.CaseID, r)
		}
	}
	if !slices.Equal(regressed, []string{"prompt@2", "slow-model@2"}) {
		t.Fatalf("regressions %v, want prompt and slow-model under version 2", regressed)
	}
	checkEvalCases(t, e.Report)
}

// checkEvalCases checks the outcome of each case of TestEvalRegressions.
func checkEvalCases(t *testing.T, rep eval.Report) {
	t.Helper()
	wantPassed := map[string][2]bool{"prompt": {true, false}, "calc": {true, true}, "wrong-args": {true, true},
		"out-of-bounds": {false, false}, "slow-model": {true, false}, "stubbed": {true, true}, "unstubbed": {false, false},
		"json": {true, true}, "quiet": {true, true}, "recorded-0": {true, true}, "recorded-1": {true, true}}
	for _, c := range rep.Cases {
		w, ok := wantPassed[c.CaseID]
		if !ok {
			t.Fatalf("unknown case %s", c.CaseID)
		}
		for i, v := range []string{"1", "2"} {
			cv := c.Versions[v]
			if cv.Runs != 2 || (cv.Passed == 2) != w[i] || (cv.Passed == 0) == w[i] {
				t.Errorf("case %s version %s: %d of %d passed, want all: %v; %s", c.CaseID, v, cv.Passed, cv.Runs, w[i], scoresOf(cv))
			}
		}
	}
	un := rep.Cases[slices.IndexFunc(rep.Cases, func(c eval.CaseReport) bool { return c.CaseID == "unstubbed" })]
	first := un.Versions["1"].Results[0].Scores[0]
	if first.Type != agentd.CheckRefused || first.Outcome != agentd.ScoreFailed || !strings.Contains(first.Reason, "charge") ||
		!strings.Contains(first.Reason, "stub") {
		t.Fatalf("the unstubbed case's first score: %+v", first)
	}
	for _, v := range rep.Versions {
		if v.Runs != 22 || v.PassAtK != v.PassAllK || v.LatencyMS.P50 == nil || len(v.Flaky) != 0 {
			t.Errorf("version %s totals: %+v", v.Version, v)
		}
	}
	if rep.Versions[0].Passed != 18 || rep.Versions[1].Passed != 14 {
		t.Errorf("passed runs: %d and %d, want 18 and 14", rep.Versions[0].Passed, rep.Versions[1].Passed)
	}
}

func scoresOf(cv eval.CaseOfVersion) string {
	var out []string
	for _, r := range cv.Results {
		for _, s := range r.Scores {
			out = append(out, fmt.Sprintf("rep %d %s %s: %s", r.Rep, s.Type, s.Outcome, s.Reason))
		}
	}
	return strings.Join(out, "; ")
}

// TestEvalRubric grades rubric checks with the judge model (the fake,
// which answers the JSON that the rubric's directives say): a score at or
// above the threshold passes, one below fails, both with the judge's
// reasoning and labelled not deterministic; an answer that is not the
// JSON asked for is not scored.
func TestEvalRubric(t *testing.T) {
	t.Parallel()
	b, _ := evalSetup(t)
	b.putAgent("helper", `{"instructions": "Be polite."}`)
	rubric := func(score, threshold string) string {
		return `{"type": "rubric", "rubric": "Is the answer polite?\n/say {\"score\": ` + score +
			`, \"reasoning\": \"It thanks the user.\"}"` + threshold + `}`
	}
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "manners", "cases": [
		{"id": "polite", "input": "/say Thank you kindly.", "checks": [`+rubric("0.9", "")+`, `+rubric("0.6", `, "threshold": 0.8`)+`]},
		{"id": "garbled", "input": "/say Hm.", "checks": [{"type": "rubric", "rubric": "Anything.\n/say not JSON"}]}]}`),
		http.StatusCreated)
	created := want[api.EvalView](t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "manners"}`),
		http.StatusCreated)
	e := b.evalDone(created.ID)
	polite := e.Report.Cases[0].Versions["1"].Results[0]
	if len(polite.Scores) != 2 || *polite.Passed {
		t.Fatalf("the polite case: %+v", polite)
	}
	pass, fail := polite.Scores[0], polite.Scores[1]
	if pass.Type != agentd.CheckRubric || pass.Outcome != agentd.ScorePassed || !strings.Contains(pass.Reason, "not deterministic") ||
		!strings.Contains(pass.Reason, "0.90") || !strings.Contains(pass.Reason, "It thanks the user.") {
		t.Fatalf("the passing rubric: %+v", pass)
	}
	if fail.Outcome != agentd.ScoreFailed || !strings.Contains(fail.Reason, "0.60 against a threshold of 0.80") {
		t.Fatalf("the failing rubric: %+v", fail)
	}
	if !slices.ContainsFunc(pass.Evidence, func(e agentd.ScoreEvidence) bool {
		return e.Field == "judge_model" && string(e.Value) == `"judge-model"`
	}) {
		t.Fatalf("the rubric's evidence: %+v", pass.Evidence)
	}
	garbled := e.Report.Cases[1].Versions["1"].Results[0]
	if s := garbled.Scores[0]; s.Outcome != agentd.ScoreNotScored || !strings.Contains(s.Reason, "did not answer the JSON asked for") ||
		!*garbled.Passed {
		t.Fatalf("the garbled judge's score: %+v", garbled)
	}
}

// TestEvalBadInput: each malformed POST /evals is refused naming its
// field, and nothing is made; a tenant's fifth running evaluation is 429;
// cancelling one that ended is 409; an unknown id is 404.
func TestEvalBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t) // no driver: evaluations stay running
	b.putAgent("helper", `{"instructions": "Be exact."}`)
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "set", "cases": [{"id": "a", "input": "hi"}]}`), http.StatusCreated)
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "empty"}`), http.StatusCreated)
	for _, c := range []struct{ body, field string }{
		{`{"versions": [1], "dataset": "set"}`, "agent"},
		{`{"agent": "helper", "dataset": "set"}`, "versions"},
		{`{"agent": "nobody", "versions": [1], "dataset": "set"}`, "agent"},
		{`{"agent": "helper", "versions": [7], "dataset": "set"}`, "versions[0]"},
		{`{"agent": "helper", "versions": [0], "dataset": "set"}`, "versions[0]"},
		{`{"agent": "helper", "versions": [1], "baseline": 3, "dataset": "set"}`, "baseline"},
		{`{"agent": "helper", "versions": [1]}`, "dataset"},
		{`{"agent": "helper", "versions": [1], "dataset": "empty"}`, "dataset"},
		{`{"agent": "helper", "versions": [1], "dataset": "set", "repeat": 0}`, "repeat"},
		{`{"agent": "helper", "versions": [1], "dataset": "set", "concurrency": 99}`, "concurrency"},
		{`{"agent": "helper", "versions": [1], "dataset": "set", "dataset_version": 0}`, "dataset_version"},
		{`{"agent": "helper", "versions": [1], "dataset": "set", "candidate": {"max_steps": "many"}}`, "candidate.max_steps"},
		{`{"agent": "helper", "versions": [1], "dataset": "set", "colour": "red"}`, "colour"},
	} {
		p := wantProblem(t, b.do("POST", "/evals", c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Errorf("%s: field %q (%s), want %q", c.body, p.Field, p.Detail, c.field)
		}
	}
	wantProblem(t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "gone"}`), http.StatusNotFound,
		"dataset_not_found")
	var ids []string
	for range agentd.MaxRunningEvals {
		ids = append(ids, want[api.EvalView](t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "set"}`),
			http.StatusCreated).ID)
	}
	wantProblem(t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "set"}`), http.StatusTooManyRequests,
		"quota_exceeded")
	if e := want[api.EvalView](t, b.do("POST", "/evals/"+ids[0]+"/cancel", ""), http.StatusOK); e.Status != agentd.EvalCancelled ||
		e.FinishedAt == nil {
		t.Fatalf("cancelled: %+v", e)
	}
	wantProblem(t, b.do("POST", "/evals/"+ids[0]+"/cancel", ""), http.StatusConflict, "evaluation_ended")
	want[api.EvalView](t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "set"}`), http.StatusCreated)
	wantProblem(t, b.do("GET", "/evals/"+agentd.NewID(), ""), http.StatusNotFound, "evaluation_not_found")
	wantProblem(t, b.do("GET", "/evals/not-an-id", ""), http.StatusNotFound, "evaluation_not_found")
	page := want[struct {
		Data []api.EvalView `json:"data"`
	}](t, b.do("GET", "/evals?limit=2", ""), http.StatusOK)
	if len(page.Data) != 2 || page.Data[0].CreatedAt.Before(page.Data[1].CreatedAt) {
		t.Fatalf("the newest evaluations: %+v", page.Data)
	}
}

// TestEvalWebhookCheck scores webhook checks by the tenant's endpoint: it
// is sent the case, the run's view and its tool calls, and its verdict is
// the score's; an endpoint that answers anything else leaves the check
// not scored.
func TestEvalWebhookCheck(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			EvaluationID string `json:"evaluation_id"`
			Case         struct{ ID string }
			Run          struct {
				OutputText *string `json:"output_text"`
			}
			ToolCalls []struct{ Tool string } `json:"tool_calls"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Agentd-Evaluation-Id") != req.EvaluationID {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got.Add(1)
		switch req.Case.ID {
		case "good":
			ok := req.Run.OutputText != nil && *req.Run.OutputText == "It is 42." && len(req.ToolCalls) == 1 && req.ToolCalls[0].Tool == "calculator"
			fmt.Fprintf(w, `{"passed": %v, "score": 1, "reason": "the ledger balances"}`, ok)
		case "bad":
			fmt.Fprint(w, `{"passed": false, "reason": "the customer was not refunded"}`)
		default:
			fmt.Fprint(w, `nonsense`)
		}
	}))
	t.Cleanup(hook.Close)
	b, _ := evalSetup(t, strings.TrimPrefix(hook.URL, "http://"))
	b.putAgent("helper", `{"instructions": "Be exact.", "tools": ["calculator"]}`)
	check := `[{"type": "webhook", "name": "world", "url": "` + hook.URL + `/score"}]`
	want[agentd.DatasetView](t, b.do("POST", "/datasets", `{"name": "world", "cases": [
		{"id": "good", "input": "/call calculator {\"expression\": \"6*7\"}\n/say It is 42.", "checks": `+check+`},
		{"id": "bad", "input": "/say Refunded.", "checks": `+check+`},
		{"id": "odd", "input": "/say Hm.", "checks": `+check+`}]}`), http.StatusCreated)
	created := want[api.EvalView](t, b.do("POST", "/evals", `{"agent": "helper", "versions": [1], "dataset": "world"}`),
		http.StatusCreated)
	e := b.evalDone(created.ID)
	outcomes := map[string]agentd.Score{}
	for _, c := range e.Report.Cases {
		outcomes[c.CaseID] = c.Versions["1"].Results[0].Scores[0]
	}
	if s := outcomes["good"]; s.Outcome != agentd.ScorePassed || s.Name != "world" || !strings.Contains(s.Reason, "the ledger balances") {
		t.Fatalf("good: %+v", s)
	}
	if s := outcomes["bad"]; s.Outcome != agentd.ScoreFailed || !strings.Contains(s.Reason, "not refunded") {
		t.Fatalf("bad: %+v", s)
	}
	if s := outcomes["odd"]; s.Outcome != agentd.ScoreNotScored || !strings.Contains(s.Reason, "nonsense") {
		t.Fatalf("odd: %+v", s)
	}
	if got.Load() != 3 {
		t.Fatalf("the endpoint was called %d times", got.Load())
	}
}
