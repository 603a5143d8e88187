package run_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/runspec"
)

// childSpecs is the composer of children of tests: the real one, over
// the test's store, where agent "researcher" runs with the calculator, the
// approval-guarded tool and itself as a sub-agent (so that the depth limit
// is met); "gone" is no agent (it was deleted). calls records each child
// asked for.
func childSpecs(t *testing.T, b *bundle, calls *[]string) run.Composer {
	t.Helper()
	def := `{"model":"fake","max_steps":5,"tools":["calculator","guarded",{"type":"agent","agent":"researcher"}]}`
	if _, err := b.store.AgentCreate(context.Background(), agentd.AgentDefine{TenantID: "default", Name: "researcher",
		Definition: json.RawMessage(def), Actor: "test"}, nil); err != nil {
		t.Fatal(err)
	}
	c := compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "fake"}, b.reg), Agents: b.store, Registry: b.reg})
	return &recorder{Composer: c, calls: calls}
}

// recorder is a composer that records the children it is asked for.
type recorder struct {
	*compose.Composer
	mu    sync.Mutex
	calls *[]string
}

func (r *recorder) Child(ctx context.Context, parent agentd.Run, sub agentd.SubAgent, call agentd.ToolCall) (agentd.RunCreate, error) {
	r.mu.Lock()
	*r.calls = append(*r.calls, parent.ID+">"+sub.Name)
	r.mu.Unlock()
	return r.Composer.Child(ctx, parent, sub, call)
}

var researchers = []agentd.SubAgent{{Name: "researcher", Version: 1, Description: "finds things out"}, {Name: "gone", Version: 2}}

// childOf returns the child runs a parent's log says its calls started.
func childOf(t *testing.T, b *bundle, parentID string) []string {
	t.Helper()
	var ids []string
	for _, e := range b.events(t, parentID) {
		if e.Type == agentd.EventAgentStarted {
			var d struct {
				Data agentd.AgentStartedData `json:"data"`
			}
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.Data.RunID)
		}
	}
	return ids
}

// TestSubAgentAnswersItsCall: a call of a sub-agent starts one child run
// (its own conversation, its parent named), the parent waits for it
// without a worker (one worker runs both), and the child's answer is the
// call's result, which the parent's model is given. A call of an agent
// that is gone, or past the depth, fails with a tool error the model sees.
func TestSubAgentAnswersItsCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Workers, cfg.Composer, cfg.AgentDepth = 1, childSpecs(t, b, &hooked), 1
	b.start(t, cfg)
	ctx := context.Background()
	task := `{"task":"/call calculator {\"expression\":\"6*7\"}\n/call researcher {\"task\":\"/say too deep\"}\n/next\n/say forty-two"}`
	p := b.create(t, "/call researcher "+task+"\n/call gone {\"task\":\"anything\"}\n/say done", agentd.RunParams{SubAgents: researchers})
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if p.Status != agentd.StatusCompleted || outputText(t, p) != "done" {
		t.Fatalf("parent ended %s/%s: %s", p.Status, p.TerminalReason, p.Error)
	}
	kids := childOf(t, b, p.ID)
	if len(kids) != 1 {
		t.Fatalf("children started: %v (hook calls %v)", kids, hooked)
	}
	child, err := b.store.RunGet(ctx, "default", kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if child.Status != agentd.StatusCompleted || child.ConversationID == p.ConversationID || child.Params.Parent == nil ||
		child.Params.Parent.RunID != p.ID || child.Params.Parent.Depth != 1 || outputText(t, child) != "forty-two" {
		t.Fatalf("child %s/%s in %s, parent %+v, output %q", child.Status, child.TerminalReason, child.ConversationID,
			child.Params.Parent, outputText(t, child))
	}
	steps, _ := b.store.StepsList(ctx, p.ID)
	// The parent's usage is its steps' and its child's.
	own := agentd.Usage{}
	for _, s := range steps {
		own = own.Add(s.Usage)
	}
	if child.Usage.InputTokens == 0 || p.Usage != own.Add(child.Usage) {
		t.Fatalf("the parent's usage %+v, its steps' %+v, its child's %+v", p.Usage, own, child.Usage)
	}
	byName := map[string]agentd.CallDetail{}
	for _, c := range steps[0].Calls {
		byName[c.Name] = c
	}
	if c := byName["researcher"]; c.Status != agentd.CallSucceeded || string(c.Result) != `"forty-two"` {
		t.Fatalf("the researcher's call: %s %s %s", c.Status, c.Result, c.Error)
	}
	if c := byName["gone"]; c.Status != agentd.CallFailed || !strings.Contains(string(c.Error), "the agent gone version 2 cannot start") {
		t.Fatalf("the call of a deleted agent: %s %s", c.Status, c.Error)
	}
	// The child's own call of a sub-agent was past the depth (1).
	csteps, _ := b.store.StepsList(ctx, child.ID)
	deep := csteps[0].Calls[1]
	if deep.Name != "researcher" || deep.Status != agentd.CallFailed || !strings.Contains(string(deep.Error), "at most 1 deep") {
		t.Fatalf("the child's call past the depth: %s %s %s", deep.Name, deep.Status, deep.Error)
	}
	// The parent's model was given the answer, and the error.
	msgs, _ := b.store.MessagesList(ctx, p.ConversationID, 0, 100)
	var results []string
	for _, m := range msgs {
		if m.Role == agentd.RoleTool {
			results = append(results, m.Content[0].Content)
		}
	}
	if got := strings.Join(results, " | "); !strings.Contains(got, `"forty-two"`) || !strings.Contains(got, "the agent gone version 2 cannot start") {
		t.Fatalf("tool messages: %s", got)
	}
	completed := 0
	for _, e := range b.events(t, p.ID) {
		if e.Type == agentd.EventToolCallCompleted && strings.Contains(string(e.Data), `"resolved_by":"agent"`) {
			completed++
		}
	}
	if completed != 1 {
		t.Fatalf("%d tool_call.completed by an agent in the parent's log", completed)
	}
}

// TestSubAgentWaitsCancelsAndFails: a child that waits for an approval
// leaves its parent waiting (agent_runs, naming the child); the approval
// given on the child lets it go on, and the parent completes with its
// answer. Cancelling a parent cancels its waiting child; a child cancelled
// on its own fails its call, and the parent goes on.
func TestSubAgentWaitsCancelsAndFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Composer = childSpecs(t, b, &hooked)
	b.start(t, cfg)
	ctx := context.Background()
	script := "/call researcher {\"task\":\"/call guarded {}\\n/say approved\"}\n/say done"

	// Approved on the child.
	p := b.create(t, script, agentd.RunParams{SubAgents: researchers})
	child := waitingChild(t, b, p.ID)
	if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: child.ID,
		Decision: agentd.DecisionApprove, ToolCallID: child.Action().ToolCallID}); err != nil {
		t.Fatal(err)
	}
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	steps, _ := b.store.StepsList(ctx, p.ID)
	if c := steps[0].Calls[0]; p.Status != agentd.StatusCompleted || string(c.Result) != `"approved"` {
		t.Fatalf("parent %s/%s, its call %s %s %s", p.Status, p.TerminalReason, c.Status, c.Result, c.Error)
	}

	// The parent cancelled: so is its child.
	p = b.create(t, script, agentd.RunParams{SubAgents: researchers})
	child = waitingChild(t, b, p.ID)
	if _, err := b.store.RunCancel(ctx, "default", p.ID, "key:0123456789ab"); err != nil {
		t.Fatal(err)
	}
	child = b.wait(t, child.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if child.Status != agentd.StatusCancelled || child.CancelledBy != "key:0123456789ab" {
		t.Fatalf("the child of a cancelled parent: %s by %q", child.Status, child.CancelledBy)
	}

	// The child cancelled: its call fails, and the parent goes on.
	p = b.create(t, script, agentd.RunParams{SubAgents: researchers})
	child = waitingChild(t, b, p.ID)
	if _, err := b.store.RunCancel(ctx, "default", child.ID, "key:0123456789ab"); err != nil {
		t.Fatal(err)
	}
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	steps, _ = b.store.StepsList(ctx, p.ID)
	if c := steps[0].Calls[0]; p.Status != agentd.StatusCompleted || c.Status != agentd.CallFailed ||
		!strings.Contains(string(c.Error), "ended cancelled") {
		t.Fatalf("parent %s/%s, its call %s %s", p.Status, p.TerminalReason, c.Status, c.Error)
	}
}

// waitingChild waits until run parentID waits for its one child, and the
// child for an approval, and returns the child.
func waitingChild(t *testing.T, b *bundle, parentID string) agentd.Run {
	t.Helper()
	p := b.wait(t, parentID, nil)
	if a := p.Action(); p.Status != agentd.StatusRequiresAction || a.Type != agentd.ActionAgentRuns || len(a.Agents) != 1 {
		t.Fatalf("parent %s/%s, action %s", p.Status, p.TerminalReason, p.RequiredAction)
	}
	child := b.wait(t, p.Action().Agents[0].RunID, nil)
	if child.Status != agentd.StatusRequiresAction || child.Action().Type != agentd.ActionToolApproval {
		t.Fatalf("child %s/%s, action %s", child.Status, child.TerminalReason, child.RequiredAction)
	}
	return child
}

// TestSubAgentOwnSchema: an agent that declares its input schema is
// offered with it; a call whose arguments it refuses fails (the model is
// told), and one it takes starts the child with the arguments as input.
func TestSubAgentOwnSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Composer = childSpecs(t, b, &hooked)
	b.start(t, cfg)
	ctx := context.Background()
	typed := []agentd.SubAgent{{Name: "researcher", Version: 1,
		Parameters: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`)}}
	p := b.create(t, "/call researcher {\"task\":\"the wrong shape\"}\n/call researcher {\"question\":\"why?\"}\n/say done",
		agentd.RunParams{SubAgents: typed})
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	steps, _ := b.store.StepsList(ctx, p.ID)
	if p.Status != agentd.StatusCompleted || len(steps[0].Calls) != 2 {
		t.Fatalf("parent %s/%s with %d calls", p.Status, p.TerminalReason, len(steps[0].Calls))
	}
	if c := steps[0].Calls[0]; c.Status != agentd.CallFailed || !strings.Contains(string(c.Error), "question") {
		t.Fatalf("the call the schema refuses: %s %s", c.Status, c.Error)
	}
	kids := childOf(t, b, p.ID)
	if len(kids) != 1 {
		t.Fatalf("children: %v", kids)
	}
	msgs, err := b.store.MessagesList(ctx, mustRun(t, b, kids[0]).ConversationID, 0, 10)
	if err != nil || len(msgs) == 0 || msgs[0].Content[0].Text != `{"question": "why?"}` && msgs[0].Content[0].Text != `{"question":"why?"}` {
		t.Fatalf("the child's input: %v %+v", err, msgs)
	}
}

func mustRun(t *testing.T, b *bundle, id string) agentd.Run {
	t.Helper()
	r, err := b.store.RunGet(context.Background(), "default", id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSubAgentTreeBounded: a run has at most AgentChildren children open
// at once, and a run tree makes at most AgentTreeRuns runs; a call of a
// sub-agent past either fails, and the model is told, as past the depth.
// Calls made at once, on several workers, cannot pass the tree's bound
// together.
func TestSubAgentTreeBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hooked []string
	cfg := runConfig()
	cfg.Composer, cfg.AgentDepth, cfg.AgentTreeRuns, cfg.AgentChildren = childSpecs(t, b, &hooked), 3, 4, 2
	b.start(t, cfg)
	ctx := context.Background()
	refusals := func(calls []agentd.CallDetail, msg string) (n int) {
		for _, c := range calls {
			if c.Status == agentd.CallFailed && strings.Contains(string(c.Error), msg) {
				n++
			} else if c.Status != agentd.CallSucceeded && c.Status != agentd.CallAwaitingAgent {
				t.Errorf("call %s: %s %s %s", c.Name, c.Status, c.Result, c.Error)
			}
		}
		return n
	}

	// Three calls at once, two children open at most: each child waits for
	// an approval, so that both are open when the third call is made.
	waiting := `/call researcher {"task":"/call guarded {}\n/say approved"}`
	p := b.create(t, waiting+"\n"+waiting+"\n"+waiting+"\n/say done", agentd.RunParams{SubAgents: researchers})
	p = b.wait(t, p.ID, func(r agentd.Run) bool {
		return r.Status.Terminal() || (r.Status == agentd.StatusRequiresAction && r.Action().Type == agentd.ActionAgentRuns)
	})
	steps, _ := b.store.StepsList(ctx, p.ID)
	if len(p.Action().Agents) != 2 || len(steps) == 0 ||
		refusals(steps[0].Calls, "at most 2 sub-agents' runs open at once, and this one has 2") != 1 {
		t.Fatalf("parent %s/%s waits for %+v; calls %+v", p.Status, p.TerminalReason, p.Action().Agents, steps)
	}
	if _, err := b.store.RunCancel(ctx, "default", p.ID, "local"); err != nil {
		t.Fatal(err)
	}

	// Two children that each call one more: the tree holds four runs, so
	// of the calls that would make a fifth, made at once, one is refused.
	mid := `/call researcher {"task":"/call researcher {\"task\":\"/say grandchild\"}\n/say child done"}`
	p = b.create(t, mid+"\n"+mid+"\n/say done", agentd.RunParams{SubAgents: researchers})
	p = b.wait(t, p.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if p.Status != agentd.StatusCompleted {
		t.Fatalf("parent ended %s/%s: %s", p.Status, p.TerminalReason, p.Error)
	}
	tree, full := []string{p.ID}, 0
	for i := 0; i < len(tree); i++ {
		steps, _ := b.store.StepsList(ctx, tree[i])
		if len(steps) > 0 {
			full += refusals(steps[0].Calls, "a run tree makes at most 4 runs, and this one has made 4")
		}
		tree = append(tree, childOf(t, b, tree[i])...)
	}
	if len(tree) != 4 || full != 1 {
		t.Fatalf("the tree holds %d runs and %d calls were refused for it, want 4 and 1", len(tree), full)
	}
}
