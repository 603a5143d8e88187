package persist_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestAuditEventsPages: a run's audit is read in pages of
// persist.AuditPageSize events of the audit's types, in order, without the
// others (text deltas), up to the seq it is read through; a page names the
// calls whose attempts it starts, with their receipts.
func TestAuditEventsPages(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	r := createRun(t, s, "")
	c, err := s.RunClaim(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w1"}
	stepID, callID, attemptID := agentd.NewID(), agentd.NewID(), agentd.NewID()
	const argsSum, resultSum = "aa", "bb"
	if _, err := s.Exec(ctx, f, []agentd.EventIn{agentd.EventOf(1, agentd.ToolAttemptStartedData{Attempt: 1, CallID: "call_1",
		Name: "charge", ToolCallID: callID})},
		persist.StepInsert{ID: stepID, RunID: r.ID, Seq: 1},
		persist.ToolCallInsert{ID: callID, RunID: r.ID, StepID: stepID, CallID: "call_1", Name: "charge",
			Arguments: json.RawMessage(`{"a":1}`), IdempotencyKey: r.ID + ":1:call_1", Effect: agentd.EffectSideEffect},
		persist.AttemptStart{ID: attemptID, ToolCallID: callID, N: 1, Worker: "w1", Epoch: c.Epoch, ArgumentsSHA256: argsSum},
		persist.AttemptFinish{ID: attemptID, Status: agentd.AttemptSucceeded, ResultSHA256: resultSum}); err != nil {
		t.Fatal(err)
	}
	// 1,200 reuses, each after a delta the audit leaves out.
	const reuses = 1200
	for i := 0; i < reuses; i += 100 {
		var evs []agentd.EventIn
		for range 100 {
			evs = append(evs, agentd.EventOf(1, agentd.MessageDeltaData{Text: "x"}),
				agentd.EventOf(1, agentd.ToolCallReusedData{CallID: "call_1", IdempotencyKey: r.ID + ":1:call_1", Name: "charge", ToolCallID: callID}))
		}
		if _, err := s.Exec(ctx, f, evs); err != nil {
			t.Fatal(err)
		}
	}
	run, err := s.RunGet(ctx, "default", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	through := run.LastEventSeq - 10 // the last 10 events (5 reuses) are past what is read
	var got []agentd.Event
	var pages []int
	var after int64
	for {
		evs, calls, err := s.AuditEvents(ctx, r.ID, after, through)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		pages = append(pages, len(evs))
		if len(got) == 0 {
			if len(calls) != 1 || len(calls[0].Attempts) != 1 || calls[0].Attempts[0].ArgumentsSHA256 != argsSum ||
				calls[0].Attempts[0].ResultSHA256 != resultSum || calls[0].IdempotencyKey != r.ID+":1:call_1" {
				t.Fatalf("the first page's calls: %+v", calls)
			}
		} else if len(calls) != 0 {
			t.Fatalf("a page that starts no attempt names calls: %+v", calls)
		}
		got = append(got, evs...)
		after = evs[len(evs)-1].Seq
	}
	// run.created, the attempt, and the reuses read through.
	want := 2 + reuses - 5
	if len(got) != want || len(pages) != 3 || pages[0] != persist.AuditPageSize {
		t.Fatalf("read %d events in pages %v, want %d in pages of %d", len(got), pages, want, persist.AuditPageSize)
	}
	for i, e := range got {
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("event %d (seq %d) after seq %d", i, e.Seq, got[i-1].Seq)
		}
		if e.Type == agentd.EventMessageDelta || e.Seq > through {
			t.Fatalf("the audit read event %d (%s)", e.Seq, e.Type)
		}
	}
	if got[0].Type != agentd.EventRunCreated || got[1].Type != agentd.EventToolAttemptStarted {
		t.Fatalf("the audit begins %s, %s", got[0].Type, got[1].Type)
	}
}
