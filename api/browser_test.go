package api_test

import (
	"net/http"
	"strings"
	"testing"

	"agentd/api"
)

// TestBrowserSafety: a web page of another origin cannot change state (403
// origin_not_allowed, nothing written), nor send a body without declaring it
// JSON (415); the server's own origin and the allowed ones can, and CORS is
// answered for the allowed ones only, preflights included.
func TestBrowserSafety(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.CORSOrigins = []string{"https://ui.example"} })
	host := strings.TrimPrefix(b.srv.URL, "http://")
	before, _ := b.counts("default")

	p := wantProblem(t, b.do("POST", "/runs", `{"input":"hi"}`, "Origin", "https://evil.example"), http.StatusForbidden, "origin_not_allowed")
	if p.Detail == "" {
		t.Error("no detail")
	}
	wantProblem(t, b.do("POST", "/runs", `{"input":"hi"}`, "Content-Type", ""), http.StatusUnsupportedMediaType, "unsupported_media_type")
	wantProblem(t, b.do("POST", "/runs", `{"input":"hi"}`, "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, "unsupported_media_type")
	if n, _ := b.counts("default"); n != before {
		t.Fatalf("refused requests created %d runs", n-before)
	}

	for _, origin := range []string{"http://" + host, "https://ui.example"} {
		r := b.do("POST", "/runs", `{"input":"hi"}`, "Origin", origin)
		if r.status != http.StatusAccepted {
			t.Fatalf("origin %s: %d %s", origin, r.status, r.body)
		}
		if origin == "https://ui.example" && r.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("allowed origin: Access-Control-Allow-Origin %q", r.header.Get("Access-Control-Allow-Origin"))
		}
	}
	// A POST without a body from curl (no Origin) passes: nothing to declare.
	run := b.createRun(`{"input":"hi"}`)
	if r := b.do("POST", "/runs/"+run.ID+"/cancel", "", "Content-Type", ""); r.status != http.StatusOK {
		t.Fatalf("cancel without a body: %d %s", r.status, r.body)
	}

	pre := b.do("OPTIONS", "/runs", "", "Origin", "https://ui.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type, idempotency-key")
	if pre.header.Get("Access-Control-Allow-Origin") != "https://ui.example" || !strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight of an allowed origin: %d %v", pre.status, pre.header)
	}
	pre = b.do("OPTIONS", "/runs", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if v := pre.header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Fatalf("preflight of another origin allowed it: %q", v)
	}
	// Without CORSOrigins, only the server's own origin may change state.
	off := setup(t)
	wantProblem(t, off.do("POST", "/runs", `{"input":"hi"}`, "Origin", "https://ui.example"), http.StatusForbidden, "origin_not_allowed")
}
