package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is a part that owns goroutines (or another resource) between
// Start and Stop.
type Service interface {
	// Start starts the part's goroutines, which run until Stop; ctx bounds
	// the start alone, not the part's lifetime. Starting a started part
	// does nothing.
	Start(ctx context.Context) error
	// Stop stops the part and waits for it until ctx ends: what the part
	// drains (runs, deliveries under way) it drains until then, and what is
	// left it cuts. It returns an error when something was cut or did not
	// stop in time. Stopping twice, or a part never started, is safe.
	Stop(ctx context.Context) error
}

// Option configures a service's place in a Group.
type Option func(*entry)

// StopWithin bounds the service's Stop by d of its own, counted from when
// its Stop begins, instead of by the context given to Group.Stop: for the
// parts after the drain, which get their time even when the drain used all
// of its.
func StopWithin(d time.Duration) Option { return func(e *entry) { e.within = d } }

type entry struct {
	name   string
	svc    Service
	within time.Duration
}

// Group is a list of services, in start order. Its zero value is empty and
// ready to use.
type Group struct {
	mu      sync.Mutex
	entries []entry
	started int // entries[:started] started and not yet stopped
}

// Add appends s to the group under name: it starts after every service
// added before it, and stops before them.
func (g *Group) Add(name string, s Service, opts ...Option) {
	e := entry{name: name, svc: s}
	for _, o := range opts {
		o(&e)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries = append(g.entries, e)
}

// Names returns the services' names in start order.
func (g *Group) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, len(g.entries))
	for i, e := range g.entries {
		names[i] = e.name
	}
	return names
}

// abortStop bounds the stop of what started when a later service fails to
// start: what started a moment ago has little to drain.
const abortStop = 10 * time.Second

// Start starts the services not yet started, in order. When one fails, it
// stops those that started (in reverse, within abortStop, whether or not
// ctx ended) and returns the failure, named.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.started < len(g.entries) {
		e := g.entries[g.started]
		if err := e.svc.Start(ctx); err != nil {
			err = fmt.Errorf("start %s: %w", e.name, err)
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortStop)
			defer cancel()
			return errors.Join(err, g.stopLocked(sctx))
		}
		g.started++
	}
	return nil
}

// Stop stops the services that started, last first, each within ctx or the
// bound of its own (StopWithin). It returns the errors of those that did
// not stop cleanly, each named (a *StopError); the others stop all the
// same. Stopping twice, or a group never started, is safe.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopLocked(ctx)
}

func (g *Group) stopLocked(ctx context.Context) error {
	var errs []error
	for g.started > 0 {
		g.started--
		e := g.entries[g.started]
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if e.within > 0 {
			sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), e.within)
		}
		if err := e.svc.Stop(sctx); err != nil {
			errs = append(errs, &StopError{Name: e.name, Err: err})
		}
		cancel()
	}
	return errors.Join(errs...)
}

// StopError is a service's failure to stop cleanly: it cut work, or did
// not stop within its context.
type StopError struct {
	Name string
	Err  error
}

func (e *StopError) Error() string { return "stop " + e.Name + ": " + e.Err.Error() }

func (e *StopError) Unwrap() error { return e.Err }

// Funcs is a Service of two functions, for a part whose own type has none
// of this shape; a nil function does nothing. It is not itself safe to
// call twice: the functions must be.
type Funcs struct {
	StartFunc func(ctx context.Context) error
	StopFunc  func(ctx context.Context) error
}

// Start calls StartFunc.
func (f Funcs) Start(ctx context.Context) error {
	if f.StartFunc == nil {
		return nil
	}
	return f.StartFunc(ctx)
}

// Stop calls StopFunc.
func (f Funcs) Stop(ctx context.Context) error {
	if f.StopFunc == nil {
		return nil
	}
	return f.StopFunc(ctx)
}
