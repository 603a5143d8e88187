package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http/httptest"

	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// keysCmd runs `agentd keys args...` against the database of dbURL and
// returns its standard output.
func keysCmd(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"keys"}, args...), func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}, &out, &errOut, nil)
	if err != nil {
		return out.String(), err
	}
	return out.String(), nil
}

// bearerDo sends a request to base with a bearer token (none when empty)
// and returns the status and body of the answer.
func bearerDo(t *testing.T, base, method, path, body, bearer string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// freeAddr is a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestKeysEndToEnd: a key made by `agentd keys create` is printed once and
// works against a server with AGENTD_AUTH=keys; the run records it as its
// creator; `agentd keys list` shows its use, never its secret; `agentd keys
// revoke` stops it within the key cache's TTL. /metrics is then served
// only on AGENTD_METRICS_ADDR.
func TestKeysEndToEnd(t *testing.T) {
	dbURL := persisttest.NewDatabase(t)
	if _, err := keysCmd(t, dbURL, "create", "--tenant", "acme", "--name", "ci", "--scopes", "runs:read,runs:fly"); err == nil ||
		!strings.Contains(err.Error(), `unknown scope "runs:fly"`) {
		t.Fatalf("keys create with an unknown scope: %v", err)
	}
	out, err := keysCmd(t, dbURL, "create", "--tenant", "acme", "--name", "ci", "--scopes", "runs:read,runs:write")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(out)
	if !strings.HasPrefix(token, "agd_") || strings.Count(token, "\n") != 0 {
		t.Fatalf("keys create printed %q, want one key", out)
	}
	prefix := token[4:16]
	secret := token[17:]

	metricsAddr := freeAddr(t)
	logs := &lockedBuffer{}
	c := startChildLogged(t, []string{"DATABASE_URL=" + dbURL, "AGENTD_AUTH=keys", "AGENTD_KEY_CACHE_TTL=100ms",
		"AGENTD_METRICS_ADDR=" + metricsAddr}, logs)
	base := "http://" + c.addr
	do := func(method, path, body, key string) (int, []byte) {
		t.Helper()
		return bearerDo(t, base, method, path, body, key)
	}
	if status, _ := do("POST", "/runs", `{"input": "hi"}`, ""); status != http.StatusUnauthorized {
		t.Fatalf("POST /runs without a key: %d", status)
	}
	status, body := do("POST", "/runs", `{"input": "hi"}`, token)
	if status != http.StatusAccepted {
		t.Fatalf("POST /runs with the key: %d %s", status, body)
	}
	var r struct {
		ID        string `json:"id"`
		TenantID  string `json:"tenant_id"`
		CreatedBy string `json:"created_by"`
	}
	_ = json.Unmarshal(body, &r)
	if r.TenantID != "acme" || r.CreatedBy != "key:"+prefix {
		t.Fatalf("run %+v, want tenant acme created by key:%s", r, prefix)
	}
	if status, _ := do("GET", "/metrics", "", token); status != http.StatusNotFound {
		t.Fatalf("/metrics on the API's address with auth on: %d, want 404", status)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(m), "agentd_http_requests_total") {
		t.Fatalf("/metrics on AGENTD_METRICS_ADDR: %d", resp.StatusCode)
	}

	list, err := keysCmd(t, dbURL, "list", "--tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], prefix) || !strings.Contains(lines[1], "runs:read,runs:write") ||
		strings.Count(lines[1], "-") < 1 || strings.Contains(list, secret) {
		t.Fatalf("keys list:\n%s", list)
	}
	if f := strings.Fields(lines[1]); f[len(f)-2] == "-" {
		t.Fatalf("keys list shows no last use after the key was used:\n%s", list)
	}
	if out, err := keysCmd(t, dbURL, "revoke", prefix); err != nil || !strings.Contains(out, "revoked "+prefix) {
		t.Fatalf("keys revoke: %q %v", out, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _ := do("GET", "/runs/"+r.ID, "", token)
		if status == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked key still answers %d after 5s (cache TTL 100ms)", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the server's logs show the key's secret")
	}
}

// TestOIDCEndToEnd: a server with AGENTD_AUTH=oidc, pointed at an OpenID
// provider started here (discovery and JWKS), accepts the provider's JWTs:
// the tenant and scopes come from their claims and the actor is the
// subject; a token for another audience is 401, a token without runs:write
// cannot create a run, and an API key works alongside.
func TestOIDCEndToEnd(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var issuer string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + "/jwks",
			"authorization_endpoint": issuer + "/authorize", "token_endpoint": issuer + "/token",
			"id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: "k1", Algorithm: string(jose.ES256), Use: "sig"}}})
	})
	idp := httptest.NewServer(mux)
	t.Cleanup(idp.Close)
	issuer = idp.URL
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	token := func(aud, scope string) string {
		s, err := jwt.Signed(signer).Claims(map[string]any{"iss": issuer, "sub": "alice", "aud": aud,
			"exp": time.Now().Add(time.Hour).Unix(), "org": "acme", "scope": scope}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	dbURL := persisttest.NewDatabase(t)
	apiKey, err := keysCmd(t, dbURL, "create", "--tenant", "globex", "--name", "robot", "--scopes", "runs:read")
	if err != nil {
		t.Fatal(err)
	}
	c := startChild(t, []string{"DATABASE_URL=" + dbURL, "AGENTD_AUTH=oidc", "AGENTD_OIDC_ISSUER=" + issuer,
		"AGENTD_OIDC_AUDIENCE=agentd", "AGENTD_OIDC_TENANT_CLAIM=org"})
	base := "http://" + c.addr
	do := func(method, path, body, bearer string) (int, []byte) {
		t.Helper()
		return bearerDo(t, base, method, path, body, bearer)
	}
	status, body := do("POST", "/runs", `{"input": "hi"}`, token("agentd", "runs:read runs:write"))
	var r struct {
		ID        string `json:"id"`
		TenantID  string `json:"tenant_id"`
		CreatedBy string `json:"created_by"`
	}
	_ = json.Unmarshal(body, &r)
	if status != http.StatusAccepted || r.TenantID != "acme" || r.CreatedBy != "oidc:alice" {
		t.Fatalf("POST /runs with a JWT: %d %s", status, body)
	}
	if status, body := do("GET", "/runs/"+r.ID, "", token("someone-else", "runs:read")); status != http.StatusUnauthorized {
		t.Fatalf("a token for another audience: %d %s", status, body)
	}
	if status, body := do("POST", "/runs", `{"input": "hi"}`, token("agentd", "runs:read")); status != http.StatusForbidden {
		t.Fatalf("a token without runs:write: %d %s", status, body)
	}
	if status, body := do("GET", "/runs/"+r.ID, "", strings.TrimSpace(apiKey)); status != http.StatusNotFound {
		t.Fatalf("another tenant's API key reading the run: %d %s", status, body)
	}
	if status, body := do("GET", "/runs", "", strings.TrimSpace(apiKey)); status != http.StatusOK {
		t.Fatalf("an API key in oidc mode: %d %s", status, body)
	}
}
