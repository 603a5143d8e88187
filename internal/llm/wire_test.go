package llm

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
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
	decode := func(b []byte) any {
		t.Helper()
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return v
	}
	for i, m := range msgs {
		got, err := messageJSON(m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want, err := json.Marshal(sdkMessage(m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decode(got), decode(want)) {
			t.Errorf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
	p, err := chatParams(Request{Model: "m", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) != len(msgs) {
		t.Fatalf("request %s: %v", body, err)
	}
	for i, m := range msgs {
		want, _ := json.Marshal(sdkMessage(m))
		if !reflect.DeepEqual(decode(req.Messages[i]), decode(want)) {
			t.Errorf("request message %d:\n got %s\nwant %s", i, req.Messages[i], want)
		}
	}
	if _, err := messageJSON(Message{Role: "robot"}); err == nil {
		t.Error("a message of role robot was written")
	}
}
