package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Scope is a permission a credential holds.
type Scope string

// The scopes. Admin holds every other scope too, and may act for another
// tenant (X-Tenant-ID).
const (
	RunsRead     Scope = "runs:read"     // read runs, their steps and events, conversations, tools
	RunsWrite    Scope = "runs:write"    // create, cancel and resume runs
	ActionsWrite Scope = "actions:write" // answer what a waiting run asks: approve, reject, resolve an unknown outcome
	AgentsWrite  Scope = "agents:write"  // define, change and delete the tenant's agents
	MemoryRead   Scope = "memory:read"   // read and search the tenant's memory
	MemoryWrite  Scope = "memory:write"  // write, delete and purge the tenant's memory
	Admin        Scope = "admin"         // everything, and acting for any tenant
)

// Scopes lists every scope.
func Scopes() []Scope {
	return []Scope{RunsRead, RunsWrite, ActionsWrite, AgentsWrite, MemoryRead, MemoryWrite, Admin}
}

// ParseScopes reads a list of scopes separated by commas or spaces. An
// unknown scope is an error; so is an empty list.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		sc := Scope(f)
		if !slices.Contains(Scopes(), sc) {
			return nil, fmt.Errorf("unknown scope %q (want %s)", f, scopeList())
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scope given (want one or more of %s)", scopeList())
	}
	return out, nil
}

func scopeList() string {
	var b strings.Builder
	for i, s := range Scopes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(s))
	}
	return b.String()
}

// Principal is who a request comes from.
type Principal struct {
	// Tenant is the tenant the credential belongs to.
	Tenant string
	// Actor names the credential, to be recorded on what it does:
	// "key:<prefix>", "oidc:<subject>", or "local" without authentication.
	Actor string
	// Scopes are what the credential may do.
	Scopes []Scope
	// Local is true when no credential was asked for (AGENTD_AUTH=none, on
	// a loopback address): the request holds every scope.
	Local bool
	// KeyPrefix names the agentd API key the request came with; empty for
	// another credential. Watch checks the key again while a long request
	// (an event stream) lasts.
	KeyPrefix string
	// Expires is when the credential stops holding by itself (a token's
	// expiry); zero: never. Watch ends a long request then.
	Expires time.Time
}

// Has reports whether p holds scope s (admin holds every scope).
func (p Principal) Has(s Scope) bool {
	return p.Local || slices.Contains(p.Scopes, s) || slices.Contains(p.Scopes, Admin)
}

// Errors of Authenticate. Both are answered 401 with WWW-Authenticate.
var (
	// ErrNoCredential: the request carries no credential.
	ErrNoCredential = errors.New("no credential: send Authorization: Bearer <key or token>")
	// ErrInvalidCredential: the credential is unknown, revoked, expired or
	// malformed. Its wrapping says which, for the client (never the secret).
	ErrInvalidCredential = errors.New("invalid credential")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCredential, fmt.Sprintf(format, args...))
}

// Authenticator says who a request comes from. Its errors wrap
// ErrNoCredential or ErrInvalidCredential, or are failures of its own (a
// database that does not answer), which the API answers 503.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (Principal, error)
}

// LocalTenant is the tenant of requests without authentication.
const LocalTenant = "default"

// None authenticates nobody: every request is local, holds every scope and
// acts for LocalTenant (or the tenant of X-Tenant-ID). agentd uses it only
// on a loopback address.
func None() Authenticator { return none{} }

type none struct{}

func (none) Authenticate(context.Context, *http.Request) (Principal, error) {
	return Principal{Tenant: LocalTenant, Actor: "local", Local: true}, nil
}

var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidTenant reports whether s can name a tenant: 1 to 64 characters of
// A-Z, a-z, 0-9, '_', '.' and '-'.
func ValidTenant(s string) bool { return tenantPattern.MatchString(s) }

// TenantRule says what a tenant name must be, for error messages.
const TenantRule = "1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-'"

// bearer returns the token of an Authorization: Bearer header. A request
// with more than one Authorization header is refused as an invalid
// credential: which of them names its caller is not for agentd to guess
// (a proxy may have added one, and another hop may read the other).
func bearer(r *http.Request) (string, error) {
	hs := r.Header.Values("Authorization")
	if len(hs) > 1 {
		return "", invalid("the request has %d Authorization headers; send one", len(hs))
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", ErrNoCredential
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", invalid("the Authorization header must be \"Bearer <key or token>\"")
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", invalid("the bearer token is empty")
	}
	return token, nil
}
