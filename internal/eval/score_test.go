package eval_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/eval"
)

func ptr[T any](v T) *T { return &v }

// evidence is a completed run that answered text after two calculator
// calls and a clock call, in two steps, over 1.5 s.
func evidence(text string) eval.Evidence {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return eval.Evidence{
		Run: agentd.RunView{Status: agentd.StatusCompleted, TerminalReason: ptr(agentd.ReasonCompleted),
			OutputText: ptr(text), Cost: 0.25, StepCount: 3, CreatedAt: created,
			FinishedAt: ptr(created.Add(1500 * time.Millisecond))},
		Calls: []eval.Call{
			{ID: "c1", Step: 1, Tool: "calculator", Arguments: json.RawMessage(`{"expression":"6*7","precision":2}`), Status: agentd.CallSucceeded},
			{ID: "c2", Step: 1, Tool: "calculator", Arguments: json.RawMessage(`{"expression":"1+1"}`), Status: agentd.CallFailed},
			{ID: "c3", Step: 2, Tool: "clock", Arguments: json.RawMessage(`{}`), Status: agentd.CallSucceeded},
		},
	}
}

type scoreCase struct {
	name   string
	check  agentd.Check
	ev     eval.Evidence
	want   agentd.ScoreOutcome
	reason string // a part of the reason
	cited  []string
}

func runScoreCases(t *testing.T, cases []scoreCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := eval.Score(tc.check, tc.ev)
			if s.Outcome != tc.want || !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("score %s %q, want %s with %q", s.Outcome, s.Reason, tc.want, tc.reason)
			}
			if s.Type != tc.check.Type || s.Name != tc.check.Name || s.Evidence == nil {
				t.Fatalf("score %+v does not name its check %+v or has nil evidence", s, tc.check)
			}
			var cited []string
			for _, e := range s.Evidence {
				if e.ToolCallID != "" {
					cited = append(cited, e.ToolCallID)
				} else {
					cited = append(cited, e.Field+"="+string(e.Value))
				}
			}
			if strings.Join(cited, " ") != strings.Join(tc.cited, " ") {
				t.Fatalf("evidence %v, want %v", cited, tc.cited)
			}
		})
	}
}

func TestScoreAnswer(t *testing.T) {
	t.Parallel()
	ok := evidence("It is 42.")
	failedRun := evidence("")
	failedRun.Run.Status, failedRun.Run.OutputText = agentd.StatusFailed, nil
	answer := `output_text="It is 42."`
	runScoreCases(t, []scoreCase{
		{"equals", agentd.Check{Type: agentd.CheckEquals, Name: "exact", Value: "It is 42."}, ok, agentd.ScorePassed, "is the text", []string{answer}},
		{"equals is exact", agentd.Check{Type: agentd.CheckEquals, Value: "it is 42."}, ok, agentd.ScoreFailed, `not "it is 42."`, []string{answer}},
		{"equals an empty answer", agentd.Check{Type: agentd.CheckEquals, Value: ""}, evidence(""), agentd.ScorePassed, "", []string{`output_text=""`}},
		{"contains", agentd.Check{Type: agentd.CheckContains, Value: "42"}, ok, agentd.ScorePassed, `holds "42"`, []string{answer}},
		{"contains not", agentd.Check{Type: agentd.CheckContains, Value: "43"}, ok, agentd.ScoreFailed, `does not hold "43"`, []string{answer}},
		{"no answer", agentd.Check{Type: agentd.CheckContains, Value: ""}, failedRun, agentd.ScoreFailed, "no answer (it is failed)", []string{"output_text=null"}},
		{"regex", agentd.Check{Type: agentd.CheckRegex, Pattern: `^It is \d+\.$`}, ok, agentd.ScorePassed, "matches", []string{answer}},
		{"regex not", agentd.Check{Type: agentd.CheckRegex, Pattern: `\d{3}`}, ok, agentd.ScoreFailed, "does not match", []string{answer}},
		{"regex is RE2", agentd.Check{Type: agentd.CheckRegex, Pattern: `(?=42)`}, ok, agentd.ScoreFailed, "not RE2", []string{answer}},
	})
}

func TestScoreJSONSchema(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	check := agentd.Check{Type: agentd.CheckJSONSchema, Schema: schema}
	runScoreCases(t, []scoreCase{
		{"valid", check, evidence(`{"n": 42}`), agentd.ScorePassed, "valid under the schema", []string{`output_text="{\"n\": 42}"`}},
		{"invalid", check, evidence(`{"n": "42"}`), agentd.ScoreFailed, "not valid under the schema", []string{`output_text="{\"n\": \"42\"}"`}},
		{"missing", check, evidence(`{}`), agentd.ScoreFailed, "not valid", []string{`output_text="{}"`}},
		{"not JSON", check, evidence(`n is 42`), agentd.ScoreFailed, "not JSON", []string{`output_text="n is 42"`}},
		{"trailing text", check, evidence(`{"n": 42} and more`), agentd.ScoreFailed, "not JSON", []string{`output_text="{\"n\": 42} and more"`}},
		{"true schema", agentd.Check{Type: agentd.CheckJSONSchema, Schema: json.RawMessage(`true`)}, evidence(`[1]`), agentd.ScorePassed, "", []string{`output_text="[1]"`}},
		{"outside reference", agentd.Check{Type: agentd.CheckJSONSchema, Schema: json.RawMessage(`{"$ref":"https://example.com/s.json"}`)},
			evidence(`1`), agentd.ScoreFailed, "does not compile", []string{`output_text="1"`}},
	})
}

func TestScoreCalls(t *testing.T) {
	t.Parallel()
	ev := evidence("")
	none := evidence("")
	none.Calls = nil
	calc := func(args string, count *int) agentd.Check {
		c := agentd.Check{Type: agentd.CheckCalled, Tool: "calculator", Count: count}
		if args != "" {
			c.Arguments = json.RawMessage(args)
		}
		return c
	}
	not := func(tool, args string) agentd.Check {
		c := agentd.Check{Type: agentd.CheckNotCalled, Tool: tool}
		if args != "" {
			c.Arguments = json.RawMessage(args)
		}
		return c
	}
	runScoreCases(t, []scoreCase{
		{"called", calc("", nil), ev, agentd.ScorePassed, "calculator was called 2 times", []string{"c1", "c2"}},
		{"called with a subset", calc(`{"expression":"6*7"}`, nil), ev, agentd.ScorePassed, "called 1 time", []string{"c1"}},
		{"numbers by value", calc(`{"precision":2.0}`, nil), ev, agentd.ScorePassed, "", []string{"c1"}},
		{"called whatever its status", calc(`{"expression":"1+1"}`, nil), ev, agentd.ScorePassed, "", []string{"c2"}},
		{"other arguments", calc(`{"expression":"6*8"}`, nil), ev, agentd.ScoreFailed, "never with arguments holding", []string{"c1", "c2"}},
		{"extra key", calc(`{"expression":"1+1","precision":2}`, nil), ev, agentd.ScoreFailed, "never", []string{"c1", "c2"}},
		{"count", calc("", ptr(2)), ev, agentd.ScorePassed, "exactly 2 times", []string{"c1", "c2"}},
		{"count wrong", calc("", ptr(1)), ev, agentd.ScoreFailed, "called 2 times, not 1", []string{"c1", "c2"}},
		{"count of a subset", calc(`{"expression":"6*7"}`, ptr(1)), ev, agentd.ScorePassed, "exactly 1 time", []string{"c1"}},
		{"count none", calc(`{"expression":"9"}`, ptr(1)), ev, agentd.ScoreFailed, "0 times, not 1", []string{"c1", "c2"}},
		{"not called at all", agentd.Check{Type: agentd.CheckCalled, Tool: "search"}, ev, agentd.ScoreFailed, "search was not called",
			[]string{`tool_calls=["calculator","clock"]`}},
		{"no calls", calc("", nil), none, agentd.ScoreFailed, "was not called", []string{`tool_calls=[]`}},
		{"bad arguments", calc(`{`, nil), ev, agentd.ScoreFailed, "not JSON", nil},
		{"not_called", not("search", ""), ev, agentd.ScorePassed, "search was not called", []string{`tool_calls=["calculator","clock"]`}},
		{"not_called but called", not("clock", ""), ev, agentd.ScoreFailed, "clock was called 1 time", []string{"c3"}},
		{"not_called with arguments", not("calculator", `{"expression":"6*8"}`), ev, agentd.ScorePassed, "never with arguments", []string{"c1", "c2"}},
		{"not_called with arguments called", not("calculator", `{"expression":"1+1"}`), ev, agentd.ScoreFailed, "called 1 time", []string{"c2"}},
	})
}

func TestHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
		holds     bool
	}{
		{`{"a":1,"b":{"c":[1,{"d":2,"e":3}]}}`, `{"b":{"c":[1,{"d":2}]}}`, true},
		{`{"a":[1,2]}`, `{"a":[1]}`, false},
		{`{"a":[2,1]}`, `{"a":[1,2]}`, false},
		{`{"a":null}`, `{"a":null}`, true},
		{`{}`, `{"a":null}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`{"a":1}`, `{}`, true},
		{`[1]`, `{}`, false},
		{`"x"`, `"x"`, true},
	} {
		var got, want any
		if err := json.Unmarshal([]byte(tc.got), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if eval.Holds(got, want) != tc.holds {
			t.Errorf("Holds(%s, %s) = %v", tc.got, tc.want, !tc.holds)
		}
	}
	if ok, err := eval.ArgumentsHold(json.RawMessage(`{"a":1}`), nil); !ok || err != nil {
		t.Errorf("no match: %v %v, want any arguments to hold it", ok, err)
	}
	if ok, err := eval.ArgumentsHold(json.RawMessage(`not json`), json.RawMessage(`{}`)); ok || err != nil {
		t.Errorf("arguments that are not JSON: %v %v, want them to hold nothing", ok, err)
	}
}

func TestScoreStatus(t *testing.T) {
	t.Parallel()
	ok := evidence("x")
	timedOut := evidence("")
	timedOut.Run.Status, timedOut.Run.TerminalReason, timedOut.Run.OutputText = agentd.StatusTimedOut, ptr(agentd.ReasonTimedOutTotal), nil
	waiting := evidence("")
	waiting.Run.Status, waiting.Run.TerminalReason, waiting.Run.FinishedAt = agentd.StatusRequiresAction, nil, nil
	st := func(s agentd.RunStatus, r agentd.Reason) agentd.Check {
		return agentd.Check{Type: agentd.CheckStatus, Status: s, Reason: r}
	}
	cited := func(s, r string) []string { return []string{"status=" + s, "terminal_reason=" + r} }
	runScoreCases(t, []scoreCase{
		{"status", st(agentd.StatusCompleted, ""), ok, agentd.ScorePassed, "the run is completed", cited(`"completed"`, `"completed"`)},
		{"status and reason", st(agentd.StatusTimedOut, agentd.ReasonTimedOutTotal), timedOut, agentd.ScorePassed, "timed_out (timed_out_total)",
			cited(`"timed_out"`, `"timed_out_total"`)},
		{"reason only", st("", agentd.ReasonTimedOutTotal), ok, agentd.ScoreFailed, "not reason timed_out_total", cited(`"completed"`, `"completed"`)},
		{"wrong status", st(agentd.StatusCompleted, ""), timedOut, agentd.ScoreFailed, "timed_out (timed_out_total), not status completed",
			cited(`"timed_out"`, `"timed_out_total"`)},
		{"right status wrong reason", st(agentd.StatusTimedOut, agentd.ReasonCompleted), timedOut, agentd.ScoreFailed,
			"not status timed_out and reason completed", cited(`"timed_out"`, `"timed_out_total"`)},
		{"requires_action", st(agentd.StatusRequiresAction, ""), waiting, agentd.ScorePassed, "requires_action", cited(`"requires_action"`, "null")},
		{"neither", st("", ""), ok, agentd.ScoreFailed, "neither", cited(`"completed"`, `"completed"`)},
	})
}

func TestScoreCeilings(t *testing.T) {
	t.Parallel()
	ev := evidence("x")
	running := evidence("")
	running.Run.Status, running.Run.FinishedAt = agentd.StatusRequiresAction, nil
	c := func(typ agentd.CheckType, max float64) agentd.Check { return agentd.Check{Type: typ, Max: &max} }
	lat := []string{`created_at="2026-01-02T03:04:05Z"`, `finished_at="2026-01-02T03:04:06.5Z"`}
	runScoreCases(t, []scoreCase{
		{"steps", c(agentd.CheckMaxSteps, 3), ev, agentd.ScorePassed, "step_count is 3, at most 3", []string{"step_count=3"}},
		{"steps over", c(agentd.CheckMaxSteps, 2), ev, agentd.ScoreFailed, "over the max of 2 steps", []string{"step_count=3"}},
		{"cost", c(agentd.CheckMaxCost, 0.25), ev, agentd.ScorePassed, "cost is 0.25", []string{"cost=0.25"}},
		{"cost over", c(agentd.CheckMaxCost, 0.1), ev, agentd.ScoreFailed, "over the max of 0.1", []string{"cost=0.25"}},
		{"free", c(agentd.CheckMaxCost, 0), evidence("x"), agentd.ScoreFailed, "", []string{"cost=0.25"}},
		{"latency", c(agentd.CheckMaxLatencyMS, 1500), ev, agentd.ScorePassed, "took 1500.0 ms", lat},
		{"latency over", c(agentd.CheckMaxLatencyMS, 1499), ev, agentd.ScoreFailed, "over the max of 1499", lat},
		{"not finished", c(agentd.CheckMaxLatencyMS, 1e9), running, agentd.ScoreFailed, "has not finished (it is requires_action)",
			[]string{`created_at="2026-01-02T03:04:05Z"`, "finished_at=null"}},
		{"no max", agentd.Check{Type: agentd.CheckMaxSteps}, ev, agentd.ScoreFailed, "no max", []string{"step_count=3"}},
	})
}

func TestNotScored(t *testing.T) {
	t.Parallel()
	runScoreCases(t, []scoreCase{
		{"rubric", agentd.Check{Type: agentd.CheckRubric, Rubric: "polite"}, evidence("x"), agentd.ScoreNotScored, "judge model", nil},
		{"webhook", agentd.Check{Type: agentd.CheckWebhook, URL: "https://example.com"}, evidence("x"), agentd.ScoreNotScored, "endpoint", nil},
		{"unknown", agentd.Check{Type: "vibes"}, evidence("x"), agentd.ScoreNotScored, `"vibes"`, nil},
	})
}

// TestEveryCheckTypeIsScored checks that each type of check has a scorer
// (or is one this package leaves to another on purpose).
func TestEveryCheckTypeIsScored(t *testing.T) {
	t.Parallel()
	for _, typ := range agentd.CheckTypes() {
		s := eval.Score(agentd.Check{Type: typ}, evidence("x"))
		if s.Outcome == agentd.ScoreNotScored && strings.Contains(s.Reason, "no scorer knows") {
			t.Errorf("check type %s has no scorer", typ)
		}
	}
}
