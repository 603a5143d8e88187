package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
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

// TestSlowBodyIsCut: a client that sends its body too slowly gets 408
// body_timeout when the body timeout passes, instead of holding its
// connection for as long as it likes.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.BodyTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"in")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"body_timeout"`) {
		t.Fatalf("slow body: %d %s", resp.StatusCode, body)
	}
}
