package lifecycle_test

import (
	"context"
	"errors"
	"slices"
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
