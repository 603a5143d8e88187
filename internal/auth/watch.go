package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCredentialEnded is the cause of the end of a Watch context: the
// credential the request was authenticated with stopped holding while the
// request was served. Its wrapping says why (a key revoked or deleted, a
// token expired).
var ErrCredentialEnded = errors.New("the credential no longer holds")

var (
	errKeyEnded   = fmt.Errorf("%w: the API key was revoked or deleted", ErrCredentialEnded)
	errTokenEnded = fmt.Errorf("%w: the token expired", ErrCredentialEnded)
)

// keyCheckTimeout caps a watched key's read.
const keyCheckTimeout = 5 * time.Second

// Watch returns a context derived from ctx that also ends when the
// credential of p, which a authenticated, stops holding: at p.Expires, and,
// for an agentd API key, when the key is found revoked or deleted. A
// watched key is read again each time its cached entry goes stale (within
// the key cache's TTL of a revocation, on every instance), once for all
// the requests that watch it, and at once when any request reads it
// revoked. The context's cause then wraps ErrCredentialEnded. A failed read
// ends nothing: the key is read again after another TTL. stop releases the
// watch; call it when the request ends.
func Watch(ctx context.Context, a Authenticator, p Principal) (wctx context.Context, stop context.CancelFunc) {
	var cancelDeadline context.CancelFunc = func() {}
	if !p.Expires.IsZero() {
		ctx, cancelDeadline = context.WithDeadlineCause(ctx, p.Expires, errTokenEnded)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	release := func() {}
	if k := keysOf(a); k != nil && p.KeyPrefix != "" {
		release = k.watch(p.KeyPrefix, cancel)
	}
	return ctx, func() {
		release()
		cancel(context.Canceled)
		cancelDeadline()
	}
}

// keysOf returns the Keys that a uses for agentd's API keys, or nil.
func keysOf(a Authenticator) *Keys {
	switch a := a.(type) {
	case *Keys:
		return a
	case either:
		return a.keys
	}
	return nil
}

// keyWatch is the check of one key that requests in progress depend on:
// one timer re-reads the key when its cached entry goes stale, for every
// request that watches it, while any does.
type keyWatch struct {
	ctx   context.Context         // ends, with errKeyEnded, when the key is found revoked or deleted
	end   context.CancelCauseFunc // ends ctx
	timer *time.Timer
	refs  int            // requests watching; under Keys.mu
	done  bool           // no more checks: released, or the key ended; under Keys.mu
	busy  sync.WaitGroup // a check in flight; Add only under Keys.mu while !done
}

// watch makes end called, with errKeyEnded, when the key of prefix is found
// revoked or deleted. The function it returns stops that; it waits for a
// check in flight when it releases the key's last watch.
func (k *Keys) watch(prefix string, end context.CancelCauseFunc) (release func()) {
	k.mu.Lock()
	w := k.watches[prefix]
	if w == nil {
		w = &keyWatch{}
		w.ctx, w.end = context.WithCancelCause(context.Background())
		k.watches[prefix] = w
		w.timer = time.AfterFunc(max(k.staleInLocked(prefix), 0), func() { k.check(prefix, w) })
	}
	w.refs++
	k.mu.Unlock()
	stop := context.AfterFunc(w.ctx, func() { end(context.Cause(w.ctx)) })
	return func() {
		stop()
		k.unwatch(prefix, w)
	}
}

// unwatch drops a request's watch of a key; the last one stops the key's
// checks.
func (k *Keys) unwatch(prefix string, w *keyWatch) {
	k.mu.Lock()
	w.refs--
	last := w.refs == 0 && !w.done
	if last {
		k.stopWatchLocked(prefix, w)
	}
	k.mu.Unlock()
	if last {
		w.end(context.Canceled) // cuts a read in flight short
		w.busy.Wait()
	}
}

// stopWatchLocked ends the checks of w. The caller holds k.mu.
func (k *Keys) stopWatchLocked(prefix string, w *keyWatch) {
	w.done = true
	w.timer.Stop()
	if k.watches[prefix] == w {
		delete(k.watches, prefix)
	}
}

// keyEndedLocked ends the watch of prefix, if any: its requests end, with
// errKeyEnded. The caller holds k.mu.
func (k *Keys) keyEndedLocked(prefix string) {
	if w := k.watches[prefix]; w != nil && !w.done {
		k.stopWatchLocked(prefix, w)
		w.end(errKeyEnded)
	}
}

// staleInLocked is how long the cached entry of prefix stays fresh: zero or
// less when it is stale, missing, or already says the key is revoked. The
// caller holds k.mu.
func (k *Keys) staleInLocked(prefix string) time.Duration {
	c := k.cache[prefix]
	if c == nil || c.key.RevokedAt != nil {
		return 0
	}
	return c.fetched.Add(k.cfg.CacheTTL).Sub(k.cfg.Now())
}

// check reads a watched key through the cache: the store is read only when
// the cached entry is stale, and a read that finds the key revoked or
// deleted ends the watch (lookup). Then the next check is due when the
// entry goes stale again, or after a TTL when it could not be read (or the
// cache is off).
func (k *Keys) check(prefix string, w *keyWatch) {
	k.mu.Lock()
	if w.done {
		k.mu.Unlock()
		return
	}
	w.busy.Add(1)
	k.mu.Unlock()
	defer w.busy.Done()
	ctx, cancel := context.WithTimeout(w.ctx, keyCheckTimeout)
	key, err := k.lookup(ctx, prefix, k.cfg.Now())
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	if w.done {
		return
	}
	if errors.Is(err, ErrInvalidCredential) || (err == nil && key.RevokedAt != nil) {
		k.keyEndedLocked(prefix)
		return
	}
	next := k.staleInLocked(prefix)
	if err != nil || next <= 0 {
		next = k.recheckEvery()
	}
	w.timer.Reset(next)
}

// recheckEvery is the interval of a watched key's checks when its cached
// entry cannot say: the cache's TTL, or a second when the cache is off.
func (k *Keys) recheckEvery() time.Duration {
	if k.cfg.CacheTTL > 0 {
		return k.cfg.CacheTTL
	}
	return time.Second
}
