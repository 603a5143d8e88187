package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentd/agentd"
)

// A webhook check is scored by the tenant's own endpoint: it is POSTed
// the evaluation, the case, and what was stored of the run (its view and
// its tool calls), and answers {"passed": bool, "reason": "..."} (with a
// "score" from 0 to 1, if it has one). What it answers is its verdict;
// an endpoint that fails, or answers anything else, leaves the check not
// scored, saying why.

// HookTimeout bounds a webhook check's call.
const HookTimeout = 10 * time.Second

// maxHookAnswer bounds the answer read of an endpoint.
const maxHookAnswer = 64 << 10

// hookRequest is the body a webhook check's endpoint is sent.
type hookRequest struct {
	Type         string             `json:"type"` // "agentd.eval.score"
	EvaluationID string             `json:"evaluation_id"`
	Version      string             `json:"version"`
	Rep          int                `json:"rep"`
	Case         agentd.DatasetCase `json:"case"`
	Run          agentd.RunView     `json:"run"`
	ToolCalls    []hookCall         `json:"tool_calls"`
}

type hookCall struct {
	ID        string            `json:"id"`
	Step      int               `json:"step"`
	Tool      string            `json:"tool"`
	Arguments json.RawMessage   `json:"arguments"`
	Status    agentd.CallStatus `json:"status"`
}

// hookScore scores webhook check c of row r of evaluation e through
// client (held to the egress rule of the URLs tenants give).
func hookScore(ctx context.Context, client *http.Client, e agentd.Evaluation, r agentd.EvalRun, c agentd.Check,
	cs agentd.DatasetCase, ev Evidence) agentd.Score {
	req := hookRequest{Type: "agentd.eval.score", EvaluationID: e.ID, Version: r.Version, Rep: r.Rep, Case: cs, Run: ev.Run,
		ToolCalls: []hookCall{}}
	for _, call := range ev.Calls {
		req.ToolCalls = append(req.ToolCalls, hookCall{ID: call.ID, Step: call.Step, Tool: call.Tool, Arguments: call.Arguments,
			Status: call.Status})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return notScored("the webhook check's request: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return notScored(fmt.Sprintf("the webhook check's URL %s: %s", c.URL, oneLine(err)))
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Agentd-Evaluation-Id", e.ID)
	resp, err := client.Do(hr)
	if err != nil {
		return notScored(fmt.Sprintf("the endpoint %s did not answer: %s", c.URL, oneLine(err)))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxHookAnswer))
	var out struct {
		Passed *bool    `json:"passed"`
		Score  *float64 `json:"score"`
		Reason string   `json:"reason"`
	}
	if resp.StatusCode/100 != 2 || json.Unmarshal(raw, &out) != nil || out.Passed == nil {
		return notScored(fmt.Sprintf("the endpoint %s answered %d, not {\"passed\": true|false, \"reason\": ...}: %s",
			c.URL, resp.StatusCode, quote(string(raw))))
	}
	evidence := []agentd.ScoreEvidence{field("webhook_url", c.URL), field("webhook_passed", *out.Passed)}
	if out.Score != nil {
		evidence = append(evidence, field("webhook_score", *out.Score))
	}
	return verdict(*out.Passed, fmt.Sprintf("the endpoint %s: %s", c.URL, out.Reason), evidence...)
}
