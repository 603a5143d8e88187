package run_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

var detached = []agentd.SubAgent{{Name: "researcher", Version: 1, Detached: true}}

// convRuns returns the runs of a conversation, oldest first.
func (b *bundle) convRuns(t *testing.T, conv string) []agentd.Run {
	t.Helper()
	runs, err := b.store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", ConversationID: conv, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
		runs[i], runs[j] = runs[j], runs[i]
	}
	return runs
}

// TestDetachedChildReportsToItsParent: a call of a detached sub-agent
// answers at once with a handle, the parent goes on, and the child's
// answer reaches the parent as input, once, at its next step boundary;
// the parent's answer comes after it.
func TestDetachedChildReportsToItsParent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Composer = childSpecs(t, b, &hooked)
	b.start(t, cfg)
	p := b.create(t, `/call researcher {"task":"/say found it"}`+"\n/stream 30 100", agentd.RunParams{SubAgents: detached})
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if p.Status != agentd.StatusCompleted {
		t.Fatalf("parent %s/%s: %s", p.Status, p.TerminalReason, p.Error)
	}
	kids := childOf(t, b, p.ID)
	if len(kids) != 1 {
		t.Fatalf("children %v", kids)
	}
	got := strings.Join(b.transcript(t, p.ConversationID), " | ")
	report := "user: [the agent researcher, run " + kids[0] + ", which you started, answered]\n\nfound it"
	if strings.Count(got, report) != 1 || !strings.HasSuffix(got, report+" | assistant: ok") {
		t.Fatalf("transcript %q; want the child's report once, then the parent's answer", got)
	}
	ins := b.inputs(t, p.ID)
	if len(ins) != 1 || ins[0].Source != agentd.InputFromAgent || ins[0].Status != agentd.InputApplied {
		t.Fatalf("inputs %+v", ins)
	}
	if runs := b.convRuns(t, p.ConversationID); len(runs) != 1 {
		t.Fatalf("%d runs in the parent's conversation, want 1", len(runs))
	}
}

// TestDetachedChildStartsTheNextRun: a child that ends after its parent
// ended starts the parent conversation's next run with its report, once;
// a child cancelled with its parent reports nothing.
func TestDetachedChildStartsTheNextRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Composer = childSpecs(t, b, &hooked)
	b.start(t, cfg)
	p := b.create(t, `/call researcher {"task":"/stream 10 100\n/say late news"}`+"\n/say done", agentd.RunParams{SubAgents: detached})
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if p.Status != agentd.StatusCompleted || outputText(t, p) != "done" {
		t.Fatalf("parent %s/%s", p.Status, p.TerminalReason)
	}
	deadline := time.Now().Add(15 * time.Second)
	var runs []agentd.Run
	for time.Now().Before(deadline) {
		if runs = b.convRuns(t, p.ConversationID); len(runs) == 2 && runs[1].Status.Terminal() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(runs) != 2 || runs[1].Status != agentd.StatusCompleted {
		t.Fatalf("runs of the conversation %d; want the parent and the run its child's report started", len(runs))
	}
	got := strings.Join(b.transcript(t, p.ConversationID), " | ")
	if strings.Count(got, "which you started, answered]\n\nlate news") != 1 || !strings.HasSuffix(got, "assistant: ok") {
		t.Fatalf("transcript %q", got)
	}

	// A child cancelled with its parent reports nothing.
	q := b.create(t, `/call researcher {"task":"/stream 50 100"}`+"\n/stream 50 100", agentd.RunParams{SubAgents: detached})
	b.waitEvent(t, q.ID, agentd.EventAgentStarted)
	if _, err := b.store.RunCancel(context.Background(), "default", q.ID, "local"); err != nil {
		t.Fatal(err)
	}
	kid := childOf(t, b, q.ID)[0]
	b.wait(t, kid, func(r agentd.Run) bool { return r.Status.Terminal() })
	time.Sleep(500 * time.Millisecond)
	if runs := b.convRuns(t, q.ConversationID); len(runs) != 1 {
		t.Fatalf("%d runs in the cancelled parent's conversation, want 1", len(runs))
	}
}

// TestDetachedReportSweptOnce: a detached child that ended while nobody
// reported it (its instance died between its end and its report) is
// reported by the sweeper of any instance, once however often it sweeps,
// and its parent applies the report.
func TestDetachedReportSweptOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	parent := b.create(t, "/stream 10 100", agentd.RunParams{})
	child, _, err := b.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake",
		Params: agentd.RunParams{MaxSteps: 3, Parent: &agentd.ParentRef{RunID: parent.ID, ToolCallID: agentd.NewID(), Depth: 1,
			Root: parent.ID, Detached: true}},
		Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: "/say never run"}}})
	if err != nil {
		t.Fatal(err)
	}
	// The child ends with no engine to report it.
	if _, err := b.store.RunCancel(ctx, "default", child.ID, "local"); err != nil {
		t.Fatal(err)
	}
	cfg := runConfig()
	cfg.SweepInterval = 50 * time.Millisecond
	b.start(t, cfg)
	parent = b.wait(t, parent.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	time.Sleep(300 * time.Millisecond) // more sweeps
	ins := b.inputs(t, parent.ID)
	if len(ins) != 1 || ins[0].Source != agentd.InputFromAgent || ins[0].Status != agentd.InputApplied {
		t.Fatalf("inputs of the parent %+v; want the child's report once, applied", ins)
	}
	if text := ins[0].Messages[0].Content[0].Text; !strings.Contains(text, child.ID) || !strings.Contains(text, "ended cancelled") {
		t.Fatalf("report %q", text)
	}
	if parent.Status != agentd.StatusCompleted {
		t.Fatalf("parent %s/%s", parent.Status, parent.TerminalReason)
	}
}
