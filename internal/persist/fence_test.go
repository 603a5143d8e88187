package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestDeltaFenceKeepsUpdatedAt: a write that only appends events (a
// streamed delta) moves the run's last seq but not its updated_at, unless
// updated_at is a second old; a new step moves it (migration 00031, which
// keeps a delta's WAL record to the bytes of the seq).
func TestDeltaFenceKeepsUpdatedAt(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	f := claimedRuns(t, s, 1)[0]
	delta := []agentd.EventIn{agentd.EventOf(1, agentd.MessageDeltaData{Text: "x"})}
	head := func() agentd.RunHead {
		t.Helper()
		h, err := s.RunHead(ctx, f.RunID)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	exec := func(ops ...persist.Op) {
		t.Helper()
		if _, err := s.Exec(ctx, f, delta, ops...); err != nil {
			t.Fatal(err)
		}
	}

	exec(persist.StepInsert{ID: agentd.NewID(), RunID: f.RunID, Seq: 1})
	stepped := head()
	exec()
	exec()
	if h := head(); !h.UpdatedAt.Equal(stepped.UpdatedAt) || h.LastEventSeq != stepped.LastEventSeq+2 {
		t.Fatalf("after two deltas: updated_at %v (was %v), last seq %d (was %d)",
			h.UpdatedAt, stepped.UpdatedAt, h.LastEventSeq, stepped.LastEventSeq)
	}

	// A second old, a delta moves it.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE runs SET updated_at = updated_at - interval '2 seconds' WHERE id = $1`, f.RunID); err != nil {
		t.Fatal(err)
	}
	old := head().UpdatedAt
	exec()
	if h := head(); !h.UpdatedAt.After(old.Add(time.Second)) {
		t.Fatalf("a delta after a second: updated_at %v, was %v", h.UpdatedAt, old)
	}

	// A new step moves it at once.
	moved := head().UpdatedAt
	exec(persist.StepInsert{ID: agentd.NewID(), RunID: f.RunID, Seq: 2})
	if h := head(); !h.UpdatedAt.After(moved) || h.StepCount != 2 {
		t.Fatalf("a new step: updated_at %v, was %v, step count %d", h.UpdatedAt, moved, h.StepCount)
	}
}

// TestRunNumbersItsOwnMessages: a running run's messages numbered by its
// executor (MessageInsert.Seq) leave the conversation's counter alone, and
// the run's stop moves it past them, so that the next turn's input follows;
// a run's state knows the number of the conversation's last message even
// when that message is not in its Messages (an aborted input).
func TestRunNumbersItsOwnMessages(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	r := createRun(t, s, "")
	c, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || c.ID != r.ID {
		t.Fatalf("claim: %v", err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w1"}
	conv := r.ConversationID
	st, err := s.RunStateLoad(ctx, r.ID)
	if err != nil || len(st.Messages) != 1 || st.MessageSeq != 1 {
		t.Fatalf("state: %v, %d messages, last seq %d", err, len(st.Messages), st.MessageSeq)
	}
	call := message(conv, r.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartToolCall, ID: "call_1", Name: "t", Arguments: "{}"})
	call.Seq = 2
	result := message(conv, r.ID, agentd.RoleTool, agentd.Part{Type: agentd.PartToolResult, ToolCallID: "call_1", Content: "{}"})
	result.Seq = 3
	exec(t, s, f, call, result)
	if n := nextSeq(t, url, conv); n != 2 {
		t.Fatalf("the run's own messages moved the counter to %d", n)
	}
	answer := message(conv, r.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartText, Text: "a1"})
	answer.Seq = 4
	exec(t, s, f, answer, persist.RunEnd{ID: r.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})
	if n := nextSeq(t, url, conv); n != 5 {
		t.Fatalf("after the run's stop the counter is %d, want 5", n)
	}

	// The next turn's input follows; cancelled before an answer, it is
	// aborted, and a run after it reads past it.
	next, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: conv,
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCancel(ctx, "default", next.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if got, want := listed(t, s, conv), "1:hi, 2:call_1, 3:{}, 4:a1, 5:q2(aborted)"; got != want {
		t.Fatalf("messages %s, want %s", got, want)
	}
	third, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: conv,
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q3"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Its state ends at its input, 6; with that input aborted too, its last
	// completed message is 4, and the conversation's last is still 6.
	st, err = s.RunStateLoad(ctx, third.ID)
	if err != nil || st.MessageSeq != 6 || st.Messages[len(st.Messages)-1].Seq != 6 {
		t.Fatalf("the third run's state: %v, last seq %d", err, st.MessageSeq)
	}
	if _, err := s.RunCancel(ctx, "default", third.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if st, err = s.RunStateLoad(ctx, third.ID); err != nil || st.MessageSeq != 6 || st.Messages[len(st.Messages)-1].Seq != 4 {
		t.Fatalf("with the last two inputs aborted: %v, last seq %d, last completed %d", err, st.MessageSeq,
			st.Messages[len(st.Messages)-1].Seq)
	}
}
