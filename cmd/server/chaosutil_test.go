package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// The checks that the chaos tests (TestChaosKill, TestFailover) make once
// their runs have ended.

// checkSideEffects checks the side-effect tool name, whose webhook is the
// sink's path: no idempotency key reached the webhook twice, and no call of
// the tool in the runs ids is missing from the webhook's requests. It
// returns how many duplicate executions and skipped effects it found.
func checkSideEffects(t *testing.T, store *persist.Store, sink *webhooktest.Sink, path, name string, ids []string) (duplicates, skipped int) {
	t.Helper()
	effects := sink.Keys(path)
	for k, n := range effects {
		if n > 1 {
			duplicates++
			t.Errorf("side effect %s %s ran %d times", name, k, n)
		}
	}
	for _, id := range ids {
		steps, err := store.StepsList(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			for _, c := range st.Calls {
				if c.Name == name && effects[c.IdempotencyKey] == 0 {
					skipped++
					t.Errorf("run %s completed without its side effect %s", id, c.IdempotencyKey)
				}
			}
		}
	}
	return duplicates, skipped
}

// checkTranscripts checks each run's SSE transcript against its stored
// log: the log is gapless, every stored event matches openapi.yaml, and the
// transcript is the log, event for event and byte for byte. It returns how
// many runs lost or changed an event.
func checkTranscripts(t *testing.T, store *persist.Store, transcripts map[string]*[]sseEvent) int {
	t.Helper()
	lostEvents := 0
	for id, tr := range transcripts {
		evs, err := store.EventsAfter(context.Background(), id, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		spectest.CheckEvents(t, evs)
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				lostEvents++
				t.Errorf("run %s: stored event %d has seq %d", id, i, e.Seq)
				break
			}
		}
		if len(*tr) != len(evs) {
			lostEvents++
			t.Errorf("run %s: the SSE reader got %d events, the log has %d", id, len(*tr), len(evs))
			continue
		}
		for i, e := range evs {
			got := (*tr)[i]
			if got.ID != fmt.Sprint(e.Seq) || got.Event != string(e.Type) || got.Data != string(e.Data) {
				lostEvents++
				t.Errorf("run %s: SSE event %d differs from the stored one", id, i)
				break
			}
		}
	}
	return lostEvents
}

// p50 says the median and the maximum of ds (sorting it), or "n/a".
func p50(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	slices.Sort(ds)
	return fmt.Sprintf("p50 %v max %v", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}
