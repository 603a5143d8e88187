package llm

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// sdkMessage builds msg with the SDK's own types, as the adapter did before
// it wrote messages itself.
func sdkMessage(msg Message) openai.ChatCompletionMessageParamUnion {
	switch msg.Role {
	case RoleSystem:
		return openai.SystemMessage(msg.Content)
	case RoleUser:
		return openai.UserMessage(msg.Content)
	case RoleTool:
		return openai.ToolMessage(msg.Content, msg.ToolCallID)
	}
	a := openai.ChatCompletionAssistantMessageParam{}
	if msg.Content != "" || len(msg.ToolCalls) == 0 {
		a.Content.OfString = openai.String(msg.Content)
	}
	for _, tc := range msg.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: tc.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name: tc.Name, Arguments: tc.Arguments,
				},
			},
		})
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// decodeJSON decodes b into Go's generic JSON values, for comparing JSON
// texts whatever their key order and spacing.
func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// The messages the adapter writes are the JSON the SDK's types write, and
// the request carries them so.
func TestMessageJSONMatchesTheSDK(t *testing.T) {
	calls := []ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_2", Name: "echo", Arguments: ""}}
	msgs := []Message{
		{Role: RoleSystem, Content: "Be brief. \"Quoted\" <tags> & unicode: é ✓"},
		{Role: RoleSystem},
		{Role: RoleUser, Content: "What is 6*7?\nline two"},
		{Role: RoleUser},
		{Role: RoleAssistant, Content: "It is 42."},
		{Role: RoleAssistant},
		{Role: RoleAssistant, ToolCalls: calls},
		{Role: RoleAssistant, Content: "Let me compute.", ToolCalls: calls[:1]},
		{Role: RoleTool, ToolCallID: "call_1", Content: `{"result":42}`},
		{Role: RoleTool, ToolCallID: "call_2"},
		{Role: RoleTool, Content: "no call id"},
	}
	for i, m := range msgs {
		got, err := appendMessage(nil, m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want, err := json.Marshal(sdkMessage(m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decodeJSON(t, got), decodeJSON(t, want)) {
			t.Errorf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if _, err := appendMessage(nil, Message{Role: "robot"}); err == nil {
		t.Error("a message of role robot was written")
	}
}

// The request body the adapter writes is the JSON the SDK's
// ChatCompletionNewParams writes, with "stream" set as NewStreaming sets it.
func TestRequestBodyMatchesTheSDK(t *testing.T) {
	calls := []ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}
	msgs := []Message{
		{Role: RoleSystem, Content: "Be brief."},
		{Role: RoleUser, Content: "What is 6*7? <b>\"é\"</b>"},
		{Role: RoleAssistant, ToolCalls: calls},
		{Role: RoleTool, ToolCallID: "call_1", Content: `{"result":42}`},
		{Role: RoleAssistant, Content: "42."},
	}
	schema := `{"type": "object",
		"properties": {"expression": {"type": "string", "description": "e.g. 6*7"}},
		"required": ["expression"]}`
	tools := []ToolSpec{
		{Name: "calculator", Description: "Evaluates an expression.", Parameters: json.RawMessage(schema)},
		{Name: "now"},
	}
	for _, req := range []Request{
		{Model: "gpt-test", Messages: msgs, Tools: tools},
		{Model: "m \"quoted\"", Messages: msgs[:2]},
		{Model: "gpt-test", Messages: msgs[:1], CacheKey: "01a23158-24d0-755c-8953-5268112791c4"},
	} {
		got, err := requestBody(req)
		if err != nil {
			t.Fatal(err)
		}
		p := openai.ChatCompletionNewParams{
			Model:         shared.ChatModel(req.Model),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}
		if req.CacheKey != "" {
			p.PromptCacheKey = openai.String(req.CacheKey)
		}
		for _, m := range req.Messages {
			p.Messages = append(p.Messages, sdkMessage(m))
		}
		for _, tl := range req.Tools {
			def := shared.FunctionDefinitionParam{Name: tl.Name}
			if tl.Description != "" {
				def.Description = openai.String(tl.Description)
			}
			if len(tl.Parameters) > 0 {
				if err := json.Unmarshal(tl.Parameters, &def.Parameters); err != nil {
					t.Fatal(err)
				}
			}
			p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		sdk := decodeJSON(t, want).(map[string]any)
		sdk["stream"] = true // as option.WithJSONSet("stream", true) sets it
		if !reflect.DeepEqual(decodeJSON(t, got), sdk) {
			t.Errorf("request body:\n got %s\nwant %s", got, want)
		}
	}
	if _, err := requestBody(Request{Model: "m", Tools: []ToolSpec{{Name: "bad", Parameters: json.RawMessage(`{"type":`)}}}); err == nil {
		t.Error("a tool with a schema that is not JSON was written")
	}
}

// appendString writes a string as encoding/json does.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain ascii 123", "tab\tnew\nline", `quote " backslash \`, "<b>&amp;</b>",
		"é ✓ 日本", "\u2028\u2029", "bad \xff utf-8", "nul \x00 del \x7f"} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, want x%s", s, got, want)
		}
	}
}

// BenchmarkRequestBody measures the writing of a request of an agent's
// third step: system and user messages, a tool call and its result, and two
// tools.
func BenchmarkRequestBody(b *testing.B) {
	schema := json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","minLength":1,
"maxLength":1000,"description":"Arithmetic expression, e.g. (2 + 3) * 4 ^ 2 / sqrt(16)."}},
"required":["expression"],"additionalProperties":false}`)
	req := Request{Model: "gpt-4o-mini", Messages: []Message{
		{Role: RoleSystem, Content: "You are a helpful assistant. Use the tools when they help."},
		{Role: RoleUser, Content: "What is 6*7? Answer in one sentence."},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_0_0", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Role: RoleTool, ToolCallID: "call_0_0", Content: `{"result":42}`},
	}, Tools: []ToolSpec{
		{Name: "calculator", Description: "Evaluates an arithmetic expression.", Parameters: schema},
		{Name: "echo", Description: "Returns its input.", Parameters: json.RawMessage(`{"type":"object"}`)},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := requestBody(req); err != nil {
			b.Fatal(err)
		}
	}
}
