package llm

import (
	"context"
	"time"
)

// idleTimer ends a stream's context with errIdle when no event arrives
// within its timeout; its zero value (no timeout) never does. The clock
// stops while an event is handled (pause), so that it measures the wait
// for events, not the time the caller spends in onDelta.
type idleTimer struct {
	t *time.Timer
	d time.Duration
}

// idleTimeout is the idle timeout of a request: its own, else the
// adapter's.
func idleTimeout(adapter, request time.Duration) time.Duration {
	if request > 0 {
		return request
	}
	return adapter
}

// startIdle starts the clock of a stream whose context cancel ends: d
// (0: no timeout).
func startIdle(cancel context.CancelCauseFunc, d time.Duration) idleTimer {
	if d <= 0 {
		return idleTimer{}
	}
	return idleTimer{t: time.AfterFunc(d, func() { cancel(errIdle) }), d: d}
}

// pause stops the clock (for an event being handled, or for good).
func (i idleTimer) pause() {
	if i.t != nil {
		i.t.Stop()
	}
}

// resume starts the clock again, for a whole timeout.
func (i idleTimer) resume() {
	if i.t != nil {
		i.t.Reset(i.d)
	}
}
