package run_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// faultyStore fails the first commit of a successful tool result, as a
// database that dropped the connection at that moment would.
type faultyStore struct {
	*persist.Store
	failed atomic.Bool
}

func (s *faultyStore) Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error) {
	for _, op := range ops {
		if fin, ok := op.(persist.ToolCallFinish); ok && fin.Status == agentd.CallSucceeded && s.failed.CompareAndSwap(false, true) {
			return 0, errors.New("injected: connection reset")
		}
	}
	return s.Store.Exec(ctx, f, evs, ops...)
}

func TestUncommittedToolResultIsRecoveredNotGuessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fs := &faultyStore{Store: b.store}
	b.start(t, run.Config{Store: fs, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond})
	r := b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/say done", agentd.RunParams{})
	r = b.wait(t, r.ID, nil)
	if !fs.failed.Load() || r.Status != agentd.StatusCompleted || r.Epoch < 2 {
		t.Fatalf("run ended %s at epoch %d (fault injected: %v)", r.Status, r.Epoch, fs.failed.Load())
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	c := steps[0].Calls[0]
	if c.Status != agentd.CallSucceeded || len(c.Attempts) != 2 || c.Attempts[0].Status != agentd.AttemptUnknown {
		t.Fatalf("call %s with %d attempts", c.Status, len(c.Attempts))
	}
	msgs, _ := b.store.MessagesList(context.Background(), r.ConversationID, 0, 100)
	if len(msgs) != 4 || msgs[2].Content[0].IsError || !strings.Contains(msgs[2].Content[0].Content, "42") {
		t.Fatalf("the model was told %+v, want the recovered result", msgs[2].Content)
	}
}

// refusingStore refuses, as data, every commit of a successful result of
// the named tool: a value the database cannot store that slipped past
// internal/clean.
type refusingStore struct {
	*persist.Store
	tool    string
	callIDs map[string]string // tool call id -> name, from the planned calls
	refused atomic.Int64
}

func (s *refusingStore) Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error) {
	for _, op := range ops {
		switch o := op.(type) {
		case persist.ToolCallInsert:
			s.callIDs[o.ID] = o.Name
		case persist.ToolCallFinish:
			if o.Status == agentd.CallSucceeded && s.callIDs[o.ID] == s.tool {
				s.refused.Add(1)
				return 0, fmt.Errorf("finish tool call: %w: invalid byte sequence (SQLSTATE 22021)", persist.ErrInvalidValue)
			}
		}
	}
	return s.Store.Exec(ctx, f, evs, ops...)
}

// TestRefusedWriteFailsTheRun: a write the database refuses as data is not
// tried again: the run fails with storage_error at its first claim, its
// events stay gapless, and the results committed before stay.
func TestRefusedWriteFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rs := &refusingStore{Store: b.store, tool: "clock", callIDs: map[string]string{}}
	b.start(t, run.Config{Store: rs, LeaseTTL: time.Second, PollInterval: 100 * time.Millisecond, Workers: 1})
	r := b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/next\n/call clock {}\n/say done", agentd.RunParams{})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusFailed || r.TerminalReason != agentd.ReasonStorageError || r.Epoch != 1 || rs.refused.Load() != 1 {
		t.Fatalf("run %s (%s) at epoch %d after %d refused writes, want failed storage_error at epoch 1 after 1",
			r.Status, r.TerminalReason, r.Epoch, rs.refused.Load())
	}
	evs := b.events(t, r.ID) // gapless, checked by events
	if last := evs[len(evs)-1]; last.Type != agentd.EventRunFailed || !strings.Contains(string(last.Data), `"kind":"storage"`) {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if c := steps[0].Calls[0]; c.Name != "calculator" || c.Status != agentd.CallSucceeded || !strings.Contains(string(c.Result), "42") {
		t.Fatalf("the first step's committed result: %s %s %s", c.Name, c.Status, c.Result)
	}
	noneOpen(t, steps)
}

// wedgedStore fails, as a lost connection would, every commit of a
// successful result of the named tool: the run can never finish its step.
type wedgedStore struct {
	*persist.Store
	tool    string
	callIDs sync.Map // tool call id -> name, from the planned calls
	failed  atomic.Int64
}

func (s *wedgedStore) Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error) {
	for _, op := range ops {
		switch o := op.(type) {
		case persist.ToolCallInsert:
			s.callIDs.Store(o.ID, o.Name)
		case persist.ToolCallFinish:
			if name, _ := s.callIDs.Load(o.ID); o.Status == agentd.CallSucceeded && name == s.tool {
				s.failed.Add(1)
				return 0, errors.New("injected: connection reset")
			}
		}
	}
	return s.Store.Exec(ctx, f, evs, ops...)
}

// TestRunWithoutProgressFails: a run taken over again and again without
// starting a new step fails (no_progress) after the configured number of
// takeovers, instead of being executed forever.
func TestRunWithoutProgressFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ws := &wedgedStore{Store: b.store, tool: "clock"}
	b.start(t, run.Config{Store: ws, LeaseTTL: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond, MaxStallClaims: 3})
	r := b.create(t, "/call clock {}\n/say done", agentd.RunParams{})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusFailed || r.TerminalReason != agentd.ReasonNoProgress {
		t.Fatalf("run ended %s/%s, want failed/no_progress", r.Status, r.TerminalReason)
	}
	// Claimed first at epoch 1, then taken over 3 times and failed at
	// the 4th: the tool ran at each of the first four claims.
	if r.Epoch != 5 || ws.failed.Load() != 4 {
		t.Fatalf("failed at epoch %d after %d lost results, want epoch 5 after 4", r.Epoch, ws.failed.Load())
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if steps[0].Status != agentd.StepFailed {
		t.Fatalf("the stuck step is %s, want failed", steps[0].Status)
	}
	noneOpen(t, steps)
}

// noneOpen fails t when an attempt of steps is still running, or a call
// still running.
func noneOpen(t *testing.T, steps []agentd.StepDetail) {
	t.Helper()
	for _, st := range steps {
		for _, c := range st.Calls {
			if c.Status == agentd.CallRunning {
				t.Errorf("call %s is still running", c.Name)
			}
			for _, a := range c.Attempts {
				if a.Status == agentd.AttemptRunning {
					t.Errorf("attempt %d of %s is still running", a.N, c.Name)
				}
			}
		}
	}
}
