package fakellm

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseScript(t *testing.T) {
	t.Parallel()
	sc, err := parseScript(strings.Join([]string{
		"Please do things.",
		"  /call a {\"x\":1}  ",
		"/call b",
		"/next",
		"/next",
		"/call c not json",
		"/unknown is ignored",
		"/say line one",
		"/say line two",
		"/stream 4 25",
		"/fault 500@2",
		"/fault hang",
	}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]call{{{"a", `{"x":1}`}, {"b", "{}"}}, {{"c", "not json"}}}
	if len(sc.groups) != 2 || !slices.Equal(sc.groups[0], want[0]) || !slices.Equal(sc.groups[1], want[1]) {
		t.Fatalf("groups = %+v", sc.groups)
	}
	if sc.streamN != 4 || sc.streamGap != 25*time.Millisecond {
		t.Fatalf("stream = %d %s", sc.streamN, sc.streamGap)
	}
	if got := sc.finalPieces(); !slices.Equal(got, []string{"line ", "one\n", "line", " two"}) {
		t.Fatalf("pieces = %q", got)
	}
	if sc.faultAt(2) != FaultServer || sc.faultAt(0) != FaultHang {
		t.Fatalf("faults = %+v", sc.faults)
	}

	for _, bad := range []string{"/call", "/stream 3", "/stream 0 10", "/stream 2 -1", "/fault 404", "/fault 500@x"} {
		if _, err := parseScript(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSplitRunes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		n    int
		want []string
	}{
		{"abcdefg", 3, []string{"abc", "de", "fg"}},
		{"abc", 5, []string{"a", "b", "c"}},
		{"日本語テキスト", 2, []string{"日本語テ", "キスト"}},
		{"", 3, []string{""}},
	}
	for _, tt := range tests {
		if got := splitRunes(tt.text, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("splitRunes(%q, %d) = %q, want %q", tt.text, tt.n, got, tt.want)
		}
	}
}

// post sends body to the fake and returns the response.
func post(t *testing.T, srv *httptest.Server, path, body string) *http.Response {
	t.Helper()
	res, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"model":"m1","stream":true,"stream_options":{"include_usage":true},"messages":[
		{"role":"system","content":"sys"},
		{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"/call f {\"a\":\"bc\"}\n/call g"}]}]}`
	res := post(t, srv, "/chat/completions", body)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var lines []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	if lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("last line = %q", lines[len(lines)-1])
	}
	var chunks []chunk
	for _, l := range lines[:len(lines)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &c); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		chunks = append(chunks, c)
	}
	// f: header, two argument halves; g: header, two halves; finish; usage.
	if len(chunks) != 8 {
		t.Fatalf("got %d chunks: %q", len(chunks), lines)
	}
	args := map[string]string{}
	ids := map[int]string{}
	names := map[int]string{}
	for _, c := range chunks[:6] {
		tc := c.Choices[0].Delta.ToolCalls[0]
		if tc.ID != "" {
			ids[tc.Index], names[tc.Index] = tc.ID, tc.Function.Name
		}
		args[names[tc.Index]] += tc.Function.Arguments
	}
	if ids[0] != "call_0_0" || ids[1] != "call_0_1" || args["f"] != `{"a":"bc"}` || args["g"] != "{}" {
		t.Fatalf("ids %v, args %v", ids, args)
	}
	if chunks[0].Choices[0].Delta.Role != "assistant" || chunks[0].Model != "m1" {
		t.Fatalf("first chunk = %+v", chunks[0])
	}
	if fr := chunks[6].Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Fatalf("finish chunk = %+v", chunks[6])
	}
	// Prompt: "sys" + "hi\n/call f {\"a\":\"bc\"}\n/call g" (parts joined by
	// a newline) = 3+29 bytes: 32/4+1 = 9, cached 4. Completion: "f"+`{"a":"bc"}`+"g"+"{}" = 14 bytes:
	// 14/4+1 = 4, reasoning 2.
	u := chunks[7].Usage
	if len(chunks[7].Choices) != 0 || u == nil || u.PromptTokens != 9 || u.PromptTokensDetails.CachedTokens != 4 ||
		u.CompletionTokens != 4 || u.CompletionTokensDetails.ReasoningTokens != 2 || u.TotalTokens != 13 {
		t.Fatalf("usage chunk = %+v", *u)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || !reqs[0].Completed || reqs[0].ToolCalls != 2 || reqs[0].Usage != (Usage{9, 4, 4, 2}) {
		t.Fatalf("records = %+v", reqs)
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"model":"m2","messages":[{"role":"user","content":"/call f\n/say done"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_0_0","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_0_0","content":"r"}]}`
	res := post(t, srv, "/v1/chat/completions", body)
	var c completion
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	msg := c.Choices[0].Message
	if c.Model != "m2" || c.Choices[0].FinishReason != "stop" || msg.Content == nil || *msg.Content != "done" || c.Usage == nil {
		t.Fatalf("completion = %+v", c)
	}
	if r := s.Requests()[0]; r.Step != 1 || r.Stream || !r.UsageReported || s.UsageTotal() != r.Usage {
		t.Fatalf("record = %+v", r)
	}
}

func TestFaultOncePerRequest(t *testing.T) {
	t.Parallel()
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	// The same request, spelled differently: the fault fires only once.
	a := `{"model":"m","messages":[{"role":"user","content":"/fault 429"}]}`
	b := `{ "messages": [ { "content": "/fault 429", "role": "user" } ], "model": "m" }`
	res := post(t, srv, "/v1/chat/completions", a)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("first: status %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	raw, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(raw), `"code":"rate_limit_exceeded"`) {
		t.Fatalf("error body = %s", raw)
	}
	if res := post(t, srv, "/v1/chat/completions", b); res.StatusCode != 200 {
		t.Fatalf("second: status %d", res.StatusCode)
	}
	// Another model is another request.
	if res := post(t, srv, "/v1/chat/completions", strings.Replace(a, `"m"`, `"m3"`, 1)); res.StatusCode != 429 {
		t.Fatalf("other model: status %d", res.StatusCode)
	}
	s.Reset()
	if res := post(t, srv, "/v1/chat/completions", a); res.StatusCode != 429 {
		t.Fatalf("after Reset: status %d", res.StatusCode)
	}
	if s.Calls() != 1 || len(s.Requests()) != 1 {
		t.Fatalf("after Reset: calls %d", s.Calls())
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := New(WithMaxHistory(2))
	srv := httptest.NewServer(s)
	defer srv.Close()
	tests := []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/models", "{}", 404},
		{"GET", "/v1/chat/completions", "", 405},
		{"POST", "/v1/chat/completions", "{", 400},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"/stream x 1"}]}`, 400},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != tt.status {
			t.Errorf("%s %s %q: status %d, want %d", tt.method, tt.path, tt.body, res.StatusCode, tt.status)
		}
	}
	if s.Calls() != 2 || len(s.Requests()) != 2 {
		t.Fatalf("calls %d, records %d", s.Calls(), len(s.Requests()))
	}
}

func TestV1Only(t *testing.T) {
	t.Parallel()
	s := New(WithV1Only())
	srv := httptest.NewServer(s)
	defer srv.Close()
	const body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	res := post(t, srv, "/chat/completions", body)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 404 || string(b) != `{"error":{"message":"Invalid URL (POST /chat/completions)","type":"invalid_request_error","code":null}}` {
		t.Fatalf("without /v1: %d %s", res.StatusCode, b)
	}
	if res := post(t, srv, "/v1/chat/completions", body); res.StatusCode != 200 {
		t.Fatalf("with /v1: %d", res.StatusCode)
	}
	if s.Calls() != 1 {
		t.Fatalf("calls %d, want 1", s.Calls())
	}
}

// TestEmbeddings: the embeddings endpoint answers OpenAI's shape with
// Embed's vectors, which put texts that share words near each other.
func TestEmbeddings(t *testing.T) {
	ts := httptest.NewServer(New())
	defer ts.Close()
	resp, err := http.Post(ts.URL+"/v1/embeddings", "application/json",
		strings.NewReader(`{"model":"fake-embed","input":["a trip to Lisbon","Lisbon trip","peanut allergy"],"dimensions":32}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Data) != 3 {
		t.Fatalf("%d %v %+v", resp.StatusCode, err, out)
	}
	dot := func(a, b []float32) (d float32) {
		for i := range a {
			d += a[i] * b[i]
		}
		return d
	}
	a, b, c := out.Data[0].Embedding, out.Data[1].Embedding, out.Data[2].Embedding
	if len(a) != 32 || dot(a, b) <= dot(a, c) || dot(b, b) < 0.999 || dot(b, b) > 1.001 {
		t.Fatalf("near %v, far %v, norm %v", dot(a, b), dot(a, c), dot(b, b))
	}
	if got := Embed("Lisbon trip", 32); dot(got, b) < 0.999 {
		t.Fatalf("Embed differs from the endpoint's vector")
	}
}
