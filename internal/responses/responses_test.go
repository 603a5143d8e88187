package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

const runID = "01a234dc-98f7-71a3-b8a0-100ed5226eca"

// ev builds a stored event of step with data, in its envelope.
func ev(seq int64, t agentd.EventType, step int, data string) agentd.Event {
	return agentd.Event{Seq: seq, Type: t, Data: json.RawMessage(fmt.Sprintf(
		`{"seq":%d,"type":%q,"run_id":%q,"step":%d,"at":"2026-12-01T00:00:%02dZ","data":%s}`, seq, t, runID, step, seq, data))}
}

func testRun() agentd.Run {
	return agentd.Run{ID: runID, ConversationID: "01a234dc-0000-7000-8000-000000000001", Model: "fake",
		Status: agentd.StatusCompleted, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

// answered is the log of a run that streamed an answer, had its first
// try retracted, and completed.
var answered = []agentd.Event{
	ev(1, agentd.EventRunCreated, 0, `{"conversation_id":"c","model":"fake","status":"queued"}`),
	ev(2, agentd.EventRunStarted, 0, `{"epoch":1,"worker":"w"}`),
	ev(3, agentd.EventStepStarted, 1, `{"transition":null}`),
	ev(4, agentd.EventMessageDelta, 1, `{"text":"hel"}`),
	ev(5, agentd.EventStepRetracted, 1, `{"reason":"model_retry"}`),
	ev(6, agentd.EventMessageDelta, 1, `{"text":"hello "}`),
	ev(7, agentd.EventMessageDelta, 1, `{"text":"world"}`),
	ev(8, agentd.EventMessageCompleted, 1, `{"content":[{"type":"text","text":"hello world"}],"finish_reason":"stop",
		"message_id":"m","role":"assistant","usage":{"input_tokens":10,"output_tokens":2,"cached_input_tokens":4}}`),
	ev(9, agentd.EventStepCompleted, 1, `{"finish_reason":"stop"}`),
	ev(10, agentd.EventRunCompleted, 1, `{"output_text":"hello world","reason":"completed","status":"completed"}`),
}

// sse splits a stream into its events' types and decoded data.
func sse(t *testing.T, b []byte) (types []string, data []map[string]any) {
	t.Helper()
	frames := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if len(frames) == 0 || frames[len(frames)-1] != "data: [DONE]" {
		t.Fatalf("the stream does not end with data: [DONE]: %q", b)
	}
	for _, frame := range frames[:len(frames)-1] {
		lines := strings.Split(frame, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("not an event: %q", frame)
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &d); err != nil {
			t.Fatal(err)
		}
		typ := strings.TrimPrefix(lines[0], "event: ")
		if d["type"] != typ {
			t.Fatalf("event %s has data of type %v", typ, d["type"])
		}
		types, data = append(types, typ), append(data, d)
	}
	return types, data
}

func encode(run agentd.Run, after int, evs []agentd.Event) ([]byte, bool) {
	e := NewEncoder(run, after)
	var out bytes.Buffer
	end := false
	for _, ev := range evs {
		b, done := e.Event(ev, false)
		out.Write(b)
		end = done
	}
	return out.Bytes(), end
}

// TestStream: a run's log makes the Responses API's events, numbered from
// 0 without a gap; the retracted try ends as an incomplete item that is not
// part of the final output; the final response has the answer and usage;
// and a stream resumed after any sequence number is the rest of the same
// bytes.
func TestStream(t *testing.T) {
	t.Parallel()
	run := testRun()
	full, end := encode(run, -1, answered)
	if !end {
		t.Fatal("the stream does not end at run.completed")
	}
	types, data := sse(t, full)
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_item.done " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	for i, d := range data {
		if d["sequence_number"] != float64(i) {
			t.Fatalf("event %d has sequence_number %v", i, d["sequence_number"])
		}
	}
	if it := data[5]["item"].(map[string]any); it["status"] != "incomplete" {
		t.Fatalf("the retracted item ends %v", it["status"])
	}
	final := data[len(data)-1]["response"].(map[string]any)
	out := final["output"].([]any)
	if final["status"] != "completed" || len(out) != 1 || final["id"] != "resp_01a234dc98f771a3b8a0100ed5226eca" {
		t.Fatalf("final response: %v", final)
	}
	item := out[0].(map[string]any)
	if item["id"] != "msg_01a234dc98f771a3b8a0100ed5226eca_1" || item["content"].([]any)[0].(map[string]any)["text"] != "hello world" {
		t.Fatalf("final output: %v", item)
	}
	usage := final["usage"].(map[string]any)
	if usage["total_tokens"] != float64(12) || usage["input_tokens_details"].(map[string]any)["cached_tokens"] != float64(4) {
		t.Fatalf("usage: %v", usage)
	}
	for after := 0; after < len(types); after++ {
		rest, _ := encode(run, after, answered)
		i := bytes.Index(full, []byte(fmt.Sprintf(`"sequence_number":%d,`, after+1)))
		start := bytes.LastIndex(full[:max(i, 0)], []byte("event: "))
		if after == len(types)-1 {
			if string(rest) != "data: [DONE]\n\n" {
				t.Fatalf("after the last event: %q", rest)
			}
			continue
		}
		if i < 0 || !bytes.Equal(rest, full[start:]) {
			t.Fatalf("resumed after %d: not the rest of the stream", after)
		}
	}
	// The response object built from the whole log is the final one.
	b := NewBuilder(run, nil)
	for _, e := range answered {
		b.Add(e)
	}
	got, _ := json.Marshal(b.Response())
	wantResp, _ := json.Marshal(final)
	var g, w any
	json.Unmarshal(got, &g)
	json.Unmarshal(wantResp, &w)
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Fatalf("built response\n%s\nfinal event's\n%s", got, wantResp)
	}
}

// TestOutcome: each way a run ends is a response status.
func TestOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status     agentd.RunStatus
		reason     agentd.Reason
		want, why  string
		errorCode  string
		eventFinal string
	}{
		{agentd.StatusCompleted, agentd.ReasonCompleted, "completed", "", "", "response.completed"},
		{agentd.StatusCompleted, agentd.ReasonMaxOutputTokens, "incomplete", "max_output_tokens", "", "response.incomplete"},
		{agentd.StatusFailed, agentd.ReasonContentFilter, "incomplete", "content_filter", "", "response.incomplete"},
		{agentd.StatusCancelled, agentd.ReasonCancelled, "cancelled", "", "", "response.failed"},
		{agentd.StatusFailed, agentd.ReasonModelError, "failed", "", "server_error", "response.failed"},
		{agentd.StatusTimedOut, agentd.ReasonTimedOutTotal, "failed", "", "timed_out_total", "response.failed"},
	} {
		evs := append([]agentd.Event{}, answered[:2]...)
		typ := agentd.EventType("run." + string(c.status))
		evs = append(evs, ev(3, typ, 0, fmt.Sprintf(`{"reason":%q,"status":%q}`, c.reason, c.status)))
		out, _ := encode(testRun(), -1, evs)
		types, data := sse(t, out)
		final := data[len(data)-1]["response"].(map[string]any)
		if types[len(types)-1] != c.eventFinal || final["status"] != c.want {
			t.Errorf("%s/%s: %s with status %v, want %s %s", c.status, c.reason, types[len(types)-1], final["status"], c.eventFinal, c.want)
		}
		if c.why != "" && final["incomplete_details"].(map[string]any)["reason"] != c.why {
			t.Errorf("%s/%s: incomplete_details %v", c.status, c.reason, final["incomplete_details"])
		}
		if c.errorCode != "" && final["error"].(map[string]any)["code"] != c.errorCode {
			t.Errorf("%s/%s: error %v", c.status, c.reason, final["error"])
		}
	}
}

// TestIDs: response and conversation ids map to agentd's both ways; other
// strings are no id.
func TestIDs(t *testing.T) {
	t.Parallel()
	if id, ok := RunID(ResponseID(runID)); !ok || id != runID {
		t.Fatalf("round trip: %s %v", id, ok)
	}
	if id, ok := ConversationOf(ConversationID(runID)); !ok || id != runID {
		t.Fatalf("conversation round trip: %s %v", id, ok)
	}
	for _, bad := range []string{"", "resp_", "resp_xyz", "conv_01a234dc98f771a3b8a0100ed5226eca", "resp_01a234dc98f771a3b8a0100ed5226ecaff",
		"resp_01a234dc-98f7-71a3-b8a0-100ed5226e"} {
		if _, ok := RunID(bad); ok {
			t.Errorf("%q is a response id", bad)
		}
	}
}

// TestDecode: a request's fields are read as OpenAI's API reads them; what
// agentd does not take is refused, naming the field.
func TestDecode(t *testing.T) {
	t.Parallel()
	spec := func(body string) (runspec.Request, error) {
		r, err := Decode([]byte(body))
		if err != nil {
			return runspec.Request{}, err
		}
		return r.Spec("")
	}
	req, err := spec(`{"model":"m","input":[{"role":"developer","content":"rules"},{"type":"message","role":"user",
		"content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}],"temperature":0.2,
		"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}},"metadata":{"k":"v"},"store":true,
		"tool_choice":"auto","tools":[],"parallel_tool_calls":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Input) != 2 || req.Input[0].Role != agentd.RoleSystem || req.Input[1].Content != "a\nb" || req.InputText {
		t.Fatalf("input: %+v", req.Input)
	}
	if req.Sampling == nil || *req.Sampling.Temperature != 0.2 || *req.Sampling.Format.Type != "json_schema" {
		t.Fatalf("sampling: %+v", req.Sampling)
	}
	if req.Tools == nil || len(*req.Tools) != 0 || *req.OnDisconnect != "continue" {
		t.Fatalf("tools %v, on_disconnect %v", req.Tools, req.OnDisconnect)
	}
	var echo Echo
	if err := json.Unmarshal(req.Echo, &echo); err != nil || echo.Metadata["k"] != "v" {
		t.Fatalf("echo %s: %v", req.Echo, err)
	}
	// include, as Codex and the AI SDK send it, names nothing agentd
	// produces: accepted, a no-op.
	if _, err := spec(`{"input":"x","include":["reasoning.encrypted_content","message.output_text.logprobs"]}`); err != nil {
		t.Fatalf("include: %v", err)
	}
	// client_metadata, as Codex sends it, is kept, never refused.
	req, err = spec(`{"input":"x","client_metadata":{"x-codex-installation-id": "c0dex", "turn": {"n": 1}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(req.Echo, &echo); err != nil || string(echo.ClientMetadata) != `{"x-codex-installation-id":"c0dex","turn":{"n":1}}` {
		t.Fatalf("echo %s: %v", req.Echo, err)
	}
	for _, bad := range []string{`[]`, `"x"`, `{"big":"` + strings.Repeat("a", runspec.MaxMetadataBytes) + `"}`} {
		var fe *runspec.FieldError
		if _, err := spec(`{"input":"x","client_metadata":` + bad + `}`); !errors.As(err, &fe) || fe.Field != "client_metadata" {
			t.Fatalf("client_metadata %.20s: %v, want an error naming it", bad, err)
		}
	}
	for body, param := range map[string]string{
		`{"input":"x","bogus":1}`:                                   "bogus",
		`{"input":"x","text":{"format":{"type":"text"},"other":1}}`: "text.other",
		`{"input":7}`: "input",
		`{}`:          "input",
		`{"input":[{"role":"robot","content":"x"}]}`:                                        "input[0].role",
		`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`:       "input[0].content[0].file_id",
		`{"input":[{"type":"function_call_output","output":"o"}]}`:                          "input[0].call_id",
		`{"input":[{"type":"item_reference","id":"msg_x"}]}`:                                "input[0].id",
		`{"input":"x","tools":[{"type":"tool_search"}]}`:                                    "tools[0].type",
		`{"input":"x","reasoning":{"effort":"maximal"}}`:                                    "reasoning.effort",
		`{"input":"x","reasoning":{"summary":"long"}}`:                                      "reasoning.summary",
		`{"input":"x","reasoning":{"effort":"low","budget":1}}`:                             "reasoning.budget",
		`{"input":"x","tools":[{"type":"namespace","name":"a__b","tools":[]}]}`:             "tools[0].name",
		`{"input":"x","tools":[{"type":"namespace","name":"ns","tools":[{"type":"mcp"}]}]}`: "tools[0].tools[0].type",
		`{"input":"x","tools":[{"type":"function","name":"f","bogus":1}]}`:                  "tools[0].bogus",
		`{"input":"x","tool_choice":"sometimes"}`:                                           "tool_choice",
		`{"input":"x","tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`:     "tool_choice",
		`{"input":"x","tool_choice":{"type":"file_search"}}`:                                "tool_choice.type",
		`{"input":"x","tool_choice":{"type":"function"}}`:                                   "tool_choice.name",
		`{"input":"x","tool_choice":{"type":"mcp","server_label":"x","name":"calculator"}}`: "tool_choice.server_label",
		`{"input":"x","include":["reasoning.encrypted_content","everything"]}`:              "include[1]",
		`{"input":"x","truncation":"never"}`:                                                "truncation",
		`{"input":"x","background":true,"store":false}`:                                     "background",
		`{"input":"x","previous_response_id":"resp_x"}`:                                     "previous_response_id",
		`{"input":"x","temperature":"hot"}`:                                                 "temperature",
		`{"input":"x","conversation":"c1"}`:                                                 "conversation",
	} {
		r, err := Decode([]byte(body))
		if err == nil {
			_, err = r.Spec("")
		}
		if err == nil {
			_, err = r.PreviousRunID()
		}
		if err == nil {
			_, err = r.ConversationRunID()
		}
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != param {
			t.Errorf("%s: %v, want an error about %s", body, err, param)
		}
	}
}

// TestParam: runspec's field names are the request's.
func TestParam(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"sampling.temperature": "temperature", "sampling.format.name": "text.format.name",
		"input[0].content": "input[0].content", "instructions": "instructions"} {
		if got := Param(in); got != want {
			t.Errorf("Param(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPage: input items page as OpenAI's lists do.
func TestPage(t *testing.T) {
	t.Parallel()
	var items []Item
	for i := range 5 {
		items = append(items, Item{ID: fmt.Sprint("i", i)})
	}
	ids := func(l List) string {
		var s []string
		for _, it := range l.Data {
			s = append(s, it.ID)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		order, after, before string
		limit                int
		want                 string
		more                 bool
	}{
		{"desc", "", "", 2, "i4,i3", true},
		{"desc", "i3", "", 2, "i2,i1", true},
		{"asc", "i2", "", 10, "i3,i4", false},
		{"asc", "", "i2", 10, "i0,i1", false},
	} {
		l, err := Page(items, c.order, c.after, c.before, c.limit)
		if err != nil || ids(l) != c.want || l.HasMore != c.more || l.Object != "list" || *l.FirstID != l.Data[0].ID {
			t.Errorf("%+v: %s more=%v (%v)", c, ids(l), l.HasMore, err)
		}
	}
	if _, err := Page(items, "asc", "nope", "", 2); err == nil {
		t.Error("after an unknown item: no error")
	}
}

// TestFunctionCallItems: function tools are the run's client tools, which
// end the run at their calls; the calls and outputs a client sends back
// with its history are an assistant message with tool calls and tool
// messages, in order.
func TestFunctionCallItems(t *testing.T) {
	t.Parallel()
	r, err := Decode([]byte(`{"input":[{"role":"user","content":"weather?"},
		{"type":"function_call","call_id":"c1","name":"weather","arguments":"{\"city\":\"Paris\"}"},
		{"type":"function_call","call_id":"c2","name":"weather","arguments":"{}","id":"fc_1","status":"completed"},
		{"type":"function_call_output","call_id":"c1","output":"sunny"},
		{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}],
		"tools":[{"type":"function","name":"weather","description":"d","parameters":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"},"strict":false}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req, err := r.Spec("")
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Input) != 4 || len(req.Input[1].ToolCalls) != 2 || req.Input[1].ToolCalls[0].Arguments != `{"city":"Paris"}` ||
		req.Input[2].Role != agentd.RoleTool || req.Input[2].ToolCallID != "c1" || req.Input[3].Content != "rain" {
		t.Fatalf("input: %+v", req.Input)
	}
	if req.ClientTools == nil || len(*req.ClientTools) != 1 || *(*req.ClientTools)[0].Name != "weather" || !req.ClientToolsEnd {
		t.Fatalf("client tools: %+v, end %v", req.ClientTools, req.ClientToolsEnd)
	}
	var echo Echo
	if err := json.Unmarshal(req.Echo, &echo); err != nil || len(echo.Tools) != 1 || !strings.Contains(string(echo.Tools[0]), `"strict":false`) {
		t.Fatalf("echoed tools: %s (%v)", req.Echo, err)
	}
	if id, ok := ItemRun("fc_01a234dc98f771a3b8a0100ed5226eca_3"); !ok || id != runID {
		t.Fatalf("ItemRun: %s %v", id, ok)
	}
}

// TestMCPTools: an mcp tool names the operator's tools of its
// server_label that the run may call; what agentd cannot do with one is
// refused, named; a call of one is an mcp_call item with its events.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	labelled := func(label string) ([]string, bool) {
		switch label {
		case "":
			return []string{"calculator", "guarded"}, true
		case "docs":
			return []string{"search"}, true
		}
		return nil, false
	}
	spec := func(tools string) (runspec.Request, error) {
		r, err := Decode([]byte(`{"input":"x","tools":` + tools + `}`))
		if err != nil {
			return runspec.Request{}, err
		}
		r.Labelled = labelled
		r.NeedsApproval = func(name string) bool { return name == "guarded" }
		return r.Spec("")
	}
	req, err := spec(`[{"type":"mcp","server_label":"agentd","allowed_tools":["calculator"]},{"type":"mcp","server_label":"docs","require_approval":"never"}]`)
	if err != nil {
		t.Fatal(err)
	}
	if req.Tools == nil || strings.Join(*req.Tools, ",") != "calculator,search" {
		t.Fatalf("tools: %v", req.Tools)
	}
	var echo Echo
	if err := json.Unmarshal(req.Echo, &echo); err != nil || echo.MCP["calculator"] != "agentd" || echo.MCP["search"] != "docs" {
		t.Fatalf("echo %s: %v", req.Echo, err)
	}
	for tools, param := range map[string]string{
		`[{"type":"mcp","server_label":"nowhere"}]`:                                                                                        "tools[0].server_label",
		`[{"type":"mcp","server_label":"agentd","allowed_tools":["nope"]}]`:                                                                "tools[0].allowed_tools",
		`[{"type":"mcp","server_label":"x","server_url":"https://example.com/mcp"}]`:                                                       "tools[0].server_url",
		`[{"type":"mcp","server_label":"docs","require_approval":"sometimes"}]`:                                                            "tools[0].require_approval",
		`[{"type":"mcp","server_label":"docs","require_approval":{"never":{"tool_names":["search"]},"always":{"tool_names":["search"]}}}]`: "tools[0].require_approval",
		`[{"type":"web_search"},{"type":"mcp","server_label":"nowhere"}]`:                                                                  "tools[1].server_label",
	} {
		_, err := spec(tools)
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != param {
			t.Errorf("%s: %v, want an error about %s", tools, err, param)
		}
	}

	// Which calls wait for an approval: every tool's by default, as
	// OpenAI's; none but those the operator marked with "never"; by name
	// with a filter, where a tool it does not name needs one.
	for tools, want := range map[string]string{
		`[{"type":"mcp","server_label":"agentd"}]`:                                                            "calculator,guarded",
		`[{"type":"mcp","server_label":"agentd","require_approval":"always"}]`:                                "calculator,guarded",
		`[{"type":"mcp","server_label":"agentd","require_approval":"never"}]`:                                 "guarded",
		`[{"type":"mcp","server_label":"agentd","require_approval":{"never":{"tool_names":["calculator"]}}}]`: "guarded",
		`[{"type":"mcp","server_label":"docs","require_approval":{"always":{"tool_names":["search"]}}}]`:      "search",
		`[{"type":"mcp","server_label":"docs","require_approval":"never"}]`:                                   "",
	} {
		req, err := spec(tools)
		if err != nil {
			t.Fatalf("%s: %v", tools, err)
		}
		if got := strings.Join(req.ApprovalTools, ","); got != want || !req.ClientToolsEnd {
			t.Errorf("%s: approval tools %q (ends at them: %v), want %q", tools, got, req.ClientToolsEnd, want)
		}
	}

	run := testRun()
	run.Params.Echo = req.Echo
	evs := append(append([]agentd.Event{}, answered[:3]...),
		ev(4, agentd.EventMessageCompleted, 1, `{"content":[{"type":"tool_call","id":"c1","name":"calculator","arguments":"{}"}],
			"finish_reason":"tool_calls","message_id":"m","role":"assistant","usage":{}}`),
		ev(5, agentd.EventToolCallCreated, 1, `{"arguments":{"expression":"6*7"},"call_id":"c1","effect":"read_only","idempotency_key":"k",
			"name":"calculator","status":"planned","tool_call_id":"t1"}`),
		ev(6, agentd.EventToolCallCompleted, 1, `{"result":{"result":42},"status":"succeeded","tool_call_id":"t1"}`),
		ev(7, agentd.EventRunCompleted, 1, `{"output_text":"","reason":"completed","status":"completed"}`))
	out, _ := encode(run, -1, evs)
	types, data := sse(t, out)
	want := "response.created response.in_progress response.output_item.added response.mcp_call.in_progress " +
		"response.mcp_call_arguments.done response.mcp_call.completed response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	item := data[6]["item"].(map[string]any)
	if item["type"] != "mcp_call" || item["server_label"] != "agentd" || item["output"] != `{"result":42}` || item["status"] != "completed" {
		t.Fatalf("the mcp_call item: %v", item)
	}
}

// TestMCPApprovals: a call that waits for the client's approval is an
// mcp_approval_request item, added and done, and the response completes
// at it; the next request decides it with an mcp_approval_response item.
func TestMCPApprovals(t *testing.T) {
	t.Parallel()
	run := testRun()
	run.Params.Echo = []byte(`{"mcp":{"calculator":"agentd"}}`)
	toolCall := "5f0c2b6e-93a8-4c55-9d0b-2f1e77c1a001"
	evs := append(append([]agentd.Event{}, answered[:3]...),
		ev(4, agentd.EventMessageCompleted, 1, `{"content":[{"type":"tool_call","id":"c1","name":"calculator","arguments":"{}"}],
			"finish_reason":"tool_calls","message_id":"m","role":"assistant","usage":{}}`),
		ev(5, agentd.EventToolCallCreated, 1, `{"arguments":{"expression":"6*7"},"call_id":"c1","effect":"read_only","idempotency_key":"k",
			"name":"calculator","status":"awaiting_approval","tool_call_id":"`+toolCall+`"}`),
		ev(6, agentd.EventRunCompleted, 1, `{"output_text":"","reason":"client_tool_calls","status":"completed"}`))
	out, _ := encode(run, -1, evs)
	types, data := sse(t, out)
	want := "response.created response.in_progress response.output_item.added response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	final := data[4]["response"].(map[string]any)
	items := final["output"].([]any)
	if final["status"] != "completed" || len(items) != 1 {
		t.Fatalf("the response: %v", final)
	}
	item := items[0].(map[string]any)
	id := "mcpr_5f0c2b6e93a84c559d0b2f1e77c1a001"
	if item["type"] != "mcp_approval_request" || item["id"] != id || item["name"] != "calculator" || item["server_label"] != "agentd" ||
		item["arguments"] != `{"expression":"6*7"}` {
		t.Fatalf("the approval request: %v", item)
	}

	r, err := Decode([]byte(`{"input":[{"type":"mcp_approval_response","approval_request_id":"` + id + `","approve":false,"reason":"not now"}],
		"previous_response_id":"resp_01a234dc98f771a3b8a0100ed5226eca"}`))
	if err != nil {
		t.Fatal(err)
	}
	req, err := r.Spec("c")
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Approvals) != 1 || req.Approvals[0].ToolCallID != toolCall || req.Approvals[0].Approve || req.Approvals[0].Reason != "not now" ||
		len(req.Input) != 0 {
		t.Fatalf("the decision: %+v, input %+v", req.Approvals, req.Input)
	}
	for body, param := range map[string]string{
		`{"input":[{"type":"mcp_approval_response","approval_request_id":"mcpr_x","approve":true}]}`:           "input[0].approval_request_id",
		`{"input":[{"type":"mcp_approval_response","approval_request_id":"` + id + `"}]}`:                      "input[0]",
		`{"input":[{"type":"mcp_approval_response","approve":true,"approval_request_id":"` + id + `","x":1}]}`: "input[0].x",
	} {
		r, err := Decode([]byte(body))
		if err == nil {
			_, err = r.Spec("c")
		}
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != param {
			t.Errorf("%s: %v, want an error about %s", body, err, param)
		}
	}
}

// TestRefusedTogether: one 400 names every field a request is refused
// for, its param the first of them.
func TestRefusedTogether(t *testing.T) {
	t.Parallel()
	_, err := Decode([]byte(`{"input":[{"role":"robot","content":"x"}],"bogus":1,"text":{"other":2},"truncation":"never",
		"tools":[{"type":"tool_search"}],"also":true}`))
	var fe *runspec.FieldError
	if !errors.As(err, &fe) || fe.Field != "bogus" {
		t.Fatalf("%v, want an error about bogus first", err)
	}
	for _, name := range []string{"text.other", "also", "input[0].role", "truncation", "tools[0].type"} {
		if !strings.Contains(fe.Message, name+": ") {
			t.Errorf("the message does not name %s: %s", name, fe.Message)
		}
	}
	// Without an unknown field, Spec names them all.
	r, err := Decode([]byte(`{"input":[{"role":"robot","content":"x"},{"type":"function_call_output","output":"o"}],"truncation":"never"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Spec("")
	if !errors.As(err, &fe) || fe.Field != "input[0].role" || !strings.Contains(fe.Message, "input[1].call_id: ") ||
		!strings.Contains(fe.Message, "truncation: ") {
		t.Fatalf("%v, want input[0].role first, then input[1].call_id and truncation", err)
	}
}

// TestClientShapes: what Codex, the Agents SDK and the AI SDK send beyond
// the basics is taken: reasoning (its effort asked of the model, both
// echoed), text.verbosity, namespace tools (their functions named for the
// model by namespace; a call sent back with its namespace), hosted tools
// (left out with a warning, or the operator's tool they are mapped to),
// reasoning items and the approval requests of a history the client keeps.
func TestClientShapes(t *testing.T) {
	t.Parallel()
	r, err := Decode([]byte(`{"model":"m","reasoning":{"effort":"high","summary":"auto"},"text":{"verbosity":"low"},
		"tools":[{"type":"namespace","name":"multi_agent_v1","description":"agents","tools":[{"type":"function","name":"spawn",
		"parameters":{"type":"object"}}]},{"type":"web_search"},{"type":"file_search","vector_store_ids":["vs"]}],
		"input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"hm"}],"encrypted_content":"opaque"},
		{"type":"function_call","call_id":"c1","name":"spawn","namespace":"multi_agent_v1","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"done"},{"role":"user","content":"go on"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r.HostedTool = func(kind string) (string, bool) { return "search", kind == "file_search" }
	req, err := r.Spec("")
	if err != nil {
		t.Fatal(err)
	}
	if req.Sampling == nil || req.Sampling.ReasoningEffort == nil || *req.Sampling.ReasoningEffort != "high" {
		t.Fatalf("sampling: %+v", req.Sampling)
	}
	if req.ClientTools == nil || len(*req.ClientTools) != 1 || *(*req.ClientTools)[0].Name != "multi_agent_v1__spawn" {
		t.Fatalf("client tools: %+v", req.ClientTools)
	}
	if req.Tools == nil || strings.Join(*req.Tools, ",") != "search" {
		t.Fatalf("tools: %v", req.Tools)
	}
	if len(req.Input) != 3 || req.Input[0].ToolCalls[0].Name != "multi_agent_v1__spawn" || req.Input[1].ToolCallID != "c1" {
		t.Fatalf("input: %+v", req.Input)
	}
	var echo Echo
	if err := json.Unmarshal(req.Echo, &echo); err != nil {
		t.Fatal(err)
	}
	if echo.ReasoningSummary != "auto" || echo.Verbosity != "low" || echo.Namespaces["multi_agent_v1__spawn"] != [2]string{"multi_agent_v1", "spawn"} ||
		len(echo.Warnings) != 1 || echo.Warnings[0].Param != "tools[1]" || len(echo.Tools) != 2 {
		t.Fatalf("echo: %+v", echo)
	}
	if ns, fn := SplitNamespace(echo.Namespaces, "multi_agent_v1__spawn"); ns != "multi_agent_v1" || fn != "spawn" {
		t.Fatalf("split: %s %s", ns, fn)
	}

	// A forced hosted tool: the operator's tool when mapped, else refused.
	r, _ = Decode([]byte(`{"input":"x","tools":[{"type":"file_search"}],"tool_choice":{"type":"file_search"}}`))
	r.HostedTool = func(kind string) (string, bool) { return "search", kind == "file_search" }
	if req, err := r.Spec(""); err != nil || req.Sampling.ToolChoice == nil || req.Sampling.ToolChoice.Name != "search" {
		t.Fatalf("forced file_search: %+v %v", req.Sampling, err)
	}
	r, _ = Decode([]byte(`{"input":"x","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}`))
	var fe *runspec.FieldError
	if _, err := r.Spec(""); !errors.As(err, &fe) || fe.Field != "tool_choice.type" {
		t.Fatalf("forced web_search: %v", err)
	}

	// The history a client keeps, up to an approval request agentd
	// issued: the conversation holds it, so the input is what follows.
	req, err = spec(t, `{"input":[{"role":"user","content":"add"},{"type":"mcp_approval_request","id":"mcpr_0123456789abcdef0123456789abcdef",
		"server_label":"agentd","name":"calculator","arguments":"{}"},{"type":"mcp_approval_response",
		"approval_request_id":"mcpr_0123456789abcdef0123456789abcdef","approve":true}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Input) != 0 || len(req.Approvals) != 1 || !req.Approvals[0].Approve {
		t.Fatalf("input %+v, approvals %+v", req.Input, req.Approvals)
	}
}

func spec(t *testing.T, body string) (runspec.Request, error) {
	t.Helper()
	r, err := Decode([]byte(body))
	if err != nil {
		return runspec.Request{}, err
	}
	if ids := r.ResentApprovals(); len(ids) != 1 {
		t.Fatalf("resent approvals: %v", ids)
	}
	return r.Spec("conv")
}

// TestCustomTools: Codex's custom tools (input a text), also in a
// namespace of the additional_tools item of its input, are client tools
// whose one argument is the input; a call of one is a custom_tool_call
// item with that input, and one sent back is the call again.
func TestCustomTools(t *testing.T) {
	t.Parallel()
	r, err := Decode([]byte(`{"model":"m","reasoning":{"effort":"low","context":"all_turns"},
		"tools":[{"type":"custom","name":"apply_patch","description":"Patch.","format":{"type":"grammar","syntax":"lark","definition":"start: x"}}],
		"input":[{"type":"additional_tools","id":"at_1","role":"developer","tools":[{"type":"namespace","name":"functions","description":"",
		"tools":[{"type":"custom","name":"exec","description":"Run JS."},{"type":"function","name":"wait","parameters":{"type":"object"}}]}]},
		{"role":"user","content":"go"},
		{"type":"custom_tool_call","call_id":"c1","name":"exec","namespace":"functions","input":"1+1","status":"completed"},
		{"type":"custom_tool_call_output","call_id":"c1","output":"2"},{"role":"user","content":"again"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req, err := r.Spec("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ct := range *req.ClientTools {
		names = append(names, *ct.Name)
	}
	if strings.Join(names, ",") != "apply_patch,functions__exec,functions__wait" ||
		!strings.Contains(*(*req.ClientTools)[0].Description, "lark grammar:\nstart: x") {
		t.Fatalf("client tools: %v %q", names, *(*req.ClientTools)[0].Description)
	}
	if len(req.Input) != 4 || req.Input[1].ToolCalls[0].Name != "functions__exec" || req.Input[1].ToolCalls[0].Arguments != `{"input":"1+1"}` ||
		req.Input[2].ToolCallID != "c1" || req.Input[2].Content != "2" {
		t.Fatalf("input: %+v", req.Input)
	}
	var echo Echo
	if err := json.Unmarshal(req.Echo, &echo); err != nil || !echo.Custom["functions__exec"] || !echo.Custom["apply_patch"] || echo.Custom["functions__wait"] {
		t.Fatalf("echo %s: %v", req.Echo, err)
	}
	run := testRun()
	run.Params.Echo = req.Echo
	run.Params.ClientTools = []agentd.ClientTool{{Name: "functions__exec"}}
	b := NewBuilder(run, nil)
	for _, e := range []agentd.Event{
		ev(1, agentd.EventRunCreated, 0, `{"conversation_id":"c","model":"fake","status":"queued"}`),
		ev(2, agentd.EventMessageCompleted, 1, `{"content":[{"type":"tool_call","id":"c2","name":"functions__exec","arguments":"{\"input\":\"2+2\"}"}],
			"finish_reason":"tool_calls","message_id":"m","role":"assistant"}`),
	} {
		b.Add(e)
	}
	out := b.Response().Output
	if len(out) != 1 || out[0].Type != ItemCustomToolCall || out[0].Name != "exec" || out[0].Namespace != "functions" ||
		out[0].Input == nil || *out[0].Input != "2+2" || out[0].CallID != "c2" {
		t.Fatalf("output: %+v", out)
	}
}
