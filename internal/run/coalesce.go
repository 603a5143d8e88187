package run

import (
	"agentd/internal/event"
	"strings"
	"sync"
	"time"
)

// coalescer batches a model attempt's text deltas into message.delta events:
// the first goes out at once, later ones after a short window or when the
// buffer reaches a size cap, so that a long answer costs tens of rows, not
// thousands. Whatever is still buffered when the model finishes is committed
// with the step's output.
type coalescer struct {
	x      *execution
	step   int
	window time.Duration
	max    int

	mu      sync.Mutex
	buf     strings.Builder
	last    time.Time
	timer   *time.Timer
	stopped bool
	sent    int   // delta events committed
	failed  error // a write failed (the lease was lost); nothing more is written
}

func newCoalescer(x *execution, step int, window time.Duration, max int) *coalescer {
	return &coalescer{x: x, step: step, window: window, max: max}
}

func (c *coalescer) add(text string) {
	if text == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.failed != nil {
		return
	}
	c.buf.WriteString(text)
	switch {
	case c.sent == 0 && c.last.IsZero(), c.buf.Len() >= c.max, time.Since(c.last) >= c.window:
		c.flushLocked()
	case c.timer == nil:
		c.timer = time.AfterFunc(c.window-time.Since(c.last), c.flushLater)
	}
}

func (c *coalescer) flushLater() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	if !c.stopped && c.failed == nil {
		c.flushLocked()
	}
}

func (c *coalescer) flushLocked() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.last = time.Now()
	if c.buf.Len() == 0 {
		return
	}
	text := c.buf.String()
	c.buf.Reset()
	err := c.x.write(c.x.ctx, []event.In{event.Of(c.step, event.MessageDeltaData{Text: text})})
	if err != nil {
		c.failed = err
		return
	}
	c.sent++
}

// stop ends flushing; a flush under way completes first.
func (c *coalescer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// pending returns the text not yet committed.
func (c *coalescer) pending() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
