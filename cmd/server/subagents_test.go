package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"

	"github.com/jackc/pgx/v5"
)

// TestSubAgents: an agent whose tools name another agent hands it a task
// over HTTP: the call starts one child run (parent_run_id,
// parent_tool_call_id), whose approval shows in the parent's
// required_action and is answered on the parent; the child's side effect
// runs once, its answer is the call's result, and the parent's stream
// says that the child started. Cancelling a parent cancels its child. A
// cycle of agents, an unknown agent, a name two tools share and an agent
// tool without its agent are refused naming the field.
func TestSubAgents(t *testing.T) {
	t.Parallel()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/charge": webhooktest.OK(), "/guarded": webhooktest.OK()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[
		{"name":"charge","description":"charges a card","parameters":{"type":"object"},"url":%q,"effect":"side_effect"},
		{"name":"guarded","description":"asks first","parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`,
		sink.URL+"/charge", sink.URL+"/guarded")))
	c, ctx := s.Client, testCtx(t)
	for _, a := range []string{
		`{"name": "researcher", "description": "looks things up and pays for them", "instructions": "research", "tools": ["charge", "guarded"]}`,
		`{"name": "lead", "instructions": "lead", "tools": ["calculator", {"type": "agent", "agent": "researcher"}]}`,
	} {
		if _, err := c.CreateAgentJSON(ctx, json.RawMessage(a)); err != nil {
			t.Fatalf("CreateAgentJSON %s: %v", a, err)
		}
	}
	_, err := c.UpdateAgentJSON(ctx, "researcher", json.RawMessage(`{"instructions": "research", "tools": [{"type": "agent", "agent": "lead"}]}`))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Field != "tools" || !strings.Contains(e.Detail, "researcher → lead → researcher") {
		t.Fatalf("a cycle of agents: %v", err)
	}
	// Tool entries the SDK's CreateRun cannot write (it names tools by
	// name): raw bodies, for the server's refusals.
	for body, field := range map[string]string{
		`{"input": "hi", "tools": [{"type": "agent", "agent": "nobody"}]}`:                                               "tools",
		`{"input": "hi", "tools": [{"type": "agent"}]}`:                                                                  "tools[0].agent",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "lead", "name": "x"}]}`:                                    "tools[0]",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "lead"}, {"type": "function", "name": "lead"}]}`:           "tools",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "researcher"}, {"type": "agent", "agent": "researcher"}]}`: "tools",
	} {
		resp, err := http.Post(s.URL+"/runs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var p client.Error
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnprocessableEntity || p.Field != field {
			t.Fatalf("POST /runs %s: %d %s (%s), want 422 naming %s", body, resp.StatusCode, p.Field, p.Detail, field)
		}
	}

	task, _ := json.Marshal(map[string]string{"task": "/call charge {}\n/next\n/call guarded {}\n/say charged and checked"})
	script := "/call researcher " + string(task) + "\n/say done"
	start := func() (parent, child *client.Run) {
		t.Helper()
		p, err := c.CreateRun(ctx, client.CreateRun{Agent: "lead", Input: script})
		if err != nil || len(p.SubAgents) != 1 || p.SubAgents[0].Name != "researcher" || p.SubAgents[0].Version != 1 {
			t.Fatalf("CreateRun: %+v %v", p, err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err = c.GetRun(ctx, p.ID); err != nil {
				t.Fatal(err)
			}
			if a := p.RequiredAction; a != nil && len(a.Agents) == 1 && a.Agents[0].RequiredAction != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the parent is %s, waiting for %+v", p.Status, p.RequiredAction)
			}
		}
		a := p.RequiredAction
		if p.Status != agentd.StatusRequiresAction || a.Type != agentd.ActionAgentRuns || a.Agents[0].Agent != "researcher" ||
			a.Agents[0].RequiredAction.Type != agentd.ActionToolApproval || a.Agents[0].RequiredAction.Name != "guarded" {
			t.Fatalf("the parent %s waits for %+v", p.Status, a)
		}
		if child, err = c.GetRun(ctx, a.Agents[0].RunID); err != nil {
			t.Fatal(err)
		}
		if child.ParentRunID == nil || *child.ParentRunID != p.ID || child.ParentToolCallID == nil ||
			*child.ParentToolCallID != a.Agents[0].ToolCallID || child.ConversationID == p.ConversationID || child.Status != agentd.StatusRequiresAction {
			t.Fatalf("the child: %+v", child)
		}
		return p, child
	}

	// The child's approval, answered on the parent.
	parent, child := start()
	// The parent's stream, live from here: what came before is replayed,
	// the rest comes as it is committed. Read raw: the child's events it
	// forwards carry no id, which is what the test checks (the SDK's
	// Events yields only the run's own, stored events).
	resp, err := http.Get(s.URL + "/runs/" + parent.ID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan []sseEvent, 1)
	go func() { streamed <- readEvents(t, resp.Body, nil) }()
	approval := parent.RequiredAction.Agents[0].RequiredAction.ToolCallID
	if v, err := c.Act(ctx, parent.ID, client.Action{ToolCallID: approval, Decision: agentd.DecisionApprove}); err != nil || v.ID != parent.ID {
		t.Fatalf("approve on the parent: %+v %v", v, err)
	}
	if p := runEnded(t, c, parent.ID); p.Status != agentd.StatusCompleted || p.OutputText == nil || *p.OutputText != "done" {
		t.Fatalf("the parent ended %s: %v", p.Status, p.OutputText)
	}
	if r := runEnded(t, c, child.ID); r.Status != agentd.StatusCompleted || r.OutputText == nil || *r.OutputText != "charged and checked" {
		t.Fatalf("the child ended %s: %v", r.Status, r.OutputText)
	}
	kids, err := c.ListRuns(ctx, client.ListRuns{ParentRunID: parent.ID})
	if err != nil || len(kids.Data) != 1 || kids.Data[0].ID != child.ID {
		t.Fatalf("ListRuns by parent: %+v %v", kids, err)
	}
	if _, err := c.ListRuns(ctx, client.ListRuns{ParentRunID: "nope"}); !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Field != "parent_run_id" {
		t.Fatalf("a bad parent_run_id: %v", err)
	}
	if n, g := sink.Count("/charge"), sink.Count("/guarded"); n != 1 || g != 1 {
		t.Fatalf("the child's webhooks ran %d and %d times", n, g)
	}
	steps, err := c.Steps(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if call := steps[0].ToolCalls[0]; call.Name != "researcher" || call.Status != agentd.CallSucceeded || string(call.Result) != `"charged and checked"` {
		t.Fatalf("the parent's call: %+v", call)
	}
	var evs []sseEvent
	select {
	case evs = <-streamed:
		resp.Body.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("the parent's stream did not end with it")
	}
	// The parent's stream has the child's start, then the child's own
	// events, forwarded without an id (agent.event, the child's
	// envelopes), then the call's end and the parent's.
	var order []string
	for _, e := range evs {
		var env struct {
			Seq   int64  `json:"seq"`
			Type  string `json:"type"`
			RunID string `json:"run_id"`
		}
		if err := json.Unmarshal([]byte(e.Data), &env); err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Event == "agent.event" && (e.ID != "" || env.RunID != child.ID):
			t.Fatalf("a forwarded event with id %q of run %s", e.ID, env.RunID)
		case e.Event == "agent.event":
			order = append(order, "child:"+env.Type)
		case e.Event != env.Type || env.RunID != parent.ID || e.ID != fmt.Sprint(env.Seq):
			t.Fatalf("event %s %s: %s", e.ID, e.Event, e.Data)
		case e.Event == "agent.started" || e.Event == "tool_call.completed" || e.Event == "run.completed":
			order = append(order, e.Event)
		}
	}
	got := strings.Join(order, " ")
	if !strings.HasPrefix(got, "agent.started child:run.created child:run.started") ||
		!strings.Contains(got, "child:tool_call.created child:tool_attempt.started child:tool_call.completed") ||
		!strings.Contains(got, "child:run.requires_action child:tool_call.approved") ||
		!strings.Contains(got, "child:message.delta") || !strings.HasSuffix(got, "child:run.completed tool_call.completed run.completed") {
		t.Fatalf("the parent's stream: %s", got)
	}

	// Cancelling the parent cancels its child. Before, a client that comes
	// back to the parent's stream past its agent.started still follows
	// the open child (raw, for the forwarded events, as above).
	parent, child = start()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/runs/"+parent.ID+"/events", nil)
	req.Header.Set("Last-Event-ID", fmt.Sprint(parent.LastEventSeq))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	back := readEvents(t, resp.Body, func(e sseEvent) bool {
		return e.Event == "agent.event" && strings.Contains(e.Data, `"type":"run.requires_action","run_id":"`+child.ID+`"`)
	})
	resp.Body.Close()
	if len(back) == 0 || back[0].Event != "agent.event" || !strings.Contains(back[len(back)-1].Data, child.ID) {
		t.Fatalf("a parent's stream from its last event: %+v", back)
	}
	if _, err := c.CancelRun(ctx, parent.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if r := runEnded(t, c, child.ID); r.Status != agentd.StatusCancelled {
		t.Fatalf("the child of a cancelled parent is %s", r.Status)
	}
}

// TestKillMidChild: the instance that runs a sub-agent's child run is
// killed (SIGKILL) while the child streams its answer, after its side
// effect; another instance takes the child over (the same run: no second
// child), the side effect is not made again, and the parent completes
// once, with the child's answer as its call's result.
func TestKillMidChild(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/charge": webhooktest.OK()})
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"charge","description":"charges a card",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect"}]}`, sink.URL+"/charge")), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_TOOLS_FILE=" + toolsFile, "AGENTD_LEASE_TTL=1s",
		"AGENTD_POLL_INTERVAL=100ms", "AGENTD_LOG_LEVEL=info"}
	a := startChild(t, env)
	c, ctx := client.New("http://"+a.addr), t.Context()
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "researcher", Instructions: "research", Tools: &[]string{"charge"}}); err != nil {
		t.Fatal(err)
	}
	// An agent tool is an object the SDK's AgentDefinition cannot write:
	// the definition as JSON.
	if _, err := c.CreateAgentJSON(ctx, json.RawMessage(`{"name": "lead", "instructions": "lead",
		"tools": [{"type": "agent", "agent": "researcher"}]}`)); err != nil {
		t.Fatal(err)
	}
	const answer = "the researcher's long answer, streamed slowly"
	task, _ := json.Marshal(map[string]string{"task": "/call charge {}\n/next\n/stream 40 100\n/say " + answer})
	parent, err := c.CreateRun(ctx, client.CreateRun{Agent: "lead", Input: "/call researcher " + string(task) + "\n/say done"})
	if err != nil {
		t.Fatal(err)
	}

	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p := persisttest.WaitRun(t, store, parent.ID, nil, 20*time.Second)
	if p.Status != agentd.StatusRequiresAction || len(p.Action().Agents) != 1 {
		t.Fatalf("the parent is %s, waiting for %s", p.Status, p.RequiredAction)
	}
	childID := p.Action().Agents[0].RunID
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, err := store.EventsAfter(ctx, childID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs, func(e agentd.Event) bool { return e.Type == agentd.EventMessageDelta }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child streamed nothing")
		}
	}
	a.kill(t)
	startChild(t, env)
	p = persisttest.WaitRun(t, store, parent.ID, func(r agentd.Run) bool { return r.Status.Terminal() }, 60*time.Second)
	child, err := store.RunGet(ctx, "default", childID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != agentd.StatusCompleted || child.Status != agentd.StatusCompleted || child.Epoch < 2 {
		t.Fatalf("the parent ended %s/%s, the child %s/%s at epoch %d", p.Status, p.TerminalReason, child.Status,
			child.TerminalReason, child.Epoch)
	}
	if n := sink.Count("/charge"); n != 1 {
		t.Fatalf("the child's side effect ran %d times", n)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var children int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM runs WHERE parent_run_id = $1`, parent.ID).Scan(&children); err != nil || children != 1 {
		t.Fatalf("%d children (%v)", children, err)
	}
	steps, _ := store.StepsList(ctx, parent.ID)
	want, _ := json.Marshal(answer)
	if c := steps[0].Calls[0]; c.Status != agentd.CallSucceeded || string(c.Result) != string(want) {
		t.Fatalf("the parent's call: %s %s", c.Status, c.Result)
	}
	for _, id := range []string{parent.ID, childID} {
		evs, err := store.EventsAfter(ctx, id, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		spectest.CheckEvents(t, evs)
		if id == parent.ID && countOf(evs, agentd.EventRunCompleted) != 1 {
			t.Fatalf("the parent completed %d times", countOf(evs, agentd.EventRunCompleted))
		}
	}
}

// countOf counts the events of type typ.
func countOf(evs []agentd.Event, typ agentd.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}
