package run

import (
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
)

// coalescer batches a model attempt's text deltas into message.delta events:
// the first goes out at once, later ones after a short window or when the
// buffer reaches a size cap, so that a long answer costs tens of rows, not
// thousands. Whatever is still buffered when the model finishes is committed
// with the step's output.
//
// When the store defers writes to a tick that every run shares (deferred),
// the window is the store's: text is written as soon as no commit is under
// way, and the write waits for the tick, with the deltas of every other
// run that streams, so that a tick costs one transaction however many runs
// stream, and each run one delta a tick.
//
// Its mutex guards the buffer only: a commit is made outside it, so that the
// model's stream is not held up by a commit the window's timer started. One
// commit is under way at a time (writing), so that deltas are committed in
// order; text that arrives meanwhile waits in the buffer for the next.
type coalescer struct {
	x        *execution
	step     int
	window   time.Duration
	max      int
	deferred bool // later deltas wait for the store's tick (writeDeferred)

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a commit under way ends
	buf     strings.Builder
	last    time.Time
	timer   *time.Timer
	writing bool // a commit is under way
	due     bool // text became due while a commit was under way
	stopped bool
	sent    int   // delta events committed
	failed  error // a write failed (the lease was lost); nothing more is written
}

func newCoalescer(x *execution, step int, window time.Duration, max int, deferred bool) *coalescer {
	c := &coalescer{x: x, step: step, window: window, max: max, deferred: deferred}
	c.idle = sync.NewCond(&c.mu)
	return c
}

func (c *coalescer) add(text string) {
	if text == "" {
		return
	}
	text, _ = clean.Text(text) // as the step's message will store it
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.failed != nil {
		return
	}
	c.buf.WriteString(text)
	switch {
	case c.sent == 0 && c.last.IsZero():
		c.flushLocked()
	case c.deferred && c.writing:
		c.due = true // the commit under way writes it next, at the next tick
	case c.deferred && c.timer == nil:
		// Written now, off the model's stream: the write waits for the tick.
		c.timer = time.AfterFunc(0, c.flushLater)
	case c.deferred:
	case c.buf.Len() >= c.max, time.Since(c.last) >= c.window:
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

// flushLocked commits what is buffered, with c.mu held on entry and on
// return but not during the commit. When a commit is under way, it marks the
// text due: that commit's caller commits it next.
func (c *coalescer) flushLocked() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.last = time.Now()
	if c.writing {
		c.due = true
		return
	}
	c.writing = true
	defer func() {
		c.writing = false
		c.idle.Broadcast()
	}()
	for c.buf.Len() > 0 {
		text := c.buf.String()
		c.buf.Reset()
		c.due = false
		c.mu.Unlock()
		write := c.x.write
		if c.deferred && c.sent > 0 {
			write = c.x.writeDeferred // the first goes out at once
		}
		err := write(c.x.ctx, []agentd.EventIn{agentd.EventOf(c.step, agentd.MessageDeltaData{Text: text})})
		c.mu.Lock()
		if err != nil {
			c.failed = err
			return
		}
		c.sent++
		if !c.due || c.stopped {
			return
		}
		c.last = time.Now()
	}
}

// stop ends flushing; a commit under way completes first.
func (c *coalescer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.writing && c.deferred {
		// The step's output follows the delta held for the tick: the tick
		// comes now, for every run's held deltas.
		c.mu.Unlock()
		c.x.d.store.FlushDeferred()
		c.mu.Lock()
	}
	for c.writing {
		c.idle.Wait()
	}
}

// pending returns the text not yet committed.
func (c *coalescer) pending() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
