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

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// itemsOf writes a conversation's messages as seq:role:text, a call as
// call(id), a result as result(id)=content, a run's message with its
// run's tag from runs (a message of no run has none).
func itemsOf(t *testing.T, s *persist.Store, conv string, runs map[string]string) string {
	t.Helper()
	msgs, err := s.MessagesList(context.Background(), conv, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		var parts []string
		for _, p := range m.Content {
			switch p.Type {
			case agentd.PartText:
				parts = append(parts, p.Text)
			case agentd.PartToolCall:
				parts = append(parts, "call("+p.ID+")")
			case agentd.PartToolResult:
				parts = append(parts, "result("+p.ToolCallID+")="+p.Content)
			}
		}
		out[i] = fmt.Sprintf("%d:%s:%s", m.Seq, m.Role, strings.Join(parts, "+"))
		if m.RunID != "" {
			out[i] += "@" + runs[m.RunID]
		}
		if m.Status != agentd.MessageCompleted {
			out[i] += "(" + string(m.Status) + ")"
		}
	}
	return strings.Join(out, ", ")
}

// counter reads a conversation's message counter.
func counter(t *testing.T, url, conv string) int {
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

// answer claims run r (which must be the one claimable run) and completes
// it with the answer text.
func answer(t *testing.T, s *persist.Store, r agentd.Run, text string) {
	t.Helper()
	ctx := context.Background()
	c, err := s.RunClaimStartID(ctx, "w1", time.Minute, r.ID)
	if err != nil {
		t.Fatalf("claim %s: %v", r.ID, err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: c.Epoch, Worker: "w1"}
	if _, err := s.Exec(ctx, f, nil, persist.MessageInsert{ID: agentd.NewID(), ConversationID: r.ConversationID, RunID: r.ID,
		Role: agentd.RoleAssistant, Content: []agentd.Part{{Type: agentd.PartText, Text: text}}, Status: agentd.MessageCompleted},
		persist.RunEnd{ID: r.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}); err != nil {
		t.Fatalf("answer %s: %v", r.ID, err)
	}
}

func keepNothing(agentd.Message) ([]agentd.Part, error) { return nil, nil }

// TestConversationItemsAppendAndDelete: items given on create, and items
// appended later, are messages of no run, numbered after everything
// before them, which the conversation's next run loads before its input;
// nothing is appended or deleted while a run is in flight, nothing of a
// failed append stays, a delete removes one message (or, as keep says,
// part of it) and the compactions whose summary stands for it, and the
// other messages keep their numbers.
func TestConversationItemsAppendAndDelete(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	c, first, err := s.ConversationCreateWith(ctx, "default", json.RawMessage(`{"topic":"demo"}`), []agentd.InputMessage{
		{Role: agentd.RoleUser, Content: "hello"}, {Role: agentd.RoleAssistant, Content: "hi there"}})
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(c.Metadata, `{"topic":"demo"}`) || len(first) != 2 || first[0].Seq != 1 || first[1].Seq != 2 ||
		first[0].RunID != "" || first[1].Status != agentd.MessageCompleted || first[1].Content[0].Text != "hi there" {
		t.Fatalf("created %+v with %+v", c, first)
	}
	if n := counter(t, url, c.ID); n != 3 {
		t.Fatalf("the counter after two items is %d, want 3", n)
	}

	// A run in flight: nothing is added or deleted.
	r1, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", ConversationID: c.ID, Model: "m",
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyReject}, Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "q1"}}})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]string{r1.ID: "r1"}
	before := itemsOf(t, s, c.ID, runs)
	if want := "1:user:hello, 2:assistant:hi there, 3:user:q1@r1"; before != want {
		t.Fatalf("before: %s, want %s", before, want)
	}
	var busy *agentd.BusyError
	if _, err := s.MessagesAppend(ctx, "default", c.ID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "x"}}); !errors.As(err, &busy) || busy.RunID != r1.ID {
		t.Fatalf("append while a run is queued: %v", err)
	}
	if _, err := s.MessageDelete(ctx, "default", c.ID, first[0].ID, keepNothing); !errors.As(err, &busy) || busy.RunID != r1.ID {
		t.Fatalf("delete while a run is queued: %v", err)
	}
	if got := itemsOf(t, s, c.ID, runs); got != before {
		t.Fatalf("a refused change changed the conversation: %s", got)
	}
	answer(t, s, r1, "a1")

	// Appended after the turn, in order, in one statement.
	added, err := s.MessagesAppend(ctx, "default", c.ID, []agentd.InputMessage{
		{Role: agentd.RoleUser, Content: "u2"},
		{Role: agentd.RoleAssistant, Content: "let me look", ToolCalls: []agentd.InputCall{{ID: "c1", Name: "lookup", Arguments: `{"q":1}`}}},
		{Role: agentd.RoleTool, ToolCallID: "c1", Content: "found"},
		{Role: agentd.RoleSystem, Content: "be brief"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 4 || added[0].Seq != 5 || added[3].Seq != 8 || added[1].Content[1].Arguments != `{"q":1}` {
		t.Fatalf("added %+v", added)
	}
	want := "1:user:hello, 2:assistant:hi there, 3:user:q1@r1, 4:assistant:a1@r1, 5:user:u2, " +
		"6:assistant:let me look+call(c1), 7:tool:result(c1)=found, 8:system:be brief"
	if got := itemsOf(t, s, c.ID, runs); got != want {
		t.Fatalf("after the append: %s, want %s", got, want)
	}

	// Nothing of a failed append stays (the second text cannot be stored).
	if _, err := s.MessagesAppend(ctx, "default", c.ID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "fine"},
		{Role: agentd.RoleUser, Content: "nul\x00"}}); err == nil {
		t.Fatal("an append of a text with a NUL character succeeded")
	}
	if got := itemsOf(t, s, c.ID, runs); got != want || counter(t, url, c.ID) != 9 {
		t.Fatalf("after a failed append: %s, counter %d", got, counter(t, url, c.ID))
	}
	convs, err := s.ConversationList(ctx, agentd.ConversationListParams{TenantID: "default", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ConversationCreateWith(ctx, "default", nil, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "nul\x00"}}); err == nil {
		t.Fatal("a conversation created with a text with a NUL character")
	}
	if after, err := s.ConversationList(ctx, agentd.ConversationListParams{TenantID: "default", Limit: 100}); err != nil || len(after) != len(convs) {
		t.Fatalf("a failed create left a conversation: %d, then %d (%v)", len(convs), len(after), err)
	}

	// The next run loads the appended messages before its input.
	r2, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", ConversationID: c.ID, Model: "m",
		Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyReject}, Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "q2"}}})
	if err != nil {
		t.Fatal(err)
	}
	runs[r2.ID] = "r2"
	st, err := s.RunStateLoad(ctx, r2.ID)
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, m := range st.Messages {
		loaded = append(loaded, fmt.Sprintf("%d:%s", m.Seq, agentd.TextOf(m.Content)+m.Content[0].Content))
	}
	if got := strings.Join(loaded, ","); got != "1:hello,2:hi there,3:q1,4:a1,5:u2,6:let me look,7:found,8:be brief,9:q2" {
		t.Fatalf("the next run loads %s", got)
	}
	answer(t, s, r2, "a2")

	// Two compactions: one whose summary stands for messages up to 4, one
	// up to 2.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, covers := range []int{2, 4} {
		if _, err := conn.Exec(ctx, `INSERT INTO compactions (id, conversation_id, run_id, step_id, covers_to_seq,
			messages_covered, summary, tokens_before, tokens_after) VALUES ($1, $2, $3, $4, $5, 1, 'summary', 10, 5)`,
			agentd.NewID(), c.ID, r1.ID, agentd.NewID(), covers); err != nil {
			t.Fatal(err)
		}
	}

	// Deletes: a message, the text of an assistant message with a call
	// (its call stays), and one that keep refuses.
	byID := func(seq int) string {
		msgs, err := s.MessagesList(ctx, c.ID, seq-1, 1)
		if err != nil || len(msgs) != 1 || msgs[0].Seq != seq {
			t.Fatalf("message %d: %v %+v", seq, err, msgs)
		}
		return msgs[0].ID
	}
	got, err := s.MessageDelete(ctx, "default", c.ID, byID(5), keepNothing)
	if err != nil || got.ID != c.ID || !got.UpdatedAt.After(c.UpdatedAt) {
		t.Fatalf("delete: %v %+v", err, got)
	}
	var kept agentd.Message
	if _, err := s.MessageDelete(ctx, "default", c.ID, byID(6), func(m agentd.Message) ([]agentd.Part, error) {
		kept = m
		return m.Content[1:], nil
	}); err != nil || kept.Seq != 6 || kept.Content[0].Text != "let me look" {
		t.Fatalf("delete the text of a call's message: %v, keep was given %+v", err, kept)
	}
	refused := errors.New("not this one")
	if _, err := s.MessageDelete(ctx, "default", c.ID, byID(7), func(agentd.Message) ([]agentd.Part, error) {
		return nil, refused
	}); !errors.Is(err, refused) {
		t.Fatalf("a delete keep refuses: %v", err)
	}
	want = "1:user:hello, 2:assistant:hi there, 3:user:q1@r1, 4:assistant:a1@r1, " +
		"6:assistant:call(c1), 7:tool:result(c1)=found, 8:system:be brief, 9:user:q2@r2, 10:assistant:a2@r2"
	if got := itemsOf(t, s, c.ID, runs); got != want {
		t.Fatalf("after the deletes: %s, want %s", got, want)
	}
	if latest, err := s.CompactionLatest(ctx, c.ID); err != nil || latest.CoversToSeq != 4 {
		t.Fatalf("a delete after both compactions' messages dropped one: %v %+v", err, latest)
	}
	// a1 (4) is summarized by the compaction up to 4, not by the one up
	// to 2.
	if _, err := s.MessageDelete(ctx, "default", c.ID, byID(4), keepNothing); err != nil {
		t.Fatal(err)
	}
	if latest, err := s.CompactionLatest(ctx, c.ID); err != nil || latest.CoversToSeq != 2 {
		t.Fatalf("after deleting a message the latest compaction summarized: %v %+v", err, latest)
	}
	if _, err := s.MessageDelete(ctx, "default", c.ID, byID(2), keepNothing); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompactionLatest(ctx, c.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("after deleting the last message of the earliest summary, a compaction is left: %v", err)
	}

	// The next append is numbered after everything, gaps and all.
	if more, err := s.MessagesAppend(ctx, "default", c.ID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "u3"}}); err != nil || more[0].Seq != 11 {
		t.Fatalf("append after deletes: %v %+v", err, more)
	}

	// Unknown messages and conversations, and another tenant's.
	if _, err := s.MessageDelete(ctx, "default", c.ID, agentd.NewID(), keepNothing); !errors.Is(err, agentd.ErrNotFound) ||
		errors.Is(err, agentd.ErrConversationNotFound) {
		t.Fatalf("delete of an unknown message: %v", err)
	}
	if _, err := s.MessageDelete(ctx, "acme", c.ID, byID(3), keepNothing); !errors.Is(err, agentd.ErrConversationNotFound) {
		t.Fatalf("delete in another tenant's conversation: %v", err)
	}
	if _, err := s.MessagesAppend(ctx, "acme", c.ID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "x"}}); !errors.Is(err, agentd.ErrConversationNotFound) {
		t.Fatalf("append to another tenant's conversation: %v", err)
	}
	if _, err := s.MessagesAppend(ctx, "default", agentd.NewID(), []agentd.InputMessage{{Role: agentd.RoleUser, Content: "x"}}); !errors.Is(err, agentd.ErrConversationNotFound) {
		t.Fatalf("append to an unknown conversation: %v", err)
	}
}

// sameJSON reports whether a and b are the same JSON text once compacted
// and with keys in order.
func sameJSON(a json.RawMessage, b string) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

// TestMessagesAppendWaitsForClientOutputs: a conversation whose latest run
// ended at client tool calls takes no appended message until the next
// run gives their outputs (which must follow the calls); a delete is not
// refused.
func TestMessagesAppendWaitsForClientOutputs(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	r, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m", Params: agentd.RunParams{MaxSteps: 4},
		Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "q"}}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := s.RunClaimStartID(ctx, "w1", time.Minute, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	f := persist.Fence{RunID: r.ID, Epoch: cl.Epoch, Worker: "w1"}
	if _, err := s.Exec(ctx, f, nil, persist.MessageInsert{ID: agentd.NewID(), ConversationID: r.ConversationID, RunID: r.ID,
		Role: agentd.RoleAssistant, Content: []agentd.Part{{Type: agentd.PartToolCall, ID: "call_7", Name: "weather", Arguments: "{}"}},
		Status: agentd.MessageCompleted},
		persist.ToolCallInsert{ID: agentd.NewID(), RunID: r.ID, StepID: cl.StartedStep, CallID: "call_7", Name: "weather",
			Arguments: json.RawMessage(`{}`), IdempotencyKey: r.ID + ":1:call_7", Effect: agentd.EffectSideEffect,
			Status: agentd.CallAwaitingClient},
		persist.RunEnd{ID: r.ID, Status: agentd.StatusCompleted, Reason: agentd.ReasonClientToolCalls}); err != nil {
		t.Fatal(err)
	}
	var pending *agentd.PendingCallsError
	if _, err := s.MessagesAppend(ctx, "default", r.ConversationID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: "x"}}); !errors.As(err, &pending) ||
		len(pending.Missing) != 1 || pending.Missing[0] != "call_7" {
		t.Fatalf("append while calls wait for their outputs: %v", err)
	}
	msgs, err := s.MessagesList(ctx, r.ConversationID, 0, 10)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("messages: %v %d", err, len(msgs))
	}
	if _, err := s.MessageDelete(ctx, "default", r.ConversationID, msgs[0].ID, keepNothing); err != nil {
		t.Fatalf("delete while calls wait for their outputs: %v", err)
	}
}

// TestMessagesAppendRacesRunCreate: an append and a run's creation sent at
// once on an idle conversation are serialised by the conversation's lock:
// either the append comes first, and the run's input is numbered after its
// message, or the run does, and the append is refused (busy).
func TestMessagesAppendRacesRunCreate(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	c, err := s.ConversationCreate(ctx, "default", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for i := range 20 {
		var (
			wg        sync.WaitGroup
			appended  []agentd.Message
			appendErr error
			run       agentd.Run
			createErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			appended, appendErr = s.MessagesAppend(ctx, "default", c.ID, []agentd.InputMessage{{Role: agentd.RoleUser, Content: fmt.Sprint("x", i)}})
		}()
		go func() {
			defer wg.Done()
			run, _, createErr = s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", ConversationID: c.ID, Model: "m",
				Params: agentd.RunParams{MaxSteps: 4, IfBusy: agentd.IfBusyReject},
				Input:  []agentd.InputMessage{{Role: agentd.RoleUser, Content: fmt.Sprint("q", i)}}})
		}()
		wg.Wait()
		if createErr != nil {
			t.Fatalf("round %d: the run's creation failed: %v", i, createErr)
		}
		msgs, err := s.MessagesList(ctx, c.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		input := -1
		for _, m := range msgs {
			if m.RunID == run.ID {
				input = m.Seq
			}
		}
		var busy *agentd.BusyError
		switch {
		case appendErr == nil:
			if len(appended) != 1 || appended[0].Seq >= input {
				t.Fatalf("round %d: appended %+v, the run's input numbered %d", i, appended, input)
			}
			outcomes["appended first"]++
		case errors.As(appendErr, &busy) && busy.RunID == run.ID:
			outcomes["refused"]++
		default:
			t.Fatalf("round %d: append: %v", i, appendErr)
		}
		if _, err := s.RunCancel(ctx, "default", run.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
