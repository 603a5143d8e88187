package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// everything returns the path of the reference MCP server's entry point,
// server-everything from npm, or skips the test when it is not installed.
func everything(t *testing.T) string {
	t.Helper()
	const main = "@modelcontextprotocol/server-everything/dist/index.js"
	return filepath.Join(needNode(t, "mcp", main), "node_modules", main)
}

// startEverythingHTTP runs server-everything over streamable HTTP and
// returns its endpoint.
func startEverythingHTTP(t *testing.T, main string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("node", main, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
		}
	}
	t.Fatal("server-everything did not listen")
	return ""
}

// stepsCalls reads the tool calls of a run's steps, in order.
func stepsCalls(t *testing.T, c *client.Client, runID string) []client.ToolCall {
	t.Helper()
	steps, err := c.Steps(testCtx(t), runID)
	if err != nil {
		t.Fatal(err)
	}
	var out []client.ToolCall
	for _, s := range steps {
		out = append(out, s.ToolCalls...)
	}
	return out
}

// waitStatus reads run id until it is in one of the statuses want.
func waitStatus(t *testing.T, c *client.Client, id string, want ...agentd.RunStatus) *client.Run {
	t.Helper()
	ctx := testCtx(t)
	for {
		r, err := c.GetRun(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if slices.Contains(want, r.Status) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s is %s, want one of %v", id, r.Status, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestMCPTools: agentd offers server-everything's tools, over stdio and
// over streamable HTTP, with effects from their annotations or the tools
// file; a run calls them; a server killed mid-call leaves a side-effect call
// unknown and never makes it again, and has a read-only one made again once
// it is back.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	main := everything(t)
	endpoint := startEverythingHTTP(t, main)
	// In front of it, a proxy that keeps the tools/call requests.
	target, _ := url.Parse(endpoint)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	direct := proxy.Director
	proxy.Director = func(r *http.Request) { direct(r); r.Host = target.Host }
	var callsMu sync.Mutex
	var callBodies []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte(`"tools/call"`)) || bytes.Contains(b, []byte(`"notifications/cancelled"`)) {
				callsMu.Lock()
				callBodies = append(callBodies, string(b))
				callsMu.Unlock()
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	endpoint = front.URL + target.Path
	marker := fmt.Sprintf("agentd-mcp-test-%d", time.Now().UnixNano())
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	long := "trigger-long-running-operation"
	cfg := fmt.Sprintf(`{"mcp_servers": [
		{"name": "every", "command": "node", "args": [%q, "stdio", %q], "tools": ["echo", "get-sum", "get-structured-content", %q],
		 "overrides": {%q: {"effect": "side_effect", "timeout_ms": 20000}}},
		{"name": "again", "command": "node", "args": [%q, "stdio", %q], "tools": [%q],
		 "overrides": {%q: {"effect": "read_only", "timeout_ms": 20000}}},
		{"name": "web", "url": %q, "tools": ["echo", "get-sum", %q]},
		{"name": "down", "url": "http://127.0.0.1:1/mcp"}]}`,
		main, marker+"-se", long, long, main, marker+"-ro", long, long, endpoint, long)
	os.WriteFile(toolsFile, []byte(cfg), 0o600)
	s := setup(t, withEnv("AGENTD_TOOLS_FILE", toolsFile))
	c, ctx := s.Client, testCtx(t)

	// The tools appear, with their effects; the server that is down is
	// said to be so, and agentd is ready all the same.
	want := map[string]string{"every__echo": "read_only", "every__get-sum": "read_only", "every__get-structured-content": "read_only", "every__" + long: "side_effect",
		"again__" + long: "read_only", "web__echo": "read_only", "web__get-sum": "read_only", "web__" + long: "read_only"}
	var listed map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tools, err := c.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = map[string]string{}
		for _, tl := range tools {
			if strings.Contains(tl.Name, "__") {
				listed[tl.Name] = string(tl.Effect)
			}
		}
		if fmt.Sprint(listed) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			ready, err := c.Readiness(ctx)
			t.Fatalf("MCP tools listed: %v, want %v; readiness: %+v %v", listed, want, ready, err)
		}
	}
	ready, err := c.Readiness(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]bool{}
	for _, s := range ready.MCPServers {
		states[s.Name] = s.Connected
		if s.Name == "down" && s.Error == "" {
			t.Errorf("the server that is down has no error in /readyz")
		}
	}
	if ready.Status != "ready" || !states["every"] || !states["web"] || states["down"] || len(states) != 4 {
		t.Fatalf("/readyz: %+v", ready)
	}

	t.Run("calls", func(t *testing.T) {
		id := startRun(t, c, "/call every__echo {\"message\":\"hi\"}\n/call web__get-sum {\"a\":2,\"b\":3}\n/next\n/call every__get-sum {\"a\":\"x\"}\n/call every__get-structured-content {\"location\":\"Chicago\"}\n/say done")
		if r := waitStatus(t, c, id, agentd.StatusCompleted, agentd.StatusFailed); r.Status != agentd.StatusCompleted {
			t.Fatalf("run ended %s", r.Status)
		}
		calls := stepsCalls(t, c, id)
		if len(calls) != 4 || string(calls[0].Result) != `"Echo: hi"` || string(calls[1].Result) != `"The sum of 2 and 3 is 5."` {
			t.Fatalf("calls: %+v", calls)
		}
		// Structured content comes with the content, in MCP's own form.
		var structured struct {
			Content    []struct{ Type, Text string }
			Structured struct {
				Temperature *float64
				Conditions  string
			} `json:"structured_content"`
		}
		if err := json.Unmarshal(calls[3].Result, &structured); err != nil || calls[3].Status != agentd.CallSucceeded ||
			structured.Structured.Temperature == nil || structured.Structured.Conditions == "" || len(structured.Content) == 0 || structured.Content[0].Type != "text" {
			t.Fatalf("the structured result: %s %s (%v)", calls[3].Status, calls[3].Result, err)
		}
		// The call's idempotency key went in the request's _meta.
		callsMu.Lock()
		bodies := strings.Join(callBodies, "\n")
		callsMu.Unlock()
		if key := fmt.Sprintf(`"_meta":{"github.com/agentd/agentd/idempotency_key":"%s:1:call_0_1"}`, id); !strings.Contains(bodies, key) {
			t.Fatalf("no %s in the tools/call requests: %s", key, bodies)
		}
		// Arguments that do not fit the tool's schema are a tool error the
		// model sees, and the server is not called.
		if e, _ := json.Marshal(calls[2].Error); calls[2].Status != agentd.CallFailed || calls[2].Attempts != 0 || !strings.Contains(string(e), "wrong type") {
			t.Fatalf("a call with bad arguments: %s %d %s", calls[2].Status, calls[2].Attempts, e)
		}
	})

	kill := func(marker string) {
		t.Helper()
		if out, err := exec.Command("pkill", "-KILL", "-f", marker).CombinedOutput(); err != nil {
			t.Fatalf("pkill %s: %v %s", marker, err, out)
		}
	}
	midCall := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if r, err := c.GetRun(ctx, id); err == nil && r.Status == agentd.StatusRunning {
				calls := stepsCalls(t, c, id)
				if len(calls) == 1 && calls[0].Status == agentd.CallRunning {
					time.Sleep(300 * time.Millisecond) // well inside the 3 s operation
					return
				}
			}
		}
		t.Fatal("the call did not start")
	}

	t.Run("side effect killed mid-call", func(t *testing.T) {
		id := startRun(t, c, fmt.Sprintf("/call every__%s {\"duration\":3,\"steps\":3}\n/say done", long))
		midCall(id)
		kill(marker + "-se")
		r := waitStatus(t, c, id, agentd.StatusRequiresAction, agentd.StatusCompleted, agentd.StatusFailed)
		calls := stepsCalls(t, c, id)
		if r.Status != agentd.StatusRequiresAction || len(calls) != 1 || calls[0].Status != agentd.CallUnknown || calls[0].Attempts != 1 {
			t.Fatalf("run %s, calls %+v", r.Status, calls)
		}
		time.Sleep(2 * time.Second) // the server is back by now: the call is still not made again
		if calls := stepsCalls(t, c, id); calls[0].Attempts != 1 || calls[0].Status != agentd.CallUnknown {
			t.Fatalf("the side effect was made again: %+v", calls[0])
		}
	})

	t.Run("read-only killed mid-call", func(t *testing.T) {
		id := startRun(t, c, fmt.Sprintf("/call again__%s {\"duration\":3,\"steps\":3}\n/say done", long))
		midCall(id)
		kill(marker + "-ro")
		if r := waitStatus(t, c, id, agentd.StatusCompleted, agentd.StatusFailed, agentd.StatusRequiresAction); r.Status != agentd.StatusCompleted {
			t.Fatalf("run ended %s", r.Status)
		}
		calls := stepsCalls(t, c, id)
		if len(calls) != 1 || calls[0].Status != agentd.CallSucceeded || calls[0].Attempts != 2 {
			t.Fatalf("the read-only call: %+v", calls)
		}
	})

	t.Run("cancel mid-call", func(t *testing.T) {
		id := startRun(t, c, fmt.Sprintf("/call web__%s {\"duration\":5,\"steps\":5}\n/say done", long))
		midCall(id)
		if _, err := c.CancelRun(ctx, id); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, c, id, agentd.StatusCancelled)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			callsMu.Lock()
			bodies := strings.Join(callBodies, "\n")
			callsMu.Unlock()
			if strings.Contains(bodies, `"notifications/cancelled"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the cancelled run's MCP request was not cancelled (no notifications/cancelled)")
			}
		}
	})
}
