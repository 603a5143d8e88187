package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// rsaKeys are made once: a 2048-bit key takes a while under -race.
var rsaKeys = sync.OnceValue(func() []*rsa.PrivateKey {
	keys := make([]*rsa.PrivateKey, 3)
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// signingKey is a private key and the kid its tokens name.
type signingKey struct {
	kid string
	key *rsa.PrivateKey
}

// provider is an OpenID provider on an httptest.Server: discovery and a
// JWKS of the keys it publishes.
type provider struct {
	srv       *httptest.Server
	mu        sync.Mutex
	published []signingKey
	discovery atomic.Int64 // requests of the discovery document
	jwks      atomic.Int64 // requests of the key set
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{published: []signingKey{{kid: "k1", key: rsaKeys()[0]}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		p.discovery.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{ //nolint:errcheck
			"issuer":                                p.srv.URL,
			"jwks_uri":                              p.srv.URL + "/jwks",
			"authorization_endpoint":                p.srv.URL + "/authorize",
			"token_endpoint":                        p.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		p.jwks.Add(1)
		p.mu.Lock()
		var set jose.JSONWebKeySet
		for _, k := range p.published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"})
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(set) //nolint:errcheck
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// publish adds a key to the key set the provider serves.
func (p *provider) publish(k signingKey) {
	p.mu.Lock()
	p.published = append(p.published, k)
	p.mu.Unlock()
}

// key is the i-th key the provider publishes.
func (p *provider) key(i int) signingKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[i]
}

// claims are those of a good token of p; set overrides them (a nil value
// removes the claim).
func (p *provider) claims(set map[string]any) map[string]any {
	c := map[string]any{
		"iss":    p.srv.URL,
		"sub":    "user-42",
		"aud":    "agentd",
		"iat":    time.Now().Unix(),
		"exp":    time.Now().Add(time.Hour).Unix(),
		"tenant": "acme",
		"scope":  "runs:read openid",
	}
	for k, v := range set {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// sign makes a JWT of claims signed by k, its kid in the header.
func sign(t *testing.T, k signingKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), k.kid))
	if err != nil {
		t.Fatalf("signer: %v", err)
	}
	token, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return token
}

// unsigned makes a JWT with alg "none".
func unsigned(t *testing.T, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(payload) + "."
}

// newOIDC is the verifier of p, found by discovery or, with jwksURL, given
// its key set; mod adjusts the config.
func newOIDC(t *testing.T, p *provider, jwksURL bool, mod func(*auth.OIDCConfig)) *auth.OIDC {
	t.Helper()
	cfg := auth.OIDCConfig{Issuer: p.srv.URL, Audience: "agentd"}
	if jwksURL {
		cfg.JWKSURL = p.srv.URL + "/jwks"
	}
	if mod != nil {
		mod(&cfg)
	}
	o, err := auth.NewOIDC(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewOIDC(%+v): %v", cfg, err)
	}
	return o
}

// modes are the two ways NewOIDC finds the provider's keys.
var modes = []struct {
	name    string
	jwksURL bool
}{{"discovery", false}, {"JWKSURL", true}}

func samePrincipal(a, b auth.Principal) bool {
	return a.Tenant == b.Tenant && a.Actor == b.Actor && slices.Equal(a.Scopes, b.Scopes) && a.Local == b.Local
}

func TestOIDCValidToken(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t)
			o := newOIDC(t, p, m.jwksURL, nil)
			wantDiscovery := int64(1)
			if m.jwksURL {
				wantDiscovery = 0
			}
			if n := p.discovery.Load(); n != wantDiscovery {
				t.Fatalf("discovery requests: %d; want %d", n, wantDiscovery)
			}
			for _, tc := range []struct {
				name   string
				claims map[string]any
				want   auth.Principal
			}{
				{"scope string", nil,
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42", Scopes: []auth.Scope{auth.RunsRead}}},
				{"scope list", map[string]any{"scope": []string{"runs:write", "email", "admin"}},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42", Scopes: []auth.Scope{auth.RunsWrite, auth.Admin}}},
				{"every scope", map[string]any{"scope": "runs:read runs:write actions:write agents:write memory:read memory:write admin"},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42", Scopes: auth.Scopes()}},
				{"no known scope", map[string]any{"scope": "openid profile"},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42"}},
				{"no scope claim", map[string]any{"scope": nil},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42"}},
				{"scope of another type", map[string]any{"scope": 7},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42"}},
				{"audience list", map[string]any{"aud": []string{"other", "agentd"}, "sub": "svc@x", "tenant": "t.1-b_c"},
					auth.Principal{Tenant: "t.1-b_c", Actor: "oidc:svc@x", Scopes: []auth.Scope{auth.RunsRead}}},
				{"not before within the skew", map[string]any{"nbf": time.Now().Add(time.Minute).Unix()},
					auth.Principal{Tenant: "acme", Actor: "oidc:user-42", Scopes: []auth.Scope{auth.RunsRead}}},
			} {
				token := sign(t, p.key(0), p.claims(tc.claims))
				got, err := o.Authenticate(t.Context(), bearerRequest(token))
				if err != nil {
					t.Fatalf("%s: Authenticate: %v", tc.name, err)
				}
				if !samePrincipal(got, tc.want) {
					t.Fatalf("%s: principal = %+v; want %+v", tc.name, got, tc.want)
				}
			}
			pr, err := o.Verify(t.Context(), sign(t, p.key(0), p.claims(nil)))
			if err != nil || pr.Has(auth.RunsWrite) || !pr.Has(auth.RunsRead) || pr.Local {
				t.Fatalf("runs:read token: %+v, %v; want runs:read and not runs:write", pr, err)
			}
			// The key set is fetched and then kept.
			if p.jwks.Load() == 0 {
				t.Fatal("the tokens verified without fetching the key set")
			}
			cached(t, p, o, sign(t, p.key(0), p.claims(nil)))
		})
	}
}

func TestOIDCCustomClaims(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	o := newOIDC(t, p, false, func(c *auth.OIDCConfig) { c.TenantClaim = "org"; c.ScopesClaim = "permissions" })

	token := sign(t, p.key(0), p.claims(map[string]any{"org": "globex", "permissions": []string{"actions:write"}}))
	got, err := o.Authenticate(t.Context(), bearerRequest(token))
	want := auth.Principal{Tenant: "globex", Actor: "oidc:user-42", Scopes: []auth.Scope{auth.ActionsWrite}}
	if err != nil || !samePrincipal(got, want) {
		t.Fatalf("custom claims: %+v, %v; want %+v", got, err, want)
	}
	got, err = o.Authenticate(t.Context(), bearerRequest(sign(t, p.key(0), p.claims(map[string]any{"org": "globex", "permissions": "runs:write admin"}))))
	want.Scopes = []auth.Scope{auth.RunsWrite, auth.Admin}
	if err != nil || !samePrincipal(got, want) {
		t.Fatalf("custom claims, scopes as a string: %+v, %v; want %+v", got, err, want)
	}
	// The default claims are not read any more: "tenant" without "org" is no tenant.
	_, err = o.Authenticate(t.Context(), bearerRequest(sign(t, p.key(0), p.claims(nil))))
	if !errors.Is(err, auth.ErrInvalidCredential) || !strings.Contains(err.Error(), `"org"`) {
		t.Fatalf("a token without the org claim: %v; want ErrInvalidCredential naming \"org\"", err)
	}
}

func TestOIDCRefuses(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t)
			o := newOIDC(t, p, m.jwksURL, nil)
			good := p.key(0)
			stranger := signingKey{kid: "k-stranger", key: rsaKeys()[2]}
			impostor := signingKey{kid: good.kid, key: rsaKeys()[2]} // names the provider's kid
			pubDER, err := x509.MarshalPKIXPublicKey(&good.key.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			hmacSigner, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pubDER},
				(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), good.kid))
			if err != nil {
				t.Fatal(err)
			}
			hs256, err := jwt.Signed(hmacSigner).Claims(p.claims(nil)).Serialize()
			if err != nil {
				t.Fatal(err)
			}
			valid := sign(t, good, p.claims(nil))
			parts := strings.Split(valid, ".")
			tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(
				[]byte(`{"iss":"`+p.srv.URL+`","sub":"user-42","aud":"agentd","exp":9999999999,"tenant":"acme","scope":"admin"}`)) + "." + parts[2]

			for _, tc := range []struct {
				name  string
				token string
				says  string // a part of the error, if not ""
			}{
				{"expired", sign(t, good, p.claims(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})), "expired"},
				{"no expiry", sign(t, good, p.claims(map[string]any{"exp": nil})), "expired"},
				{"not yet valid", sign(t, good, p.claims(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "nbf"},
				{"wrong audience", sign(t, good, p.claims(map[string]any{"aud": "someone-else"})), "audience"},
				{"audience list without agentd", sign(t, good, p.claims(map[string]any{"aud": []string{"a", "b"}})), "audience"},
				{"no audience", sign(t, good, p.claims(map[string]any{"aud": nil})), "audience"},
				{"wrong issuer", sign(t, good, p.claims(map[string]any{"iss": "https://evil.example"})), "different provider"},
				{"issuer with a trailing slash", sign(t, good, p.claims(map[string]any{"iss": p.srv.URL + "/"})), "different provider"},
				{"no issuer", sign(t, good, p.claims(map[string]any{"iss": nil})), "different provider"},
				{"another key, unknown kid", sign(t, stranger, p.claims(nil)), ""},
				{"another key, the provider's kid", sign(t, impostor, p.claims(nil)), ""},
				{"tampered claims", tampered, ""},
				{"no tenant", sign(t, good, p.claims(map[string]any{"tenant": nil})), `"tenant"`},
				{"invalid tenant", sign(t, good, p.claims(map[string]any{"tenant": "a b"})), `"tenant"`},
				{"empty tenant", sign(t, good, p.claims(map[string]any{"tenant": ""})), `"tenant"`},
				{"tenant too long", sign(t, good, p.claims(map[string]any{"tenant": strings.Repeat("x", 65)})), `"tenant"`},
				{"tenant not a string", sign(t, good, p.claims(map[string]any{"tenant": 42})), `"tenant"`},
				{"no subject", sign(t, good, p.claims(map[string]any{"sub": nil})), "subject"},
				{"alg none", unsigned(t, p.claims(nil)), ""},
				{"HS256 keyed with the public key", hs256, ""},
				{"garbage", "not-a-jwt", ""},
				{"three garbage parts", "a.b.c", ""},
				{"an API key", "agd_0123456789ab_" + strings.Repeat("A", 43), ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got, err := o.Authenticate(t.Context(), bearerRequest(tc.token))
					if !errors.Is(err, auth.ErrInvalidCredential) {
						t.Fatalf("Authenticate = %+v, %v; want ErrInvalidCredential", got, err)
					}
					if got.Tenant != "" || got.Actor != "" || got.Scopes != nil {
						t.Fatalf("refused, but gave a principal: %+v", got)
					}
					if tc.says != "" && !strings.Contains(err.Error(), tc.says) {
						t.Fatalf("error %q does not say %q", err, tc.says)
					}
					if ps := strings.Split(tc.token, "."); len(ps) == 3 && len(ps[2]) > 8 && strings.Contains(err.Error(), ps[2]) {
						t.Fatalf("error %q shows the token's signature", err)
					}
				})
			}
			// The good token still verifies after all of that.
			if _, err := o.Verify(t.Context(), valid); err != nil {
				t.Fatalf("the good token after the refusals: %v", err)
			}
		})
	}
}

func TestOIDCMissingCredential(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	o := newOIDC(t, p, true, nil)
	for h, want := range map[string]error{
		"":        auth.ErrNoCredential,
		"Basic x": auth.ErrInvalidCredential,
		"Bearer ": auth.ErrInvalidCredential,
	} {
		if _, err := o.Authenticate(t.Context(), request(h)); !errors.Is(err, want) {
			t.Errorf("Authorization %q: %v; want %v", h, err, want)
		}
	}
	if n := p.jwks.Load(); n != 0 {
		t.Fatalf("requests without a token fetched the key set %d times", n)
	}
}

// verifySoon verifies token, trying again while go-oidc hands back the
// result of the key set fetch that has just ended: its RemoteKeySet clears
// its in-flight fetch only after waking the waiters, so a fetch asked for in
// that moment shares the previous result instead of fetching the new keys.
// The moment lasts until the fetching goroutine runs again; no sleep is
// needed, only a yield.
func verifySoon(t *testing.T, o *auth.OIDC, token string) auth.Principal {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		var p auth.Principal
		if p, err = o.Verify(t.Context(), token); err == nil {
			return p
		}
	}
	t.Fatalf("the token never verified: %v", err)
	return auth.Principal{}
}

// cached checks that the verifier keeps the key set: once go-oidc has
// stored its last fetch, verifying tokens of known keys fetches nothing.
func cached(t *testing.T, p *provider, o *auth.OIDC, tokens ...string) {
	t.Helper()
	for range 100 {
		before := p.jwks.Load()
		for range 10 {
			for _, tok := range tokens {
				if _, err := o.Verify(t.Context(), tok); err != nil {
					t.Fatalf("token of a known key: %v", err)
				}
			}
		}
		if p.jwks.Load() == before {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("verifying tokens of known keys keeps fetching the key set (%d fetches)", p.jwks.Load())
}

func TestOIDCKeyRotation(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t)
			o := newOIDC(t, p, m.jwksURL, nil)
			oldToken := sign(t, p.key(0), p.claims(map[string]any{"sub": "old"}))
			if got := verifySoon(t, o, oldToken); got.Actor != "oidc:old" {
				t.Fatalf("token of the first key: %+v", got)
			}
			cached(t, p, o, oldToken)

			// A key the provider does not serve is refused, however often the set is fetched again...
			next := signingKey{kid: "k2", key: rsaKeys()[1]}
			newToken := sign(t, next, p.claims(map[string]any{"sub": "new"}))
			before := p.jwks.Load()
			if _, err := o.Verify(t.Context(), newToken); !errors.Is(err, auth.ErrInvalidCredential) {
				t.Fatalf("token of an unpublished key: %v; want ErrInvalidCredential", err)
			}

			// ...and accepted once it does: the unknown kid makes go-oidc fetch the set again.
			p.publish(next)
			if got := verifySoon(t, o, newToken); got.Actor != "oidc:new" || got.Tenant != "acme" {
				t.Fatalf("token of the rotated key: %+v", got)
			}
			if n := p.jwks.Load(); n <= before {
				t.Fatalf("the rotated key verified without fetching the key set again (%d fetches, %d before)", n, before)
			}
			// Both keys verify now, from the cache.
			cached(t, p, o, oldToken, newToken)
			if p.discovery.Load() > 1 {
				t.Fatalf("the rotation repeated the discovery: %d requests", p.discovery.Load())
			}
		})
	}
}

// roundTripCounter is a transport that counts the requests it carries.
type roundTripCounter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *roundTripCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func TestOIDCHTTPClient(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t)
			rt := &roundTripCounter{next: p.srv.Client().Transport}
			o := newOIDC(t, p, m.jwksURL, func(c *auth.OIDCConfig) { c.HTTPClient = &http.Client{Transport: rt} })
			if _, err := o.Verify(t.Context(), sign(t, p.key(0), p.claims(nil))); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := p.discovery.Load() + p.jwks.Load()
			if n := rt.n.Load(); n != want || n == 0 {
				t.Fatalf("the client carried %d requests; the provider saw %d", n, want)
			}
		})
	}
}

func TestNewOIDCErrors(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	for _, tc := range []struct {
		name string
		cfg  auth.OIDCConfig
	}{
		{"no issuer", auth.OIDCConfig{Audience: "agentd"}},
		{"no audience", auth.OIDCConfig{Issuer: p.srv.URL}},
		{"no audience, with JWKSURL", auth.OIDCConfig{Issuer: p.srv.URL, JWKSURL: p.srv.URL + "/jwks"}},
		{"no discovery document", auth.OIDCConfig{Issuer: p.srv.URL + "/nowhere", Audience: "agentd"}},
		{"issuer other than discovered", auth.OIDCConfig{Issuer: p.srv.URL + "/", Audience: "agentd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if o, err := auth.NewOIDC(t.Context(), tc.cfg); err == nil {
				t.Fatalf("NewOIDC(%+v) = %v, nil; want an error", tc.cfg, o)
			}
		})
	}
	// Discovery is bounded by the context.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: p.srv.URL, Audience: "agentd"}); err == nil {
		t.Fatal("NewOIDC with a cancelled context: no error")
	}
}

// recorder is an Authenticator that counts the requests it is asked about.
type recorder struct {
	next auth.Authenticator
	n    atomic.Int64
}

func (r *recorder) Authenticate(ctx context.Context, req *http.Request) (auth.Principal, error) {
	r.n.Add(1)
	return r.next.Authenticate(ctx, req)
}

func TestEither(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	cs := &countingStore{inner: store}
	keys := auth.NewKeys(auth.KeysConfig{Store: cs, CacheTTL: -1})
	p := newProvider(t)
	other := &recorder{next: newOIDC(t, p, false, nil)}
	a := auth.Either(keys, other)

	key, row := insertKey(t, store, "acme", auth.RunsWrite)
	got := mustAuthenticate(t, a, key)
	if want := (auth.Principal{Tenant: "acme", Actor: "key:" + row.Prefix, Scopes: []auth.Scope{auth.RunsWrite}}); !samePrincipal(got, want) {
		t.Fatalf("API key through Either: %+v; want %+v", got, want)
	}
	if cs.gets.Load() != 1 || other.n.Load() != 0 {
		t.Fatalf("API key: %d key reads, %d OIDC calls; want 1 and 0", cs.gets.Load(), other.n.Load())
	}

	got = mustAuthenticate(t, a, sign(t, p.key(0), p.claims(map[string]any{"tenant": "globex"})))
	if want := (auth.Principal{Tenant: "globex", Actor: "oidc:user-42", Scopes: []auth.Scope{auth.RunsRead}}); !samePrincipal(got, want) {
		t.Fatalf("JWT through Either: %+v; want %+v", got, want)
	}
	if cs.gets.Load() != 1 || other.n.Load() != 1 {
		t.Fatalf("JWT: %d key reads, %d OIDC calls; want 1 and 1", cs.gets.Load(), other.n.Load())
	}

	// A bad agd_ token is the keys' to refuse; it never reaches OIDC.
	mustRefuse(t, a, "agd_"+row.Prefix+"_"+strings.Repeat("C", 43))
	mustRefuse(t, a, "agd_short")
	if other.n.Load() != 1 {
		t.Fatalf("bad API keys reached OIDC: %d calls", other.n.Load())
	}
	// A bad JWT is OIDC's.
	mustRefuse(t, a, sign(t, p.key(0), p.claims(map[string]any{"aud": "nope"})))
	if cs.gets.Load() != 2 || other.n.Load() != 2 {
		t.Fatalf("bad JWT: %d key reads, %d OIDC calls; want 2 and 2", cs.gets.Load(), other.n.Load())
	}
	// No credential is nobody's.
	if _, err := a.Authenticate(t.Context(), request("")); !errors.Is(err, auth.ErrNoCredential) {
		t.Fatalf("no header through Either: %v; want ErrNoCredential", err)
	}
	if _, err := a.Authenticate(t.Context(), request("Basic x")); !errors.Is(err, auth.ErrInvalidCredential) {
		t.Fatalf("Basic through Either: %v; want ErrInvalidCredential", err)
	}
	if other.n.Load() != 2 {
		t.Fatalf("requests without a bearer token reached OIDC: %d calls", other.n.Load())
	}
}
