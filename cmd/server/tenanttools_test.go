package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// TestTenantTools: tenant acme declares a webhook tool whose header carries
// a secret; acme's runs call it with that header, and after a PUT with the
// new one. Tenant rival sees it nowhere (GET /tools, GET /tools/{name}),
// cannot name it in a run, and its model's call of it reaches nothing. The
// secret appears in no answer of any route, in none of the server's logs
// (at debug level) and nowhere in the table's rows. A URL the egress rule
// refuses is refused at once; a deleted tool is no longer called.
func TestTenantTools(t *testing.T) {
	t.Parallel()
	const secret, rotated = "Bearer s3cret-of-acme", "Bearer rotated-s3cret"
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/crm": webhooktest.Respond(http.StatusOK, `{"customer":"Ann"}`)})
	sinkURL, _ := url.Parse(sink.URL)
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
	logs := &lockedBuffer{}
	base, stopped := serveInProcess(t, map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys", "AGENTD_LOG_LEVEL": "debug",
		"AGENTD_SECRET_KEY": base64.StdEncoding.EncodeToString(key), "AGENTD_HTTP_ALLOW_HOSTS": sinkURL.Host}, logs)
	t.Cleanup(func() { _ = stopped() })

	var answers strings.Builder // every body any route answered
	call := func(tenant, method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keys[tenant])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
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
	tool := `{"name": "crm", "description": "finds a customer", "url": "` + sink.URL + `/crm", "effect": "read_only",
		"parameters": {"type": "object", "properties": {"id": {"type": "string"}}}, "headers": {"Authorization": "` + secret + `"}}`
	if code, v := call("acme", http.MethodPost, "/tools", tool); code != http.StatusCreated || v["header_names"].([]any)[0] != "Authorization" {
		t.Fatalf("declare: %d %v", code, v)
	}
	runOf := func(tenant, body string) map[string]any {
		t.Helper()
		code, v := call(tenant, http.MethodPost, "/runs", body)
		if code != http.StatusAccepted {
			t.Fatalf("%s's run: %d %v", tenant, code, v)
		}
		id := v["id"].(string)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, v = call(tenant, http.MethodGet, "/runs/"+id, ""); v["status"] == "completed" || v["status"] == "failed" {
				return v
			}
		}
		t.Fatalf("%s's run %s did not end", tenant, id)
		return nil
	}
	const uses = `"input": "/call crm {\"id\": \"c1\"}\n/say done"`
	if r := runOf("acme", `{"tools": ["crm"], `+uses+`}`); r["output_text"] != "done" || sink.Count("/crm") != 1 {
		t.Fatalf("acme's run: %v, %d calls", r, sink.Count("/crm"))
	}
	if got := sink.Requests()[0].Header.Get("Authorization"); got != secret {
		t.Fatalf("the tool was called with Authorization %q", got)
	}

	// rival: nowhere to be seen, and never called.
	if _, v := call("rival", http.MethodGet, "/tools", ""); strings.Contains(toJSON(v), `"crm"`) {
		t.Fatalf("rival's GET /tools lists acme's tool: %v", v)
	}
	if code, v := call("rival", http.MethodGet, "/tools/crm", ""); code != http.StatusNotFound || v["code"] != "tool_not_found" {
		t.Fatalf("rival's GET /tools/crm: %d %v", code, v)
	}
	if code, v := call("rival", http.MethodPost, "/runs", `{"tools": ["crm"], "input": "x"}`); code != http.StatusUnprocessableEntity || v["code"] != "unknown_tool" {
		t.Fatalf("rival's run naming it: %d %v", code, v)
	}
	runOf("rival", `{`+uses+`}`)
	if n := sink.Count("/crm"); n != 1 {
		t.Fatalf("rival's model reached acme's tool: %d calls", n)
	}

	// A new secret; a URL the egress rule refuses; a delete.
	if code, v := call("acme", http.MethodPut, "/tools/crm", strings.Replace(tool, secret, rotated, 1)); code != http.StatusOK {
		t.Fatalf("replace: %d %v", code, v)
	}
	runOf("acme", `{"tools": ["crm"], `+uses+`}`)
	if reqs := sink.Requests(); len(reqs) != 2 || reqs[1].Header.Get("Authorization") != rotated {
		t.Fatalf("after the PUT the tool was called %d times, last with %q", len(reqs), reqs[len(reqs)-1].Header.Get("Authorization"))
	}
	for _, bad := range []string{"http://169.254.169.254/latest", "http://127.0.0.1:1/x", "http://localhost:9/x"} {
		if code, v := call("acme", http.MethodPost, "/tools", `{"name": "leak", "url": "`+bad+`", "effect": "read_only"}`); code != http.StatusUnprocessableEntity || v["field"] != "url" {
			t.Errorf("%s: %d %v", bad, code, v)
		}
	}
	if code, _ := call("acme", http.MethodGet, "/tools/crm", ""); code != http.StatusOK {
		t.Fatalf("GET /tools/crm: %d", code)
	}
	if code, _ := call("acme", http.MethodDelete, "/tools/crm", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	runOf("acme", `{`+uses+`}`)
	if n := sink.Count("/crm"); n != 2 {
		t.Fatalf("a deleted tool was called: %d calls", n)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	call("acme", http.MethodPost, "/tools", tool) // a row to dump
	var dump string
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(string_agg(row_to_json(t)::text, ' '), '') FROM tenant_tools t`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, `"crm"`) {
		t.Fatalf("the dump holds no row: %s", dump)
	}
	for _, s := range []string{"s3cret", strings.TrimPrefix(secret, "Bearer ")} {
		for what, text := range map[string]string{"an answer": answers.String(), "the logs": logs.String(), "the table": dump} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %q", what, s)
			}
		}
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
