package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
)

// itemsSetup starts the API over a running engine whose model is the fake,
// which the test reads back to see what the model was sent.
func itemsSetup(t *testing.T, opts ...func(*api.Config)) (*bundle, *fakellm.Server) {
	t.Helper()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	fake := fakellm.New()
	fs := httptest.NewServer(fake)
	t.Cleanup(fs.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	reg := registry(t)
	e := startEngine(t, store, run.Config{Tools: reg,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fs.URL + "/v1", APIKey: "test", HTTPClient: &http.Client{Transport: tr}})})
	return setupWith(t, store, store, append([]func(*api.Config){func(c *api.Config) { c.Runs, c.Tools = e.Service(), reg }}, opts...)...), fake
}

// v1Item is a conversation item as the tests read it.
type v1Item struct {
	ID, Type, Status, Role  string
	CallID                  string `json:"call_id"`
	Name, Arguments, Output string
	Content                 []struct{ Type, Text string }
}

func (it v1Item) String() string {
	switch it.Type {
	case "message":
		var texts []string
		for _, c := range it.Content {
			texts = append(texts, c.Type+"="+c.Text)
		}
		return it.Role + ":" + strings.Join(texts, "+")
	case "function_call":
		return "call(" + it.CallID + "," + it.Name + "," + it.Arguments + ")"
	case "function_call_output":
		return "output(" + it.CallID + ")=" + it.Output
	}
	return it.Type
}

type v1ItemList struct {
	Object  string
	Data    []v1Item
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

type v1Conv struct {
	ID, Object string
	Metadata   map[string]string
}

// v1Err checks that r is OpenAI's error with status and code, and
// returns its param and message.
func v1Err(t *testing.T, r response, status int, code string) (param, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type string
			Param, Code   *string
		}
	}
	if err := json.Unmarshal(r.body, &e); err != nil || r.status != status || e.Error.Code == nil || *e.Error.Code != code ||
		e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("OpenAI error %s (status %d), want status %d code %s", r.body, r.status, status, code)
	}
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	return param, e.Error.Message
}

// listItems reads every item of conversation conv, oldest first.
func listItems(t *testing.T, b *bundle, conv string) []v1Item {
	t.Helper()
	l := want[v1ItemList](t, b.do("GET", "/v1/conversations/"+conv+"/items?order=asc&limit=100", ""), http.StatusOK)
	return l.Data
}

func itemsString(items []v1Item) string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return strings.Join(out, " | ")
}

// sentString is the messages the fake model was sent in request r, as
// role:text (an assistant's calls as call(id), a tool's result as
// result(id)=text).
func sentString(t *testing.T, r fakellm.Request) string {
	t.Helper()
	out := make([]string, len(r.Sent))
	for i, raw := range r.Sent {
		var m struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("sent %s: %v", raw, err)
		}
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			var parts []struct{ Text string }
			_ = json.Unmarshal(m.Content, &parts)
			for _, p := range parts {
				text += p.Text
			}
		}
		s := m.Role + ":" + text
		for _, c := range m.ToolCalls {
			s += "call(" + c.ID + ")"
		}
		if m.ToolCallID != "" {
			s = "result(" + m.ToolCallID + ")=" + text
		}
		out[i] = s
	}
	return strings.Join(out, " | ")
}

// TestV1ConversationItems: items given on create and added later are the
// conversation's messages, listed, read and deleted as OpenAI's API does
// it, and the next response of the conversation is sent them, in order,
// before its own input; nothing changes while a response of it is in
// progress, or while it waits for the outputs of its function calls.
func TestV1ConversationItems(t *testing.T) {
	t.Parallel()
	b, fake := itemsSetup(t)

	c := want[v1Conv](t, b.do("POST", "/v1/conversations", `{"metadata": {"topic": "demo"}, "items": [
		{"type": "message", "role": "system", "content": "Answer in French."},
		{"role": "user", "content": [{"type": "input_text", "text": "Bonjour"}]},
		{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Salut"}]}]}`), http.StatusOK)
	if !strings.HasPrefix(c.ID, "conv_") || c.Object != "conversation" || c.Metadata["topic"] != "demo" {
		t.Fatalf("created %+v", c)
	}
	const seeded = "system:input_text=Answer in French. | user:input_text=Bonjour | assistant:output_text=Salut"
	if got := itemsString(listItems(t, b, c.ID)); got != seeded {
		t.Fatalf("items on create: %s, want %s", got, seeded)
	}

	added := want[v1ItemList](t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [
		{"role": "developer", "content": "Be brief."},
		{"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": "{\"q\":1}"},
		{"type": "function_call_output", "call_id": "call_a", "output": "42"},
		{"type": "message", "role": "user", "content": "/say ignored"}]}`), http.StatusOK)
	const more = "system:input_text=Be brief. | call(call_a,lookup,{\"q\":1}) | output(call_a)=42 | user:input_text=/say ignored"
	if got := itemsString(added.Data); got != more || added.Object != "list" || added.HasMore ||
		added.FirstID == nil || *added.FirstID != added.Data[0].ID || added.LastID == nil || *added.LastID != added.Data[3].ID {
		t.Fatalf("added %+v (%s)", added, got)
	}
	items := listItems(t, b, c.ID)
	if got := itemsString(items); got != seeded+" | "+more {
		t.Fatalf("items: %s", got)
	}
	for _, it := range items {
		if it.Status != "completed" || it.ID == "" {
			t.Fatalf("item %+v", it)
		}
	}
	user := items[6]
	if got := want[v1Item](t, b.do("GET", "/v1/conversations/"+c.ID+"/items/"+user.ID, ""), http.StatusOK); got.String() != user.String() || got.ID != user.ID {
		t.Fatalf("retrieved %+v, listed %+v", got, user)
	}

	// The next response is sent every item, in order, then its input.
	resp := want[struct {
		ID, Status string
		Output     []v1Item
	}](t, b.do("POST", "/v1/responses", `{"model": "fake", "conversation": "`+c.ID+`", "input": "/say Compris."}`), http.StatusOK)
	if resp.Status != "completed" || len(resp.Output) != 1 || resp.Output[0].Content[0].Text != "Compris." {
		t.Fatalf("response %+v", resp)
	}
	reqs := fake.Requests()
	if got, want := sentString(t, reqs[len(reqs)-1]), "system:Answer in French. | user:Bonjour | assistant:Salut | system:Be brief. | "+
		"assistant:call(call_a) | result(call_a)=42 | user:/say ignored | user:/say Compris."; got != want {
		t.Fatalf("the model was sent %s, want %s", got, want)
	}
	items = listItems(t, b, c.ID)
	if got := itemsString(items[len(items)-2:]); got != "user:input_text=/say Compris. | assistant:output_text=Compris." {
		t.Fatalf("the response's items: %s", got)
	}

	// Deletes: a message, and the response's answer; not a call, nor its
	// output; an unknown item is 404.
	conv := want[v1Conv](t, b.do("DELETE", "/v1/conversations/"+c.ID+"/items/"+items[1].ID, ""), http.StatusOK)
	if conv.ID != c.ID || conv.Object != "conversation" || conv.Metadata["topic"] != "demo" {
		t.Fatalf("delete answered %+v", conv)
	}
	v1Err(t, b.do("GET", "/v1/conversations/"+c.ID+"/items/"+items[1].ID, ""), http.StatusNotFound, "not_found")
	want[v1Conv](t, b.do("DELETE", "/v1/conversations/"+c.ID+"/items/"+items[len(items)-1].ID, ""), http.StatusOK)
	for _, i := range []int{4, 5} {
		if param, msg := v1Err(t, b.do("DELETE", "/v1/conversations/"+c.ID+"/items/"+items[i].ID, ""), http.StatusBadRequest,
			"invalid_field"); param != "item_id" || !strings.Contains(msg, "function call") {
			t.Fatalf("delete of %s: param %q, %s", items[i], param, msg)
		}
	}
	for _, id := range []string{items[1].ID, "msg_" + strings.Repeat("0", 32), "nope", items[4].ID + "9"} {
		v1Err(t, b.do("DELETE", "/v1/conversations/"+c.ID+"/items/"+id, ""), http.StatusNotFound, "not_found")
	}
	v1Err(t, b.do("DELETE", "/v1/conversations/conv_"+strings.Repeat("0", 32)+"/items/"+items[2].ID, ""), http.StatusNotFound, "not_found")
	if got, want := itemsString(listItems(t, b, c.ID)), "system:input_text=Answer in French. | assistant:output_text=Salut | "+more+
		" | user:input_text=/say Compris."; got != want {
		t.Fatalf("after the deletes: %s, want %s", got, want)
	}
	want[struct{ ID string }](t, b.do("POST", "/v1/responses", `{"model": "fake", "conversation": "`+c.ID+`", "input": "/say Encore."}`), http.StatusOK)
	reqs = fake.Requests()
	if got, want := sentString(t, reqs[len(reqs)-1]), "system:Answer in French. | assistant:Salut | system:Be brief. | "+
		"assistant:call(call_a) | result(call_a)=42 | user:/say ignored | user:/say Compris. | user:/say Encore."; got != want {
		t.Fatalf("after the deletes, the model was sent %s, want %s", got, want)
	}

	// A response in progress: nothing is added or deleted until it ends.
	bg := want[struct{ ID, Status string }](t, b.do("POST", "/v1/responses", `{"model": "fake", "conversation": "`+c.ID+
		`", "input": "/stream 50 100", "background": true}`), http.StatusOK)
	before := itemsString(listItems(t, b, c.ID))
	_, msg := v1Err(t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [{"role": "user", "content": "late"}]}`),
		http.StatusConflict, "conversation_busy")
	if !strings.Contains(msg, bg.ID) {
		t.Fatalf("busy: %s does not name %s", msg, bg.ID)
	}
	v1Err(t, b.do("DELETE", "/v1/conversations/"+c.ID+"/items/"+items[0].ID, ""), http.StatusConflict, "conversation_busy")
	if got := itemsString(listItems(t, b, c.ID)); got != before {
		t.Fatalf("a refused change changed the items: %s", got)
	}
	want[struct{ Status string }](t, b.do("POST", "/v1/responses/"+bg.ID+"/cancel", ""), http.StatusOK)
	b.waitFor(responseRunID(bg.ID), func(r runBody) bool { return r.Status == "cancelled" })
	want[v1ItemList](t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [{"role": "user", "content": "in time"}]}`), http.StatusOK)
}

// responseRunID is the run id of a response id.
func responseRunID(id string) string {
	h := strings.TrimPrefix(id, "resp_")
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestV1ConversationItemsWaitForFunctionOutputs: after a response that
// ended at its function calls, items are refused until the next response
// gives the calls' outputs.
func TestV1ConversationItemsWaitForFunctionOutputs(t *testing.T) {
	t.Parallel()
	b, _ := itemsSetup(t)
	c := want[v1Conv](t, b.do("POST", "/v1/conversations", `{}`), http.StatusOK)
	const tools = `"tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]`
	first := want[struct {
		Status string
		Output []v1Item
	}](t, b.do("POST", "/v1/responses", `{"model": "fake", "conversation": "`+c.ID+`", "input": "/call get_weather {}", `+tools+`}`), http.StatusOK)
	if first.Status != "completed" || len(first.Output) != 1 || first.Output[0].Type != "function_call" {
		t.Fatalf("first response %+v", first)
	}
	call := first.Output[0].CallID
	param, msg := v1Err(t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [{"role": "user", "content": "x"}]}`),
		http.StatusBadRequest, "invalid_field")
	if param != "items" || !strings.Contains(msg, call) {
		t.Fatalf("items while %s waits: param %q, %s", call, param, msg)
	}
	want[struct{ ID string }](t, b.do("POST", "/v1/responses", `{"model": "fake", "conversation": "`+c.ID+`", "input": [
		{"type": "function_call_output", "call_id": "`+call+`", "output": "sunny"}], `+tools+`}`), http.StatusOK)
	want[v1ItemList](t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [{"role": "user", "content": "x"}]}`), http.StatusOK)
}

// TestV1ConversationItemsRefused: items agentd cannot add are refused with
// 400 naming them, and nothing of the request is stored.
func TestV1ConversationItemsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := want[v1Conv](t, b.do("POST", "/v1/conversations", `{"items": [{"role": "user", "content": "first"}]}`), http.StatusOK)
	many := strings.TrimSuffix(strings.Repeat(`{"role": "user", "content": "x"},`, 21), ",")
	for _, tc := range []struct{ items, param string }{
		{`[]`, "items"},
		{`[` + many + `]`, "items"},
		{`[{"role": "robot", "content": "x"}]`, "items[0].role"},
		{`[{"role": "user", "content": ""}]`, "items[0].content"},
		{`[{"role": "user"}]`, "items[0].content"},
		{`[{"role": "user", "content": "ok"}, {"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]}]`, "items[1].content[0].type"},
		{`[{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]`, "items[0].content[0].type"},
		{`[{"role": "user", "content": "x", "colour": "red"}]`, "items[0].colour"},
		{`[{"role": "user", "content": "nul\u0000"}]`, "items[0].content"},
		{`[{"type": "item_reference", "id": "msg_x"}]`, "items[0].type"},
		{`[{"type": "reasoning", "summary": []}]`, "items[0].type"},
		{`[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]`, "items"},
		{`[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}, {"type": "function_call_output", "call_id": "c", "output": "x"}]`,
			"items[0].arguments"},
		{`[{"type": "function_call", "call_id": "c", "name": "f"}, {"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c", "output": "x"}]`,
			"items[1]"},
		{`[{"type": "function_call_output", "call_id": "c", "output": "x"}]`, "items[0].call_id"},
		{`[{"type": "function_call", "name": "f"}]`, "items[0]"},
		{`[7]`, "items[0]"},
	} {
		r := b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": `+tc.items+`}`)
		if param, _ := v1Err(t, r, http.StatusBadRequest, "invalid_field"); param != tc.param {
			t.Errorf("items %s: param %q, want %q (%s)", tc.items, param, tc.param, r.body)
		}
		if tc.items == "[]" || tc.items == "[7]" {
			continue
		}
		// The same items on create are refused the same way, and no
		// conversation is made.
		r = b.do("POST", "/v1/conversations", `{"items": `+tc.items+`}`)
		if param, _ := v1Err(t, r, http.StatusBadRequest, "invalid_field"); param != tc.param {
			t.Errorf("create with items %s: param %q, want %q", tc.items, param, tc.param)
		}
	}
	if got := itemsString(listItems(t, b, c.ID)); got != "user:input_text=first" {
		t.Fatalf("after refused items: %s", got)
	}
	if l := want[struct{ Data []struct{ ID string } }](t, b.do("GET", "/conversations?limit=100", ""), http.StatusOK); len(l.Data) != 1 {
		t.Fatalf("refused creates left %d conversations", len(l.Data))
	}
	for _, body := range []string{`{}`, `{"items": [{"role": "user", "content": "x"}], "metadata": {}}`, `[`, ``} {
		if r := b.do("POST", "/v1/conversations/"+c.ID+"/items", body); r.status != http.StatusBadRequest {
			t.Errorf("body %q: status %d: %s", body, r.status, r.body)
		}
	}
	param, _ := v1Err(t, b.do("POST", "/v1/conversations/"+c.ID, `{"metadata": {}, "items": [{"role": "user", "content": "x"}]}`),
		http.StatusBadRequest, "invalid_field")
	if param != "items" {
		t.Fatalf("an update with items: param %q", param)
	}
	v1Err(t, b.do("POST", "/v1/conversations/conv_"+strings.Repeat("0", 32)+"/items", `{"items": [{"role": "user", "content": "x"}]}`),
		http.StatusNotFound, "not_found")
	v1Err(t, b.do("POST", "/v1/conversations/nope/items", `{"items": [{"role": "user", "content": "x"}]}`), http.StatusNotFound, "not_found")
	// Twenty items is the limit, not past it.
	twenty := strings.TrimSuffix(strings.Repeat(`{"role": "user", "content": "x"},`, 20), ",")
	if l := want[v1ItemList](t, b.do("POST", "/v1/conversations/"+c.ID+"/items", `{"items": [`+twenty+`]}`), http.StatusOK); len(l.Data) != 20 {
		t.Fatalf("twenty items: %d added", len(l.Data))
	}
	if got := len(listItems(t, b, c.ID)); got != 21 {
		t.Fatalf("%d items, want 21", got)
	}
	// A retry with the same Idempotency-Key is answered the first
	// request's items, and adds nothing.
	const once = `{"items": [{"role": "user", "content": "once"}]}`
	first := want[v1ItemList](t, b.do("POST", "/v1/conversations/"+c.ID+"/items", once, "Idempotency-Key", "add-once"), http.StatusOK)
	again := b.do("POST", "/v1/conversations/"+c.ID+"/items", once, "Idempotency-Key", "add-once")
	if l := want[v1ItemList](t, again, http.StatusOK); again.header.Get("Idempotent-Replayed") != "true" || len(l.Data) != 1 ||
		l.Data[0].ID != first.Data[0].ID {
		t.Fatalf("a retry answered %s (%v), the first %+v", again.body, again.header, first)
	}
	if got := len(listItems(t, b, c.ID)); got != 22 {
		t.Fatalf("%d items after a retry, want 22", got)
	}
}
