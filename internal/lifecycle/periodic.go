package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Periodic is a Service that makes a pass at its start and then every
// interval, until Stop: a retention or a sweep that every instance runs.
// A pass is given a context that Stop cancels; a pass under way when Stop
// is called is waited for, within Stop's context.
type Periodic struct {
	name     string
	interval time.Duration
	pass     func(ctx context.Context)

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop has returned
}

// NewPeriodic returns the service, not yet started, that calls pass every
// interval; name says which in Stop's error.
func NewPeriodic(name string, interval time.Duration, pass func(ctx context.Context)) *Periodic {
	return &Periodic{name: name, interval: interval, pass: pass, done: make(chan struct{})}
}

// Start starts the passes. Starting twice, or after Stop, does nothing.
func (p *Periodic) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return nil
	}
	p.started = true
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go p.loop(lctx)
	return nil
}

// Stop stops the passes and waits, within ctx, for one under way: its
// context is cancelled. Stopping twice, or before Start, is safe.
func (p *Periodic) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	started := p.started
	p.mu.Unlock()
	if !started {
		return nil
	}
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", p.name, ctx.Err())
	}
}

func (p *Periodic) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
