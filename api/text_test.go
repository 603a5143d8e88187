package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestTextIsKeptOrRefused: a string of a request body that decoding would
// change (invalid UTF-8, a lone surrogate escape, both of which a JSON
// decoder turns into U+FFFD) is 422 naming its field, in every field of
// POST /runs and of an action alike, and nothing is written; text is never
// stored other than as sent.
func TestTextIsKeptOrRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runID, callID := waitingRun(t, b)
	action := func(rest string) string {
		return `{"tool_call_id":"` + callID + `",` + rest + `}`
	}
	cases := []struct {
		name, path, body, field, at string // at: where the detail says the string is
	}{
		{"0xff in input", "/runs", "{\"input\":\"a\xffb\"}", "input", ""},
		{"a lone surrogate in input", "/runs", `{"input":"hi \ud83d"}`, "input", ""},
		{"an encoded surrogate in an input message", "/runs",
			"{\"input\":[{\"role\":\"user\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", "input[1].content", ""},
		{"0xff in model", "/runs", "{\"input\":\"x\",\"model\":\"m\xff\"}", "model", ""},
		{"a lone low surrogate in instructions", "/runs", `{"input":"x","instructions":"\udc00"}`, "instructions", ""},
		{"0xc3 in a client tool's description", "/runs",
			"{\"input\":\"x\",\"client_tools\":[{\"name\":\"pick\",\"description\":\"\xc3\"}]}", "client_tools[0].description", ""},
		{"a lone surrogate deep in metadata", "/runs", `{"input":"x","metadata":{"a":{"b":["\ud800"]}}}`, "metadata", "metadata.a.b[0]"},
		{"0xff in a metadata key", "/runs", "{\"input\":\"x\",\"metadata\":{\"k\xff\":1}}", "metadata", ""},
		{"0xff in an action's error", "/runs/" + runID + "/actions", action("\"decision\":\"fail\",\"error\":\"no\xff\""), "error", ""},
		{"a lone surrogate in an action's result", "/runs/" + runID + "/actions",
			action(`"decision":"result","result":{"k":"\udfff"}`), "result", "result.k"},
	}
	runs, messages := b.counts("default")
	for _, c := range cases {
		p := wantProblem(t, b.do("POST", c.path, c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field || !strings.Contains(p.Detail, "UTF-8") && !strings.Contains(p.Detail, "surrogate") {
			t.Errorf("%s: field %q (%s), want %q", c.name, p.Field, p.Detail, c.field)
		}
		if c.at != "" && !strings.Contains(p.Detail, "at "+c.at) {
			t.Errorf("%s: the detail %q does not say the string is at %s", c.name, p.Detail, c.at)
		}
	}
	if r, m := b.counts("default"); r != runs || m != messages {
		t.Fatalf("refused requests wrote: %d runs and %d messages, had %d and %d", r, m, runs, messages)
	}
	if got := want[runBody](t, b.do("GET", "/runs/"+runID, ""), http.StatusOK); got.Status != "requires_action" {
		t.Fatalf("the waiting run is %s after refused actions", got.Status)
	}
	// What is written as the character it stands for is kept as sent: a
	// surrogate pair, an escaped backslash before u, and U+FFFD itself.
	r := b.createRun(`{"input":"\ud83d\ude42 \\ud800 \ufffd �","metadata":{"k":"\\udc00"}}`)
	msgs := want[messageList](t, b.do("GET", "/conversations/"+r.ConversationID+"/messages", ""), http.StatusOK)
	if len(msgs.Data) != 1 || msgs.Data[0].Content[0].Text != "🙂 \\ud800 \uFFFD \uFFFD" {
		t.Fatalf("the input was stored as %+v", msgs.Data)
	}
	if !sameJSON(t, r.Metadata, `{"k":"\\udc00"}`) {
		t.Fatalf("metadata stored as %s", r.Metadata)
	}
}
