package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
)

// A rubric check is graded by a judge model: it is given the case's input
// and the run's answer, then the rubric alone in a message of its own,
// and answers a score from 0 to 1 with its reasoning as JSON. The score
// passes at the check's threshold (default DefaultThreshold). It is not
// deterministic, and its score says so.

// Model is the judge's model (every llm.Model).
type Model interface {
	Stream(ctx context.Context, req llm.Request, onDelta func(text string)) (llm.Response, error)
}

// DefaultThreshold is the least passing score of a rubric check that
// names none.
const DefaultThreshold = 0.7

// JudgeMarker begins the judge's system prompt.
const JudgeMarker = "You are agentd's judge."

const judgeSystem = JudgeMarker + ` You grade the answer an agent gave to a request against a rubric.
Read the request and the answer, then the rubric. Answer with one JSON object and nothing else:
{"score": a number from 0 (fails the rubric) to 1 (meets it fully), "reasoning": one or two sentences}.`

// maxJudged bounds the text of a request or an answer the judge is given.
const maxJudged = 16 << 10

// grade grades check c (a rubric) on a run of case cs whose evidence is
// ev, with model (the check's own, else defaultModel).
func grade(ctx context.Context, m Model, defaultModel string, c agentd.Check, cs agentd.DatasetCase, ev Evidence) agentd.Score {
	model := c.Model
	if model == "" {
		model = defaultModel
	}
	threshold := DefaultThreshold
	if c.Threshold != nil {
		threshold = *c.Threshold
	}
	answer := "(none: the run ended " + string(ev.Run.Status) + ")"
	if ev.Run.OutputText != nil {
		answer = *ev.Run.OutputText
	}
	material := "The request:\n" + cut(caseText(cs)) + "\n\nThe agent's answer:\n" + cut(answer)
	resp, err := m.Stream(ctx, llm.Request{Model: model, Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, judgeSystem), llm.TextMessage(llm.RoleUser, material),
		llm.TextMessage(llm.RoleUser, "The rubric:\n"+c.Rubric)}}, nil)
	if err != nil {
		return notScored(fmt.Sprintf("the judge model %s failed: %s", model, oneLine(err)))
	}
	var out struct {
		Score     *float64 `json:"score"`
		Reasoning string   `json:"reasoning"`
	}
	text := resp.Text
	if i, j := strings.Index(text, "{"), strings.LastIndex(text, "}"); i >= 0 && j > i {
		text = text[i : j+1]
	}
	if json.Unmarshal([]byte(text), &out) != nil || out.Score == nil || *out.Score < 0 || *out.Score > 1 {
		return notScored(fmt.Sprintf("the judge model %s did not answer the JSON asked for: %s", model, quote(resp.Text)))
	}
	evidence := []agentd.ScoreEvidence{field("output_text", ev.Run.OutputText), field("judge_model", model),
		field("judge_score", *out.Score), field("judge_reasoning", out.Reasoning), field("deterministic", false)}
	return verdict(*out.Score >= threshold, fmt.Sprintf("the judge (%s, not deterministic) scored %.2f against a threshold of %.2f: %s",
		model, *out.Score, threshold, out.Reasoning), evidence...)
}

// caseText is the text of a case's input (its recorded conversation's
// last user message before it, for a case from a run without input).
func caseText(cs agentd.DatasetCase) string {
	var s string
	if json.Unmarshal(cs.Input, &s) == nil {
		return s
	}
	if len(cs.Input) > 0 && string(cs.Input) != "null" {
		return string(cs.Input)
	}
	if cs.Recorded != nil {
		for i := len(cs.Recorded.Messages) - 1; i >= 0; i-- {
			if m := cs.Recorded.Messages[i]; m.Role == agentd.RoleUser {
				if json.Unmarshal(m.Content, &s) == nil {
					return s
				}
				return string(m.Content)
			}
		}
	}
	return ""
}

func cut(s string) string {
	if len(s) > maxJudged {
		return s[:maxJudged] + "…"
	}
	return s
}
