package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentd/agentd"
)

// Score scores check c on what was stored of a run (docs/evals.md,
// Scorers). A check a stored case cannot hold (a pattern that does not
// compile, a ceiling without max) fails, its reason naming the fault;
// rubric and webhook checks, and types it does not know, are not scored.
func Score(c agentd.Check, ev Evidence) agentd.Score {
	s := score(c, ev)
	s.Type, s.Name = c.Type, c.Name
	if s.Evidence == nil {
		s.Evidence = []agentd.ScoreEvidence{}
	}
	return s
}

// ScoreAll scores each of checks on ev, in their order.
func ScoreAll(checks []agentd.Check, ev Evidence) []agentd.Score {
	out := make([]agentd.Score, len(checks))
	for i, c := range checks {
		out[i] = Score(c, ev)
	}
	return out
}

func score(c agentd.Check, ev Evidence) agentd.Score {
	switch c.Type {
	case agentd.CheckEquals, agentd.CheckContains, agentd.CheckRegex, agentd.CheckJSONSchema:
		return scoreAnswer(c, ev.Run)
	case agentd.CheckCalled:
		return scoreCalled(c, ev.Calls)
	case agentd.CheckNotCalled:
		return scoreNotCalled(c, ev.Calls)
	case agentd.CheckStatus:
		return scoreStatus(c, ev.Run)
	case agentd.CheckMaxSteps:
		return scoreCeiling(c, "step_count", float64(ev.Run.StepCount), ev.Run.StepCount, "steps")
	case agentd.CheckMaxCost:
		return scoreCeiling(c, "cost", ev.Run.Cost, ev.Run.Cost, "in cost")
	case agentd.CheckMaxLatencyMS:
		return scoreLatency(c, ev.Run)
	case agentd.CheckRubric:
		return notScored("a rubric is graded by a judge model: not deterministic, not scored here")
	case agentd.CheckWebhook:
		return notScored("a webhook check is scored by the tenant's endpoint, not here")
	}
	return notScored(fmt.Sprintf("no scorer knows checks of type %q", c.Type))
}

// verdict is a score that passed when ok, with reason and evidence.
func verdict(ok bool, reason string, evidence ...agentd.ScoreEvidence) agentd.Score {
	out := agentd.ScoreFailed
	if ok {
		out = agentd.ScorePassed
	}
	return agentd.Score{Outcome: out, Reason: reason, Evidence: evidence}
}

func failed(reason string, evidence ...agentd.ScoreEvidence) agentd.Score {
	return verdict(false, reason, evidence...)
}

func notScored(reason string) agentd.Score {
	return agentd.Score{Outcome: agentd.ScoreNotScored, Reason: reason}
}

// field is the evidence of a field of the run's view and its value.
func field(name string, v any) agentd.ScoreEvidence {
	b, err := json.Marshal(v)
	if err != nil { // the view's fields all marshal
		b = []byte("null")
	}
	return agentd.ScoreEvidence{Field: name, Value: b}
}

// scoreAnswer scores a check of the run's answer, its output_text: none
// (a run that did not complete) fails every one.
func scoreAnswer(c agentd.Check, run agentd.RunView) agentd.Score {
	e := field("output_text", run.OutputText)
	if run.OutputText == nil {
		return failed(fmt.Sprintf("the run has no answer (it is %s)", run.Status), e)
	}
	text := *run.OutputText
	switch c.Type {
	case agentd.CheckEquals:
		if text == c.Value {
			return verdict(true, "the answer is the text", e)
		}
		return failed(fmt.Sprintf("the answer is not %s", quote(c.Value)), e)
	case agentd.CheckContains:
		if strings.Contains(text, c.Value) {
			return verdict(true, fmt.Sprintf("the answer holds %s", quote(c.Value)), e)
		}
		return failed(fmt.Sprintf("the answer does not hold %s", quote(c.Value)), e)
	case agentd.CheckRegex:
		re, err := regexp.Compile(c.Pattern)
		if err != nil {
			return failed(fmt.Sprintf("the check's pattern is not RE2: %v", err), e)
		}
		if re.MatchString(text) {
			return verdict(true, fmt.Sprintf("the answer matches %s", quote(c.Pattern)), e)
		}
		return failed(fmt.Sprintf("the answer does not match %s", quote(c.Pattern)), e)
	}
	return scoreSchema(c.Schema, text, e)
}

// scoreSchema scores an answer against a JSON Schema (draft 2020-12
// unless it says another), which may load nothing from outside itself.
func scoreSchema(schema json.RawMessage, text string, e agentd.ScoreEvidence) agentd.Score {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return failed("the check's schema is not JSON", e)
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network references
	if err := comp.AddResource("mem:///check.json", doc); err != nil {
		return failed(fmt.Sprintf("the check's schema is not a JSON Schema: %s", oneLine(err)), e)
	}
	sch, err := comp.Compile("mem:///check.json")
	if err != nil {
		return failed(fmt.Sprintf("the check's schema does not compile: %s", oneLine(err)), e)
	}
	answer, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return failed("the answer is not JSON", e)
	}
	if err := sch.Validate(answer); err != nil {
		return failed(fmt.Sprintf("the answer is not valid under the schema: %s", oneLine(err)), e)
	}
	return verdict(true, "the answer is JSON valid under the schema", e)
}

// scoreStatus scores a status check: the run's status and terminal_reason
// are those the check names (either, or both).
func scoreStatus(c agentd.Check, run agentd.RunView) agentd.Score {
	var reason agentd.Reason
	if run.TerminalReason != nil {
		reason = *run.TerminalReason
	}
	ev := []agentd.ScoreEvidence{field("status", run.Status), field("terminal_reason", run.TerminalReason)}
	if c.Status == "" && c.Reason == "" {
		return failed("the check names neither a status nor a reason", ev...)
	}
	got := string(run.Status)
	if reason != "" {
		got += " (" + string(reason) + ")"
	}
	var want []string
	if c.Status != "" {
		want = append(want, "status "+string(c.Status))
	}
	if c.Reason != "" {
		want = append(want, "reason "+string(c.Reason))
	}
	ok := (c.Status == "" || c.Status == run.Status) && (c.Reason == "" || c.Reason == reason)
	if ok {
		return verdict(true, fmt.Sprintf("the run is %s", got), ev...)
	}
	return failed(fmt.Sprintf("the run is %s, not %s", got, strings.Join(want, " and ")), ev...)
}

// scoreCeiling scores a ceiling on a number of the run's view: it passes
// at most at the check's max.
func scoreCeiling(c agentd.Check, name string, n float64, v any, unit string) agentd.Score {
	e := field(name, v)
	if c.Max == nil {
		return failed("the check has no max", e)
	}
	if n <= *c.Max {
		return verdict(true, fmt.Sprintf("%s is %v, at most %v", name, v, *c.Max), e)
	}
	return failed(fmt.Sprintf("%s is %v, over the max of %v %s", name, v, *c.Max, unit), e)
}

// scoreLatency scores a ceiling on the run's latency, from its creation
// to its finish: a run that has not finished fails it.
func scoreLatency(c agentd.Check, run agentd.RunView) agentd.Score {
	ev := []agentd.ScoreEvidence{field("created_at", run.CreatedAt), field("finished_at", run.FinishedAt)}
	if c.Max == nil {
		return failed("the check has no max", ev...)
	}
	if run.FinishedAt == nil {
		return failed(fmt.Sprintf("the run has not finished (it is %s)", run.Status), ev...)
	}
	took := run.FinishedAt.Sub(run.CreatedAt)
	ms := float64(took) / float64(time.Millisecond)
	if ms <= *c.Max {
		return verdict(true, fmt.Sprintf("the run took %.1f ms, at most %v", ms, *c.Max), ev...)
	}
	return failed(fmt.Sprintf("the run took %.1f ms, over the max of %v", ms, *c.Max), ev...)
}

// quote is s quoted for a reason, cut to a readable length.
func quote(s string) string {
	const max = 80
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return fmt.Sprintf("%q", s)
}

// oneLine is err's text on one line, cut to a readable length.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	return s
}
