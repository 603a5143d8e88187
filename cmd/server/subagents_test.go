package main

import (
	"context"
	"encoding/json"
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
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"

	"github.com/jackc/pgx/v5"
)

// subRun is what the sub-agent tests read of a run.
type subRun struct {
	ID               string  `json:"id"`
	Status           string  `json:"status"`
	ConversationID   string  `json:"conversation_id"`
	OutputText       string  `json:"output_text"`
	LastEventSeq     int64   `json:"last_event_seq"`
	ParentRunID      *string `json:"parent_run_id"`
	ParentToolCallID *string `json:"parent_tool_call_id"`
	SubAgents        []struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
	} `json:"sub_agents"`
	RequiredAction *struct {
		Type   string `json:"type"`
		Agents []struct {
			Agent          string `json:"agent"`
			RunID          string `json:"run_id"`
			ToolCallID     string `json:"tool_call_id"`
			RequiredAction *struct {
				Type       string `json:"type"`
				ToolCallID string `json:"tool_call_id"`
				Name       string `json:"name"`
			} `json:"required_action"`
		} `json:"agents"`
	} `json:"required_action"`
	Code   string `json:"code"`
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

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
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[
		{"name":"charge","description":"charges a card","parameters":{"type":"object"},"url":%q,"effect":"side_effect"},
		{"name":"guarded","description":"asks first","parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`,
		sink.URL+"/charge", sink.URL+"/guarded")), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, map[string]string{"AGENTD_TOOLS_FILE": toolsFile})
	send := func(method, path string, body any) (int, subRun) {
		t.Helper()
		b, _ := json.Marshal(body)
		if s, ok := body.(string); ok {
			b = []byte(s)
		}
		req, _ := http.NewRequest(method, base+path, strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v subRun
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	for _, a := range []string{
		`{"name": "researcher", "description": "looks things up and pays for them", "instructions": "research", "tools": ["charge", "guarded"]}`,
		`{"name": "lead", "instructions": "lead", "tools": ["calculator", {"type": "agent", "agent": "researcher"}]}`,
	} {
		if code, v := send(http.MethodPost, "/agents", a); code != http.StatusCreated {
			t.Fatalf("POST /agents %s: %d %s", a, code, v.Detail)
		}
	}
	code, v := send(http.MethodPut, "/agents/researcher", `{"instructions": "research", "tools": [{"type": "agent", "agent": "lead"}]}`)
	if code != http.StatusUnprocessableEntity || v.Field != "tools" || !strings.Contains(v.Detail, "researcher → lead → researcher") {
		t.Fatalf("a cycle of agents: %d %s %q", code, v.Field, v.Detail)
	}
	for body, field := range map[string]string{
		`{"input": "hi", "tools": [{"type": "agent", "agent": "nobody"}]}`:                                               "tools",
		`{"input": "hi", "tools": [{"type": "agent"}]}`:                                                                  "tools[0].agent",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "lead", "name": "x"}]}`:                                    "tools[0]",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "lead"}, {"type": "function", "name": "lead"}]}`:           "tools",
		`{"input": "hi", "tools": [{"type": "agent", "agent": "researcher"}, {"type": "agent", "agent": "researcher"}]}`: "tools",
	} {
		if code, v := send(http.MethodPost, "/runs", body); code != http.StatusUnprocessableEntity || v.Field != field {
			t.Fatalf("POST /runs %s: %d %s (%s), want 422 naming %s", body, code, v.Field, v.Detail, field)
		}
	}

	task, _ := json.Marshal(map[string]string{"task": "/call charge {}\n/next\n/call guarded {}\n/say charged and checked"})
	script := "/call researcher " + string(task) + "\n/say done"
	start := func() (parent, child subRun) {
		t.Helper()
		code, p := send(http.MethodPost, "/runs", map[string]any{"agent": "lead", "input": script})
		if code != http.StatusAccepted || len(p.SubAgents) != 1 || p.SubAgents[0].Name != "researcher" || p.SubAgents[0].Version != 1 {
			t.Fatalf("POST /runs: %d %+v", code, p)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, p = send(http.MethodGet, "/runs/"+p.ID, nil)
			if a := p.RequiredAction; a != nil && len(a.Agents) == 1 && a.Agents[0].RequiredAction != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the parent is %s, waiting for %+v", p.Status, p.RequiredAction)
			}
		}
		a := p.RequiredAction
		if p.Status != "requires_action" || a.Type != "agent_runs" || a.Agents[0].Agent != "researcher" ||
			a.Agents[0].RequiredAction.Type != "tool_approval" || a.Agents[0].RequiredAction.Name != "guarded" {
			t.Fatalf("the parent %s waits for %+v", p.Status, a)
		}
		_, child = send(http.MethodGet, "/runs/"+a.Agents[0].RunID, nil)
		if child.ParentRunID == nil || *child.ParentRunID != p.ID || child.ParentToolCallID == nil ||
			*child.ParentToolCallID != a.Agents[0].ToolCallID || child.ConversationID == p.ConversationID || child.Status != "requires_action" {
			t.Fatalf("the child: %+v", child)
		}
		return p, child
	}

	// The child's approval, answered on the parent.
	parent, child := start()
	// The parent's stream, live from here: what came before is replayed,
	// the rest comes as it is committed.
	resp, err := http.Get(base + "/runs/" + parent.ID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan []sseEvent, 1)
	go func() { streamed <- readEvents(t, resp.Body, nil) }()
	approval := parent.RequiredAction.Agents[0].RequiredAction.ToolCallID
	if code, v := send(http.MethodPost, "/runs/"+parent.ID+"/actions", map[string]string{"tool_call_id": approval,
		"decision": "approve"}); code != http.StatusOK || v.ID != parent.ID {
		t.Fatalf("approve on the parent: %d %+v", code, v)
	}
	if p := waitRunEnd(t, base, parent.ID); p.Status != "completed" || p.OutputText != "done" {
		t.Fatalf("the parent ended %s: %q", p.Status, p.OutputText)
	}
	if c := waitRunEnd(t, base, child.ID); c.Status != "completed" || c.OutputText != "charged and checked" {
		t.Fatalf("the child ended %s: %q", c.Status, c.OutputText)
	}
	var kids struct {
		Data []subRun `json:"data"`
	}
	getJSON(t, base+"/runs?parent_run_id="+parent.ID, &kids)
	if len(kids.Data) != 1 || kids.Data[0].ID != child.ID {
		t.Fatalf("GET /runs?parent_run_id: %+v", kids.Data)
	}
	if code, v := send(http.MethodGet, "/runs?parent_run_id=nope", nil); code != http.StatusUnprocessableEntity || v.Field != "parent_run_id" {
		t.Fatalf("a bad parent_run_id: %d %s", code, v.Field)
	}
	if n, g := sink.Count("/charge"), sink.Count("/guarded"); n != 1 || g != 1 {
		t.Fatalf("the child's webhooks ran %d and %d times", n, g)
	}
	var steps struct {
		Data []struct {
			ToolCalls []struct {
				Name   string          `json:"name"`
				Status string          `json:"status"`
				Result json.RawMessage `json:"result"`
			} `json:"tool_calls"`
		} `json:"data"`
	}
	getJSON(t, base+"/runs/"+parent.ID+"/steps", &steps)
	if c := steps.Data[0].ToolCalls[0]; c.Name != "researcher" || c.Status != "succeeded" || string(c.Result) != `"charged and checked"` {
		t.Fatalf("the parent's call: %+v", c)
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
	// the open child.
	parent, child = start()
	req, _ := http.NewRequest(http.MethodGet, base+"/runs/"+parent.ID+"/events", nil)
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
	if code, _ := send(http.MethodPost, "/runs/"+parent.ID+"/cancel", nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	if c := waitRunEnd(t, base, child.ID); c.Status != "cancelled" {
		t.Fatalf("the child of a cancelled parent is %s", c.Status)
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
	post := func(addr, path string, body any) subRun {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v subRun
		_ = json.NewDecoder(resp.Body).Decode(&v)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, v.Detail)
		}
		return v
	}
	post(a.addr, "/agents", map[string]any{"name": "researcher", "instructions": "research", "tools": []string{"charge"}})
	post(a.addr, "/agents", map[string]any{"name": "lead", "instructions": "lead",
		"tools": []any{map[string]string{"type": "agent", "agent": "researcher"}}})
	const answer = "the researcher's long answer, streamed slowly"
	task, _ := json.Marshal(map[string]string{"task": "/call charge {}\n/next\n/stream 40 100\n/say " + answer})
	parent := post(a.addr, "/runs", map[string]any{"agent": "lead", "input": "/call researcher " + string(task) + "\n/say done"})

	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
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
