package stream_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/stream"
)

// conversationOf returns the conversation of a run of tenant t1.
func conversationOf(t *testing.T, store *persist.Store, runID string) string {
	t.Helper()
	r, err := store.RunGet(context.Background(), "t1", runID)
	if err != nil {
		t.Fatal(err)
	}
	return r.ConversationID
}

// openStream opens a stream of a run from its start; its channel gets the
// stream's events when it ends.
func openStream(t *testing.T, inst *instance, runID string) chan []sseEvent {
	t.Helper()
	done := make(chan []sseEvent, 1)
	resp := get(t, client(t), inst.srv.URL+"/runs/"+runID+"/events", nil)
	go func() { done <- readAll(t, resp) }()
	return done
}

// TestDeletedRunsStreams: when a run's conversation is deleted, the run's
// open streams end without a terminal event, at once on the instance that
// is told (Forget) and within its poll interval on another one; a new
// stream of the run, from any position and on any instance, is refused with
// agentd.ErrRunNotFound (404 here), and nothing of the run's events is
// replayed from what a Hub kept in memory.
func TestDeletedRunsStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := persisttest.NewDatabase(t)
	// A is told of the deletion, and neither polls nor beats in the test's
	// time; B learns of it by its poll alone; C never followed the run.
	hubA := stream.New(stream.Config{Poll: time.Hour, Heartbeat: time.Hour})
	hubB := stream.New(stream.Config{Poll: 50 * time.Millisecond, Heartbeat: time.Hour})
	hubC := stream.New(stream.Config{Poll: time.Hour, Heartbeat: time.Hour})
	storeA, storeB := publishing(t, url, hubA), publishing(t, url, hubB)
	a := newInstance(t, hubA, storeA, nil)
	b := newInstance(t, hubB, storeB, nil)
	c := newInstance(t, hubC, persisttest.Open(t, persist.Config{URL: url, MaxConns: 5}), nil)

	f := newRun(t, storeA)
	appendEvents(t, storeA, f, 3, 1, 10)
	onA, onB := openStream(t, a, f.RunID), openStream(t, b, f.RunID)
	if !waitFor(10*time.Second, func() bool { return hubA.SubscriberCount() == 1 && hubB.SubscriberCount() == 1 }) {
		t.Fatal("the streams did not subscribe")
	}
	// The run stops without an event, so that its streams stay open as
	// they would for a run whose end they have not seen.
	if _, err := storeA.Exec(ctx, f, nil, persist.RunEnd{ID: f.RunID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		t.Fatal(err)
	}
	// A run created here whose first events the Hub keeps for its first
	// stream, which never came.
	g := newRun(t, storeA)
	complete(t, storeA, g)
	// And one created on B, deleted through A.
	k := newRun(t, storeB)
	complete(t, storeB, k)

	for _, runID := range []string{f.RunID, g.RunID, k.RunID} {
		ids, err := storeA.ConversationDelete(ctx, "t1", conversationOf(t, storeA, runID))
		if err != nil || len(ids) != 1 || ids[0] != runID {
			t.Fatalf("delete the conversation of %s: %v, %v", runID, ids, err)
		}
		hubA.Forget(ids...)
	}
	for name, done := range map[string]chan []sseEvent{"A (told)": onA, "B (polling)": onB} {
		select {
		case evs := <-done:
			// A stream subscribes before it replays: one whose replay came
			// after the delete read nothing, which is as right as what it
			// read before. Whatever it got is the run's log from its start.
			for i, ev := range evs {
				if i >= 4 || ev.ID != strconv.Itoa(i+1) {
					t.Errorf("%s: the stream got %+v, want events 1 to 4 or a part of them from the first", name, evs)
					break
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stream of the deleted run did not end", name)
		}
	}
	if !waitFor(10*time.Second, func() bool { return hubA.Stats().Feeds == 0 && hubB.Stats().Feeds == 0 }) {
		t.Fatalf("feeds left: A %+v, B %+v", hubA.Stats(), hubB.Stats())
	}

	// A Hub admits a stream of a run it created within its last poll
	// interval from memory (B's is 50 ms): past that, it reads the run.
	time.Sleep(100 * time.Millisecond)
	hc := &http.Client{Timeout: 5 * time.Second} // a stream that opens fails the test, not hangs it
	for name, inst := range map[string]*instance{"A": a, "B": b, "C": c} {
		for _, runID := range []string{f.RunID, g.RunID, k.RunID} {
			for _, header := range []map[string]string{nil, {"Last-Event-ID": "2"}} {
				resp := get(t, hc, inst.srv.URL+"/runs/"+runID+"/events", header)
				if resp == nil {
					t.FailNow()
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s: a stream of deleted run %s (%v): status %d, want 404", name, runID, header, resp.StatusCode)
				}
			}
		}
	}

	// The other wire formats' streams (the AI SDK's) are refused alike.
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil)
	if _, err := hubA.StreamRunAs(httptest.NewRecorder(), req, g.RunID, 0, dataEncoder{}); !errors.Is(err, agentd.ErrRunNotFound) {
		t.Errorf("StreamRunAs of a deleted run: %v, want agentd.ErrRunNotFound", err)
	}
}

// dataEncoder writes each event's data alone, and ends at the run's end.
type dataEncoder struct{}

func (dataEncoder) Start(http.Header) []byte { return nil }

func (dataEncoder) Event(ev agentd.Event, followed bool) ([]byte, bool) {
	return ev.Data, ev.Type.Terminal() && !followed
}

func (dataEncoder) Heartbeat() []byte { return nil }
