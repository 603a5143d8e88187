package llm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// benchSchema is a tool schema of the size agentd's built-in tools have.
var benchSchema = json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","minLength":1,
"maxLength":1000,"description":"Arithmetic expression, e.g. (2 + 3) * 4 ^ 2 / sqrt(16)."}},
"required":["expression"],"additionalProperties":false}`)

// BenchmarkStream measures one model call of an agent step through the
// adapter against the fake model in the same process: the request the
// engine sends for a step that has a tool result to answer (system, user,
// assistant tool call, tool result; two tools), and the streamed answer of
// 20 content chunks. Its CPU includes the fake's, which is the same for any
// adapter.
func BenchmarkStream(b *testing.B) {
	srv := httptest.NewServer(fakellm.New())
	tr := &http.Transport{}
	defer func() {
		srv.Close()
		tr.CloseIdleConnections()
	}()
	m := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "bench",
		HTTPClient: &http.Client{Transport: tr}})
	req := llm.Request{Model: "fake-1",
		Messages: []llm.Message{
			llm.TextMessage(llm.RoleSystem, "You are a careful assistant."),
			llm.TextMessage(llm.RoleUser, "What is 6*7?\n/stream 20 0"),
			{Role: llm.RoleAssistant, Parts: []llm.Part{{Type: llm.PartToolCall, Call: llm.ToolCall{ID: "call_1", Name: "calculator",
				Arguments: `{"expression":"6*7"}`}}}},
			{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("call_1", `{"value":42}`)}},
		},
		Tools: []llm.ToolSpec{
			{Name: "calculator", Description: "Evaluate an arithmetic expression.", Parameters: benchSchema},
			{Name: "echo", Description: "Return its input.", Parameters: benchSchema},
		},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := m.Stream(ctx, req, func(string) {})
		if err != nil {
			b.Fatal(err)
		}
		if res.FinishReason != llm.FinishStop || res.Usage.OutputTokens == 0 {
			b.Fatalf("response %+v", res)
		}
	}
}
