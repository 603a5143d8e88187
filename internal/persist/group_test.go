package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func TestGroupCommitSharesTransactionsAndKeepsFences(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	const runs, writers, writes = 8, 4, 25
	fences := claimedRuns(t, s, runs)
	stale := fences[0]
	stale.Epoch-- // a worker that lost run 0
	s.StartGroupCommit(2, 64)
	defer s.StopGroupCommit()
	before := s.GroupCommitStats()
	var wg sync.WaitGroup
	var staleOK, staleLost int
	var mu sync.Mutex
	for _, f := range fences {
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range writes {
					if _, err := s.Exec(ctx, f, []agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "x"})}); err != nil {
						t.Errorf("exec: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range writes {
			_, err := s.Exec(ctx, stale, []agentd.EventIn{agentd.EventOf(0, agentd.MessageDeltaData{Text: "late"})})
			mu.Lock()
			if errors.Is(err, persist.ErrLeaseLost) {
				staleLost++
			} else {
				staleOK++
			}
			mu.Unlock()
		}
	}()
	wg.Wait()
	after := s.GroupCommitStats()
	if staleOK != 0 || staleLost != writes {
		t.Fatalf("stale writes: %d committed, %d refused", staleOK, staleLost)
	}
	for _, f := range fences {
		evs, err := s.EventsAfter(ctx, f.RunID, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1+writers*writes {
			t.Fatalf("run %s has %d events, want %d", f.RunID, len(evs), 1+writers*writes)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || (i > 0 && e.Type != "message.delta") {
				t.Fatalf("run %s: event %d is seq %d %s", f.RunID, i, e.Seq, e.Type)
			}
			// The envelope, numbered in SQL, agrees with the row.
			var env struct {
				Seq   int64            `json:"seq"`
				Type  agentd.EventType `json:"type"`
				RunID string           `json:"run_id"`
			}
			if err := json.Unmarshal(e.Data, &env); err != nil || env.Seq != e.Seq || env.Type != e.Type || env.RunID != f.RunID ||
				!strings.HasPrefix(string(e.Data), fmt.Sprintf(`{"seq":%d,"type":`, e.Seq)) {
				t.Fatalf("run %s: event %d has envelope %s (%v)", f.RunID, e.Seq, e.Data, err)
			}
		}
	}
	tx, reqs := after.Transactions-before.Transactions, after.Requests-before.Requests
	t.Logf("%d writes in %d transactions", reqs, tx)
	if reqs != runs*writers*writes || tx >= reqs {
		t.Fatalf("%d writes in %d transactions: nothing was shared", reqs, tx)
	}
}

// handedEvents is a publisher that keeps the events handed to it.
type handedEvents struct {
	mu     sync.Mutex
	handed map[string][]agentd.Event
}

func (h *handedEvents) Published(string, int64) {}

func (h *handedEvents) PublishedEvents(runID string, evs []agentd.Event) {
	h.mu.Lock()
	h.handed[runID] = append(h.handed[runID], evs...)
	h.mu.Unlock()
}

// TestPublishedEventsMatchTheStoredEvents: the events handed to the
// publisher after a run's creation and after group commits, of several runs
// at once, are byte for byte what EventsAfter reads back, gapless and in
// order, and no commit is reported twice.
func TestPublishedEventsMatchTheStoredEvents(t *testing.T) {
	t.Parallel()
	pub := &handedEvents{handed: map[string][]agentd.Event{}}
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: pub})
	ctx := context.Background()
	const runs, writes = 6, 20
	fences := claimedRuns(t, s, runs)
	handed := pub.handed // read once the writers are done
	s.StartGroupCommit(1, 64)
	defer s.StopGroupCommit()
	var wg sync.WaitGroup
	for i, f := range fences {
		wg.Go(func() {
			for w := range writes {
				evs := []agentd.EventIn{agentd.EventOf(w, agentd.MessageDeltaData{Text: fmt.Sprintf("x<&>\"é %d", w)})}
				if w%3 == 0 {
					evs = append(evs, agentd.EventOf(w, agentd.StepCompletedData{FinishReason: agentd.FinishReason(fmt.Sprint(i))}), agentd.EventOf(w, agentd.StepRetractedData{}))
				}
				if _, err := s.Exec(ctx, f, evs); err != nil {
					t.Errorf("exec: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, f := range fences {
		stored, err := s.EventsAfter(ctx, f.RunID, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		got := handed[f.RunID]
		if len(got) != len(stored) {
			t.Fatalf("run %s: %d events handed, %d stored", f.RunID, len(got), len(stored))
		}
		for i := range stored {
			if got[i].Seq != stored[i].Seq || got[i].Type != stored[i].Type || string(got[i].Data) != string(stored[i].Data) ||
				!got[i].CreatedAt.Equal(stored[i].CreatedAt) || got[i].RunID != stored[i].RunID {
				t.Fatalf("run %s event %d:\nhanded %d %s %s %v\nstored %d %s %s %v", f.RunID, i,
					got[i].Seq, got[i].Type, got[i].Data, got[i].CreatedAt, stored[i].Seq, stored[i].Type, stored[i].Data, stored[i].CreatedAt)
			}
		}
	}
}

// claimedRuns creates n runs and claims them for worker "w".
func claimedRuns(t *testing.T, s *persist.Store, n int) []persist.Fence {
	t.Helper()
	fences := make([]persist.Fence, n)
	for i := range fences {
		createRun(t, s, "")
		c, err := s.RunClaim(context.Background(), "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fences[i] = persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}
	}
	return fences
}
