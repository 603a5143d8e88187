package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// otlpReceiver is an OTLP/HTTP trace receiver, as a collector runs one:
// protobuf ExportTraceServiceRequests on POST /v1/traces.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// trace returns the spans of trace id received so far.
func (o *otlpReceiver) trace(id []byte) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if bytes.Equal(s.TraceId, id) {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans polls until trace id has spans that satisfy done.
func (o *otlpReceiver) waitSpans(t *testing.T, id []byte, done func([]*tracepb.Span) bool) []*tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s := o.trace(id); done(s) {
			return s
		}
	}
	var names []string
	for _, s := range o.trace(id) {
		names = append(names, s.Name)
	}
	t.Fatalf("the trace's spans never became complete: %v", names)
	return nil
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

func named(spans []*tracepb.Span, prefix string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// spanList is a trace as lines: name, span id, parent, some attributes.
func spanList(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s span=%x parent=%x", s.Name, s.SpanId, s.ParentSpanId)
		for _, a := range s.Attributes {
			if strings.HasPrefix(a.Key, "gen_ai.") || strings.HasPrefix(a.Key, "agentd.") || a.Key == "http.route" {
				fmt.Fprintf(&b, " %s=%s", a.Key, strings.Trim(a.Value.String(), " "))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestTraces: a tool-calling run's trace, exported over OTLP to a
// receiver in this process: the caller's traceparent is the parent of the
// POST /runs span, the run's execution (invoke_agent) is its child, each
// model call (chat) and tool attempt (execute_tool) a child of that, with
// the GenAI attributes; the webhook tool gets the attempt's traceparent;
// and no message content is recorded.
func TestTraces(t *testing.T) {
	t.Parallel()
	rec := &otlpReceiver{}
	collector := httptest.NewServer(rec)
	defer collector.Close()
	var hookMu sync.Mutex
	var hookParent string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookMu.Lock()
		hookParent = r.Header.Get("traceparent")
		hookMu.Unlock()
		io.WriteString(w, `{"found": true}`)
	}))
	defer hook.Close()
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[{"name":"lookup","description":"looks up","url":%q,"effect":"read_only"}]}`, hook.URL)),
		withEnv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL), withEnv("OTEL_BSP_SCHEDULE_DELAY", "100"))
	// The caller's trace context, as a traced caller sends it.
	c := client.New(s.URL, client.WithHeader("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"))
	run, err := c.CreateRun(testCtx(t), client.CreateRun{Input: "/call lookup {\"q\":\"x\"}\n/call calculator {\"expression\":\"6*7\"}\n/say done"})
	if err != nil {
		t.Fatal(err)
	}
	runEnded(t, s.Client, run.ID)
	id, _ := hex.DecodeString(traceID)
	spans := rec.waitSpans(t, id, func(s []*tracepb.Span) bool {
		return len(named(s, "invoke_agent")) == 1 && len(named(s, "chat")) == 2 && len(named(s, "execute_tool")) == 2
	})
	t.Logf("the run's trace:\n%s", spanList(spans))
	post := named(spans, "POST /runs")
	if len(post) != 1 || hex.EncodeToString(post[0].ParentSpanId) != "00f067aa0ba902b7" {
		t.Fatalf("the POST /runs span is not the caller's child:\n%s", spanList(spans))
	}
	agent := named(spans, "invoke_agent")[0]
	if !bytes.Equal(agent.ParentSpanId, post[0].SpanId) || attr(agent, "agentd.run_id").GetStringValue() != run.ID ||
		attr(agent, "gen_ai.operation.name").GetStringValue() != "invoke_agent" || attr(agent, "agentd.recovered").GetBoolValue() {
		t.Fatalf("invoke_agent:\n%s", spanList(spans))
	}
	for _, c := range named(spans, "chat") {
		if !bytes.Equal(c.ParentSpanId, agent.SpanId) || attr(c, "gen_ai.request.model").GetStringValue() != "fake" ||
			attr(c, "gen_ai.usage.input_tokens").GetIntValue() <= 0 || attr(c, "gen_ai.response.finish_reasons") == nil ||
			attr(c, "agentd.step") == nil || attr(c, "gen_ai.input.messages") != nil {
			t.Fatalf("a chat span:\n%s", spanList([]*tracepb.Span{c}))
		}
	}
	tools := map[string]*tracepb.Span{}
	for _, s := range named(spans, "execute_tool") {
		if !bytes.Equal(s.ParentSpanId, agent.SpanId) || attr(s, "agentd.attempt").GetIntValue() != 1 ||
			attr(s, "agentd.effect").GetStringValue() != "read_only" || attr(s, "gen_ai.tool.call.id").GetStringValue() == "" {
			t.Fatalf("an execute_tool span:\n%s", spanList([]*tracepb.Span{s}))
		}
		tools[attr(s, "gen_ai.tool.name").GetStringValue()] = s
	}
	if tools["lookup"] == nil || tools["calculator"] == nil {
		t.Fatalf("execute_tool spans: %v", tools)
	}
	hookMu.Lock()
	got := hookParent
	hookMu.Unlock()
	if want := fmt.Sprintf("00-%s-%x-01", traceID, tools["lookup"].SpanId); got != want {
		t.Fatalf("the webhook got traceparent %q, want %q", got, want)
	}
	s.Stop()
}

// TestTraceOfARunTakenOver: a server process is killed mid-run; the one
// that takes the run over exports an execution span of its own, in the
// same trace, under the same POST /runs span, marked recovered.
func TestTraceOfARunTakenOver(t *testing.T) {
	t.Parallel()
	rec := &otlpReceiver{}
	collector := httptest.NewServer(rec)
	defer collector.Close()
	env := []string{"DATABASE_URL=" + persisttest.NewDatabase(t), "AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
	first := startChild(t, env)
	run, err := client.New("http://"+first.addr, client.WithHeader("traceparent", "00-"+strings.Repeat("ab", 16)+"-00f067aa0ba902b7-01")).
		CreateRun(testCtx(t), client.CreateRun{Input: "/stream 60 40"})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := hex.DecodeString(strings.Repeat("ab", 16))
	// The POST's span is exported before the kill.
	rec.waitSpans(t, id, func(s []*tracepb.Span) bool { return len(named(s, "POST /runs")) == 1 })
	time.Sleep(300 * time.Millisecond) // mid-answer
	first.kill(t)
	second := startChild(t, env)
	runEnded(t, client.New("http://"+second.addr), run.ID)
	spans := rec.waitSpans(t, id, func(s []*tracepb.Span) bool {
		for _, a := range named(s, "invoke_agent") {
			if attr(a, "agentd.recovered").GetBoolValue() {
				return len(named(s, "chat")) >= 1
			}
		}
		return false
	})
	t.Logf("the trace of the run taken over:\n%s", spanList(spans))
	post := named(spans, "POST /runs")[0]
	for _, a := range named(spans, "invoke_agent") {
		if !bytes.Equal(a.ParentSpanId, post.SpanId) || attr(a, "agentd.run_id").GetStringValue() != run.ID {
			t.Fatalf("an execution span outside the run's trace:\n%s", spanList(spans))
		}
		if attr(a, "agentd.recovered").GetBoolValue() && attr(a, "agentd.epoch").GetIntValue() < 2 {
			t.Fatalf("the recovered execution has epoch %d", attr(a, "agentd.epoch").GetIntValue())
		}
	}
}

// TestTraceContent: with AGENTD_TRACE_CONTENT=true, model calls carry
// their messages and tool attempts their arguments and results.
func TestTraceContent(t *testing.T) {
	t.Parallel()
	rec := &otlpReceiver{}
	collector := httptest.NewServer(rec)
	defer collector.Close()
	srv := startChild(t, []string{"DATABASE_URL=" + persisttest.NewDatabase(t), "AGENTD_TRACE_CONTENT=true",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"})
	trace := strings.Repeat("cd", 16)
	c := client.New("http://"+srv.addr, client.WithHeader("traceparent", "00-"+trace+"-00f067aa0ba902b7-01"))
	if _, err := c.CreateRun(testCtx(t), client.CreateRun{Input: "/call calculator {\"expression\":\"6*7\"}\n/say secret answer"}); err != nil {
		t.Fatal(err)
	}
	id, _ := hex.DecodeString(trace)
	spans := rec.waitSpans(t, id, func(s []*tracepb.Span) bool { return len(named(s, "chat")) == 2 && len(named(s, "execute_tool")) == 1 })
	tool := named(spans, "execute_tool")[0]
	if attr(tool, "gen_ai.tool.call.arguments").GetStringValue() != `{"expression": "6*7"}` &&
		attr(tool, "gen_ai.tool.call.arguments").GetStringValue() != `{"expression":"6*7"}` ||
		!strings.Contains(attr(tool, "gen_ai.tool.call.result").GetStringValue(), "42") {
		t.Fatalf("the tool span's content:\n%s", spanList([]*tracepb.Span{tool}))
	}
	var saw bool
	for _, c := range named(spans, "chat") {
		saw = saw || strings.Contains(attr(c, "gen_ai.output.messages").GetStringValue(), "secret answer")
		if !strings.Contains(attr(c, "gen_ai.input.messages").GetStringValue(), "/say secret answer") {
			t.Fatalf("a chat span without its input messages:\n%s", spanList([]*tracepb.Span{c}))
		}
	}
	if !saw {
		t.Fatal("no chat span carries the answer")
	}
}

// TestTraceOfAFallback: a step whose model's endpoint refuses connections
// falls back to the next model of its chain; the chat span of the model
// that answered names the model it fell back from, and why.
func TestTraceOfAFallback(t *testing.T) {
	t.Parallel()
	rec := &otlpReceiver{}
	collector := httptest.NewServer(rec)
	defer collector.Close()
	models := filepath.Join(t.TempDir(), "models.json")
	os.WriteFile(models, []byte(`{"models": {"down": {"context_window": 0, "provider": "openai",
		"base_url": "http://127.0.0.1:1/v1", "model": "fake"}}}`), 0o600)
	// A process of its own: the tracer is the process's, and the other
	// traced servers export to their own collectors.
	srv := startChild(t, []string{"DATABASE_URL=" + persisttest.NewDatabase(t), "AGENTD_MODELS_FILE=" + models,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"})
	trace := strings.Repeat("ef", 16)
	c := client.New("http://"+srv.addr, client.WithHeader("traceparent", "00-"+trace+"-00f067aa0ba902b7-01"))
	run, err := c.CreateRun(testCtx(t), client.CreateRun{Models: []string{"down", "fake"}, Input: "/say hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r := runEnded(t, client.New("http://"+srv.addr), run.ID); r.OutputText == nil || *r.OutputText != "hi" {
		t.Fatalf("the run answered %v", r.OutputText)
	}
	id, _ := hex.DecodeString(trace)
	spans := rec.waitSpans(t, id, func(s []*tracepb.Span) bool { return len(named(s, "chat")) >= 5 })
	var answered *tracepb.Span
	for _, c := range named(spans, "chat") {
		if attr(c, "gen_ai.request.model").GetStringValue() == "fake" {
			answered = c
		}
	}
	if answered == nil || attr(answered, "agentd.fallback_from").GetStringValue() != "down" ||
		attr(answered, "agentd.fallback_reason").GetStringValue() != "connection" ||
		attr(answered, "gen_ai.provider.name").GetStringValue() != "openai" {
		t.Fatalf("the chat spans:\n%s", spanList(named(spans, "chat")))
	}
}
