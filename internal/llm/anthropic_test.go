package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// claude is what a test of the Anthropic adapter against its fake needs.
type claude struct {
	fake  *fakeanthropic.Server
	model *llm.Anthropic
}

func setupClaude(t *testing.T, idle time.Duration) *claude {
	t.Helper()
	fake, srv := fakeanthropic.Start()
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	m := llm.NewAnthropic(llm.AnthropicConfig{BaseURL: srv.URL, APIKey: "sk-ant-test-key-0123456789",
		IdleTimeout: idle, HTTPClient: &http.Client{Transport: tr}})
	return &claude{fake: fake, model: m}
}

func (c *claude) last(t *testing.T) fakeanthropic.Request {
	t.Helper()
	reqs := c.fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the fake saw no request")
	}
	return reqs[len(reqs)-1]
}

func TestAnthropicText(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	var deltas []string
	req := llm.Request{Model: "claude-fake", Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, "be brief"), llm.TextMessage(llm.RoleUser, "hello\n/say hello world\n/stream 3 0")}}
	resp, err := c.model.Stream(t.Context(), req, func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "hello world" || resp.FinishReason != llm.FinishStop || len(resp.ToolCalls) != 0 || len(resp.Reasoning) != 0 {
		t.Fatalf("response = %+v", resp)
	}
	if strings.Join(deltas, "") != "hello world" || len(deltas) != 3 {
		t.Fatalf("deltas = %q", deltas)
	}
	rec := c.last(t)
	if rec.Usage.TotalInput() != resp.Usage.InputTokens || resp.Usage.OutputTokens != rec.Usage.OutputTokens || resp.Usage.InputTokens == 0 {
		t.Fatalf("usage %+v, the fake reported %+v", resp.Usage, rec.Usage)
	}
	if rec.APIKey != "sk-ant-test-key-0123456789" || rec.Breakpoints != 2 {
		t.Fatalf("record = %+v", rec)
	}
}

// TestAnthropicToolLoop: a tool call, its result sent back (in the user
// turn after it), then the final answer.
func TestAnthropicToolLoop(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	tools := []llm.ToolSpec{{Name: "add", Description: "adds", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`)}}
	msgs := []llm.Message{llm.TextMessage(llm.RoleUser, "/call add {\"a\": 1}\n/call add {\"a\": 2}\n/say done")}
	resp, err := c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{{ID: "toolu_0_0", Name: "add", Arguments: `{"a": 1}`}, {ID: "toolu_0_1", Name: "add", Arguments: `{"a": 2}`}}
	if resp.FinishReason != llm.FinishToolCalls || !slices.Equal(resp.ToolCalls, want) || resp.Text != "" {
		t.Fatalf("response = %+v", resp)
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Parts: callParts(resp.ToolCalls...)},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("toolu_0_0", "1")}},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{Type: llm.PartToolResult, ToolCallID: "toolu_0_1", Text: "no", IsError: true}}})
	resp, err = c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "done" || resp.FinishReason != llm.FinishStop {
		t.Fatalf("response = %+v", resp)
	}
	// A result dropped is refused, as the real API refuses it.
	_, err = c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: msgs[:3], Tools: tools}, nil)
	if e := asError(t, err); e.Kind != llm.KindBadRequest || !strings.Contains(e.Message, "tool_result") {
		t.Fatalf("error = %v", err)
	}
}

// TestAnthropicCaching: a 50-turn conversation, sent turn after turn,
// reads most of its input from the cache, and never sends more than 4
// breakpoints, whatever the request's CacheBreakpoints.
func TestAnthropicCaching(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	tools := []llm.ToolSpec{{Name: "look", Description: "looks something up", Parameters: json.RawMessage(`{"type":"object"}`)}}
	msgs := []llm.Message{llm.TextMessage(llm.RoleSystem, strings.Repeat("You are a careful assistant. ", 40))}
	var total llm.Usage
	for turn := range 50 {
		msgs = append(msgs, llm.TextMessage(llm.RoleUser, fmt.Sprintf("turn %d: tell me more about the topic.\n/say answer %d, with some detail.", turn, turn)))
		// Every user message named stable: more than the adapter may mark.
		var bps []int
		for i, m := range msgs {
			if m.Role == llm.RoleUser {
				bps = append(bps, i)
			}
		}
		resp, err := c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: msgs, Tools: tools, CacheBreakpoints: bps}, nil)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if rec := c.last(t); rec.Breakpoints > llm.MaxCacheBreakpoints {
			t.Fatalf("turn %d: %d breakpoints", turn, rec.Breakpoints)
		}
		total = total.Add(resp.Usage)
		msgs = append(msgs, llm.TextMessage(llm.RoleAssistant, resp.Text))
	}
	share := float64(total.CachedInputTokens) / float64(total.InputTokens)
	t.Logf("50 turns: %d input tokens, %d read from the cache (%.1f%%), %d written to it",
		total.InputTokens, total.CachedInputTokens, 100*share, total.CacheWriteTokens)
	if share < 0.8 {
		t.Fatalf("cache-read share %.3f, want above 0.8", share)
	}
	if fake := c.fake.UsageTotal(); fake.TotalInput() != total.InputTokens || fake.CacheReadInputTokens != total.CachedInputTokens ||
		fake.CacheCreationInputTokens != total.CacheWriteTokens {
		t.Fatalf("adapter summed %+v, the fake reported %+v", total, fake)
	}
}

// TestAnthropicThinking: thinking blocks come back as Reasoning, never as
// text; sent back before their tool use they are accepted, dropped or
// tampered with they are refused.
func TestAnthropicThinking(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	msgs := []llm.Message{llm.TextMessage(llm.RoleUser, "/think weighing the options\n/redacted secret\n/call pick {}\n/say chosen")}
	var deltas []string
	resp, err := c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: msgs, Thinking: 2048,
		Tools: []llm.ToolSpec{{Name: "pick"}}}, func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Reasoning) != 2 || resp.Reasoning[0].Type != llm.ReasoningThinking || resp.Reasoning[0].Text != "weighing the options" ||
		resp.Reasoning[0].Signature == "" || resp.Reasoning[1].Type != llm.ReasoningRedacted || resp.Reasoning[1].Data == "" {
		t.Fatalf("reasoning = %+v", resp.Reasoning)
	}
	if resp.Text != "" || len(deltas) != 0 || len(resp.ToolCalls) != 1 || resp.Usage.ReasoningTokens == 0 {
		t.Fatalf("response = %+v, deltas %q", resp, deltas)
	}
	send := func(reasoning []llm.ReasoningBlock) (llm.Response, error) {
		var parts []llm.Part
		parts = append(parts, callParts(resp.ToolCalls...)...)
		for _, r := range reasoning {
			parts = append(parts, llm.Reasoning(r)) // after the call: the adapter puts it first
		}
		m := append(slices.Clone(msgs), llm.Message{Role: llm.RoleAssistant, Parts: parts},
			llm.Message{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult(resp.ToolCalls[0].ID, "a")}})
		return c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Messages: m, Thinking: 2048, Tools: []llm.ToolSpec{{Name: "pick"}}}, nil)
	}
	final, err := send(resp.Reasoning)
	if err != nil {
		t.Fatal(err)
	}
	if final.Text != "chosen" || len(final.Reasoning) != 2 {
		t.Fatalf("final = %+v", final)
	}
	tampered := slices.Clone(resp.Reasoning)
	tampered[0].Text += " (edited)"
	for name, r := range map[string][]llm.ReasoningBlock{"dropped": nil, "tampered": tampered} {
		_, err := send(r)
		if e := asError(t, err); e.Kind != llm.KindBadRequest || e.Status != http.StatusBadRequest {
			t.Fatalf("%s: error = %v", name, err)
		}
	}
}

// TestAnthropicErrors: the fake's faults and an endpoint's error statuses
// are classified as the OpenAI adapter's are.
func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	for _, tc := range []struct {
		prompt string
		model  string
		kind   llm.ErrorKind
		status int
	}{
		{"/fault 429", "claude-fake", llm.KindRateLimited, 429},
		{"/fault 529", "claude-fake", llm.KindServer, 529},
		{"/fault 500", "claude-fake", llm.KindServer, 500},
		{"/fault truncate\n/say a long enough answer", "claude-fake", llm.KindConnection, 200},
		{strings.Repeat("long prompt ", 1000), "fake-1k", llm.KindContextOverflow, 400},
	} {
		_, err := c.model.Stream(t.Context(), llm.Request{Model: tc.model, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, tc.prompt)}}, nil)
		e := asError(t, err)
		if e.Kind != tc.kind || e.Status != tc.status || e.Retryable() != (tc.kind != llm.KindContextOverflow) {
			t.Fatalf("%.20q: error = %v (kind %s, status %d)", tc.prompt, err, e.Kind, e.Status)
		}
		if tc.status == 429 && e.RetryAfter != time.Second {
			t.Fatalf("retry after %v", e.RetryAfter)
		}
		if tc.status == 529 && e.Type != "overloaded_error" {
			t.Fatalf("529: type %q", e.Type)
		}
	}
	// A thinking budget below the API's minimum: a bad request.
	_, err := c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", Thinking: 100, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}, nil)
	if e := asError(t, err); e.Kind != llm.KindBadRequest || e.Retryable() || e.Type != "invalid_request_error" {
		t.Fatalf("error = %v", err)
	}
}

// TestAnthropicStatuses: an endpoint's 401 is auth, its key never shown.
func TestAnthropicStatuses(t *testing.T) {
	t.Parallel()
	const key = "sk-ant-secret-key-abcdef"
	for _, tc := range []struct {
		status int
		body   string
		kind   llm.ErrorKind
	}{
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + key + `"}}`, llm.KindAuth},
		{403, `{"type":"error","error":{"type":"permission_error","message":"no"}}`, llm.KindAuth},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, llm.KindContextOverflow},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, llm.KindBadRequest},
		{503, `<html><title>503 Service Unavailable</title></html>`, llm.KindServer},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		tr := &http.Transport{}
		m := llm.NewAnthropic(llm.AnthropicConfig{BaseURL: srv.URL, APIKey: key, HTTPClient: &http.Client{Transport: tr}})
		_, err := m.Stream(t.Context(), llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}, nil)
		srv.Close()
		tr.CloseIdleConnections()
		e := asError(t, err)
		if e.Kind != tc.kind || e.Status != tc.status || strings.Contains(err.Error(), key) {
			t.Fatalf("%d: error = %v", tc.status, err)
		}
	}
}

// TestAnthropicIdle: a stream that says nothing ends at the idle timeout.
func TestAnthropicIdle(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, time.Hour)
	_, err := c.model.Stream(t.Context(), llm.Request{Model: "claude-fake", IdleTimeout: 100 * time.Millisecond,
		Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "/fault hang")}}, nil)
	if e := asError(t, err); e.Kind != llm.KindIdle {
		t.Fatalf("error = %v", err)
	}
}

// TestRouterToAnthropic: a route of provider anthropic reaches the fake
// Anthropic endpoint with its key, under its name there.
func TestRouterToAnthropic(t *testing.T) {
	t.Parallel()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r, err := llm.NewRouter(map[string]llm.Route{
		"claude":  {Provider: llm.ProviderAnthropic, BaseURL: srv.URL, APIKeyEnv: "ANT_KEY", Model: "claude-upstream"},
		"claude2": {Provider: llm.ProviderAnthropic, BaseURL: srv.URL, APIKeyEnv: "ANT_KEY"},
	}, llm.OpenAIConfig{HTTPClient: &http.Client{Transport: tr}}, func(string) string { return "ant-key-0123456789" })
	if err != nil {
		t.Fatal(err)
	}
	defer r.CloseIdleConnections()
	for _, name := range []string{"claude", "claude2"} {
		resp, err := r.Stream(t.Context(), llm.Request{Model: name, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "/say hi")}}, nil)
		if err != nil || resp.Text != "hi" {
			t.Fatalf("%s: %+v, %v", name, resp, err)
		}
	}
	if fake.CallsFor("claude-upstream") != 1 || fake.CallsFor("claude2") != 1 || fake.Requests()[0].APIKey != "ant-key-0123456789" {
		t.Fatalf("the fake saw %+v", fake.Requests())
	}
	if !slices.Contains(llm.Providers(), llm.ProviderAnthropic) {
		t.Fatal("Providers() does not list anthropic")
	}
}

// TestOpenAIIgnoresReasoning: an assistant message's reasoning parts are
// never sent to a Chat Completions endpoint.
func TestOpenAIIgnoresReasoning(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	thought := llm.Reasoning(llm.ReasoningBlock{Type: llm.ReasoningThinking, Text: "secret thought", Signature: "sig"})
	req := llm.Request{Model: "fake-1", Messages: []llm.Message{
		llm.TextMessage(llm.RoleUser, "/call f {}\n/say ok"),
		{Role: llm.RoleAssistant, Parts: append([]llm.Part{thought}, callParts(llm.ToolCall{ID: "call_0_0", Name: "f", Arguments: "{}"})...)},
		{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("call_0_0", "x")}},
	}}
	if _, err := b.model.Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	rec := b.wait(t)
	for _, m := range rec.Sent {
		if strings.Contains(string(m), "secret thought") || strings.Contains(string(m), "reasoning") {
			t.Fatalf("sent %s", m)
		}
	}
	var _ fakellm.Request = rec
}

// TestAnthropicMediaAndLaterSystem: images and files go in the user turn;
// a system message after the opening ones is user text where it stands,
// merged with the user messages around it into one turn.
func TestAnthropicMediaAndLaterSystem(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	req := llm.Request{Model: "claude-fake", Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, "instructions"),
		{Role: llm.RoleUser, Parts: []llm.Part{llm.Text("look"), {Type: llm.PartImage, URL: "https://example.com/cat.png"},
			{Type: llm.PartImage, Data: []byte("\x89PNG"), MediaType: "image/png"},
			{Type: llm.PartFile, Data: []byte("%PDF-1.7"), MediaType: "application/pdf", Filename: "r.pdf"},
			{Type: llm.PartFile, Data: []byte("notes"), MediaType: "text/plain"}}},
		llm.TextMessage(llm.RoleSystem, "Summary of the earlier conversation"),
		llm.TextMessage(llm.RoleUser, "/system"),
	}}
	resp, err := c.model.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "instructions" || c.last(t).Messages != 1 {
		t.Fatalf("response %+v, record %+v", resp, c.last(t))
	}
	// A file Anthropic cannot take is refused before any request.
	req.Messages[1].Parts = append(req.Messages[1].Parts, llm.Part{Type: llm.PartFile, Data: []byte("x"), MediaType: "application/zip"})
	if _, err := c.model.Stream(t.Context(), req, nil); asError(t, err).Kind != llm.KindBadRequest || c.fake.Calls() != 1 {
		t.Fatalf("error = %v, calls %d", err, c.fake.Calls())
	}
}

// TestAnthropicSampling: what the request's sampling becomes, as the fake
// saw it (/sampling answers with it).
func TestAnthropicSampling(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	temp, no := 0.5, false
	tools := []llm.ToolSpec{{Name: "f"}}
	for _, tc := range []struct {
		req  llm.Request
		want string
	}{
		{llm.Request{}, `{"max_tokens":4096}`},
		{llm.Request{Thinking: 1024, Sampling: llm.Sampling{MaxOutputTokens: 100}},
			`{"max_tokens":1124,"thinking":{"type":"enabled","budget_tokens":1024}}`},
		{llm.Request{Tools: tools, Sampling: llm.Sampling{Temperature: &temp, ParallelToolCalls: &no,
			ToolChoice: &llm.ToolChoice{Mode: llm.ToolChoiceRequired}}},
			`{"max_tokens":4096,"temperature":0.5,"tool_choice":{"disable_parallel_tool_use":true,"type":"any"}}`},
		{llm.Request{Tools: tools, Sampling: llm.Sampling{ToolChoice: &llm.ToolChoice{Mode: llm.ToolChoiceTool, Name: "f"}}},
			`{"max_tokens":4096,"tool_choice":{"name":"f","type":"tool"}}`},
		{llm.Request{Sampling: llm.Sampling{Format: &llm.OutputFormat{Type: llm.FormatJSONSchema, Name: "s", Schema: json.RawMessage(`{"type":"object"}`)}}},
			`{"max_tokens":4096,"output_config":{"format":{"schema":{"type":"object"},"type":"json_schema"}}}`},
	} {
		tc.req.Model, tc.req.Messages = "claude-fake", []llm.Message{llm.TextMessage(llm.RoleUser, "/sampling")}
		resp, err := c.model.Stream(t.Context(), tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text != tc.want {
			t.Errorf("sampling %s, want %s", resp.Text, tc.want)
		}
	}
}

// TestAnthropicCancel: a cancelled context ends the stream with
// KindCancelled, wrapping the cause.
func TestAnthropicCancel(t *testing.T) {
	t.Parallel()
	c := setupClaude(t, 0)
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("user cancel")
	_, err := c.model.Stream(ctx, llm.Request{Model: "claude-fake", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "/stream 5 200")}},
		func(string) { cancel(cause) })
	if e := asError(t, err); e.Kind != llm.KindCancelled || !errors.Is(err, cause) {
		t.Fatalf("error = %v", err)
	}
}
