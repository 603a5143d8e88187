package auth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// countingStore is a KeyStore that counts the reads and writes it passes on
// to the real store.
type countingStore struct {
	inner   auth.KeyStore
	gets    atomic.Int64
	touches atomic.Int64
}

func (c *countingStore) KeyGet(ctx context.Context, prefix string) (agentd.APIKey, error) {
	c.gets.Add(1)
	return c.inner.KeyGet(ctx, prefix)
}

func (c *countingStore) KeyTouch(ctx context.Context, prefix string, at time.Time) error {
	c.touches.Add(1)
	return c.inner.KeyTouch(ctx, prefix, at)
}

// fakeClock is a clock that moves only when told to. Its start is whole
// seconds, so that PostgreSQL (microseconds) keeps it exactly.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

// insertKey makes a key of tenant with scopes and stores it.
func insertKey(t *testing.T, store *persist.Store, tenant string, scopes ...auth.Scope) (string, agentd.APIKey) {
	t.Helper()
	token, row, err := auth.NewKey(tenant, "test key", scopes)
	if err != nil {
		t.Fatalf("NewKey(%q, %v): %v", tenant, scopes, err)
	}
	stored, err := store.KeyInsert(context.Background(), row)
	if err != nil {
		t.Fatalf("KeyInsert: %v", err)
	}
	return token, stored
}

// request is a GET with the Authorization header h (none when empty).
func request(h string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/runs", nil)
	if h != "" {
		r.Header.Set("Authorization", h)
	}
	return r
}

func bearerRequest(token string) *http.Request { return request("Bearer " + token) }

// secretOf is the secret part of an agd_ token.
func secretOf(t *testing.T, token string) string {
	t.Helper()
	_, secret, err := auth.ParseKey(token)
	if err != nil {
		t.Fatalf("ParseKey(%q): %v", token, err)
	}
	return secret
}

func mustAuthenticate(t *testing.T, a auth.Authenticator, token string) auth.Principal {
	t.Helper()
	p, err := a.Authenticate(t.Context(), bearerRequest(token))
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	return p
}

func mustRefuse(t *testing.T, a auth.Authenticator, token string) error {
	t.Helper()
	p, err := a.Authenticate(t.Context(), bearerRequest(token))
	if !errors.Is(err, auth.ErrInvalidCredential) {
		t.Fatalf("Authenticate: got principal %+v, error %v; want ErrInvalidCredential", p, err)
	}
	return err
}

var tokenPattern = regexp.MustCompile(`^agd_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$`)

func TestNewKey(t *testing.T) {
	t.Parallel()
	scopes := []auth.Scope{auth.RunsRead, auth.ActionsWrite}
	token, row, err := auth.NewKey("acme", "ci bot", scopes)
	if err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		t.Fatalf("token %q does not match %s", token, tokenPattern)
	}
	prefix, secret := m[1], m[2]
	if raw, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(raw) != 32 {
		t.Fatalf("secret %q: %d bytes, %v; want 32 bytes of base64url", secret, len(raw), err)
	}
	if p, s, err := auth.ParseKey(token); err != nil || p != prefix || s != secret {
		t.Fatalf("ParseKey(token) = %q, %q, %v; want %q, %q", p, s, err, prefix, secret)
	}
	if row.Prefix != prefix || row.TenantID != "acme" || row.Name != "ci bot" ||
		!slices.Equal(row.Scopes, []string{"runs:read", "actions:write"}) {
		t.Fatalf("row = %+v; want prefix %s, tenant acme, name \"ci bot\", scopes [runs:read actions:write]", row, prefix)
	}
	if row.LastUsedAt != nil || row.RevokedAt != nil {
		t.Fatalf("a new row is used or revoked: %+v", row)
	}
	// The row keeps the secret's SHA-256, and the secret in no form.
	want := sha256.Sum256([]byte(secret))
	if !bytes.Equal(row.SecretHash, want[:]) {
		t.Fatalf("row.SecretHash = %x; want sha256(secret) = %x", row.SecretHash, want)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(secret)
	dump := fmt.Sprintf("%+v %q %x", row, row.SecretHash, row.SecretHash)
	for _, form := range []string{secret, string(raw), hex.EncodeToString(raw)} {
		if strings.Contains(dump, form) || bytes.Contains(row.SecretHash, []byte(form)) {
			t.Fatalf("the row %s holds the secret", dump)
		}
	}

	token2, row2, err := auth.NewKey("acme", "ci bot", scopes)
	if err != nil {
		t.Fatalf("second NewKey: %v", err)
	}
	if token2 == token || row2.Prefix == row.Prefix || bytes.Equal(row2.SecretHash, row.SecretHash) ||
		secretOf(t, token2) == secret {
		t.Fatalf("two keys share a part:\n%s %x\n%s %x", token, row.SecretHash, token2, row2.SecretHash)
	}
}

func TestNewKeyRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tenant, keyName string
		scopes                []auth.Scope
	}{
		{"empty tenant", "", "k", []auth.Scope{auth.RunsRead}},
		{"tenant with a space", "a b", "k", []auth.Scope{auth.RunsRead}},
		{"tenant too long", strings.Repeat("t", 65), "k", []auth.Scope{auth.RunsRead}},
		{"empty name", "acme", "", []auth.Scope{auth.RunsRead}},
		{"blank name", "acme", "   ", []auth.Scope{auth.RunsRead}},
		{"name too long", "acme", strings.Repeat("n", 201), []auth.Scope{auth.RunsRead}},
		{"no scope", "acme", "k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, row, err := auth.NewKey(tc.tenant, tc.keyName, tc.scopes)
			if err == nil || token != "" || row.Prefix != "" {
				t.Fatalf("NewKey(%q, %q, %v) = %q, %+v, %v; want an error", tc.tenant, tc.keyName, tc.scopes, token, row, err)
			}
		})
	}
}

func TestKeysAuthenticate(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	keys := auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: -1})

	reader, readerRow := insertKey(t, store, "acme", auth.RunsRead)
	p := mustAuthenticate(t, keys, reader)
	want := auth.Principal{Tenant: "acme", Actor: "key:" + readerRow.Prefix, Scopes: []auth.Scope{auth.RunsRead}}
	if p.Tenant != want.Tenant || p.Actor != want.Actor || !slices.Equal(p.Scopes, want.Scopes) || p.Local {
		t.Fatalf("principal = %+v; want %+v", p, want)
	}
	for s, has := range map[auth.Scope]bool{auth.RunsRead: true, auth.RunsWrite: false, auth.ActionsWrite: false, auth.Admin: false} {
		if p.Has(s) != has {
			t.Errorf("runs:read key: Has(%s) = %v; want %v", s, !has, has)
		}
	}

	admin, adminRow := insertKey(t, store, "ops", auth.Admin)
	p = mustAuthenticate(t, keys, admin)
	if p.Tenant != "ops" || p.Actor != "key:"+adminRow.Prefix || !slices.Equal(p.Scopes, []auth.Scope{auth.Admin}) {
		t.Fatalf("admin principal = %+v", p)
	}
	for _, s := range auth.Scopes() {
		if !p.Has(s) {
			t.Errorf("admin key: Has(%s) = false; admin holds every scope", s)
		}
	}

	// The scheme is case-insensitive and spaces around the token do not count.
	for _, h := range []string{"bearer " + reader, "BEARER " + reader, "Bearer   " + reader + "  "} {
		if p, err := keys.Authenticate(t.Context(), request(h)); err != nil || p.Actor != "key:"+readerRow.Prefix {
			t.Errorf("Authorization %q: %+v, %v", h, p, err)
		}
	}
}

func TestKeysAuthenticateErrors(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	keys := auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: -1})
	good, goodRow := insertKey(t, store, "acme", auth.RunsWrite)
	revoked, revokedRow := insertKey(t, store, "acme", auth.RunsWrite)
	mustAuthenticate(t, keys, revoked)
	if _, err := store.KeyRevoke(t.Context(), revokedRow.Prefix); err != nil {
		t.Fatalf("KeyRevoke: %v", err)
	}
	goodSecret := secretOf(t, good)
	wrongSecret := strings.Repeat("A", 43)
	_, unknownRow, err := auth.NewKey("acme", "never stored", []auth.Scope{auth.RunsRead})
	if err != nil {
		t.Fatal(err)
	}
	// A key whose prefix surely has letters, to write it in upper case.
	lettersSecret := strings.Repeat("L", 43)
	lettersHash := sha256.Sum256([]byte(lettersSecret))
	if _, err := store.KeyInsert(t.Context(), agentd.APIKey{Prefix: "abcdef012345", TenantID: "acme", Name: "letters",
		Scopes: []string{"runs:read"}, SecretHash: lettersHash[:]}); err != nil {
		t.Fatalf("KeyInsert: %v", err)
	}
	mustAuthenticate(t, keys, "agd_abcdef012345_"+lettersSecret)

	for _, tc := range []struct {
		name   string
		header string // "" sends no Authorization header
		want   error
		secret string // a secret the error must not show
	}{
		{"no header", "", auth.ErrNoCredential, ""},
		{"basic scheme", "Basic x", auth.ErrInvalidCredential, ""},
		{"basic scheme with a key", "Basic " + good, auth.ErrInvalidCredential, goodSecret},
		{"scheme only", "Bearer", auth.ErrInvalidCredential, ""},
		{"empty bearer", "Bearer ", auth.ErrInvalidCredential, ""},
		{"blank bearer", "Bearer    ", auth.ErrInvalidCredential, ""},
		{"not a key", "Bearer hello", auth.ErrInvalidCredential, ""},
		{"marker only", "Bearer agd_", auth.ErrInvalidCredential, ""},
		{"secret too short", "Bearer " + good[:len(good)-1], auth.ErrInvalidCredential, goodSecret[:42]},
		{"secret too long", "Bearer " + good + "x", auth.ErrInvalidCredential, goodSecret},
		{"upper-case prefix", "Bearer agd_ABCDEF012345_" + lettersSecret, auth.ErrInvalidCredential, lettersSecret},
		{"prefix not hex", "Bearer agd_zzzzzzzzzzzz_" + goodSecret, auth.ErrInvalidCredential, goodSecret},
		{"no separator", "Bearer agd_" + goodRow.Prefix + "-" + goodSecret, auth.ErrInvalidCredential, goodSecret},
		{"wrong marker", "Bearer agx_" + goodRow.Prefix + "_" + goodSecret, auth.ErrInvalidCredential, goodSecret},
		{"wrong secret", "Bearer agd_" + goodRow.Prefix + "_" + wrongSecret, auth.ErrInvalidCredential, wrongSecret},
		{"another key's secret", "Bearer agd_" + goodRow.Prefix + "_" + secretOf(t, revoked), auth.ErrInvalidCredential, secretOf(t, revoked)},
		{"unknown prefix", "Bearer agd_" + unknownRow.Prefix + "_" + goodSecret, auth.ErrInvalidCredential, goodSecret},
		{"revoked key", "Bearer " + revoked, auth.ErrInvalidCredential, secretOf(t, revoked)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := keys.Authenticate(t.Context(), request(tc.header))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Authenticate(%q) = %+v, %v; want %v", tc.header, p, err, tc.want)
			}
			if tc.want == auth.ErrInvalidCredential && errors.Is(err, auth.ErrNoCredential) {
				t.Fatalf("Authenticate(%q): %v is both invalid and missing", tc.header, err)
			}
			if p.Tenant != "" || p.Actor != "" || p.Scopes != nil || p.Local {
				t.Fatalf("Authenticate(%q) failed but gave a principal: %+v", tc.header, p)
			}
			for _, s := range []string{tc.secret, goodSecret} {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Fatalf("error %q shows the secret %q", err, s)
				}
			}
		})
	}

	// The good key still works after all of that.
	if p := mustAuthenticate(t, keys, good); p.Actor != "key:"+goodRow.Prefix {
		t.Fatalf("good key after the failures: %+v", p)
	}
}

// A store that fails is neither "no credential" nor "invalid credential":
// the API answers 503, not 401.
func TestKeysStoreFailure(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	token, _ := insertKey(t, store, "acme", auth.RunsRead)
	keys := auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: -1})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p, err := keys.Authenticate(ctx, bearerRequest(token))
	if err == nil || errors.Is(err, auth.ErrInvalidCredential) || errors.Is(err, auth.ErrNoCredential) {
		t.Fatalf("Authenticate with a store that does not answer = %+v, %v; want a failure of its own", p, err)
	}
	if strings.Contains(err.Error(), secretOf(t, token)) {
		t.Fatalf("error %q shows the secret", err)
	}
}

func TestKeysCache(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	clock := newClock()
	cs := &countingStore{inner: store}
	keys := auth.NewKeys(auth.KeysConfig{Store: cs, CacheTTL: time.Hour, Now: clock.Now})

	a, aRow := insertKey(t, store, "acme", auth.RunsRead)
	for range 100 {
		mustAuthenticate(t, keys, a)
	}
	if n := cs.gets.Load(); n != 1 {
		t.Fatalf("100 verifies of one key: %d reads; want 1", n)
	}
	// A wrong secret is checked against the cached key, and fails.
	mustRefuse(t, keys, "agd_"+aRow.Prefix+"_"+strings.Repeat("B", 43))

	// Revoked in the store, the key works from the cache until it is forgotten.
	if _, err := store.KeyRevoke(t.Context(), aRow.Prefix); err != nil {
		t.Fatalf("KeyRevoke: %v", err)
	}
	clock.Advance(30 * time.Minute)
	if p := mustAuthenticate(t, keys, a); p.Actor != "key:"+aRow.Prefix {
		t.Fatalf("cached key: %+v", p)
	}
	if n := cs.gets.Load(); n != 1 {
		t.Fatalf("reads before Forget: %d; want 1", n)
	}
	keys.Forget(aRow.Prefix)
	mustRefuse(t, keys, a)
	if n := cs.gets.Load(); n != 2 {
		t.Fatalf("reads after Forget: %d; want 2", n)
	}

	// Another key, revoked: it works until its cached copy is CacheTTL old.
	b, bRow := insertKey(t, store, "acme", auth.RunsWrite)
	mustAuthenticate(t, keys, b)
	if _, err := store.KeyRevoke(t.Context(), bRow.Prefix); err != nil {
		t.Fatalf("KeyRevoke: %v", err)
	}
	clock.Advance(time.Hour - time.Nanosecond)
	mustAuthenticate(t, keys, b)
	if n := cs.gets.Load(); n != 3 {
		t.Fatalf("reads within the TTL: %d; want 3", n)
	}
	clock.Advance(time.Nanosecond)
	mustRefuse(t, keys, b)
	if n := cs.gets.Load(); n != 4 {
		t.Fatalf("reads once the TTL passed: %d; want 4", n)
	}
	// Forgetting a key that is not cached is harmless.
	keys.Forget("000000000000")
}

func TestKeysCacheTTL(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	token, _ := insertKey(t, store, "acme", auth.RunsRead)
	for _, tc := range []struct {
		name  string
		ttl   time.Duration
		step  time.Duration // the clock moves by step between verifies
		reads int64         // reads of 10 verifies
	}{
		{"negative reads every time", -1, 0, 10},
		{"default is 5s, within it", 0, time.Second, 2},    // 0 1 2 3 4 | 5 6 7 8 9
		{"default is 5s, past it", 0, 5 * time.Second, 10}, // each verify finds a copy 5s old
		{"an hour", time.Hour, time.Minute, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newClock()
			cs := &countingStore{inner: store}
			keys := auth.NewKeys(auth.KeysConfig{Store: cs, CacheTTL: tc.ttl, Now: clock.Now})
			for range 10 {
				mustAuthenticate(t, keys, token)
				clock.Advance(tc.step)
			}
			if n := cs.gets.Load(); n != tc.reads {
				t.Fatalf("CacheTTL %v, a verify every %v: %d reads of 10 verifies; want %d", tc.ttl, tc.step, n, tc.reads)
			}
		})
	}
}

func TestKeysTouch(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{-1, time.Hour} {
		t.Run(fmt.Sprintf("CacheTTL %v", ttl), func(t *testing.T) {
			t.Parallel()
			store, _ := persisttest.New(t)
			clock := newClock()
			cs := &countingStore{inner: store}
			keys := auth.NewKeys(auth.KeysConfig{Store: cs, CacheTTL: ttl, TouchEvery: time.Minute, Now: clock.Now})
			token, row := insertKey(t, store, "acme", auth.RunsRead)

			lastUsed := func() *time.Time {
				t.Helper()
				k, err := store.KeyGet(t.Context(), row.Prefix)
				if err != nil {
					t.Fatalf("KeyGet: %v", err)
				}
				return k.LastUsedAt
			}
			if at := lastUsed(); at != nil {
				t.Fatalf("a new key was used at %v", at)
			}

			first := clock.Now()
			mustAuthenticate(t, keys, token)
			if at := lastUsed(); at == nil || !at.Equal(first) {
				t.Fatalf("after the first use: last_used_at %v; want %v", at, first)
			}
			if n := cs.touches.Load(); n != 1 {
				t.Fatalf("touches after the first use: %d; want 1", n)
			}

			for _, d := range []time.Duration{0, 10 * time.Second, 30 * time.Second, time.Minute - time.Nanosecond} {
				clock.Set(first.Add(d))
				mustAuthenticate(t, keys, token)
			}
			if n := cs.touches.Load(); n != 1 {
				t.Fatalf("touches after uses within the minute: %d; want 1", n)
			}
			if at := lastUsed(); at == nil || !at.Equal(first) {
				t.Fatalf("after uses within the minute: last_used_at %v; want %v", at, first)
			}

			second := first.Add(time.Minute)
			clock.Set(second)
			mustAuthenticate(t, keys, token)
			if n := cs.touches.Load(); n != 2 {
				t.Fatalf("touches after a use a minute later: %d; want 2", n)
			}
			if at := lastUsed(); at == nil || !at.Equal(second) {
				t.Fatalf("after a use a minute later: last_used_at %v; want %v", at, second)
			}
		})
	}
}

// Another instance (or this one restarted) reads last_used_at from the
// store and does not write it again within the minute.
func TestKeysTouchAcrossInstances(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	clock := newClock()
	token, row := insertKey(t, store, "acme", auth.RunsRead)
	first := &countingStore{inner: store}
	mustAuthenticate(t, auth.NewKeys(auth.KeysConfig{Store: first, Now: clock.Now}), token)
	if n := first.touches.Load(); n != 1 {
		t.Fatalf("first instance: %d touches; want 1", n)
	}

	clock.Advance(30 * time.Second)
	cs := &countingStore{inner: store}
	second := auth.NewKeys(auth.KeysConfig{Store: cs, Now: clock.Now})
	mustAuthenticate(t, second, token)
	if n := cs.touches.Load(); n != 0 {
		t.Fatalf("second instance, 30s after the first's use: %d touches; want 0", n)
	}
	clock.Advance(30 * time.Second)
	third := auth.NewKeys(auth.KeysConfig{Store: cs, Now: clock.Now})
	mustAuthenticate(t, third, token)
	if n := cs.touches.Load(); n != 1 {
		t.Fatalf("a third instance, a minute after the first use: %d touches; want 1", n)
	}
	k, err := store.KeyGet(t.Context(), row.Prefix)
	if err != nil || k.LastUsedAt == nil || !k.LastUsedAt.Equal(clock.Now()) {
		t.Fatalf("last_used_at = %v, %v; want %v", k.LastUsedAt, err, clock.Now())
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 43)
	for _, tc := range []struct {
		token, prefix string // prefix "" : an error
	}{
		{"agd_0123456789ab_" + secret, "0123456789ab"},
		{"agd_ABCDEF012345_" + secret, ""},
		{"agd_0123456789aB_" + secret, ""},
		{"agd_0123456789ag_" + secret, ""},
		{"agd_0123456789a_" + secret + "s", ""},
		{"agd_0123456789abc" + secret, ""},
		{"AGD_0123456789ab_" + secret, ""},
		{"0123456789ab_" + secret, ""},
		{"agd_0123456789ab_" + secret[1:], ""},
		{"", ""},
	} {
		prefix, sec, err := auth.ParseKey(tc.token)
		switch {
		case tc.prefix == "" && !errors.Is(err, auth.ErrInvalidCredential):
			t.Errorf("ParseKey(%q) = %q, %q, %v; want ErrInvalidCredential", tc.token, prefix, sec, err)
		case tc.prefix == "" && strings.Contains(err.Error(), secret[:20]):
			t.Errorf("ParseKey(%q): error %q shows the secret", tc.token, err)
		case tc.prefix != "" && (err != nil || prefix != tc.prefix || sec != secret):
			t.Errorf("ParseKey(%q) = %q, %q, %v; want %q, %q", tc.token, prefix, sec, err, tc.prefix, secret)
		}
	}
}

// Many requests at once with a key whose use is due are recorded once.
func TestKeysTouchConcurrent(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	clock := newClock()
	cs := &countingStore{inner: store}
	keys := auth.NewKeys(auth.KeysConfig{Store: cs, CacheTTL: time.Hour, TouchEvery: time.Minute, Now: clock.Now})
	token, row := insertKey(t, store, "acme", auth.RunsRead)
	mustAuthenticate(t, keys, token)
	clock.Advance(2 * time.Minute)

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			p, err := keys.Authenticate(t.Context(), bearerRequest(token))
			if err == nil && p.Actor != "key:"+row.Prefix {
				err = fmt.Errorf("actor %q", p.Actor)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Authenticate: %v", err)
		}
	}
	if g, n := cs.gets.Load(), cs.touches.Load(); g != 1 || n != 2 {
		t.Fatalf("51 uses, 50 of them at once a minute later: %d reads, %d touches; want 1 and 2", g, n)
	}
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []auth.Scope // nil: an error
	}{
		{"runs:read,runs:write", []auth.Scope{auth.RunsRead, auth.RunsWrite}},
		{"runs:read runs:write", []auth.Scope{auth.RunsRead, auth.RunsWrite}},
		{"runs:read, runs:write", []auth.Scope{auth.RunsRead, auth.RunsWrite}},
		{" admin ", []auth.Scope{auth.Admin}},
		{"runs:read,runs:read runs:read", []auth.Scope{auth.RunsRead}},
		{"actions:write,admin,actions:write,runs:write", []auth.Scope{auth.ActionsWrite, auth.Admin, auth.RunsWrite}},
		{"runs:read,runs:write,actions:write,agents:write,memory:read,memory:write,admin", auth.Scopes()},
		{"", nil},
		{" , ,", nil},
		{"runs:delete", nil},
		{"runs:read,Admin", nil},
		{"runs:read,runs:writ", nil},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := auth.ParseScopes(tc.in)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("ParseScopes(%q) = %v; want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseScopes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
	if _, err := auth.ParseScopes("runs:read,bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("the error of an unknown scope does not name it: %v", err)
	}
}

func TestNone(t *testing.T) {
	t.Parallel()
	if auth.LocalTenant != "default" {
		t.Fatalf("LocalTenant = %q; want default", auth.LocalTenant)
	}
	for _, h := range []string{"", "Bearer whatever", "Basic x"} {
		p, err := auth.None().Authenticate(t.Context(), request(h))
		if err != nil {
			t.Fatalf("None, Authorization %q: %v", h, err)
		}
		if !p.Local || p.Tenant != "default" || p.Actor != "local" {
			t.Fatalf("None, Authorization %q: %+v; want a local principal of tenant default", h, p)
		}
		for _, s := range auth.Scopes() {
			if !p.Has(s) {
				t.Fatalf("None: Has(%s) = false; a local principal holds every scope", s)
			}
		}
	}
}

func TestValidTenant(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"default": true, "acme": true, "A-b_c.9": true, strings.Repeat("x", 64): true,
		"": false, "a b": false, "a/b": false, "é": false, strings.Repeat("x", 65): false, "acme\n": false,
	} {
		if got := auth.ValidTenant(s); got != want {
			t.Errorf("ValidTenant(%q) = %v; want %v", s, got, want)
		}
	}
}

// failingTouchStore is a KeyStore whose writes of last_used_at fail while
// fail is set.
type failingTouchStore struct {
	countingStore
	fail atomic.Bool
}

func (f *failingTouchStore) KeyTouch(ctx context.Context, prefix string, at time.Time) error {
	if f.fail.Load() {
		f.touches.Add(1)
		return errors.New("database gone")
	}
	return f.countingStore.KeyTouch(ctx, prefix, at)
}

// TestKeysTouchOnlyForGoodUses: a refused attempt (a wrong secret for a
// known prefix) does not use up the due write of last_used_at, and a failed
// write neither refuses the key nor counts as done.
func TestKeysTouchOnlyForGoodUses(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	token, row := insertKey(t, store, "acme", auth.RunsRead)
	clock := newClock()
	fs := &failingTouchStore{countingStore: countingStore{inner: store}}
	keys := auth.NewKeys(auth.KeysConfig{Store: fs, CacheTTL: time.Hour, TouchEvery: time.Minute, Now: clock.Now})
	lastUsed := func() time.Time {
		t.Helper()
		k, err := store.KeyGet(t.Context(), row.Prefix)
		if err != nil || k.LastUsedAt == nil {
			t.Fatalf("KeyGet: %+v %v", k, err)
		}
		return k.LastUsedAt.UTC()
	}
	t0 := clock.Now()
	mustAuthenticate(t, keys, token)
	if got := lastUsed(); !got.Equal(t0) {
		t.Fatalf("last_used_at %v, want %v", got, t0)
	}
	clock.Advance(2 * time.Minute)
	wrong := "agd_" + row.Prefix + "_" + strings.Repeat("A", 43)
	mustRefuse(t, keys, wrong)
	clock.Advance(time.Second)
	mustAuthenticate(t, keys, token)
	if got, want := lastUsed(), t0.Add(2*time.Minute+time.Second); !got.Equal(want) {
		t.Fatalf("after a refused attempt then a good use: last_used_at %v, want %v", got, want)
	}

	clock.Advance(2 * time.Minute)
	fs.fail.Store(true)
	mustAuthenticate(t, keys, token) // the write fails; the key is good
	fs.fail.Store(false)
	clock.Advance(time.Second)
	mustAuthenticate(t, keys, token)
	if got, want := lastUsed(), t0.Add(4*time.Minute+2*time.Second); !got.Equal(want) {
		t.Fatalf("after a failed write then a good use: last_used_at %v, want %v", got, want)
	}
}
