package fakeanthropic_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/llm/fakeanthropic"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// post sends body to a new fake and returns the status and the body of
// its answer.
func post(t *testing.T, fake *fakeanthropic.Server, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

func start(t *testing.T) (*fakeanthropic.Server, string) {
	t.Helper()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return fake, srv.URL
}

// TestRefusals: what the real API refuses, the fake refuses with a 400
// invalid_request_error that says what is wrong.
func TestRefusals(t *testing.T) {
	t.Parallel()
	fake, url := start(t)
	cc := `"cache_control":{"type":"ephemeral"}`
	tests := []struct {
		name, body, says string
	}{
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens: Field required"},
		{"first not user", `{"model":"m","max_tokens":10,"messages":[{"role":"assistant","content":"hi"}]}`, `first message must use the "user" role`},
		{"same role twice", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, "roles must alternate"},
		{"empty text", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "text content blocks must be non-empty"},
		{"stray result", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`,
			"unexpected `tool_use_id` found in `tool_result` blocks: x"},
		{"unanswered use", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"a"},
			{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"f","input":{}}]},{"role":"user","content":"b"}]}`,
			"`tool_use` ids were found without `tool_result` blocks immediately after: u1"},
		{"five breakpoints", `{"model":"m","max_tokens":10,"system":[{"type":"text","text":"s",` + cc + `}],"messages":[{"role":"user","content":[` +
			strings.Repeat(`{"type":"text","text":"t",`+cc+`},`, 3) + `{"type":"text","text":"t",` + cc + `}]}]}`,
			"A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"small budget", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":10},"messages":[{"role":"user","content":"a"}]}`,
			"budget_tokens: Input should be greater than or equal to 1024"},
		{"forged thinking", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"a"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"forged"},{"type":"text","text":"b"}]},{"role":"user","content":"c"}]}`,
			"Invalid `signature` in `thinking` block"},
		{"tool use without its thinking", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"a"},
			{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"f","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"r"}]}]}`,
			"a final `assistant` message must start with a thinking block"},
		{"too long", `{"model":"fake-1k","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`,
			"prompt is too long: "},
	}
	for _, tt := range tests {
		status, body := post(t, fake, url, tt.body)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || status != http.StatusBadRequest || e.Type != "error" ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tt.says) {
			t.Errorf("%s: %d %s", tt.name, status, body)
		}
	}
	if n := fake.Calls(); n != len(tests) {
		t.Fatalf("Calls() = %d", n)
	}
}

// TestNonStreaming: without "stream", the answer is one message object,
// its tool use's input decoded.
func TestNonStreaming(t *testing.T) {
	t.Parallel()
	fake, url := start(t)
	status, body := post(t, fake, url, `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"/call f {\"a\":1}"}]}`)
	var msg struct {
		Type       string `json:"type"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, ID, Name string
			Input          map[string]any
		}
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || status != 200 || msg.StopReason != "tool_use" || len(msg.Content) != 1 ||
		msg.Content[0].ID != "toolu_0_0" || msg.Content[0].Input["a"] != 1.0 || msg.Usage.OutputTokens == 0 {
		t.Fatalf("%d %s", status, body)
	}
}

// TestCacheAccounting: a breakpoint caches its prefix; a later request
// that repeats it, with a breakpoint at most Lookback blocks after it,
// reads it, and writes what follows up to its last breakpoint.
func TestCacheAccounting(t *testing.T) {
	t.Parallel()
	fake, url := start(t)
	sys := `"system":[{"type":"text","text":"` + strings.Repeat("s", 4000) + `","cache_control":{"type":"ephemeral"}}]`
	first := `{"model":"m","max_tokens":100,` + sys + `,"messages":[{"role":"user","content":"/say a"}]}`
	if status, body := post(t, fake, url, first); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	u := fake.Requests()[0].Usage
	if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens < 1000 || u.InputTokens == 0 {
		t.Fatalf("first: %+v", u)
	}
	second := `{"model":"m","max_tokens":100,` + sys + `,"messages":[{"role":"user","content":"/say a"},{"role":"assistant","content":"a"},` +
		`{"role":"user","content":[{"type":"text","text":"/say b","cache_control":{"type":"ephemeral"}}]}]}`
	if status, body := post(t, fake, url, second); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	v := fake.Requests()[1].Usage
	if v.CacheReadInputTokens != u.CacheCreationInputTokens || v.CacheCreationInputTokens == 0 || v.InputTokens != 0 {
		t.Fatalf("second: %+v, after %+v", v, u)
	}
	// Another model has a cache of its own.
	if status, _ := post(t, fake, url, strings.Replace(first, `"m"`, `"n"`, 1)); status != 200 || fake.Requests()[2].Usage.CacheReadInputTokens != 0 {
		t.Fatalf("another model read %+v", fake.Requests()[2].Usage)
	}
	if fake.CallsFor("m") != 2 || fake.CallsFor("n") != 1 {
		t.Fatalf("calls: m %d, n %d", fake.CallsFor("m"), fake.CallsFor("n"))
	}
}
