package stream_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"agentd/internal/persist/persisttest"
	"agentd/internal/stream"
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
