package tools

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd"
)

// Decision is what the engine does after a failed attempt.
type Decision string

// Decisions after a failed attempt.
const (
	// Retry: run another attempt, with the same idempotency key, after
	// Spec.BackoffFor(attempt).
	Retry Decision = "retry"
	// Fail: the call failed; the error goes back to the model.
	Fail Decision = "fail"
	// Unknown: the effect may or may not have happened; the call goes to
	// reconciliation or to a client.
	Unknown Decision = "unknown"
)

// Defaults of the attempt policy.
const (
	DefaultMaxAttempts    = 3
	DefaultBackoff        = 200 * time.Millisecond
	MaxBackoff            = 5 * time.Second
	DefaultMaxResultBytes = 16 << 10
)

// KindOf classifies err: the Kind of an *Error in its chain, KindTimeout for
// an unclassified context.DeadlineExceeded, else KindTransient.
func KindOf(err error) ErrorKind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	return KindTransient
}

// Decide says what to do after attempt (1-based) of a call to the tool
// described by spec failed with err:
//
//   - KindFinal: Fail.
//   - KindTransient: Retry while attempts remain for read_only and idempotent
//     tools, else Fail; a side_effect tool is never retried blindly: Fail.
//   - KindTimeout, KindConnection: Retry while attempts remain for read_only
//     and idempotent tools, else Fail; for a side_effect tool the effect may
//     have happened: Unknown.
//
// Errors are classified by KindOf, so an error that is not an *Error counts
// as transient.
func Decide(spec Spec, err error, attempt int) Decision {
	k := KindOf(err)
	if k == KindFinal {
		return Fail
	}
	if spec.Effect == agentd.EffectSideEffect {
		if k == KindTimeout || k == KindConnection {
			return Unknown
		}
		return Fail
	}
	if attempt < spec.Attempts() {
		return Retry
	}
	return Fail
}

// Attempts is the most attempts one call may get: MaxAttempts if set, else 3
// for read_only and idempotent tools and 1 for side_effect tools.
func (s Spec) Attempts() int {
	if s.MaxAttempts > 0 {
		return s.MaxAttempts
	}
	if s.Effect == agentd.EffectSideEffect {
		return 1
	}
	return DefaultMaxAttempts
}

// BackoffFor is the wait after attempt (1-based) failed, before attempt+1:
// Backoff (default 200ms) after the first, doubling after each next, capped
// at 5s.
func (s Spec) BackoffFor(attempt int) time.Duration {
	d := s.Backoff
	if d <= 0 {
		d = DefaultBackoff
	}
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// ResultLimit is the most bytes of result passed back to the model whole:
// MaxResultBytes if set, else 16 KiB. A larger result is offloaded to an
// artifact (Offload).
func (s Spec) ResultLimit() int {
	if s.MaxResultBytes > 0 {
		return s.MaxResultBytes
	}
	return DefaultMaxResultBytes
}

// AttemptTimeout is the cap on one attempt: Timeout if set, else def.
func (s Spec) AttemptTimeout(def time.Duration) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return def
}

// validPrefix returns b as a string, cut back to end on a whole UTF-8 rune.
func validPrefix(b []byte) string {
	for len(b) > 0 && !utf8.Valid(b) {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return string(b)
}
