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

	"agentd/internal/persist"
	"agentd/internal/persist/persisttest"
)

func TestGroupCommitSharesTransactionsAndKeepsFences(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	const runs, writers, writes = 8, 4, 25
	fences := make([]persist.Fence, runs)
	for i := range fences {
		createRun(t, s, "")
		c, err := s.RunClaim(ctx, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fences[i] = persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}
	}
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
					if _, err := s.Exec(ctx, f, []persist.EventIn{{Type: "message.delta", Data: map[string]string{"text": "x"}}}); err != nil {
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
			_, err := s.Exec(ctx, stale, []persist.EventIn{{Type: "late"}})
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
				Seq   int64  `json:"seq"`
				Type  string `json:"type"`
				RunID string `json:"run_id"`
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
