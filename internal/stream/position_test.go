package stream_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/stream"
)

// TestPositionPastTheLog: a client whose Last-Event-ID is past the run's
// last event gets nothing the run did not send, and its stream closes when
// the run ends, by the live events or by the heartbeat's read of the run;
// after the end it gets 204.
func TestPositionPastTheLog(t *testing.T) {
	t.Parallel()
	for _, beat := range []time.Duration{time.Hour, 20 * time.Millisecond} {
		hub := stream.New(stream.Config{Heartbeat: beat})
		url := persisttest.NewDatabase(t)
		store := publishing(t, url, hub)
		inst := newInstance(t, hub, store, nil)
		f := newRun(t, store)
		base := inst.srv.URL + "/runs/" + f.RunID + "/events"
		hc := client(t)
		done := make(chan []sseEvent, 1)
		go func() {
			done <- readAll(t, get(t, hc, base, map[string]string{"Last-Event-ID": strconv.FormatInt(1<<63-1, 10)}))
		}()
		if !waitFor(10*time.Second, func() bool { return hub.SubscriberCount() == 1 }) {
			t.Fatal("the stream did not subscribe")
		}
		appendEvents(t, store, f, 3, 1, 10)
		complete(t, store, f)
		select {
		case evs := <-done:
			for _, ev := range evs {
				if ev.HasID {
					t.Errorf("heartbeat %v: the client past the log got event %s", beat, ev.ID)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heartbeat %v: the stream past the log did not close when the run ended", beat)
		}
		resp := get(t, hc, base, map[string]string{"Last-Event-ID": strconv.FormatInt(1<<63-1, 10)})
		if resp == nil {
			t.FailNow()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("heartbeat %v: after the end: %d, want 204", beat, resp.StatusCode)
		}
	}
}

// pollCounter counts the Hub's polls and its reads of events.
type pollCounter struct {
	*persist.Store
	polls, reads atomic.Int64
}

func (c *pollCounter) RunHeads(ctx context.Context, ids []string) ([]agentd.RunHead, error) {
	c.polls.Add(1)
	return c.Store.RunHeads(ctx, ids)
}

func (c *pollCounter) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	c.reads.Add(1)
	return c.Store.EventsAfter(ctx, runID, after, limit)
}

// TestOnePollForIdleStreams: without any notification (the store tells
// nobody), the Hub's poll still delivers every event; and the streams of
// idle runs cost one poll query per interval for the instance, with no read
// of events while nothing is new.
func TestOnePollForIdleStreams(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	counter := &pollCounter{Store: store}
	hub := stream.New(stream.Config{Poll: 50 * time.Millisecond, Heartbeat: time.Hour})
	inst := newInstance(t, hub, counter, nil)
	const runs = 5
	fences := make([]persist.Fence, runs)
	done := make([]chan []sseEvent, runs)
	hc := client(t)
	for i := range fences {
		fences[i] = newRun(t, store)
		done[i] = make(chan []sseEvent, 1)
		go func() { done[i] <- readAll(t, get(t, hc, inst.srv.URL+"/runs/"+fences[i].RunID+"/events", nil)) }()
	}
	if !waitFor(10*time.Second, func() bool { return hub.SubscriberCount() == runs }) {
		t.Fatal("the streams did not subscribe")
	}
	// Idle: the feeds are positioned; then polls come, and no reads.
	time.Sleep(200 * time.Millisecond)
	polls, reads := counter.polls.Load(), counter.reads.Load()
	if !waitFor(10*time.Second, func() bool { return counter.polls.Load() >= polls+3 }) {
		t.Fatal("the Hub does not poll")
	}
	if r := counter.reads.Load(); r != reads {
		t.Fatalf("idle streams read events %d times over 3 polls", r-reads)
	}
	for _, f := range fences {
		appendEvents(t, store, f, 2, 1, 10)
		complete(t, store, f)
	}
	for i := range done {
		select {
		case evs := <-done[i]:
			if len(evs) != 4 || evs[3].Type != string(agentd.EventRunCompleted) {
				t.Fatalf("stream %d got %d events, want 4 ending with run.completed", i, len(evs))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d: the poll did not deliver its events", i)
		}
	}
}

// heldHeads answers the first read of a run's head, and holds every later
// one until release is closed.
type heldHeads struct {
	*persist.Store
	reads   atomic.Int64
	release chan struct{}
}

func (h *heldHeads) RunHead(ctx context.Context, id string) (agentd.RunHead, error) {
	if h.reads.Add(1) > 1 {
		select {
		case <-h.release:
		case <-ctx.Done():
			return agentd.RunHead{}, ctx.Err()
		}
	}
	return h.Store.RunHead(ctx, id)
}

// TestPastTheLogWhenTheRunEndsBeforeTheFeedReads: a client past the log
// whose run ends after the client's position was read but before the feed's
// first read of the run gets no live terminal event (the feed starts after
// it); its stream still closes, without waiting for a heartbeat.
func TestPastTheLogWhenTheRunEndsBeforeTheFeedReads(t *testing.T) {
	t.Parallel()
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	url := persisttest.NewDatabase(t)
	store := publishing(t, url, hub)
	held := &heldHeads{Store: store, release: make(chan struct{})}
	inst := newInstance(t, hub, held, nil)
	f := newRun(t, store)
	done := make(chan []sseEvent, 1)
	go func() {
		done <- readAll(t, get(t, client(t), inst.srv.URL+"/runs/"+f.RunID+"/events",
			map[string]string{"Last-Event-ID": strconv.FormatInt(1<<62, 10)}))
	}()
	if !waitFor(10*time.Second, func() bool { return hub.SubscriberCount() == 1 }) {
		t.Fatal("the stream did not subscribe")
	}
	appendEvents(t, store, f, 3, 1, 10)
	complete(t, store, f)
	close(held.release)
	select {
	case evs := <-done:
		for _, ev := range evs {
			if ev.HasID {
				t.Errorf("the client past the log got event %s", ev.ID)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream past the log did not close when the run ended")
	}
}
