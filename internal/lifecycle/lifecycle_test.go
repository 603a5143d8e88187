package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/lifecycle"
)

// recorder is a service that writes its starts and stops to a shared log.
type recorder struct {
	name     string
	log      *[]string
	startErr error
	stopErr  error
	deadline *bool // set when its Stop's ctx had a deadline
}

func (r *recorder) Start(context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	return r.startErr
}

func (r *recorder) Stop(ctx context.Context) error {
	*r.log = append(*r.log, "stop "+r.name)
	if r.deadline != nil {
		_, *r.deadline = ctx.Deadline()
	}
	return r.stopErr
}

func TestGroupOrder(t *testing.T) {
	var log []string
	var g lifecycle.Group
	for _, n := range []string{"a", "b", "c"} {
		g.Add(n, &recorder{name: n, log: &log})
	}
	if err := g.Stop(context.Background()); err != nil || len(log) != 0 {
		t.Fatalf("stop before start: %v %v", err, log)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	if names := g.Names(); !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("names %v", names)
	}
}

// A failed start stops what started, in reverse, and names the failure.
func TestGroupFailedStart(t *testing.T) {
	var log []string
	var g lifecycle.Group
	boom := errors.New("boom")
	g.Add("a", &recorder{name: "a", log: &log})
	g.Add("b", &recorder{name: "b", log: &log})
	g.Add("c", &recorder{name: "c", log: &log, startErr: boom})
	g.Add("d", &recorder{name: "d", log: &log})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the start's context ended: what started stops all the same
	err := g.Start(ctx)
	if !errors.Is(err, boom) || err.Error() != "start c: boom" {
		t.Fatalf("start: %v", err)
	}
	want := []string{"start a", "start b", "start c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	if err := g.Stop(context.Background()); err != nil || len(log) != len(want) {
		t.Fatalf("stop after a failed start: %v %v", err, log)
	}
}

// Every service is stopped even when one before it fails to; the error
// names those that failed. A service with a bound of its own gets a
// deadline where the group's context has none.
func TestGroupStopErrors(t *testing.T) {
	var log []string
	var g lifecycle.Group
	var bounded, unbounded bool
	late := context.DeadlineExceeded
	g.Add("a", &recorder{name: "a", log: &log, deadline: &bounded}, lifecycle.StopWithin(time.Second))
	g.Add("b", &recorder{name: "b", log: &log, stopErr: late, deadline: &unbounded})
	g.Add("c", &recorder{name: "c", log: &log})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := g.Stop(context.Background())
	var se *lifecycle.StopError
	if !errors.As(err, &se) || se.Name != "b" || !errors.Is(err, late) {
		t.Fatalf("stop: %v", err)
	}
	if want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	if !bounded || unbounded {
		t.Fatalf("deadlines: a %v (want one of its own), b %v (want the group's: none)", bounded, unbounded)
	}
}

// TestPeriodic: a pass at the start and one every interval; Stop cancels
// the pass under way and waits for it, says so when its context ends
// first, and is safe before Start and twice; Start after Stop starts
// nothing.
func TestPeriodic(t *testing.T) {
	t.Parallel()
	passes := make(chan struct{}, 100)
	p := lifecycle.NewPeriodic("test pass", 10*time.Millisecond, func(ctx context.Context) { passes <- struct{}{} })
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	p = lifecycle.NewPeriodic("test pass", 10*time.Millisecond, func(ctx context.Context) { passes <- struct{}{} })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-passes:
		case <-time.After(5 * time.Second):
			t.Fatal("fewer than 3 passes in 5 s at a 10 ms interval")
		}
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for len(passes) > 0 {
		<-passes
	}
	time.Sleep(30 * time.Millisecond)
	if len(passes) != 0 {
		t.Fatal("a pass after Stop")
	}
	if err := p.Start(context.Background()); err != nil || p.Stop(context.Background()) != nil {
		t.Fatal("start or stop after stop")
	}

	// A pass that does not end when cancelled: Stop says so at its
	// context's end; the pass is cancelled, then let go.
	release := make(chan struct{})
	entered := make(chan struct{})
	var cancelled atomic.Bool
	slow := lifecycle.NewPeriodic("slow pass", time.Hour, func(ctx context.Context) {
		close(entered)
		<-ctx.Done()
		cancelled.Store(true)
		<-release
	})
	if err := slow.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := slow.Stop(ctx); err == nil || !strings.Contains(err.Error(), "slow pass") {
		t.Fatalf("stop of a pass that does not end: %v", err)
	}
	if !cancelled.Load() {
		t.Fatal("the pass under way was not cancelled")
	}
	close(release)
	if err := slow.Stop(context.Background()); err != nil {
		t.Fatalf("stop once the pass ended: %v", err)
	}
}
