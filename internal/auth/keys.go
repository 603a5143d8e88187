package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd"
)

// An API key reads agd_<prefix>_<secret>: the prefix (12 hex digits) names
// the key and is stored as it is; the secret (32 random bytes, base64url)
// is stored only as its SHA-256.
const (
	KeyMarker    = "agd_"
	prefixLen    = 12
	secretBytes  = 32
	secretLength = 43 // base64url of secretBytes, unpadded
)

// NewKey makes a key for tenant with a name and scopes: the token to hand
// to its user once, and the row to store.
func NewKey(tenant, name string, scopes []Scope) (token string, row agentd.APIKey, err error) {
	if !ValidTenant(tenant) {
		return "", agentd.APIKey{}, fmt.Errorf("tenant %q: must be %s", tenant, TenantRule)
	}
	if strings.TrimSpace(name) == "" || utf8.RuneCountInString(name) > 200 {
		return "", agentd.APIKey{}, errors.New("name: must be 1 to 200 characters")
	}
	if len(scopes) == 0 {
		return "", agentd.APIKey{}, errors.New("scopes: give at least one")
	}
	var p [prefixLen / 2]byte
	var s [secretBytes]byte
	if _, err := rand.Read(p[:]); err != nil {
		return "", agentd.APIKey{}, err
	}
	if _, err := rand.Read(s[:]); err != nil {
		return "", agentd.APIKey{}, err
	}
	prefix := hex.EncodeToString(p[:])
	secret := base64.RawURLEncoding.EncodeToString(s[:])
	row = agentd.APIKey{Prefix: prefix, TenantID: tenant, Name: name, SecretHash: hashSecret(secret)}
	for _, sc := range scopes {
		row.Scopes = append(row.Scopes, string(sc))
	}
	return KeyMarker + prefix + "_" + secret, row, nil
}

func hashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// ParseKey splits a key into its prefix and secret.
func ParseKey(token string) (prefix, secret string, err error) {
	rest, ok := strings.CutPrefix(token, KeyMarker)
	if !ok || len(rest) != prefixLen+1+secretLength || rest[prefixLen] != '_' {
		return "", "", invalid("not an agentd API key (agd_<prefix>_<secret>)")
	}
	prefix, secret = rest[:prefixLen], rest[prefixLen+1:]
	if _, err := hex.DecodeString(prefix); err != nil || strings.ToLower(prefix) != prefix {
		return "", "", invalid("not an agentd API key (agd_<prefix>_<secret>)")
	}
	return prefix, secret, nil
}

// KeyStore is where keys are kept (*persist.Store).
type KeyStore interface {
	KeyGet(ctx context.Context, prefix string) (agentd.APIKey, error)
	KeyTouch(ctx context.Context, prefix string, at time.Time) error
}

// KeysConfig configures Keys.
type KeysConfig struct {
	Store KeyStore
	// CacheTTL is how long a key read from the store is trusted before it
	// is read again (default 5s): a revoked key stops working within it, on
	// every instance, for the requests in progress that watch it (Watch:
	// event streams) as for new ones. Negative: read it on every request
	// (and every second for those in progress).
	CacheTTL time.Duration
	// TouchEvery is how often a key's last_used_at is written, at most
	// (default 1 minute).
	TouchEvery time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the failures to record a key's use (default: none).
	Logger *slog.Logger
}

// Keys authenticates agentd's API keys.
type Keys struct {
	cfg     KeysConfig
	mu      sync.Mutex
	cache   map[string]*cachedKey // by prefix
	watches map[string]*keyWatch  // by prefix: keys that requests in progress depend on (Watch)
}

type cachedKey struct {
	key     agentd.APIKey
	fetched time.Time
	touched time.Time
}

// maxCachedKeys bounds the cache; past it, it starts over.
const maxCachedKeys = 10_000

// NewKeys returns the authenticator of the keys in cfg.Store.
func NewKeys(cfg KeysConfig) *Keys {
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = 5 * time.Second
	}
	if cfg.TouchEvery <= 0 {
		cfg.TouchEvery = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Keys{cfg: cfg, cache: map[string]*cachedKey{}, watches: map[string]*keyWatch{}}
}

// Authenticate implements Authenticator.
func (k *Keys) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	token, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	return k.Verify(ctx, token)
}

// Verify checks a key and returns its principal.
func (k *Keys) Verify(ctx context.Context, token string) (Principal, error) {
	prefix, secret, err := ParseKey(token)
	if err != nil {
		return Principal{}, err
	}
	now := k.cfg.Now()
	key, err := k.lookup(ctx, prefix, now)
	if err != nil {
		return Principal{}, err
	}
	if subtle.ConstantTimeCompare(hashSecret(secret), key.SecretHash) != 1 || key.RevokedAt != nil {
		return Principal{}, invalid("unknown or revoked key")
	}
	if prev, due := k.touchDue(prefix, now); due {
		// The key is good: a failed record of its use does not refuse it;
		// the next use tries again.
		if err := k.cfg.Store.KeyTouch(ctx, prefix, now); err != nil {
			k.untouch(prefix, now, prev)
			k.cfg.Logger.WarnContext(ctx, "record an API key's use", "key_prefix", prefix, "error", err)
		}
	}
	p := Principal{Tenant: key.TenantID, Actor: "key:" + prefix, KeyPrefix: prefix}
	for _, s := range key.Scopes {
		p.Scopes = append(p.Scopes, Scope(s))
	}
	return p, nil
}

// lookup returns the key of prefix, from the cache while it is fresh. A
// read that finds the key revoked or deleted ends the requests that watch
// it (Watch).
func (k *Keys) lookup(ctx context.Context, prefix string, now time.Time) (agentd.APIKey, error) {
	k.mu.Lock()
	c := k.cache[prefix]
	if c != nil && now.Sub(c.fetched) < k.cfg.CacheTTL {
		key := c.key
		k.mu.Unlock()
		return key, nil
	}
	k.mu.Unlock()
	key, err := k.cfg.Store.KeyGet(ctx, prefix)
	if errors.Is(err, agentd.ErrNotFound) {
		k.mu.Lock()
		k.keyEndedLocked(prefix)
		k.mu.Unlock()
		return agentd.APIKey{}, invalid("unknown or revoked key")
	}
	if err != nil {
		return agentd.APIKey{}, fmt.Errorf("read key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= maxCachedKeys {
		clear(k.cache)
	}
	var touched time.Time
	if key.LastUsedAt != nil {
		touched = *key.LastUsedAt
	}
	if c = k.cache[prefix]; c != nil && c.touched.After(touched) {
		touched = c.touched
	}
	k.cache[prefix] = &cachedKey{key: key, fetched: now, touched: touched}
	if key.RevokedAt != nil {
		k.keyEndedLocked(prefix)
	}
	return key, nil
}

// touchDue reports whether the use of a verified key at now is due to be
// recorded, and if so marks it recorded (prev is the mark it replaced).
func (k *Keys) touchDue(prefix string, now time.Time) (prev time.Time, due bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.cache[prefix]
	if c == nil {
		return time.Time{}, true // dropped from the cache meanwhile
	}
	if now.Sub(c.touched) < k.cfg.TouchEvery {
		return time.Time{}, false
	}
	prev, c.touched = c.touched, now
	return prev, true
}

// untouch takes back the mark of touchDue after the record failed.
func (k *Keys) untouch(prefix string, now, prev time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.cache[prefix]; c != nil && c.touched.Equal(now) {
		c.touched = prev
	}
}

// Forget drops a key from the cache, so that its revocation holds on this
// instance at once, for the requests that watch it too (they read it now).
func (k *Keys) Forget(prefix string) {
	k.mu.Lock()
	delete(k.cache, prefix)
	if w := k.watches[prefix]; w != nil && !w.done {
		w.timer.Reset(0)
	}
	k.mu.Unlock()
}
