package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestTenantMCPServers: tenant acme declares a remote MCP server (the
// reference server-everything, over streamable HTTP) whose header carries
// a secret: the answer says it connected and names its tools, acme's runs
// call them (the header reaches the server), and the tools list shows them
// as acme's. Tenant rival sees the server nowhere and cannot name its
// tools. The secret is in no answer and no row; a URL the egress rule
// refuses, a bad name and a bad timeout are refused naming the field; a
// deleted server's tools are gone.
func TestTenantMCPServers(t *testing.T) {
	t.Parallel()
	endpoint := startEverythingHTTP(t, everything(t))
	target, _ := url.Parse(endpoint)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var mu sync.Mutex
	var auths []string // the Authorization of each tools/call that reached the server
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte(`"tools/call"`)) {
				mu.Lock()
				auths = append(auths, r.Header.Get("Authorization"))
				mu.Unlock()
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	frontURL, _ := url.Parse(front.URL)
	const secret = "Bearer mcp-s3cret-of-acme"
	dbURL := persisttest.NewDatabase(t)
	keys := map[string]string{}
	for _, tenant := range []string{"acme", "rival"} {
		out, err := keysCmd(t, dbURL, "create", "--tenant", tenant, "--name", "ci", "--scopes", "runs:read,runs:write,agents:write")
		if err != nil {
			t.Fatal(err)
		}
		keys[tenant] = strings.TrimSpace(out)
	}
	key := make([]byte, 32)
	rand.Read(key)
	base, _ := startServer(t, map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys",
		"AGENTD_SECRET_KEY": base64.StdEncoding.EncodeToString(key), "AGENTD_HTTP_ALLOW_HOSTS": frontURL.Host})
	var answers strings.Builder
	call := func(tenant, method, path string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+keys[tenant])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answers.Write(b)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	decl := map[string]any{"name": "every", "url": front.URL + target.Path, "tools": []string{"echo", "get-sum"},
		"headers": map[string]string{"Authorization": secret}}
	code, v := call("acme", http.MethodPost, "/mcp-servers", decl)
	st, _ := v["status"].(map[string]any)
	if code != http.StatusCreated || st == nil || st["connected"] != true || len(st["tools"].([]any)) != 2 ||
		v["header_names"].([]any)[0] != "Authorization" {
		t.Fatalf("declare: %d %v", code, v)
	}
	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"name": "meta", "url": "http://169.254.169.254/mcp"}, "url"},
		{map[string]any{"name": "under_score", "url": front.URL + "/mcp"}, "name"},
		{map[string]any{"name": "slow", "url": front.URL + "/mcp", "connect_timeout_ms": -1}, "connect_timeout_ms"},
		{map[string]any{"name": "nourl"}, "url"},
	} {
		if code, v := call("acme", http.MethodPost, "/mcp-servers", bad.body); code != http.StatusUnprocessableEntity || v["field"] != bad.field {
			t.Fatalf("declare %v: %d %v, want 422 naming %s", bad.body, code, v, bad.field)
		}
	}
	if code, _ := call("acme", http.MethodPost, "/mcp-servers", decl); code != http.StatusConflict {
		t.Fatalf("declared twice: %d", code)
	}
	// The tools are acme's, and its runs call them.
	listed := func(tenant string) map[string]bool {
		_, v := call(tenant, http.MethodGet, "/tools", nil)
		out := map[string]bool{}
		for _, x := range v["data"].([]any) {
			tl := x.(map[string]any)
			if strings.HasPrefix(tl["name"].(string), "every__") {
				out[tl["name"].(string)] = tl["tenant"] == true
			}
		}
		return out
	}
	if got := listed("acme"); len(got) != 2 || !got["every__echo"] || !got["every__get-sum"] {
		t.Fatalf("acme's tools: %v", got)
	}
	code, v = call("acme", http.MethodPost, "/runs", map[string]any{"input": "/call every__echo {\"message\":\"hi from acme\"}\n/say done",
		"tools": []string{"every__echo"}})
	if code != http.StatusAccepted {
		t.Fatalf("acme's run: %d %v", code, v)
	}
	runID := v["id"].(string)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, v = call("acme", http.MethodGet, "/runs/"+runID, nil); v["status"] == "completed" || time.Now().After(deadline) {
			break
		}
	}
	_, steps := call("acme", http.MethodGet, "/runs/"+runID+"/steps", nil)
	c := steps["data"].([]any)[0].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	if v["status"] != "completed" || c["status"] != "succeeded" || !strings.Contains(mustJSON(c["result"]), "hi from acme") {
		t.Fatalf("acme's run %v, its call %v", v["status"], c)
	}
	mu.Lock()
	if len(auths) != 1 || auths[0] != secret {
		t.Fatalf("the server saw the calls' Authorization %q", auths)
	}
	mu.Unlock()
	// Rival sees none of it.
	if got := listed("rival"); len(got) != 0 {
		t.Fatalf("rival's tools: %v", got)
	}
	if code, _ := call("rival", http.MethodGet, "/mcp-servers/every", nil); code != http.StatusNotFound {
		t.Fatalf("rival reads acme's server: %d", code)
	}
	if _, v := call("rival", http.MethodGet, "/mcp-servers", nil); len(v["data"].([]any)) != 0 {
		t.Fatalf("rival's list: %v", v)
	}
	if code, v := call("rival", http.MethodPost, "/runs", map[string]any{"input": "hi", "tools": []string{"every__echo"}}); code != http.StatusUnprocessableEntity {
		t.Fatalf("rival names acme's tool: %d %v", code, v)
	}
	if code, v := call("acme", http.MethodGet, "/mcp-servers/every", nil); code != http.StatusOK || v["url"] != front.URL+target.Path {
		t.Fatalf("GET: %d %v", code, v)
	}
	// The secret is in no answer, and no row.
	if strings.Contains(answers.String(), "s3cret") {
		t.Fatal("an answer holds the secret")
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dump string
	if err := conn.QueryRow(context.Background(), `SELECT string_agg(t::text, ' ') FROM tenant_tools t`).Scan(&dump); err != nil ||
		strings.Contains(dump, "s3cret") || !strings.Contains(dump, "mcp") {
		t.Fatalf("the table: %v %s", err, dump)
	}
	// Deleted, its tools are gone.
	if code, _ := call("acme", http.MethodDelete, "/mcp-servers/every", nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if got := listed("acme"); len(got) != 0 {
		t.Fatalf("acme's tools after the delete: %v", got)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
