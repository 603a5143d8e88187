package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// OIDCConfig configures OIDC.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL, as its tokens' "iss" says
	// (AGENTD_OIDC_ISSUER).
	Issuer string
	// Audience is what the tokens' "aud" must hold (AGENTD_OIDC_AUDIENCE).
	Audience string
	// JWKSURL is where the provider's signing keys are; empty: found
	// through the issuer's /.well-known/openid-configuration at start-up.
	JWKSURL string
	// TenantClaim names the claim that holds the tenant (default "tenant").
	TenantClaim string
	// ScopesClaim names the claim that holds the scopes, a space-separated
	// string or a list (default "scope"). Scopes agentd does not know are
	// ignored.
	ScopesClaim string
	// HTTPClient fetches the discovery document and the keys (default
	// http.DefaultClient).
	HTTPClient *http.Client
}

// OIDC authenticates the JWTs of an OpenID Connect provider: signed by one
// of its keys (fetched and cached by go-oidc, fetched again when a token
// names a key it does not have), issued by Issuer for Audience, not
// expired. The tenant and the scopes come from the token's claims; the
// actor is "oidc:<subject>".
type OIDC struct {
	cfg      OIDCConfig
	verifier *oidc.IDTokenVerifier
}

// NewOIDC prepares the verifier. ctx bounds the discovery; the key set's
// later fetches keep only its values (go-oidc drops its cancellation).
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("oidc: the issuer and the audience are required (AGENTD_OIDC_ISSUER, AGENTD_OIDC_AUDIENCE)")
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = "tenant"
	}
	if cfg.ScopesClaim == "" {
		cfg.ScopesClaim = "scope"
	}
	if cfg.HTTPClient != nil {
		ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	}
	vc := &oidc.Config{ClientID: cfg.Audience}
	o := &OIDC{cfg: cfg}
	if cfg.JWKSURL != "" {
		o.verifier = oidc.NewVerifier(cfg.Issuer, oidc.NewRemoteKeySet(ctx, cfg.JWKSURL), vc)
		return o, nil
	}
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc: discover %s: %w", cfg.Issuer, err)
	}
	o.verifier = p.Verifier(vc)
	return o, nil
}

// Authenticate implements Authenticator.
func (o *OIDC) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	token, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	return o.Verify(ctx, token)
}

// Verify checks a JWT and returns its principal.
func (o *OIDC) Verify(ctx context.Context, token string) (Principal, error) {
	idt, err := o.verifier.Verify(ctx, token)
	if err != nil {
		return Principal{}, invalid("the token does not verify: %s", tokenError(err))
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Principal{}, invalid("the token's claims do not decode")
	}
	tenant, _ := claims[o.cfg.TenantClaim].(string)
	if !ValidTenant(tenant) {
		return Principal{}, invalid("the token's %q claim must name a tenant (%s)", o.cfg.TenantClaim, TenantRule)
	}
	if idt.Subject == "" {
		return Principal{}, invalid("the token has no subject")
	}
	p := Principal{Tenant: tenant, Actor: "oidc:" + idt.Subject, Expires: idt.Expiry}
	var names []string
	switch v := claims[o.cfg.ScopesClaim].(type) {
	case string:
		names = strings.Fields(v)
	case []any:
		for _, s := range v {
			if s, ok := s.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, n := range names {
		for _, s := range Scopes() {
			if Scope(n) == s {
				p.Scopes = append(p.Scopes, s)
			}
		}
	}
	return p, nil
}

// tokenError is the part of a verification error a client may see: go-oidc's
// messages name the check that failed and nothing secret; they are cut to a
// line.
func tokenError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "oidc: ")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// Either authenticates agentd's API keys (tokens that start agd_) with keys
// and every other bearer token with other.
func Either(keys *Keys, other Authenticator) Authenticator {
	return either{keys: keys, other: other}
}

type either struct {
	keys  *Keys
	other Authenticator
}

func (e either) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	token, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	if strings.HasPrefix(token, KeyMarker) {
		return e.keys.Verify(ctx, token)
	}
	return e.other.Authenticate(ctx, r)
}
