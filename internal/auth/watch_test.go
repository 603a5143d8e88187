package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// ended waits until ctx ends, at most d, and returns its cause (nil: it did
// not end).
func ended(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// TestWatchEndsWithTheKey: the requests that watch a key end once it is
// revoked, within about the cache's TTL, with a cause that says so, and the
// key is then refused; however many watch it, the key is read about once
// per TTL for all of them; released watches read nothing more.
func TestWatchEndsWithTheKey(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	counting := &countingStore{inner: store}
	const ttl = 200 * time.Millisecond
	keys := auth.NewKeys(auth.KeysConfig{Store: counting, CacheTTL: ttl})
	token, row := insertKey(t, store, "acme", auth.RunsRead)
	p := mustAuthenticate(t, keys, token)
	if p.KeyPrefix != row.Prefix {
		t.Fatalf("principal %+v names no key", p)
	}

	const watchers = 50
	ctxs := make([]context.Context, watchers)
	for i := range ctxs {
		var stop context.CancelFunc
		ctxs[i], stop = auth.Watch(t.Context(), keys, p)
		defer stop()
	}
	start, before := time.Now(), counting.gets.Load()
	time.Sleep(5 * ttl)
	for i, ctx := range ctxs {
		if ctx.Err() != nil {
			t.Fatalf("watch %d of a good key ended: %v", i, context.Cause(ctx))
		}
	}
	t.Logf("%d watches, %v: %d reads of the key", watchers, time.Since(start), counting.gets.Load()-before)
	// One read per TTL, and one more when a timer fires just early.
	if n, most := counting.gets.Load()-before, 2*int64(time.Since(start)/ttl)+2; n > most {
		t.Fatalf("%d watches read the key %d times in %v, want at most %d", watchers, n, time.Since(start), most)
	}

	if _, err := store.KeyRevoke(t.Context(), row.Prefix); err != nil {
		t.Fatal(err)
	}
	for i, ctx := range ctxs {
		if cause := ended(ctx, ttl+5*time.Second); !errors.Is(cause, auth.ErrCredentialEnded) {
			t.Fatalf("watch %d after the revocation: cause %v, want ErrCredentialEnded", i, cause)
		}
	}
	mustRefuse(t, keys, token)

	// A watch released reads nothing more.
	other, otherRow := insertKey(t, store, "acme", auth.RunsRead)
	_, stop := auth.Watch(t.Context(), keys, mustAuthenticate(t, keys, other))
	stop()
	before = counting.gets.Load()
	time.Sleep(3 * ttl)
	if n := counting.gets.Load() - before; n != 0 {
		t.Fatalf("a released watch of key %s read it %d times", otherRow.Prefix, n)
	}
}

// TestWatchEndsAtOnceWhenARevocationIsKnown: a key forgotten by the cache
// (a revocation made on this instance) is read at once for the requests
// that watch it, whatever the TTL, and so is a key a request finds revoked.
func TestWatchEndsAtOnceWhenARevocationIsKnown(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	keys := auth.NewKeys(auth.KeysConfig{Store: store, CacheTTL: time.Hour})
	token, row := insertKey(t, store, "acme", auth.RunsRead)
	ctx, stop := auth.Watch(t.Context(), keys, mustAuthenticate(t, keys, token))
	defer stop()
	if _, err := store.KeyRevoke(t.Context(), row.Prefix); err != nil {
		t.Fatal(err)
	}
	if cause := ended(ctx, 200*time.Millisecond); cause != nil {
		t.Fatalf("the watch ended before the cache knew: %v", cause)
	}
	keys.Forget(row.Prefix)
	if cause := ended(ctx, 5*time.Second); !errors.Is(cause, auth.ErrCredentialEnded) {
		t.Fatalf("after Forget: cause %v, want ErrCredentialEnded", cause)
	}
}

// TestWatchEndsAtTheTokensExpiry: a credential that expires (a token's exp)
// ends its watch then; one that does not, and a local principal, never do.
func TestWatchEndsAtTheTokensExpiry(t *testing.T) {
	t.Parallel()
	p := auth.Principal{Tenant: "acme", Actor: "oidc:alice", Expires: time.Now().Add(100 * time.Millisecond)}
	ctx, stop := auth.Watch(t.Context(), auth.None(), p)
	defer stop()
	if cause := ended(ctx, 5*time.Second); !errors.Is(cause, auth.ErrCredentialEnded) {
		t.Fatalf("at the token's expiry: cause %v, want ErrCredentialEnded", cause)
	}
	p.Expires = time.Time{}
	ctx, stop = auth.Watch(t.Context(), auth.None(), p)
	defer stop()
	if cause := ended(ctx, 300*time.Millisecond); cause != nil {
		t.Fatalf("a credential without expiry: ended with %v", cause)
	}
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("after stop: cause %v", context.Cause(ctx))
	}
}
