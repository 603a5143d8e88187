package memory

import (
	"testing"
	"time"
)

// TestExtractBackoff: each retry waits twice as long as the one before,
// less up to a quarter, and never more than maxExtractBackoff.
func TestExtractBackoff(t *testing.T) {
	t.Parallel()
	e := NewExtractor(ExtractConfig{Backoff: time.Second})
	for _, c := range []struct {
		n      int
		lo, hi time.Duration
	}{{1, 750 * time.Millisecond, time.Second}, {2, 1500 * time.Millisecond, 2 * time.Second},
		{4, 6 * time.Second, 8 * time.Second}, {40, maxExtractBackoff * 3 / 4, maxExtractBackoff}} {
		for range 20 {
			if d := e.backoff(c.n); d < c.lo || d > c.hi {
				t.Fatalf("after attempt %d: %v, want %v to %v", c.n, d, c.lo, c.hi)
			}
		}
	}
}
