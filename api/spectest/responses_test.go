package spectest

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/api"
)

// runJSON is a run as GET /runs/{id} answers it, with extra spliced in
// before its last key and the keys of drop left out.
func runJSON(extra string, drop ...string) string {
	fields := [][2]string{
		{"id", `"` + runID + `"`}, {"object", `"run"`}, {"tenant_id", `"default"`},
		{"conversation_id", `"` + convID + `"`}, {"status", `"queued"`}, {"terminal_reason", `null`},
		{"model", `"test-model"`}, {"instructions", `null`}, {"tools", `null`}, {"max_steps", `16`},
		{"timeouts", `{"total_ms":600000,"step_ms":120000,"idle_ms":60000,"tool_ms":60000,"action_ms":86400000}`},
		{"loop_limits", `{"failures_in_a_row":3,"identical_calls":5}`},
		{"compact_at", `null`},
		{"on_disconnect", `"continue"`}, {"if_busy", `"reject"`}, {"metadata", `{}`},
		{"usage", `{"input_tokens":0,"output_tokens":0,"cached_input_tokens":0,"reasoning_tokens":0,"cache_write_tokens":0}`},
		{"cost", `0`}, {"step_count", `0`}, {"last_event_seq", `1`}, {"required_action", `null`}, {"error", `null`},
		{"created_at", `"2025-01-02T03:04:05.123456Z"`}, {"started_at", `null`}, {"finished_at", `null`},
		{"updated_at", `"2025-01-02T03:04:05.123456Z"`}, {"deadline_at", `null`}, {"created_by", `"local"`},
		{"cancelled_by", `null`}, {"resumed_by", `null`}, {"cancel_requested_at", `null`}, {"output_text", `null`}, {"output", `null`},
		{"agent", `null`}, {"forked_from", `null`}, {"parent_run_id", `null`}, {"parent_tool_call_id", `null`}, {"sub_agents", `[]`},
		{"schedule_id", `null`}, {"scheduled_for", `null`}, {"webhook", `null`},
		{"inputs_pending", `0`}, {"inputs_unapplied", `0`}, {"inputs", `null`},
		{"user", `null`}, {"memory", `null`}, {"managed_instructions", `null`}, {"pinned_memory", `null`},
		{"evaluation", `null`},
	}
	var parts []string
	for _, f := range fields {
		if !slices.Contains(drop, f[0]) {
			parts = append(parts, `"`+f[0]+`":`+f[1])
		}
	}
	if extra != "" {
		parts = slices.Insert(parts, len(parts)-1, extra)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

const problemJSON = `{"type":"https://agentd.dev/problems/run_not_found","title":"Run not found","status":404,` +
	`"code":"run_not_found","instance":"/runs/x","request_id":"r1"}`

// header is a header with this Content-Type ("" for none).
func header(contentType string) http.Header {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return h
}

type responseCase struct {
	name, method, path string
	status             int
	contentType, body  string
	want               string // in the error, for one that fails
}

func TestValidResponsesPass(t *testing.T) {
	t.Parallel()
	for _, c := range []responseCase{
		{name: "new run", method: "POST", path: "/runs", status: 202, contentType: "application/json", body: runJSON("")},
		{name: "run with a query string and charset", method: "GET", path: "/runs/" + runID + "?x=1", status: 200,
			contentType: "application/json; charset=utf-8", body: runJSON("")},
		{name: "completed run", method: "GET", path: "/runs/" + runID, status: 200, contentType: "application/json",
			body: runJSON(`"output_text":"4"`, "output_text")},
		{name: "declared problem", method: "GET", path: "/runs/x", status: 404, contentType: "application/problem+json", body: problemJSON},
		{name: "problem by default", method: "GET", path: "/runs/" + runID + "/steps", status: 401,
			contentType: "application/problem+json", body: `{"type":"https://agentd.dev/problems/unauthorized","title":"Unauthorized","status":401,"code":"unauthorized"}`},
		{name: "tools, an inline schema", method: "GET", path: "/tools", status: 200, contentType: "application/json",
			body: `{"data":[{"name":"clock","description":"now","parameters":{"type":"object"},"effect":"read_only","timeout_ms":null,"needs_approval":false,"tenant":false}]}`},
		{name: "event stream", method: "GET", path: "/runs/" + runID + "/events", status: 200, contentType: "text/event-stream",
			body: "retry: 2000\n\n"},
		{name: "streamed create", method: "POST", path: "/runs", status: 200, contentType: "text/event-stream", body: "retry: 2000\n\n"},
		{name: "nothing more to stream", method: "GET", path: "/runs/" + runID + "/events?after=9", status: 204},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, contentType: "text/plain; version=0.0.4", body: "# HELP x\n"},
		{name: "unknown route", method: "GET", path: "/nope", status: 404, contentType: "application/problem+json",
			body: `{"type":"https://agentd.dev/problems/not_found","title":"Not found","status":404,"code":"not_found"}`},
		{name: "unknown method", method: "DELETE", path: "/runs", status: 405, contentType: "application/problem+json",
			body: `{"type":"https://agentd.dev/problems/method_not_allowed","title":"Method not allowed","status":405,"code":"method_not_allowed"}`},
		{name: "preflight", method: "OPTIONS", path: "/runs", status: 204},
		{name: "head", method: "HEAD", path: "/livez", status: 200, contentType: "application/json"},
	} {
		r := &recorder{TB: t}
		CheckResponse(r, c.method, c.path, c.status, header(c.contentType), []byte(c.body))
		if len(r.errs) != 0 {
			t.Errorf("%s: a valid response was refused:\n%s", c.name, strings.Join(r.errs, "\n"))
		}
	}
}

func TestInvalidResponsesFail(t *testing.T) {
	t.Parallel()
	run := "/runs/" + runID
	for _, c := range []responseCase{
		{"key the spec does not describe", "GET", run, 200, "application/json", runJSON(`"priority":1`), "priority"},
		{"missing required key", "GET", run, 200, "application/json", runJSON("", "last_event_seq"), "last_event_seq"},
		{"wrong type", "GET", run, 200, "application/json", strings.Replace(runJSON(""), `"max_steps":16`, `"max_steps":"16"`, 1), "max_steps"},
		{"wrong format", "GET", run, 200, "application/json", strings.Replace(runJSON(""), runID, "r1", 1), "uuid"},
		{"undeclared status, no default", "GET", "/livez", 500, "application/problem+json",
			`{"type":"https://agentd.dev/problems/internal","title":"Internal","status":500,"code":"internal"}`, "status 500 is not declared"},
		{"key of an inline schema", "GET", "/tools", 200, "application/json", `{"data":[],"total":0}`, "total"},
		{"problem without its code", "GET", run, 404, "application/problem+json",
			`{"type":"https://agentd.dev/problems/run_not_found","title":"Run not found","status":404}`, "code"},
		{"unknown problem code", "GET", run, 404, "application/problem+json",
			`{"type":"https://agentd.dev/problems/gone","title":"Gone","status":404,"code":"gone"}`, "code"},
		{"problem as application/json", "GET", run, 404, "application/json", problemJSON, `"application/json" is not declared`},
		{"run as a stream", "GET", run, 200, "text/event-stream", "retry: 2000\n\n", `"text/event-stream" is not declared`},
		{"json where a stream is declared", "GET", run + "/events", 200, "application/json", runJSON(""), `"application/json" is not declared`},
		{"no body where one is declared", "GET", run, 200, "application/json", "", "no body"},
		{"a body where none is declared", "GET", run + "/events", 204, "application/json", `{}`, "declares none"},
		{"body without a content type", "GET", run, 200, "", runJSON(""), "without a Content-Type"},
		{"not JSON", "GET", run, 200, "application/json", `{"id":`, "JSON"},
		{"two JSON values", "GET", run, 200, "application/json", runJSON("") + `{}`, "JSON"},
		{"unknown route answering JSON", "GET", "/nope", 404, "application/json", `{"error":"no"}`, "application/problem+json"},
		{"unknown route with a bad problem", "GET", "/nope", 404, "application/problem+json",
			`{"type":"https://agentd.dev/problems/not_found","title":"Not found","status":404,"code":"not_found","path":"/nope"}`, "path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			CheckResponse(r, c.method, c.path, c.status, header(c.contentType), []byte(c.body))
			if len(r.errs) != 1 {
				t.Fatalf("%d errors, want 1: %q", len(r.errs), r.errs)
			}
			msg, body, _ := strings.Cut(r.errs[0], "\nbody: ")
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, c.method+" "+c.path) ||
				body != excerpt([]byte(c.body)) {
				t.Fatalf("the error does not name the request, the body and %q:\n%s", c.want, r.errs[0])
			}
		})
	}
}

// TestEveryRouteHasItsResponses: each route of api.RouteScopes is an
// operation of the spec, found from a request path of that route, and the
// schema of each JSON response of each operation compiles.
func TestEveryRouteHasItsResponses(t *testing.T) {
	t.Parallel()
	s, err := schemas()
	if err != nil {
		t.Fatal(err)
	}
	for route := range api.RouteScopes {
		method, template, _ := strings.Cut(route, " ")
		path := strings.NewReplacer("{id}", runID).Replace(template) + "?q=1"
		op := s.find(method, path[:strings.IndexByte(path, '?')])
		if op == nil || op.route != route {
			t.Errorf("%s: %s %s finds %+v", route, method, path, op)
			continue
		}
		if len(op.responses) == 0 {
			t.Errorf("%s has no responses", route)
		}
		for code, r := range op.responses {
			for mt, ptr := range r.content {
				if !isJSON(mt) {
					continue
				}
				if ptr == "" {
					t.Errorf("%s %s %s: no schema", route, code, mt)
				} else if _, err := s.schemaAt(ptr); err != nil {
					t.Errorf("%s %s %s: %v", route, code, mt, err)
				}
			}
		}
	}
	for _, p := range []string{"/", "/runs/", "/runs/" + runID + "/events/x", "/tools/x/y", "/runs//steps"} {
		if op := s.find("GET", p); op != nil {
			t.Errorf("GET %s finds %s", p, op.route)
		}
	}
}

func TestExcerptIsCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	r := &recorder{TB: t}
	CheckResponse(r, "GET", "/runs/"+runID, 200, header("application/json"), []byte(long))
	if len(r.errs) != 1 || strings.Contains(r.errs[0], long) || !strings.Contains(r.errs[0], "5000 bytes in all") {
		t.Fatalf("errors %q", r.errs)
	}
}
