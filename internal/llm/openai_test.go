package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is what a test of the adapter against the fake needs.
type bundle struct {
	fake  *fakellm.Server
	model *llm.OpenAI
	done  chan fakellm.Request // every finished request, in order
}

func setup(t *testing.T, idle time.Duration) *bundle {
	t.Helper()
	b := &bundle{done: make(chan fakellm.Request, 100)}
	b.fake = fakellm.New(fakellm.WithOnDone(func(r fakellm.Request) { b.done <- r }))
	srv := httptest.NewServer(b.fake)
	b.model = newModel(t, srv, idle)
	return b
}

// newModel returns an adapter for srv with its own HTTP client, closed with
// the test.
func newModel(t *testing.T, srv *httptest.Server, idle time.Duration) *llm.OpenAI {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL:     srv.URL + "/v1",
		APIKey:      "test-key",
		IdleTimeout: idle,
		HTTPClient:  &http.Client{Transport: tr},
	})
}

// wait returns the next request the fake finished.
func (b *bundle) wait(t *testing.T) fakellm.Request {
	t.Helper()
	select {
	case r := <-b.done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the fake did not finish a request within 5s")
		return fakellm.Request{}
	}
}

func user(text string) llm.Request {
	return llm.Request{Model: "fake-1", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, text)}}
}

// callParts returns the tool call parts of an assistant message.
func callParts(calls ...llm.ToolCall) []llm.Part {
	out := make([]llm.Part, len(calls))
	for i, c := range calls {
		out[i] = llm.Part{Type: llm.PartToolCall, Call: c}
	}
	return out
}

func asError(t *testing.T, err error) *llm.Error {
	t.Helper()
	var e *llm.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *llm.Error", err, err)
	}
	return e
}

func TestOpenAIText(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var deltas []string
	resp, err := b.model.Stream(t.Context(), user("hello\n/say hello world"), func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "hello world" || resp.FinishReason != llm.FinishStop || len(resp.ToolCalls) != 0 {
		t.Fatalf("response = %+v", resp)
	}
	if !slices.Equal(deltas, []string{"hello world"}) {
		t.Fatalf("deltas = %q", deltas)
	}
	// One message of 23 bytes: prompt 23/4+1 = 6, no cache; "hello world"
	// is 11 bytes: completion 11/4+1 = 3, reasoning 3/2 = 1.
	want := llm.Usage{InputTokens: 6, OutputTokens: 3, CachedInputTokens: 0, ReasoningTokens: 1}
	if resp.Usage != want {
		t.Fatalf("usage = %+v, want %+v", resp.Usage, want)
	}
	if r := b.wait(t); !r.Completed || r.Model != "fake-1" || !r.Stream || r.Text != "hello world" {
		t.Fatalf("fake record = %+v", r)
	}
}

func TestOpenAIDefaultAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	resp, err := b.model.Stream(t.Context(), user("no directives here"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "ok" || resp.FinishReason != llm.FinishStop {
		t.Fatalf("response = %+v", resp)
	}
}

func TestOpenAIStreamedDeltas(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	tests := []struct {
		prompt string
		want   []string
	}{
		{"/stream 5 1", []string{"tok1", " tok2", " tok3", " tok4", " tok5"}},
		{"/say abcdefghij\n/stream 3 0", []string{"abcd", "efg", "hij"}},
		{"/say héllo\n/stream 2 0", []string{"hél", "lo"}},
		{"/say ab\n/stream 4 0", []string{"a", "b"}},
	}
	for _, tt := range tests {
		var deltas []string
		resp, err := b.model.Stream(t.Context(), user(tt.prompt), func(s string) { deltas = append(deltas, s) })
		if err != nil {
			t.Fatalf("%q: %v", tt.prompt, err)
		}
		if !slices.Equal(deltas, tt.want) {
			t.Errorf("%q: deltas = %q, want %q", tt.prompt, deltas, tt.want)
		}
		if resp.Text != strings.Join(tt.want, "") {
			t.Errorf("%q: text = %q", tt.prompt, resp.Text)
		}
	}
}

func TestOpenAIToolSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	prompt := strings.Join([]string{
		"What is the weather in Paris, and the time?",
		`/call get_weather {"city":"Paris"}`,
		"/call get_time",
		"/next",
		`/call lookup {"q":"x y"}`,
		"/say It is sunny.",
	}, "\n")
	req := llm.Request{
		Model: "fake-1",
		Messages: []llm.Message{
			llm.TextMessage(llm.RoleSystem, "You are terse."),
			llm.TextMessage(llm.RoleUser, prompt),
		},
		Tools: []llm.ToolSpec{
			{Name: "get_weather", Description: "Weather now", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
			{Name: "get_time", Parameters: json.RawMessage(`{"type":"object"}`)},
			{Name: "lookup"},
		},
	}

	// Step 0: the first group, two calls in parallel.
	resp, err := b.model.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "call_0_0", Name: "get_weather", Arguments: `{"city":"Paris"}`},
		{ID: "call_0_1", Name: "get_time", Arguments: `{}`},
	}
	if resp.FinishReason != llm.FinishToolCalls || resp.Text != "" || !slices.Equal(resp.ToolCalls, want) {
		t.Fatalf("step 0 = %+v", resp)
	}
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: callParts(resp.ToolCalls...)},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("call_0_0", `{"sky":"clear"}`), llm.ToolResult("call_0_1", `"12:00"`)}},
	)

	// Step 1: the group after /next.
	resp, err = b.model.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = []llm.ToolCall{{ID: "call_1_0", Name: "lookup", Arguments: `{"q":"x y"}`}}
	if resp.FinishReason != llm.FinishToolCalls || !slices.Equal(resp.ToolCalls, want) {
		t.Fatalf("step 1 = %+v", resp)
	}
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: append([]llm.Part{llm.Text("Looking it up.")}, callParts(resp.ToolCalls...)...)},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("call_1_0", "found")}},
	)

	// Step 2: the groups ran out, so the final answer.
	resp, err = b.model.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.FinishReason != llm.FinishStop || resp.Text != "It is sunny." || len(resp.ToolCalls) != 0 {
		t.Fatalf("step 2 = %+v", resp)
	}

	var steps []int
	var total llm.Usage
	for range 3 {
		r := b.wait(t)
		steps = append(steps, r.Step)
		total = total.Add(llm.Usage{
			InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens,
			CachedInputTokens: r.Usage.CachedTokens, ReasoningTokens: r.Usage.ReasoningTokens,
		})
	}
	if !slices.Equal(steps, []int{0, 1, 2}) {
		t.Fatalf("fake steps = %v", steps)
	}
	if got := b.fake.UsageTotal(); got.PromptTokens != total.InputTokens || got.CachedTokens != total.CachedInputTokens {
		t.Fatalf("UsageTotal = %+v, records sum to %+v", got, total)
	}
	if b.fake.Calls() != 3 {
		t.Fatalf("calls = %d, want 3", b.fake.Calls())
	}
}

func TestOpenAIUsageWithCache(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	req := llm.Request{Model: "fake-1", Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, "You are terse."),         // 14 bytes
		llm.TextMessage(llm.RoleUser, "/say the quick brown fox"), // 24 bytes
	}}
	resp, err := b.model.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	// prompt 38/4+1 = 10, cached 10/2 = 5 (two messages); completion
	// "the quick brown fox" 19/4+1 = 5, reasoning 5/2 = 2.
	want := llm.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 5, ReasoningTokens: 2}
	if resp.Usage != want {
		t.Fatalf("usage = %+v, want %+v", resp.Usage, want)
	}
	r := b.wait(t)
	if !r.UsageReported || r.Usage != (fakellm.Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 5, ReasoningTokens: 2}) {
		t.Fatalf("fake record = %+v", r)
	}
}

func TestOpenAIFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		prompt     string
		fault      string
		kind       llm.ErrorKind
		status     int
		retryAfter time.Duration
	}{
		{"429", "/fault 429\n/say fine", "429", llm.KindRateLimited, 429, time.Second},
		{"500", "/fault 500\n/say fine", "500", llm.KindServer, 500, 0},
		{"hang", "/fault hang\n/say fine", "hang", llm.KindIdle, 200, 0},
		{"truncate text", "/fault truncate\n/say fine", "truncate", llm.KindConnection, 200, 0},
		{"truncate tool call", "/fault truncate\n/call write_file {\"path\":\"a.txt\",\"body\":\"hello\"}\n/say fine", "truncate", llm.KindConnection, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 300*time.Millisecond)
			var deltas []string
			resp, err := b.model.Stream(t.Context(), user(tt.prompt), func(s string) { deltas = append(deltas, s) })
			if err == nil {
				t.Fatalf("no error; response %+v", resp)
			}
			t.Logf("first attempt: %v", err)
			e := asError(t, err)
			if e.Kind != tt.kind || e.Status != tt.status || e.RetryAfter != tt.retryAfter {
				t.Fatalf("error = %+v (%v), want kind %s status %d retry-after %s", e, e, tt.kind, tt.status, tt.retryAfter)
			}
			if !llm.IsRetryable(err) {
				t.Fatalf("%v is not retryable", err)
			}
			if len(resp.ToolCalls) != 0 || resp.Text != "" {
				t.Fatalf("a failed stream returned a partial response %+v", resp)
			}
			first := b.wait(t)
			if first.Fault != tt.fault || first.Completed {
				t.Fatalf("fake record of the failure = %+v", first)
			}
			if tt.kind == llm.KindIdle && !first.Cancelled {
				t.Fatalf("the hung request was not cancelled: %+v", first)
			}

			// The same request again: the fault fired already, so it succeeds.
			resp, err = b.model.Stream(t.Context(), user(tt.prompt), nil)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			second := b.wait(t)
			if second.Fault != "" || !second.Completed {
				t.Fatalf("fake record of the retry = %+v", second)
			}
			if strings.Contains(tt.prompt, "/call") {
				want := []llm.ToolCall{{ID: "call_0_0", Name: "write_file", Arguments: `{"path":"a.txt","body":"hello"}`}}
				if !slices.Equal(resp.ToolCalls, want) {
					t.Fatalf("retry tool calls = %+v", resp.ToolCalls)
				}
			} else if resp.Text != "fine" {
				t.Fatalf("retry text = %q", resp.Text)
			}
			if b.fake.Calls() != 2 {
				t.Fatalf("calls = %d, want 2", b.fake.Calls())
			}
		})
	}
}

func TestOpenAIFaultAtStep(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	req := user("/call a\n/fault 500@1\n/say done")
	if _, err := b.model.Stream(t.Context(), req, nil); err != nil {
		t.Fatalf("step 0 should not fail: %v", err)
	}
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Parts: callParts(llm.ToolCall{ID: "call_0_0", Name: "a", Arguments: "{}"})},
		llm.Message{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("call_0_0", "x")}})
	_, err := b.model.Stream(t.Context(), req, nil)
	if e := asError(t, err); e.Kind != llm.KindServer {
		t.Fatalf("step 1: %v", err)
	}
	resp, err := b.model.Stream(t.Context(), req, nil)
	if err != nil || resp.Text != "done" {
		t.Fatalf("step 1 retry: %+v, %v", resp, err)
	}
}

func TestOpenAICancelDuringStream(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	cause := errors.New("user cancelled the run")
	var deltas int
	start := time.Now()
	_, err := b.model.Stream(ctx, user("/stream 50 100"), func(string) {
		deltas++
		if deltas == 2 {
			cancel(cause)
		}
	})
	elapsed := time.Since(start)
	e := asError(t, err)
	if e.Kind != llm.KindCancelled || !errors.Is(err, cause) || llm.IsRetryable(err) {
		t.Fatalf("error = %v (kind %s)", err, e.Kind)
	}
	if deltas != 2 {
		t.Fatalf("deltas after cancel: got %d in total, want 2", deltas)
	}
	// 50 chunks 100ms apart would take 5s.
	if elapsed > 2*time.Second {
		t.Fatalf("Stream returned after %s", elapsed)
	}
	r := b.wait(t)
	if !r.Cancelled || r.Completed || r.UsageReported {
		t.Fatalf("fake record = %+v", r)
	}
	if b.fake.Cancelled() != 1 || b.fake.UsageTotal() != (fakellm.Usage{}) {
		t.Fatalf("fake: cancelled %d, usage %+v", b.fake.Cancelled(), b.fake.UsageTotal())
	}
}

func TestOpenAICancelledBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.model.Stream(ctx, user("hi"), nil)
	if e := asError(t, err); e.Kind != llm.KindCancelled || !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v", err)
	}
}

// statusServer answers every request with status, headers and body.
func statusServer(t *testing.T, status int, header map[string]string, body string) *llm.OpenAI {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	return newModel(t, srv, 0)
}

func TestOpenAIStatusClassification(t *testing.T) {
	t.Parallel()
	jsonCT := map[string]string{"Content-Type": "application/json"}
	// A date far enough ahead that a subtest that starts late, on a busy
	// machine, still reads more than its lower bound.
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		kind       llm.ErrorKind
		retryAfter time.Duration // exact, or with retryAfterMin a lower bound
		minRetry   time.Duration
	}{
		{"bad request", 400, jsonCT, `{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","code":null}}`, llm.KindBadRequest, 0, 0},
		{"unauthorized", 401, jsonCT, `{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}`, llm.KindAuth, 0, 0},
		{"forbidden", 403, jsonCT, `{"error":{"message":"no access","type":"invalid_request_error","code":null}}`, llm.KindAuth, 0, 0},
		{"context code", 400, jsonCT, `{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}`, llm.KindContextOverflow, 0, 0},
		{"context message", 400, jsonCT, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":null}}`, llm.KindContextOverflow, 0, 0},
		{"not found", 404, jsonCT, `{"error":{"message":"The model does not exist","type":"invalid_request_error","code":"model_not_found"}}`, llm.KindBadRequest, 0, 0},
		{"bad gateway html", 502, map[string]string{"Content-Type": "text/html"}, `<html>502 Bad Gateway</html>`, llm.KindServer, 0, 0},
		{"unavailable retry-after", 503, map[string]string{"Content-Type": "application/json", "Retry-After": "2"}, `{"error":{"message":"overloaded","type":"server_error","code":null}}`, llm.KindServer, 2 * time.Second, 0},
		{"429 retry-after-ms", 429, map[string]string{"Content-Type": "application/json", "Retry-After-Ms": "1500", "Retry-After": "9"}, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`, llm.KindRateLimited, 1500 * time.Millisecond, 0},
		{"429 http date", 429, map[string]string{"Retry-After": date}, ``, llm.KindRateLimited, 0, time.Second},
		{"429 no header", 429, jsonCT, `{"error":{"message":"slow down","type":"requests","code":null}}`, llm.KindRateLimited, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := statusServer(t, tt.status, tt.header, tt.body)
			_, err := m.Stream(t.Context(), user("hi"), nil)
			e := asError(t, err)
			if e.Kind != tt.kind || e.Status != tt.status {
				t.Fatalf("error = %v: kind %s status %d, want %s %d", err, e.Kind, e.Status, tt.kind, tt.status)
			}
			if tt.minRetry > 0 {
				if e.RetryAfter < tt.minRetry || e.RetryAfter > 30*time.Second {
					t.Fatalf("RetryAfter = %s, want in [%s, 30s]", e.RetryAfter, tt.minRetry)
				}
			} else if e.RetryAfter != tt.retryAfter {
				t.Fatalf("RetryAfter = %s, want %s", e.RetryAfter, tt.retryAfter)
			}
			wantRetry := tt.kind == llm.KindServer || tt.kind == llm.KindRateLimited
			if llm.IsRetryable(err) != wantRetry {
				t.Fatalf("IsRetryable = %v, want %v", !wantRetry, wantRetry)
			}
		})
	}
}

func TestOpenAIBrokenStreams(t *testing.T) {
	t.Parallel()
	const textChunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"},"finish_reason":null}]}` + "\n\n"
	const toolChunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"rm","arguments":"{\"pa"}}]},"finish_reason":null}]}` + "\n\n"
	sse := map[string]string{"Content-Type": "text/event-stream"}
	tests := []struct {
		name string
		body string
		kind llm.ErrorKind
	}{
		// The body ends cleanly, but no chunk had a finish_reason.
		{"clean end without finish", textChunk, llm.KindConnection},
		{"done without finish", textChunk + "data: [DONE]\n\n", llm.KindConnection},
		{"tool call cut", toolChunk + "data: [DONE]\n\n", llm.KindConnection},
		{"error event", textChunk + `data: {"error":{"message":"upstream failed","type":"server_error"}}` + "\n\n", llm.KindServer},
		{"overflow event", `data: {"error":{"message":"too long","code":"context_length_exceeded"}}` + "\n\n", llm.KindContextOverflow},
		{"error event of a string", textChunk + `data: {"error":"upstream failed"}` + "\n\n", llm.KindServer},
		{"garbage chunk", "data: {not json\n\n", llm.KindServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := statusServer(t, 200, sse, tt.body)
			resp, err := m.Stream(t.Context(), user("hi"), nil)
			if err == nil {
				t.Fatalf("no error; response %+v", resp)
			}
			if e := asError(t, err); e.Kind != tt.kind {
				t.Fatalf("error = %v, kind %s, want %s", err, e.Kind, tt.kind)
			}
		})
	}
}

func TestOpenAIConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	m := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: "http://" + addr + "/v1", APIKey: "k", HTTPClient: &http.Client{Transport: tr}})
	_, err = m.Stream(t.Context(), user("hi"), nil)
	if e := asError(t, err); e.Kind != llm.KindConnection || !llm.IsRetryable(err) {
		t.Fatalf("error = %v, kind %s", err, e.Kind)
	}
}

func TestOpenAIIdleBeforeHeaders(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	m := newModel(t, srv, 100*time.Millisecond)
	_, err := m.Stream(t.Context(), user("hi"), nil)
	if e := asError(t, err); e.Kind != llm.KindIdle {
		t.Fatalf("error = %v, kind %s", err, e.Kind)
	}
}

func TestOpenAIBadToolSchema(t *testing.T) {
	t.Parallel()
	m := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1", APIKey: "k"})
	req := user("hi")
	req.Tools = []llm.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{"type":`)}}
	_, err := m.Stream(t.Context(), req, nil)
	if e := asError(t, err); e.Kind != llm.KindBadRequest {
		t.Fatalf("error = %v", err)
	}
}

// A compatible server that sends a field with another JSON type than the
// API's (numbers as strings, a null choice list) still gets its answer read.
func TestOpenAILooseChunkTypes(t *testing.T) {
	t.Parallel()
	body := `data: {"choices":[{"index":"0","delta":{"content":"for","tool_calls":null},"finish_reason":null}],"error":null}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"ty-two"},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"choices":null,"usage":{"prompt_tokens":"7","completion_tokens":3,"prompt_tokens_details":null}}` + "\n\n" +
		"data: [DONE]\n\n"
	m := statusServer(t, 200, map[string]string{"Content-Type": "text/event-stream"}, body)
	var deltas []string
	resp, err := m.Stream(t.Context(), user("hi"), func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "forty-two" || resp.FinishReason != llm.FinishStop || !slices.Equal(deltas, []string{"for", "ty-two"}) {
		t.Fatalf("response %+v, deltas %q", resp, deltas)
	}
	if resp.Usage.OutputTokens != 3 {
		t.Fatalf("usage %+v", resp.Usage)
	}
}

// The request is a streaming Chat Completions request with the key as a
// bearer token, and each tool's schema is sent as the tool gave it.
func TestOpenAIRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		path, auth string
		body       []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, r.Header.Get("Authorization"), body}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	m := newModel(t, srv, 0)
	req := user("hi")
	req.Tools = []llm.ToolSpec{
		{Name: "get_weather", Description: "Weather now", Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}}`)},
		{Name: "lookup"},
	}
	if _, err := m.Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.path != "/v1/chat/completions" || s.auth != "Bearer test-key" {
		t.Fatalf("path %q, authorization %q", s.path, s.auth)
	}
	var body struct {
		Model         string            `json:"model"`
		Stream        bool              `json:"stream"`
		StreamOptions map[string]bool   `json:"stream_options"`
		Messages      []json.RawMessage `json:"messages"`
		Tools         []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(s.body, &body); err != nil {
		t.Fatalf("body %s: %v", s.body, err)
	}
	if body.Model != "fake-1" || !body.Stream || !body.StreamOptions["include_usage"] || len(body.Messages) != 1 {
		t.Fatalf("body %s", s.body)
	}
	want := []string{
		`{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`,
		`{"type":"function","function":{"name":"lookup"}}`,
	}
	if len(body.Tools) != len(want) {
		t.Fatalf("tools %s", s.body)
	}
	for i, w := range want {
		if string(body.Tools[i]) != w {
			t.Errorf("tool %d = %s, want %s", i, body.Tools[i], w)
		}
	}
}

// The adapter's own HTTP client keeps a connection per concurrent caller,
// and reads each response to its end: 5 rounds of 8 concurrent calls open 8
// connections, not the 32 of net/http's default transport, which keeps 2
// and opens 6 anew each round, nor the 40 of a body closed at [DONE].
func TestOpenAIReusesConnections(t *testing.T) {
	t.Parallel()
	var opened atomic.Int64
	fake := fakellm.New()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.ServeHTTP(w, r)
		// The body's last chunk comes a little after [DONE]: a client
		// that closed the body at [DONE] could not reuse the connection.
		time.Sleep(5 * time.Millisecond)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	m := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k"})
	defer m.CloseIdleConnections()
	const callers, rounds = 8, 5
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for range callers {
			wg.Go(func() {
				if _, err := m.Stream(t.Context(), user("hi\n/stream 3 1"), nil); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// A connection goes back to the pool just after its response ends.
		time.Sleep(20 * time.Millisecond)
	}
	// A little slack: a call may start before a connection is back.
	if n := opened.Load(); n > 2*callers {
		t.Fatalf("%d connections opened for %d rounds of %d concurrent calls", n, rounds, callers)
	}
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A request goes out in one write, headers and body together: two writes
// are two packets on the wire, and twice the system calls.
func TestOpenAIRequestIsOneWrite(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(fakellm.New())
	var writes atomic.Int64
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{Conn: c, writes: &writes}, err
	}}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	m := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k", HTTPClient: &http.Client{Transport: tr}})
	req := user("hi")
	req.Tools = []llm.ToolSpec{{Name: "calculator", Description: "Evaluates an expression.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)}}
	const calls = 5
	for range calls {
		if _, err := m.Stream(t.Context(), req, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != calls {
		t.Fatalf("%d writes for %d requests", n, calls)
	}
}

// A finish_reason is read in the port's terms: the API's values as they
// are, its deprecated function_call as tool calls, and one it does not
// document (a compatible server's own) as unknown, the answer kept.
func TestOpenAIFinishReasons(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]llm.FinishReason{
		"stop": llm.FinishStop, "length": llm.FinishLength, "content_filter": llm.FinishContentFilter,
		"tool_calls": llm.FinishToolCalls, "function_call": llm.FinishToolCalls, "eos": llm.FinishUnknown,
	} {
		body := `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"` + raw + `"}]}` + "\n\ndata: [DONE]\n\n"
		m := statusServer(t, 200, map[string]string{"Content-Type": "text/event-stream"}, body)
		resp, err := m.Stream(t.Context(), user("hi"), nil)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if resp.FinishReason != want || resp.Text != "hi" {
			t.Errorf("%s: response %+v, want finish %q", raw, resp, want)
		}
	}
}
