package persist_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestQueuedInputIsNumberedByItsClaim: the input of runs enqueued behind a
// run that is mid-turn is stored at once, pending, listed last in the
// order the runs came, and left out of the running run's state; each run's
// claim numbers its input after everything before it. A claim that dies
// (its backend killed while it waits for the conversation's lock) leaves
// the run queued and its input pending, and the next claim numbers it.
func TestQueuedInputIsNumberedByItsClaim(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	first, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	conv := first.ConversationID
	c1, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || c1.ID != first.ID || c1.InputNumbered != 0 {
		t.Fatalf("claim the first run: %v (numbered %d)", err, c1.InputNumbered)
	}
	if n := nextSeq(t, url, conv); n != 2 {
		t.Fatalf("a claim with no pending input moved the counter to %d", n)
	}
	f1 := persist.Fence{RunID: first.ID, Epoch: c1.Epoch, Worker: "w1"}
	exec(t, s, f1, message(conv, first.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartToolCall, ID: "call_1", Name: "t", Arguments: "{}"}))

	// Mid-turn: two runs are enqueued, the second with two messages.
	enqueue := func(input ...agentd.InputMessage) agentd.Run {
		t.Helper()
		r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: conv,
			Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyEnqueue}, Input: input})
		if err != nil || r.Status != agentd.StatusQueued {
			t.Fatalf("enqueue: %v (%s)", err, r.Status)
		}
		return r
	}
	second := enqueue(agentd.InputMessage{Role: agentd.RoleSystem, Content: "s2"}, agentd.InputMessage{Role: agentd.RoleUser, Content: "q2"})
	third := enqueue(agentd.InputMessage{Role: agentd.RoleUser, Content: "q3"})
	p := persist.PendingSeq
	want := fmt.Sprintf("1:q1, 2:call_1, %d:s2(pending), %d:q2(pending), %d:q3(pending)", p, p+1, p+2)
	if got := listed(t, s, conv); got != want {
		t.Fatalf("while the first run is mid-turn: %s, want %s", got, want)
	}
	st, err := s.RunStateLoad(ctx, first.ID)
	if err != nil || len(st.Messages) != 2 {
		t.Fatalf("the running run's state has %d messages (%v), want its own 2", len(st.Messages), err)
	}
	if _, err := s.RunClaimStartID(ctx, "w2", time.Minute, second.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("claim of a run behind a running one: %v", err)
	}
	exec(t, s, f1, message(conv, first.ID, agentd.RoleTool, agentd.Part{Type: agentd.PartToolResult, ToolCallID: "call_1", Content: "{}"}),
		message(conv, first.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartText, Text: "a1"}),
		persist.RunEnd{ID: first.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})

	// A claim that dies while it waits for the conversation's row: nothing
	// of it stays.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	lock, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE`, conv); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan error, 1)
	go func() {
		_, err := s.RunClaimStartID(ctx, "w2", time.Minute, second.ID)
		claimed <- err
	}()
	// The claim's backend dies while it waits, after it updated the run.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int64
		if err := lock.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the conversation's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-claimed; err == nil {
		t.Fatal("a claim whose backend died succeeded")
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.RunByID(ctx, second.ID); r.Status != agentd.StatusQueued || r.Epoch != 0 {
		t.Fatalf("after a dead claim the run is %s at epoch %d, want queued at 0", r.Status, r.Epoch)
	}
	want = fmt.Sprintf("1:q1, 2:call_1, 3:{}, 4:a1, %d:s2(pending), %d:q2(pending), %d:q3(pending)", p, p+1, p+2)
	if got := listed(t, s, conv); got != want || nextSeq(t, url, conv) != 5 {
		t.Fatalf("after a dead claim: %s (next %d), want %s (next 5)", got, nextSeq(t, url, conv), want)
	}

	c2, err := s.RunClaimStartID(ctx, "w2", time.Minute, second.ID)
	if err != nil || c2.InputNumbered != 2 {
		t.Fatalf("claim the second run: %v (numbered %d, want 2)", err, c2.InputNumbered)
	}
	want = fmt.Sprintf("1:q1, 2:call_1, 3:{}, 4:a1, 5:s2, 6:q2, %d:q3(pending)", p+2)
	if got := listed(t, s, conv); got != want || nextSeq(t, url, conv) != 7 {
		t.Fatalf("after the second run's claim: %s (next %d), want %s (next 7)", got, nextSeq(t, url, conv), want)
	}
	if st, err = s.RunStateLoad(ctx, second.ID); err != nil || len(st.Messages) != 6 || st.Messages[5].Seq != 6 {
		t.Fatalf("the second run's state: %d messages (%v), want 6", len(st.Messages), err)
	}
	f2 := persist.Fence{RunID: second.ID, Epoch: c2.Epoch, Worker: "w2"}
	exec(t, s, f2, message(conv, second.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartText, Text: "a2"}),
		persist.RunEnd{ID: second.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})
	// The search claims the third, and numbers it too.
	if c3, err := s.RunClaimStart(ctx, "w3", time.Minute); err != nil || c3.ID != third.ID || c3.InputNumbered != 1 {
		t.Fatalf("claim the third run: %v (numbered %d, want 1)", err, c3.InputNumbered)
	}
	want = "1:q1, 2:call_1, 3:{}, 4:a1, 5:s2, 6:q2, 7:a2, 8:q3"
	if got := listed(t, s, conv); got != want || nextSeq(t, url, conv) != 9 {
		t.Fatalf("after the third run's claim: %s (next %d), want %s (next 9)", got, nextSeq(t, url, conv), want)
	}
}

// TestInputBehindAnIdleQueueIsNumberedAtOnce: a run created on an idle
// conversation is first in line, so its input is numbered at its creation,
// even when it waits for a worker.
func TestInputBehindAnIdleQueueIsNumberedAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCancel(ctx, "default", r.ID, "local"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: r.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyEnqueue}, Input: []agentd.InputMessage{{Role: "user", Content: "q2"}}}); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, s, r.ConversationID); got != "1:q1(aborted), 2:q2" {
		t.Fatalf("messages %s, want 1:q1(aborted), 2:q2", got)
	}
}

// message is the insert of a message of run with parts.
func message(conv, run string, role agentd.Role, parts ...agentd.Part) persist.MessageInsert {
	return persist.MessageInsert{ID: agentd.NewID(), ConversationID: conv, RunID: run, Role: role, Content: parts,
		Status: agentd.MessageCompleted}
}

func exec(t *testing.T, s *persist.Store, f persist.Fence, ops ...persist.Op) {
	t.Helper()
	if _, err := s.Exec(context.Background(), f, nil, ops...); err != nil {
		t.Fatalf("exec: %v", err)
	}
}

// listed writes the conversation's messages as MessagesList returns them:
// seq:text (a call's id, a result's content), a status other than
// completed noted.
func listed(t *testing.T, s *persist.Store, conv string) string {
	t.Helper()
	msgs, err := s.MessagesList(context.Background(), conv, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		p := m.Content[0]
		out[i] = fmt.Sprintf("%d:%s%s%s", m.Seq, p.Text, p.ID, p.Content)
		if m.Status != agentd.MessageCompleted {
			out[i] += "(" + string(m.Status) + ")"
		}
	}
	return strings.Join(out, ", ")
}

// nextSeq reads the conversation's message counter from the database at
// url.
func nextSeq(t *testing.T, url, conv string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT next_seq FROM conversations WHERE id = $1`, conv).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCancelledQueuedInputWaitsForItsRun: the input of a run cancelled
// while it waited behind another is aborted, after everything, with its
// provisional seq; resumed, it is pending again, and the run numbers it
// when it is claimed.
func TestCancelledQueuedInputWaitsForItsRun(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	first, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: first.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyEnqueue}, Input: []agentd.InputMessage{{Role: "user", Content: "q2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCancel(ctx, "default", second.ID, "local"); err != nil {
		t.Fatal(err)
	}
	exec(t, s, persist.Fence{RunID: first.ID, Epoch: c1.Epoch, Worker: "w1"},
		message(first.ConversationID, first.ID, agentd.RoleAssistant, agentd.Part{Type: agentd.PartText, Text: "a1"}),
		persist.RunEnd{ID: first.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})
	want := fmt.Sprintf("1:q1, 2:a1, %d:q2(aborted)", persist.PendingSeq)
	if got := listed(t, s, first.ConversationID); got != want {
		t.Fatalf("after the cancel: %s, want %s", got, want)
	}
	if _, err := s.RunResume(ctx, "default", second.ID, "local"); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("1:q1, 2:a1, %d:q2(pending)", persist.PendingSeq)
	if got := listed(t, s, first.ConversationID); got != want {
		t.Fatalf("after the resume: %s, want %s", got, want)
	}
	if c, err := s.RunClaimStart(ctx, "w2", time.Minute); err != nil || c.ID != second.ID || c.InputNumbered != 1 {
		t.Fatalf("claim the resumed run: %v (numbered %d)", err, c.InputNumbered)
	}
	if got := listed(t, s, first.ConversationID); got != "1:q1, 2:a1, 3:q2" {
		t.Fatalf("after the resumed run's claim: %s, want 1:q1, 2:a1, 3:q2", got)
	}
}

// TestResumedRunQueuesLast: a run resumed while another of its conversation
// is queued takes the last place in the conversation's queue, whatever its
// id, and the runs are claimed one at a time in that order. (Ordered by id,
// the resumed run went first, and a claim whose snapshot predated the
// resume's commit picked the other one, so that two claims raced for one
// conversation.)
func TestResumedRunQueuesLast(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	first, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Params: agentd.RunParams{MaxSteps: 4}, Input: []agentd.InputMessage{{Role: "user", Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCancel(ctx, "default", first.ID, "local"); err != nil {
		t.Fatal(err)
	}
	second, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", ConversationID: first.ConversationID,
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyEnqueue}, Input: []agentd.InputMessage{{Role: "user", Content: "q2"}}})
	if err != nil || second.Status != agentd.StatusQueued {
		t.Fatalf("create the second run: %v (%s)", err, second.Status)
	}
	if r, err := s.RunResume(ctx, "default", first.ID, "local"); err != nil || r.Status != agentd.StatusQueued {
		t.Fatalf("resume the first run: %v (%s)", err, r.Status)
	}
	if first.ID > second.ID {
		t.Fatalf("ids out of creation order: %s > %s", first.ID, second.ID)
	}
	c, err := s.RunClaimStart(ctx, "w1", time.Minute)
	if err != nil || c.ID != second.ID {
		t.Fatalf("first claim: %v, got %s, want the second run %s (queued before the resume)", err, c.ID, second.ID)
	}
	if _, err := s.RunClaimStart(ctx, "w2", time.Minute); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("a claim while the conversation's run is running: %v", err)
	}
	exec(t, s, persist.Fence{RunID: second.ID, Epoch: c.Epoch, Worker: "w1"},
		persist.RunEnd{ID: second.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted})
	c, err = s.RunClaimStart(ctx, "w2", time.Minute)
	if err != nil || c.ID != first.ID {
		t.Fatalf("second claim: %v, got %s, want the resumed run %s", err, c.ID, first.ID)
	}
}
