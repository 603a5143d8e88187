package llm

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// sdkMessages builds msg with the SDK's own types, as the adapter did
// before it wrote messages itself: one SDK message, or, for a tool
// message, one per tool result.
func sdkMessages(t *testing.T, msg Message) []openai.ChatCompletionMessageParamUnion {
	t.Helper()
	var text string
	var calls []openai.ChatCompletionMessageToolCallUnionParam
	var parts []openai.ChatCompletionContentPartUnionParam
	var out []openai.ChatCompletionMessageParamUnion
	media := false
	for _, p := range msg.Parts {
		switch p.Type {
		case PartText:
			text += p.Text
			parts = append(parts, openai.TextContentPart(p.Text))
		case PartImage:
			media = true
			img := openai.ChatCompletionContentPartImageImageURLParam{URL: p.URL, Detail: p.Detail}
			if len(p.Data) > 0 {
				img.URL = "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
			}
			parts = append(parts, openai.ImageContentPart(img))
		case PartFile:
			media = true
			var f openai.ChatCompletionContentPartFileFileParam
			if len(p.Data) > 0 {
				f.FileData = openai.String("data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data))
			}
			if p.FileID != "" {
				f.FileID = openai.String(p.FileID)
			}
			if p.Filename != "" {
				f.Filename = openai.String(p.Filename)
			}
			parts = append(parts, openai.FileContentPart(f))
		case PartToolCall:
			calls = append(calls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: p.Call.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name: p.Call.Name, Arguments: p.Call.Arguments,
					},
				},
			})
		case PartToolResult:
			out = append(out, openai.ToolMessage(p.Text, p.ToolCallID))
		}
	}
	switch msg.Role {
	case RoleSystem:
		return []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(text)}
	case RoleUser:
		if media {
			return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(parts)}
		}
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}
	case RoleTool:
		return out
	}
	a := openai.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if text != "" || len(calls) == 0 {
		a.Content.OfString = openai.String(text)
	}
	return []openai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}
}

// Messages of the shapes the engine sends, and of images and files.
var (
	wireCalls = []ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_2", Name: "echo", Arguments: ""}}
	wireImage = Part{Type: PartImage, URL: "https://example.com/cat.png", Detail: "low"}
	wirePNG   = Part{Type: PartImage, Data: []byte("\x89PNG\r\n\x1a\n fake"), MediaType: "image/png"}
	wirePDF   = Part{Type: PartFile, Data: []byte("%PDF-1.7 fake"), MediaType: "application/pdf", Filename: "report.pdf"}
	wireFile  = Part{Type: PartFile, FileID: "file-abc123"}
)

func calls(cs ...ToolCall) []Part {
	out := make([]Part, len(cs))
	for i, c := range cs {
		out[i] = Part{Type: PartToolCall, Call: c}
	}
	return out
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
// the request carries them so: text as a content string, images and files
// as content parts.
func TestMessageJSONMatchesTheSDK(t *testing.T) {
	msgs := []Message{
		TextMessage(RoleSystem, "Be brief. \"Quoted\" <tags> & unicode: é ✓"),
		{Role: RoleSystem},
		TextMessage(RoleUser, "What is 6*7?\nline two"),
		{Role: RoleUser, Parts: []Part{Text("first "), Text("second")}},
		{Role: RoleUser},
		TextMessage(RoleAssistant, "It is 42."),
		{Role: RoleAssistant},
		{Role: RoleAssistant, Parts: calls(wireCalls...)},
		{Role: RoleAssistant, Parts: append([]Part{Text("Let me compute.")}, calls(wireCalls[0])...)},
		{Role: RoleAssistant, Parts: append([]Part{Text("")}, calls(wireCalls[0])...)},
		{Role: RoleTool, Parts: []Part{ToolResult("call_1", `{"result":42}`)}},
		{Role: RoleTool, Parts: []Part{ToolResult("call_1", "one"), ToolResult("call_2", "")}},
		{Role: RoleTool, Parts: []Part{ToolResult("", "no call id")}},
		{Role: RoleUser, Parts: []Part{Text("What is in this picture?"), wireImage}},
		{Role: RoleUser, Parts: []Part{wirePNG, Text("and this one?"), wireImage}},
		{Role: RoleUser, Parts: []Part{Text("Summarize the report."), wirePDF}},
		{Role: RoleUser, Parts: []Part{wireFile, {Type: PartFile, FileID: "file-x", Filename: "x.pdf"}}},
	}
	for i, m := range msgs {
		got, err := appendMessage([]byte("["), m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want, err := json.Marshal(sdkMessages(t, m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decodeJSON(t, append(got, ']')), decodeJSON(t, want)) {
			t.Errorf("message %d:\n got %s]\nwant %s", i, got, want)
		}
	}
}

// What the adapter cannot send as Chat Completions takes it is refused
// before any request.
func TestMessageJSONRefuses(t *testing.T) {
	for _, m := range []Message{
		{Role: "robot"},
		{Role: RoleSystem, Parts: []Part{wireImage}},
		{Role: RoleAssistant, Parts: []Part{wirePDF}},
		{Role: RoleUser, Parts: calls(wireCalls[0])},
		{Role: RoleUser, Parts: []Part{ToolResult("call_1", "x")}},
		{Role: RoleTool},
		{Role: RoleTool, Parts: []Part{Text("x")}},
		{Role: RoleUser, Parts: []Part{{Type: "audio"}}},
		{Role: RoleUser, Parts: []Part{{Type: PartImage}}},
		{Role: RoleUser, Parts: []Part{{Type: PartImage, Data: []byte("x")}}},
		{Role: RoleUser, Parts: []Part{{Type: PartFile, URL: "https://example.com/a.pdf"}}},
		{Role: RoleUser, Parts: []Part{{Type: PartFile, Data: []byte("x")}}},
		{Role: RoleUser, Parts: []Part{{Type: PartFile, Filename: "a.pdf"}}},
	} {
		if b, err := appendMessage(nil, m); err == nil {
			t.Errorf("%+v was written: %s", m, b)
		}
	}
}

// goldenBody is the body the adapter wrote for goldenRequest when messages
// held one content string: messages of text alone are still written so,
// byte for byte.
const goldenBody = `{"messages":[{"role":"system","content":"Be brief. \u003cb\u003e\"é\"\u003c/b\u003e \u0026 \u2028"},` +
	`{"role":"user","content":"What is 6*7?\nline two"},` +
	`{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}},` +
	`{"id":"call_2","type":"function","function":{"name":"echo","arguments":""}}]},` +
	`{"role":"tool","content":"{\"result\":42}","tool_call_id":"call_1"},{"role":"tool","content":"","tool_call_id":"call_2"},` +
	`{"role":"assistant","content":"Let me see.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}]},` +
	`{"role":"tool","content":"x","tool_call_id":"call_1"},{"role":"assistant","content":"It is 42."},{"role":"user","content":""}],` +
	`"model":"gpt-4o-mini","prompt_cache_key":"conv-1","stream_options":{"include_usage":true},` +
	`"tools":[{"type":"function","function":{"name":"calculator","description":"Evaluates.","parameters":{"type":"object"}}},` +
	`{"type":"function","function":{"name":"now"}}],"stream":true}`

func TestRequestBodyOfTextIsAsBefore(t *testing.T) {
	req := Request{Model: "gpt-4o-mini", CacheKey: "conv-1", Messages: []Message{
		TextMessage(RoleSystem, "Be brief. <b>\"é\"</b> & \u2028"),
		TextMessage(RoleUser, "What is 6*7?\nline two"),
		{Role: RoleAssistant, Parts: calls(wireCalls...)},
		{Role: RoleTool, Parts: []Part{ToolResult("call_1", `{"result":42}`), ToolResult("call_2", "")}},
		{Role: RoleAssistant, Parts: append([]Part{Text("Let "), Text("me see.")}, calls(wireCalls[0])...)},
		{Role: RoleTool, Parts: []Part{ToolResult("call_1", "x")}},
		TextMessage(RoleAssistant, "It is 42."),
		{Role: RoleUser},
	}, Tools: []ToolSpec{{Name: "calculator", Description: "Evaluates.", Parameters: json.RawMessage(`{"type": "object"}`)}, {Name: "now"}}}
	got, err := requestBody(req)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != goldenBody {
		t.Fatalf("request body:\n got %s\nwant %s", got, goldenBody)
	}
}

// The request body the adapter writes is the JSON the SDK's
// ChatCompletionNewParams writes, with "stream" set as NewStreaming sets it.
func TestRequestBodyMatchesTheSDK(t *testing.T) {
	msgs := []Message{
		TextMessage(RoleSystem, "Be brief."),
		TextMessage(RoleUser, "What is 6*7? <b>\"é\"</b>"),
		{Role: RoleAssistant, Parts: calls(wireCalls[0])},
		{Role: RoleTool, Parts: []Part{ToolResult("call_1", `{"result":42}`)}},
		TextMessage(RoleAssistant, "42."),
		{Role: RoleUser, Parts: []Part{Text("And these?"), wireImage, wirePNG, wirePDF, wireFile}},
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
		{Model: "gpt-test", Messages: msgs[:2], Tools: tools, CacheKey: "c", Sampling: Sampling{MaxOutputTokens: 256,
			Temperature: ptr(0.7), TopP: ptr(0.95), Format: &OutputFormat{Type: FormatJSONSchema, Name: "answer",
				Description: "The answer, \"quoted\".", Schema: json.RawMessage(schema), Strict: ptr(true)}}},
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{Temperature: ptr(0.0), TopP: ptr(1.0),
			Format: &OutputFormat{Type: FormatJSONObject}}},
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{MaxOutputTokens: 1, Temperature: ptr(2.0), TopP: ptr(1e-7),
			Format: &OutputFormat{Type: FormatJSONSchema, Name: "n", Schema: json.RawMessage(`{}`), Strict: ptr(false)}}},
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{TopP: ptr(0.1), Format: &OutputFormat{Type: FormatJSONSchema, Name: "bare"}}},
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{Format: &OutputFormat{Type: FormatText}}},
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{ReasoningEffort: "high", Temperature: ptr(1.0)}},
		{Model: "gpt-test", Messages: msgs[:2], Tools: tools, Sampling: Sampling{ToolChoice: &ToolChoice{Mode: ToolChoiceRequired},
			ParallelToolCalls: ptr(false)}},
		{Model: "gpt-test", Messages: msgs[:2], Tools: tools, Sampling: Sampling{ToolChoice: &ToolChoice{Mode: ToolChoiceTool, Name: "now"}}},
		{Model: "gpt-test", Messages: msgs[:2], Tools: tools, Sampling: Sampling{ToolChoice: &ToolChoice{Mode: ToolChoiceNone},
			ParallelToolCalls: ptr(true)}},
		// Without tools, neither is sent: the API refuses them then.
		{Model: "gpt-test", Messages: msgs[:2], Sampling: Sampling{ToolChoice: &ToolChoice{Mode: ToolChoiceAuto}, ParallelToolCalls: ptr(false)}},
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
		sdkSampling(t, &p, req.Sampling)
		if c := req.Sampling.ToolChoice; c != nil && len(req.Tools) > 0 {
			if c.Mode == ToolChoiceTool {
				p.ToolChoice.OfFunctionToolChoice = &openai.ChatCompletionNamedToolChoiceParam{
					Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: c.Name}}
			} else {
				p.ToolChoice.OfAuto = openai.String(c.Mode)
			}
		}
		if e := req.Sampling.ReasoningEffort; e != "" {
			p.ReasoningEffort = shared.ReasoningEffort(e)
		}
		if v := req.Sampling.ParallelToolCalls; v != nil && len(req.Tools) > 0 {
			p.ParallelToolCalls = openai.Bool(*v)
		}
		for _, m := range req.Messages {
			p.Messages = append(p.Messages, sdkMessages(t, m)...)
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

// sdkSampling sets s on p with the SDK's own types.
func sdkSampling(t *testing.T, p *openai.ChatCompletionNewParams, s Sampling) {
	t.Helper()
	if s.MaxOutputTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(s.MaxOutputTokens))
	}
	if s.Temperature != nil {
		p.Temperature = openai.Float(*s.Temperature)
	}
	if s.TopP != nil {
		p.TopP = openai.Float(*s.TopP)
	}
	f := s.Format
	switch {
	case f == nil || f.Type == FormatText:
	case f.Type == FormatJSONObject:
		p.ResponseFormat.OfJSONObject = &shared.ResponseFormatJSONObjectParam{}
	case f.Type == FormatJSONSchema:
		js := shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: f.Name}
		if f.Description != "" {
			js.Description = openai.String(f.Description)
		}
		if f.Strict != nil {
			js.Strict = openai.Bool(*f.Strict)
		}
		if len(f.Schema) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(f.Schema, &schema); err != nil {
				t.Fatal(err)
			}
			js.Schema = schema
		}
		p.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{JSONSchema: js}
	default:
		t.Fatalf("format type %q", f.Type)
	}
}

func ptr[T any](v T) *T { return &v }

// A request without sampling sends none of its fields, and what cannot be
// sent is refused before any request.
func TestRequestBodySampling(t *testing.T) {
	msgs := []Message{TextMessage(RoleUser, "hi")}
	got, err := requestBody(Request{Model: "m", Messages: msgs, Sampling: Sampling{Format: &OutputFormat{Type: FormatText}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_completion_tokens", "temperature", "top_p", "response_format"} {
		if strings.Contains(string(got), k) {
			t.Errorf("%s sent without being asked: %s", k, got)
		}
	}
	for _, s := range []Sampling{
		{Temperature: ptr(math.NaN())},
		{TopP: ptr(math.Inf(1))},
		{Format: &OutputFormat{Type: "xml"}},
		{Format: &OutputFormat{Type: FormatJSONSchema, Name: "x", Schema: json.RawMessage(`{"type":`)}},
	} {
		if b, err := requestBody(Request{Model: "m", Messages: msgs, Sampling: s}); err == nil {
			t.Errorf("%+v was written: %s", s, b)
		}
	}
}

// appendNumber writes a float64 as encoding/json does.
func TestAppendNumber(t *testing.T) {
	for _, f := range []float64{0, 1, 2, 0.7, 0.1 + 0.2, 1e-6, 1e-7, 5e-324, 1e20, 1e21, 123456789.125, -0.5, math.MaxFloat64} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendNumber([]byte("x"), "n", &f)
		if err != nil || string(got) != `x,"n":`+string(want) {
			t.Errorf("appendNumber(%v) = %s, %v; want x,\"n\":%s", f, got, err, want)
		}
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
		TextMessage(RoleSystem, "You are a helpful assistant. Use the tools when they help."),
		TextMessage(RoleUser, "What is 6*7? Answer in one sentence."),
		{Role: RoleAssistant, Parts: calls(ToolCall{ID: "call_0_0", Name: "calculator", Arguments: `{"expression":"6*7"}`})},
		{Role: RoleTool, Parts: []Part{ToolResult("call_0_0", `{"result":42}`)}},
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
