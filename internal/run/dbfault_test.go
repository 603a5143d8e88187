package run_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"agentd/internal/event"
	"agentd/internal/persist"
	"agentd/internal/run"
	"agentd/internal/vocab"
)

// faultyStore fails the first commit of a successful tool result, as a
// database that dropped the connection at that moment would.
type faultyStore struct {
	*persist.Store
	failed atomic.Bool
}

func (s *faultyStore) Exec(ctx context.Context, f persist.Fence, evs []event.In, ops ...persist.Op) (int64, error) {
	for _, op := range ops {
		if fin, ok := op.(persist.ToolCallFinish); ok && fin.Status == vocab.CallSucceeded && s.failed.CompareAndSwap(false, true) {
			return 0, errors.New("injected: connection reset")
		}
	}
	return s.Store.Exec(ctx, f, evs, ops...)
}

func TestUncommittedToolResultIsRecoveredNotGuessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fs := &faultyStore{Store: b.store}
	e := run.New(run.Config{Store: fs, Model: b.model, Tools: b.reg, LeaseTTL: time.Second,
		PollInterval: 100 * time.Millisecond})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	r := b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/say done", persist.RunParams{})
	r = b.wait(t, r.ID, nil)
	if !fs.failed.Load() || r.Status != vocab.StatusCompleted || r.Epoch < 2 {
		t.Fatalf("run ended %s at epoch %d (fault injected: %v)", r.Status, r.Epoch, fs.failed.Load())
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	c := steps[0].Calls[0]
	if c.Status != vocab.CallSucceeded || len(c.Attempts) != 2 || c.Attempts[0].Status != vocab.AttemptUnknown {
		t.Fatalf("call %s with %d attempts", c.Status, len(c.Attempts))
	}
	msgs, _ := b.store.MessagesList(context.Background(), r.ConversationID, 0, 100)
	if len(msgs) != 4 || msgs[2].Content[0].IsError || !strings.Contains(msgs[2].Content[0].Content, "42") {
		t.Fatalf("the model was told %+v, want the recovered result", msgs[2].Content)
	}
}
