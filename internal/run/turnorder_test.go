package run_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// TestEnqueuedRunWaitsForTheTurnBefore: a run created with if_busy enqueue
// while the run before it waits mid-turn (in a tool, or for a client's
// approval, between the assistant's call and its result) has its input
// numbered only when it starts, after the whole turn before it. Until then
// its input is listed last, pending, and no model request carries it; every
// request the model got is valid (each tool message right after the call
// it answers, every call answered).
func TestEnqueuedRunWaitsForTheTurnBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tool string
		release    func(t *testing.T, b *bundle, first agentd.Run)
	}{
		{"in a tool", "blocker", func(t *testing.T, b *bundle, first agentd.Run) { b.sink.Release() }},
		{"for an approval", "guarded", func(t *testing.T, b *bundle, first agentd.Run) {
			r := b.wait(t, first.ID, nil)
			var action agentd.RequiredAction
			if err := json.Unmarshal(r.RequiredAction, &action); err != nil || r.Status != agentd.StatusRequiresAction {
				t.Fatalf("first run is %s (%s), want requires_action", r.Status, r.RequiredAction)
			}
			if _, err := b.store.RunResolveAction(context.Background(), agentd.ActionParams{TenantID: "default", RunID: r.ID,
				ToolCallID: action.ToolCallID, Decision: agentd.DecisionApprove}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.engine(t, 5*time.Second)
			ctx := context.Background()
			first := b.create(t, "/call "+tc.tool+" {}\n/say first done", agentd.RunParams{})
			if tc.tool == "blocker" {
				b.sink.WaitEntered(t, "/block", 15*time.Second)
			} else {
				b.wait(t, first.ID, nil)
			}
			second, err := b.createOn(t, first.ConversationID, "/say second done", agentd.IfBusyEnqueue)
			if err != nil {
				t.Fatal(err)
			}
			if second.Status != agentd.StatusQueued {
				t.Fatalf("second run is %s, want queued", second.Status)
			}
			// While the first run is mid-turn, the second's input is
			// listed last and pending.
			msgs, err := b.store.MessagesList(ctx, first.ConversationID, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(msgs, first.ID, second.ID); got != "1:user,1:assistant(call),2:user(pending)" {
				t.Errorf("messages while the first run waits: %s", got)
			}
			tc.release(t, b, first)
			for _, r := range []agentd.Run{first, second} {
				if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
					t.Fatalf("run %s ended %s/%s: %s", r.ID, r.Status, r.TerminalReason, r.Error)
				}
			}
			msgs, err = b.store.MessagesList(ctx, first.ConversationID, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			want := "1:user,1:assistant(call),1:tool,1:assistant,2:user,2:assistant"
			if got := describe(msgs, first.ID, second.ID); got != want {
				t.Errorf("conversation reads %s, want %s", got, want)
			}
			for i, m := range msgs {
				if m.Seq != i+1 {
					t.Errorf("message %d has seq %d: not contiguous from 1", i, m.Seq)
				}
			}
			if n := len(msgs); n == 6 && (msgs[3].Content[0].Text != "first done" || msgs[5].Content[0].Text != "second done") {
				t.Errorf("answers %q and %q, want each run's own", msgs[3].Content[0].Text, msgs[5].Content[0].Text)
			}
			checkRequests(t, b.fake.Requests())
		})
	}
}

// describe writes msgs as run:role, runs named 1 (first) and 2 (second),
// an assistant's tool calls and a status other than completed noted.
func describe(msgs []agentd.Message, first, second string) string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		name := map[string]string{first: "1", second: "2"}[m.RunID]
		s := name + ":" + string(m.Role)
		for _, p := range m.Content {
			if p.Type == agentd.PartToolCall {
				s += "(call)"
				break
			}
		}
		if m.Status != agentd.MessageCompleted {
			s += "(" + string(m.Status) + ")"
		}
		out[i] = s
	}
	return strings.Join(out, ",")
}

// checkRequests fails t for each request the model refused: the fake
// refuses, as OpenAI does, a tool message that does not follow the
// assistant message that called it, and a call not answered.
func checkRequests(t *testing.T, reqs []fakellm.Request) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	for _, r := range reqs {
		if r.Status != http.StatusOK || r.Error != "" {
			t.Errorf("the model refused request %d (%d): %s", r.Seq, r.Status, r.Error)
		}
	}
}
