package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd/api"
)

// v1Response is a response object as these tests read it.
type v1Response struct {
	ID, Status string
	Output     []struct {
		ID, Type, Name, Status, Arguments string
		ServerLabel                       string  `json:"server_label"`
		Output                            *string `json:"output"`
	}
	Reasoning struct{ Effort, Summary *string }
	Warnings  []struct{ Param, Message string }
}

func postResponse(t *testing.T, b *bundle, body string, want int) v1Response {
	t.Helper()
	resp := b.do("POST", "/v1/responses", body)
	if resp.status != want {
		t.Fatalf("POST /v1/responses: %d %s", resp.status, resp.body)
	}
	var r v1Response
	if err := json.Unmarshal(resp.body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestV1HostedTools: a hosted tool the operator maps (hosted_tools) is
// the server's tool, called as an mcp_call; one not mapped is left out,
// the response saying so in its warnings; forcing one not mapped is a
// 400. reasoning is asked and echoed.
func TestV1HostedTools(t *testing.T) {
	t.Parallel()
	b, fake := itemsSetup(t, func(c *api.Config) { c.HostedTools = map[string]string{"web_search": "calculator"} })
	r := postResponse(t, b, `{"model":"m","tools":[{"type":"web_search"},{"type":"file_search","vector_store_ids":["vs_1"]}],
		"reasoning":{"effort":"low","summary":"auto"},
		"input":"/call calculator {\"expression\":\"6*7\"}\n/say done"}`, http.StatusOK)
	if r.Status != "completed" || len(r.Output) != 2 || r.Output[0].Type != "mcp_call" || r.Output[0].Name != "calculator" ||
		r.Output[0].Output == nil || *r.Output[0].Output != `{"result":42}` {
		t.Fatalf("response: %+v", r)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Param != "tools[1]" || !strings.Contains(r.Warnings[0].Message, "file_search") {
		t.Fatalf("warnings: %+v", r.Warnings)
	}
	if r.Reasoning.Effort == nil || *r.Reasoning.Effort != "low" || r.Reasoning.Summary == nil || *r.Reasoning.Summary != "auto" {
		t.Fatalf("reasoning: %+v", r.Reasoning)
	}
	if got := fake.Requests(); len(got) == 0 || got[0].ReasoningEffort != "low" {
		t.Fatalf("the model was not asked for low effort")
	}
	resp := b.do("POST", "/v1/responses", `{"model":"m","tools":[{"type":"file_search"}],"tool_choice":{"type":"file_search"},"input":"x"}`)
	if resp.status != http.StatusBadRequest || !strings.Contains(string(resp.body), `"param":"tool_choice.type"`) {
		t.Fatalf("forced file_search: %d %s", resp.status, resp.body)
	}
}

// TestV1ApprovalHistoryResent: a client that keeps the history (the
// Agents SDK's default) sends back the user message and the approval
// request agentd issued, with its decision and no previous_response_id:
// the response that asked goes on with the decision.
func TestV1ApprovalHistoryResent(t *testing.T) {
	t.Parallel()
	b, _ := itemsSetup(t)
	tools := `[{"type":"mcp","server_label":"agentd","allowed_tools":["calculator"],"require_approval":"always"}]`
	user := `{"role":"user","content":"/call calculator {\"expression\":\"6*7\"}\n/say it is 42"}`
	r := postResponse(t, b, `{"model":"m","tools":`+tools+`,"input":[`+user+`]}`, http.StatusOK)
	if len(r.Output) != 1 || r.Output[0].Type != "mcp_approval_request" {
		t.Fatalf("first response: %+v", r)
	}
	req := r.Output[0]
	item, _ := json.Marshal(map[string]any{"type": "mcp_approval_request", "id": req.ID, "server_label": req.ServerLabel,
		"name": req.Name, "arguments": req.Arguments})
	r = postResponse(t, b, `{"model":"m","tools":`+tools+`,"input":[`+user+`,`+string(item)+
		`,{"type":"mcp_approval_response","approval_request_id":"`+req.ID+`","approve":true}]}`, http.StatusOK)
	if r.Status != "completed" || len(r.Output) < 2 || r.Output[0].Type != "mcp_call" || r.Output[0].Output == nil || *r.Output[0].Output != `{"result":42}` {
		t.Fatalf("the approved response: %+v", r)
	}
	// An approval request agentd never issued is refused, naming it.
	resp := b.do("POST", "/v1/responses", `{"model":"m","input":[{"type":"mcp_approval_request","id":"mcpr_0123456789abcdef0123456789abcdef",
		"server_label":"agentd","name":"calculator","arguments":"{}"}]}`)
	if resp.status != http.StatusBadRequest || !strings.Contains(string(resp.body), `"param":"input"`) {
		t.Fatalf("an unknown approval request: %d %s", resp.status, resp.body)
	}
}
