package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm/fakeanthropic"
)

// TestResponsesReasoningRoundTrip: a Responses client that keeps its own
// history (store: false) against a model with extended thinking, asked
// through reasoning.effort: the response shows the model's thinking as a
// reasoning item (its summary, and its encrypted_content when included),
// and the next request, which sends that item back before the function
// call, gives the model its thinking back signed as it came (the fake, as
// Anthropic's API, refuses an assistant turn of tool use without it: the
// same request without the item fails).
func TestResponsesReasoningRoundTrip(t *testing.T) {
	t.Parallel()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(srv.Close)
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {"claude": {"provider": "anthropic", "base_url": "`+srv.URL+`",
		"api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-test", "context_window": 200000}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, map[string]string{"AGENTD_MODELS_FILE": models, "TEST_ANTHROPIC_KEY": "sk-ant-test"})
	common := `"model":"claude","store":false,"reasoning":{"effort":"low","summary":"auto"},"include":["reasoning.encrypted_content"],
		"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	user := `{"role":"user","content":"/call get_weather {\"city\":\"Paris\"}\n/say It is sunny."}`
	var first struct {
		Status    string
		Reasoning struct{ Effort, Summary string }
		Output    []json.RawMessage
	}
	postJSON(t, base+"/v1/responses", `{`+common+`,"input":[`+user+`]}`, http.StatusOK, &first)
	if first.Status != "completed" || first.Reasoning.Effort != "low" || first.Reasoning.Summary != "auto" || len(first.Output) != 2 {
		t.Fatalf("first response: %+v", first)
	}
	var reasoning struct {
		Type             string
		Summary          []struct{ Type, Text string }
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(first.Output[0], &reasoning); err != nil || reasoning.Type != "reasoning" || len(reasoning.Summary) != 1 ||
		reasoning.Summary[0].Type != "summary_text" || reasoning.Summary[0].Text == "" || reasoning.EncryptedContent == "" {
		t.Fatalf("reasoning item %s: %v", first.Output[0], err)
	}
	if strings.Contains(string(first.Output[1]), `"function_call"`) == false {
		t.Fatalf("the second item is no function call: %s", first.Output[1])
	}
	var call struct {
		CallID string `json:"call_id"`
	}
	_ = json.Unmarshal(first.Output[1], &call)
	history := user + `,` + string(first.Output[0]) + `,` + string(first.Output[1]) +
		`,{"type":"function_call_output","call_id":"` + call.CallID + `","output":"sunny, 24C"}`
	var second struct {
		Status string
		Output []struct {
			Type    string
			Content []struct{ Text string }
		}
	}
	postJSON(t, base+"/v1/responses", `{`+common+`,"input":[`+history+`]}`, http.StatusOK, &second)
	last := second.Output[len(second.Output)-1]
	if second.Status != "completed" || last.Type != "message" || last.Content[0].Text != "It is sunny." {
		t.Fatalf("second response: %+v", second)
	}
	// Without the reasoning item, the model refuses the turn.
	noReasoning := user + `,` + string(first.Output[1]) + `,{"type":"function_call_output","call_id":"` + call.CallID + `","output":"x"}`
	postJSON(t, base+"/v1/responses", `{`+common+`,"input":[`+noReasoning+`]}`, http.StatusOK, &second)
	if second.Status != "failed" {
		t.Fatalf("without its thinking the turn went on: %+v", second)
	}
	if n := fake.CallsFor("claude-test"); n < 2 {
		t.Fatalf("the fake answered %d requests", n)
	}
}

// postJSON posts body to url and decodes the answer, which must have
// status want, into out.
func postJSON(t *testing.T, url, body string, want int, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	if resp.StatusCode != want {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}
