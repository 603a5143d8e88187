package agentd

import "encoding/json"

// A score is the verdict of one check of a dataset's case on one run
// (docs/evals.md, Scorers): passed or failed, why in a sentence, and the
// evidence it read of what was stored of the run, so that a report shows
// why. Checks a deterministic scorer cannot judge (a judge model's rubric,
// a tenant's webhook) are not scored by it, and say so.

// ScoreOutcome is what a scorer made of a check.
type ScoreOutcome string

// Outcomes of a check.
const (
	ScorePassed ScoreOutcome = "passed"
	ScoreFailed ScoreOutcome = "failed"
	// ScoreNotScored: the check is not for this scorer (rubric, webhook:
	// not deterministic), or of a type it does not know.
	ScoreNotScored ScoreOutcome = "not_scored"
)

// ScoreOutcomes lists every outcome of a check.
func ScoreOutcomes() []ScoreOutcome { return []ScoreOutcome{ScorePassed, ScoreFailed, ScoreNotScored} }

// Score is the verdict of one check on one run.
type Score struct {
	Type    CheckType    `json:"type"`
	Name    string       `json:"name,omitempty"` // the check's label
	Outcome ScoreOutcome `json:"outcome"`
	// Reason says why, in a short sentence.
	Reason string `json:"reason"`
	// Evidence is what the scorer read: fields of the run, or its tool
	// calls. Empty for a check not scored.
	Evidence []ScoreEvidence `json:"evidence"`
}

// Passed reports whether the check passed.
func (s Score) Passed() bool { return s.Outcome == ScorePassed }

// ScoreEvidence is one thing a scorer read of a run: a field of its view
// (Field and Value, as GET /runs/{id} shows it), or one of its tool calls
// (ToolCallID, the id GET /runs/{id}/steps shows, with its step, tool,
// arguments and status).
type ScoreEvidence struct {
	Field      string          `json:"field,omitempty"`
	Value      json.RawMessage `json:"value,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Step       int             `json:"step,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Status     CallStatus      `json:"status,omitempty"`
}
