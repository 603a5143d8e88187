package api_test

import (
	"net/http"
	"testing"
)

// TestPoisonValuesAreRefused: values PostgreSQL cannot store (NUL, invalid
// UTF-8, lone surrogate escapes, numbers past a float64) are 422 naming the
// field, never a 500 or a 404, and nothing is written.
func TestPoisonValuesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runID, callID := waitingRun(t, b)
	cases := []struct {
		name, path, body, field string
	}{
		{"NUL in input", "/runs", `{"input":"a\u0000b"}`, "input"},
		{"NUL in an input message", "/runs", `{"input":[{"role":"user","content":"x\u0000"}]}`, "input[0].content"},
		{"NUL in model", "/runs", `{"input":"x","model":"m\u0000"}`, "model"},
		{"NUL in instructions", "/runs", `{"input":"x","instructions":"\u0000"}`, "instructions"},
		{"NUL in a metadata key", "/runs", `{"input":"x","metadata":{"\u0000":1}}`, "metadata"},
		{"NUL in a metadata value", "/runs", `{"input":"x","metadata":{"k":"\u0000"}}`, "metadata"},
		{"raw 0xff in metadata", "/runs", "{\"input\":\"x\",\"metadata\":{\"k\":\"\xff\"}}", "metadata"},
		{"a huge number in metadata", "/runs", `{"input":"x","metadata":{"n":1e999999}}`, "metadata"},
		{"a tiny number in metadata", "/runs", `{"input":"x","metadata":{"n":1e-999999}}`, "metadata"},
		{"a lone surrogate in metadata", "/runs", `{"input":"x","metadata":{"k":"\ud800"}}`, "metadata"},
		{"NUL in an action result", "/runs/" + runID + "/actions",
			`{"tool_call_id":"` + callID + `","decision":"result","result":{"k":"\u0000"}}`, "result"},
		{"a huge number in an action result", "/runs/" + runID + "/actions",
			`{"tool_call_id":"` + callID + `","decision":"result","result":1e999999}`, "result"},
		{"NUL in an action error", "/runs/" + runID + "/actions",
			`{"tool_call_id":"` + callID + `","decision":"fail","error":"no\u0000"}`, "error"},
	}
	runs, messages := b.counts("default")
	for _, c := range cases {
		p := wantProblem(t, b.do("POST", c.path, c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Errorf("%s: field %q, want %q (%s)", c.name, p.Field, c.field, p.Detail)
		}
	}
	if r, m := b.counts("default"); r != runs || m != messages {
		t.Fatalf("refused requests wrote: %d runs and %d messages, had %d and %d", r, m, runs, messages)
	}
	if got := want[runBody](t, b.do("GET", "/runs/"+runID, ""), http.StatusOK); got.Status != "requires_action" {
		t.Fatalf("the waiting run is %s after refused actions", got.Status)
	}
	// The same values where text may hold them, escaped, are kept as sent.
	r := b.createRun(`{"input":"\\u0000 is six characters","metadata":{"k":"\\u0000","n":"1e999999"}}`)
	if r.ID == "" {
		t.Fatal("a run with escaped text was not created")
	}
}
