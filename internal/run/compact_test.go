package run_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"agentd/internal/compact"
	"agentd/internal/event"
	"agentd/internal/persist"
	"agentd/internal/run"
	"agentd/internal/vocab"
)

// TestLongConversationNeverOverflows: 200 runs of one conversation on
// fake-4k (a window of 4,096 tokens; each turn adds about 450) all
// complete: every request the fake received fit its window, because the
// older turns were compacted into summaries that follow the template. Every
// message is still stored; the model is sent the first question, the
// latest summary and the latest turns.
func TestLongConversationNeverOverflows(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	turns := 200
	if testing.Short() {
		turns = 40
	}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30) // about 800 bytes
	var conv string
	for i := range turns {
		input := fmt.Sprintf("question %d: %s\n/say answer %d: %s", i, filler, i, filler)
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake-4k",
			ConversationID: conv, Params: persist.RunParams{MaxSteps: 3, IfBusy: vocab.IfBusyEnqueue},
			Input: []persist.InputMessage{{Role: "user", Content: input}}})
		if err != nil {
			t.Fatal(err)
		}
		conv = r.ConversationID
		if r = b.wait(t, r.ID, func(r persist.Run) bool { return r.Status.Terminal() }); r.Status != vocab.StatusCompleted {
			t.Fatalf("turn %d ended %s/%s: %s", i, r.Status, r.TerminalReason, r.Error)
		}
	}
	if max := b.fake.MaxPromptTokens("fake-4k"); max == 0 || max > 4096 {
		t.Fatalf("the largest request the fake received had %d prompt tokens; the window is 4096", max)
	}
	msgs, err := b.store.MessagesList(context.Background(), conv, 0, 10_000)
	if err != nil || len(msgs) != 2*turns {
		t.Fatalf("%d messages stored after %d turns, want %d: %v", len(msgs), turns, 2*turns, err)
	}
	c, err := b.store.CompactionLatest(context.Background(), conv)
	if err != nil {
		t.Fatalf("no compaction after %d turns: %v", turns, err)
	}
	for _, h := range compact.Sections {
		if !strings.Contains(c.Summary, h) {
			t.Fatalf("the summary lacks %q:\n%s", h, c.Summary)
		}
	}
	visible := compact.Visible(msgs, &c)
	if visible[0].Seq != 1 || visible[1].Role != vocab.RoleSystem || len(visible) >= 20 {
		t.Fatalf("the model is sent %d messages, starting %s %d, %s", len(visible), visible[0].Role, visible[0].Seq, visible[1].Role)
	}
	for _, m := range visible[2:] {
		if m.Seq <= c.CoversToSeq {
			t.Fatalf("the model is sent message %d, which the summary (up to %d) stands for", m.Seq, c.CoversToSeq)
		}
	}
	var compactions int
	r, err := b.store.RunList(context.Background(), persist.RunListParams{TenantID: "default", ConversationID: conv, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range r {
		for _, e := range b.events(t, run.ID) {
			if e.Type == event.ContextCompacted {
				compactions++
			}
		}
	}
	if compactions == 0 || compactions > turns/2 {
		t.Fatalf("%d compactions over %d turns", compactions, turns)
	}
	t.Logf("%d turns, %d compactions, largest request %d tokens, latest summary covers up to seq %d (%d tokens before, %d after)",
		turns, compactions, b.fake.MaxPromptTokens("fake-4k"), c.CoversToSeq, c.TokensBefore, c.TokensAfter)
}
