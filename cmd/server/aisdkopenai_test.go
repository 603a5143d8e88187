package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// providerRequest is one call test/aisdk-openai/provider.mjs saw the AI
// SDK's OpenAI provider make, with agentd's answer.
type providerRequest struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body"`
	Status int             `json:"status"`
	Error  json.RawMessage `json:"error"`
}

// providerUsage is the AI SDK's LanguageModelUsage.
type providerUsage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	TotalTokens  int `json:"totalTokens"`
}

// aisdkOpenAI runs one scenario of test/aisdk-openai/provider.mjs (the AI
// SDK's @ai-sdk/openai provider on the Responses API, unchanged) against
// base, decodes what it prints into out, and returns the calls the
// provider made. A scenario that failed fails the test with the calls and
// agentd's answers to them.
func aisdkOpenAI(t *testing.T, base, scenario, prompt string, out any) []providerRequest {
	t.Helper()
	dir, _ := filepath.Abs("../../test/aisdk-openai")
	cmd := exec.Command("node", "provider.mjs", base, scenario, prompt)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node provider.mjs %s: %v\n%s", scenario, err, stderr.String())
	}
	t.Logf("provider.mjs %s: %s", scenario, stdout.Bytes())
	var common struct {
		Error    json.RawMessage   `json:"error"`
		Requests []providerRequest `json:"requests"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &common); err != nil {
		t.Fatalf("provider.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
	if len(common.Error) > 0 {
		var calls strings.Builder
		for _, r := range common.Requests {
			fmt.Fprintf(&calls, "\n  %s %s %s\n    -> %d %s", r.Method, r.Path, r.Body, r.Status, r.Error)
		}
		t.Fatalf("provider.mjs %s failed: %s\ncalls:%s", scenario, common.Error, calls.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("provider.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
	return common.Requests
}

// allAnswered fails the test unless every call was a POST /v1/responses
// that agentd answered with 200.
func allAnswered(t *testing.T, reqs []providerRequest) {
	t.Helper()
	for _, r := range reqs {
		if r.Method != "POST" || r.Path != "/v1/responses" || r.Status != 200 {
			t.Errorf("%s %s answered %d %s", r.Method, r.Path, r.Status, r.Error)
		}
	}
}

func needAISDKOpenAINode(t *testing.T) {
	t.Helper()
	needNode(t, "aisdk-openai", "@ai-sdk/openai")
}

// TestAISDKOpenAIProvider: the AI SDK's OpenAI provider, its base URL
// pointed at agentd's /v1, generates and streams text through the
// Responses API, as openai.responses(model) and as the default openai(model).
func TestAISDKOpenAIProvider(t *testing.T) {
	t.Parallel()
	needAISDKOpenAINode(t)
	base, _ := startServer(t, nil)

	t.Run("generate", func(t *testing.T) {
		var r struct {
			Text, FinishReason, ResponseID, ProviderResponseID, ModelID string
			Usage                                                       providerUsage
			Default                                                     struct {
				Text, FinishReason, ResponseID string
				Paths                          []string
			}
		}
		reqs := aisdkOpenAI(t, base, "generate", "/say Hello from agentd.", &r)
		allAnswered(t, reqs)
		if r.Text != "Hello from agentd." || r.FinishReason != "stop" {
			t.Fatalf("text %q, finish reason %q", r.Text, r.FinishReason)
		}
		if !strings.HasPrefix(r.ResponseID, "resp_") || r.ProviderResponseID != r.ResponseID || r.ModelID != "fake" {
			t.Fatalf("response id %q, provider metadata's responseId %q, model %q", r.ResponseID, r.ProviderResponseID, r.ModelID)
		}
		if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Fatalf("usage %+v", r.Usage)
		}
		if r.Default.Text != r.Text || r.Default.FinishReason != "stop" || !reflect.DeepEqual(r.Default.Paths, []string{"/v1/responses"}) ||
			r.Default.ResponseID == r.ResponseID || !strings.HasPrefix(r.Default.ResponseID, "resp_") {
			t.Fatalf("openai('fake'): %+v", r.Default)
		}
		if len(reqs) != 2 {
			t.Fatalf("%d calls, want 2", len(reqs))
		}
	})

	t.Run("stream", func(t *testing.T) {
		var r struct {
			Deltas, FinishReason, Text, ResponseID, ProviderResponseID string
			Chunks                                                     int
			Usage                                                      providerUsage
		}
		const want = "Streamed by agentd through the AI SDK."
		reqs := aisdkOpenAI(t, base, "stream", "/say "+want+"\n/stream 6 10", &r)
		allAnswered(t, reqs)
		if r.Deltas != want || r.Text != want || r.FinishReason != "stop" {
			t.Fatalf("deltas %q, text %q, finish reason %q", r.Deltas, r.Text, r.FinishReason)
		}
		if r.Chunks < 2 {
			t.Fatalf("the text came in %d deltas", r.Chunks)
		}
		if !strings.HasPrefix(r.ResponseID, "resp_") || r.ProviderResponseID != r.ResponseID {
			t.Fatalf("response id %q, provider metadata's responseId %q", r.ResponseID, r.ProviderResponseID)
		}
		if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
			t.Fatalf("usage %+v", r.Usage)
		}
		var body struct {
			Stream bool `json:"stream"`
		}
		if len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &body) != nil || !body.Stream {
			t.Fatalf("calls %+v", reqs)
		}
	})

	// The common settings reach the model (the fake answers /sampling with
	// what it was sent); the system prompt comes as a system message.
	t.Run("options", func(t *testing.T) {
		var r struct {
			Text, FinishReason string
			Warnings           []json.RawMessage
		}
		allAnswered(t, aisdkOpenAI(t, base, "options", "/sampling", &r))
		if r.Text != `{"max_completion_tokens":100,"temperature":0.5,"top_p":0.9}` || r.FinishReason != "stop" || len(r.Warnings) != 0 {
			t.Fatalf("%+v", r)
		}
	})

	// A second turn: agentd continues the conversation when the chat sends
	// the assistant's earlier answer as text, as result.response.messages
	// (which the provider sends as an item_reference to the stored answer,
	// or inline with store: false, a response agentd does not keep), or
	// only the new message with previousResponseId.
	t.Run("history", func(t *testing.T) {
		type turn struct {
			Text, FinishReason string
			Error              json.RawMessage
			Input              []json.RawMessage
		}
		var r struct {
			First                                  string
			Reference, Plain, StoreFalse, Previous turn
		}
		aisdkOpenAI(t, base, "history", "/say First answer.", &r)
		if r.First != "First answer." {
			t.Fatalf("the first turn: %q", r.First)
		}
		for name, tr := range map[string]turn{"plain": r.Plain, "previousResponseId": r.Previous,
			"response.messages": r.Reference, "response.messages, store: false": r.StoreFalse} {
			if tr.Text != "Second answer." || tr.FinishReason != "stop" || len(tr.Error) > 0 {
				t.Errorf("%s: %+v", name, tr)
			}
		}
		if len(r.Plain.Input) != 3 || len(r.Previous.Input) != 1 {
			t.Errorf("the second turns' inputs: plain %d items, previousResponseId %d", len(r.Plain.Input), len(r.Previous.Input))
		}
	})
}

// TestAISDKOpenAIProviderTools: generateText with a tool of the AI SDK's
// tool() and its execute, over agentd's /v1: the model's call ends the
// first response with a function_call, the SDK runs the tool and sends its
// output in a second response, which answers with the final text.
func TestAISDKOpenAIProviderTools(t *testing.T) {
	t.Parallel()
	needAISDKOpenAINode(t)
	base, _ := startServer(t, nil)

	type step struct {
		FinishReason, Text string
		ToolCalls          []struct {
			ToolCallID, ToolName string
			Input                map[string]any
		}
		ToolResults []struct {
			ToolCallID, ToolName string
			Output               map[string]any
		}
	}
	var r struct {
		Text, FinishReason string
		Executed           []string
		Steps              []step
	}
	reqs := aisdkOpenAI(t, base, "tool", "/call weather {\"city\":\"Paris\"}\n/say It is sunny.", &r)
	allAnswered(t, reqs)
	if r.Text != "It is sunny." || r.FinishReason != "stop" || !reflect.DeepEqual(r.Executed, []string{"Paris"}) {
		t.Fatalf("text %q, finish reason %q, the tool ran for %q", r.Text, r.FinishReason, r.Executed)
	}
	if len(r.Steps) != 2 || len(reqs) != 2 {
		t.Fatalf("%d steps in %d calls, want 2: %+v", len(r.Steps), len(reqs), r.Steps)
	}
	first, last := r.Steps[0], r.Steps[1]
	if first.FinishReason != "tool-calls" || len(first.ToolCalls) != 1 || len(first.ToolResults) != 1 {
		t.Fatalf("the first step: %+v", first)
	}
	call, result := first.ToolCalls[0], first.ToolResults[0]
	if call.ToolName != "weather" || !reflect.DeepEqual(call.Input, map[string]any{"city": "Paris"}) || call.ToolCallID == "" {
		t.Fatalf("the tool call: %+v", call)
	}
	if result.ToolCallID != call.ToolCallID || result.ToolName != "weather" ||
		!reflect.DeepEqual(result.Output, map[string]any{"city": "Paris", "forecast": "sunny", "celsius": float64(21)}) {
		t.Fatalf("the tool result: %+v", result)
	}
	if last.FinishReason != "stop" || last.Text != "It is sunny." || len(last.ToolCalls) != 0 {
		t.Fatalf("the last step: %+v", last)
	}
	// The second call sends the tool's output back as a function_call_output
	// of the call the first response made.
	var second struct {
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(reqs[1].Body, &second); err != nil {
		t.Fatal(err)
	}
	var outputs int
	for _, it := range second.Input {
		if it.Type == "function_call_output" && it.CallID == call.ToolCallID {
			outputs++
		}
	}
	if outputs != 1 {
		t.Fatalf("the second call's input: %+v", second.Input)
	}
}
