package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
)

// TestBodyMemory: a body without Content-Length reserves its share of
// AGENTD_MAX_BODY_MEMORY as it arrives; while it holds all of it, a
// request with a body is answered 503 server_busy with Retry-After, and
// once it is answered the next one goes through. A body past its limit by
// its Content-Length is 413, unread.
func TestBodyMemory(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.MaxBodyMemory = 1 << 20 })

	pr, pw := io.Pipe()
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/runs", pr)
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.srv.Client().Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	pw.Write([]byte(`{"input": "` + strings.Repeat("a", 64<<10))) // the body is being read: the budget is held

	var r response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if r = b.do(http.MethodPost, "/runs", `{"input": "hello"}`); r.status != http.StatusAccepted {
			break
		}
	}
	wantProblem(t, r, http.StatusServiceUnavailable, api.CodeServerBusy)
	if r.header.Get("Retry-After") == "" {
		t.Error("server_busy without Retry-After")
	}

	pw.Write([]byte(`"}`))
	pw.Close()
	if got := <-first; got != http.StatusAccepted {
		t.Fatalf("the body that held the budget: %d", got)
	}
	want[map[string]any](t, b.do(http.MethodPost, "/runs", `{"input": "hello"}`), http.StatusAccepted)

	big := bytes.Repeat([]byte(" "), 2<<20) // past AGENTD_MAX_BODY_BYTES (1 MiB) for /agents
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/agents", bytes.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body past its limit: %d, want 413", resp.StatusCode)
	}
}
