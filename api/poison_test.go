package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
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

// TestInputBounds: an input of more messages than the cap is 422 naming
// input; a client's result larger than a tool's result limit is kept whole
// as an artifact, as a tool's own would be, and served whole.
func TestInputBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.MaxBodyBytes = 4 << 20 })
	msgs := strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"x"},`, 1001), ",")
	p := wantProblem(t, b.do("POST", "/runs", `{"input":[`+msgs+`]}`), http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "input" || !strings.Contains(p.Detail, "1000") {
		t.Fatalf("1001 messages: %+v", p)
	}
	runID, callID := waitingRun(t, b)
	big := `{"blob":"` + strings.Repeat("y", 900<<10) + `"}`
	want[runBody](t, b.do("POST", "/runs/"+runID+"/actions",
		`{"tool_call_id":"`+callID+`","decision":"result","result":`+big+`}`), http.StatusOK)
	steps, err := b.store.StepsList(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var pv struct {
		ArtifactID string `json:"artifact_id"`
		Bytes      int    `json:"bytes"`
		SHA256     string `json:"sha256"`
		MediaType  string `json:"media_type"`
	}
	res := steps[0].Calls[0].Result
	if err := json.Unmarshal(res, &pv); err != nil || pv.ArtifactID == "" || pv.Bytes != len(big) || len(res) > 4<<10 {
		t.Fatalf("a 900 KiB result was stored as %d bytes: %.80s", len(res), res)
	}
	path := "/runs/" + runID + "/artifacts/" + pv.ArtifactID
	got := b.do("GET", path, "")
	if got.status != http.StatusOK || string(got.body) != big || got.header.Get("Content-Type") != "application/json" ||
		got.header.Get("ETag") != `"`+pv.SHA256+`"` || !strings.HasPrefix(got.header.Get("Repr-Digest"), "sha-256=:") {
		t.Fatalf("GET %s: %d, %d bytes, %v", path, got.status, len(got.body), got.header)
	}
	if r := b.do("GET", path, "", "Range", "bytes=2-7"); r.status != http.StatusPartialContent || string(r.body) != `blob":` {
		t.Fatalf("a range: %d %q", r.status, r.body)
	}
	if r := b.do("GET", path, "", "If-None-Match", `"`+pv.SHA256+`"`); r.status != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", r.status)
	}
	wantProblem(t, b.do("GET", "/runs/"+runID+"/artifacts/"+callID, ""), http.StatusNotFound, "artifact_not_found")
	wantProblem(t, b.do("GET", "/runs/"+runID+"/artifacts/nope", ""), http.StatusNotFound, "artifact_not_found")
}

// TestTimeoutCeilings: a client's timeouts are at most the operator's
// ceilings, and 0 asks for the ceiling: no run is unbounded.
func TestTimeoutCeilings(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) {
		c.Defaults.MaxTimeouts = agentd.Timeouts{TotalMS: 5000, StepMS: 4000, IdleMS: 3000, ToolMS: 2000, ActionMS: 1000}
	})
	r := b.createRun(`{"input":"x","timeouts":{"total_ms":0,"step_ms":100,"idle_ms":0}}`)
	if r.Timeouts != (agentd.Timeouts{TotalMS: 5000, StepMS: 100, IdleMS: 3000, ToolMS: 2000, ActionMS: 1000}) {
		t.Fatalf("timeouts %+v: want 0 to take the ceiling and the defaults lowered to it", r.Timeouts)
	}
	for _, field := range []string{"total_ms", "step_ms", "idle_ms", "tool_ms", "action_ms"} {
		p := wantProblem(t, b.do("POST", "/runs", `{"input":"x","timeouts":{"`+field+`":5001}}`), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != "timeouts."+field {
			t.Errorf("%s over its ceiling: field %q", field, p.Field)
		}
	}
}
