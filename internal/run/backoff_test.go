package run

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The wait between model attempts doubles from the base up to its cap,
// jittered over the upper half of the backoff, and is never less than a
// server's Retry-After up to its cap: checked on the computed waits, with
// the random draw at its ends and from a seeded source.
func TestRetryWait(t *testing.T) {
	t.Parallel()
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	const base = 500 * time.Millisecond
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		min, max   time.Duration // the waits at the lowest and the highest draw
	}{
		{1, 0, 250 * time.Millisecond, 500 * time.Millisecond},
		{2, 0, 500 * time.Millisecond, time.Second},
		{3, 0, time.Second, 2 * time.Second},
		{6, 0, 8 * time.Second, 16 * time.Second},
		{7, 0, 15 * time.Second, 30 * time.Second}, // 32 s, capped at 30 s
		{200, 0, 15 * time.Second, 30 * time.Second},
		// Retry-After is a floor, above the jitter's range ...
		{1, 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{7, 45 * time.Second, 45 * time.Second, 45 * time.Second},
		// ... within it, the jitter's draw still counts ...
		{3, 1500 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second},
		// ... and past maxRetryAfterWait, it is cut to it.
		{1, 10 * time.Minute, maxRetryAfterWait, maxRetryAfterWait},
		{1, 24 * time.Hour, maxRetryAfterWait, maxRetryAfterWait},
	}
	for _, tt := range tests {
		lo := retryWait(base, tt.attempt, tt.retryAfter, lowest)
		hi := retryWait(base, tt.attempt, tt.retryAfter, highest)
		if lo != tt.min || hi != tt.max {
			t.Errorf("attempt %d, Retry-After %s: waits %s to %s, want %s to %s", tt.attempt, tt.retryAfter, lo, hi, tt.min, tt.max)
		}
	}

	// A seeded source: every wait in the upper half of its backoff, and
	// the waits spread (runs that failed together come back apart).
	src := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for range 200 {
		w := retryWait(base, 3, 0, src.Int64N)
		if w < time.Second || w > 2*time.Second {
			t.Fatalf("wait %s outside [1s, 2s]", w)
		}
		seen[w] = true
	}
	if len(seen) < 150 {
		t.Fatalf("200 waits took only %d values", len(seen))
	}

	// No backoff configured: no wait, but the server's Retry-After.
	if w := retryWait(0, 3, 0, highest); w != 0 {
		t.Fatalf("base 0: wait %s", w)
	}
	if w := retryWait(0, 1, time.Second, highest); w != time.Second {
		t.Fatalf("base 0, Retry-After 1s: wait %s", w)
	}
}
