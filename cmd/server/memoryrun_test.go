package main

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// TestManagedInstructionsFirst: the tenant's managed instructions open
// the system prompt the model is sent (the fake answers /system with it),
// before an agent's instructions and a run's own; a run keeps the version
// it was created with, even when a PUT comes while it waits in its
// conversation's queue; after a DELETE, runs are given none.
func TestManagedInstructionsFirst(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c, ctx := s.Client, testCtx(t)
	put := func(text string) agentd.InstructionsView {
		t.Helper()
		code, body := bearerDo(t, s.URL, "PUT", "/instructions", `{"text": `+mustJSON(text)+`}`, "")
		var v agentd.InstructionsView
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("PUT /instructions: %d %s", code, body)
		}
		return v
	}
	system := func(r client.CreateRun) *client.Run {
		t.Helper()
		created, err := c.CreateRun(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return runEnded(t, c, created.ID)
	}
	output := func(r *client.Run) string {
		if r.OutputText == nil {
			return ""
		}
		return *r.OutputText
	}
	if v := put("Never write to the production database."); v.Version != 1 {
		t.Fatalf("first version: %+v", v)
	}
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "helper", Instructions: "You help {{who}}."}); err != nil {
		t.Fatal(err)
	}
	for _, cr := range []struct {
		run  client.CreateRun
		want string
	}{
		{client.CreateRun{Agent: "helper", Variables: map[string]string{"who": "Ann"}, Input: "/system"},
			"Never write to the production database.\n\nYou help Ann."},
		{client.CreateRun{Instructions: "Be brief.", Input: "/system"}, "Never write to the production database.\n\nBe brief."},
		{client.CreateRun{Input: "/system"}, "Never write to the production database."},
	} {
		r := system(cr.run)
		if output(r) != cr.want || r.ManagedInstructions == nil || r.ManagedInstructions.Version != 1 {
			t.Fatalf("the system prompt %q (managed %+v), want %q", output(r), r.ManagedInstructions, cr.want)
		}
	}

	// A run queued behind a slow one under version 2 answers with version
	// 2 after version 3 is put: a change is for later runs only.
	put("Version two.")
	slow, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 20 50"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := c.CreateRun(ctx, client.CreateRun{ConversationID: slow.ConversationID, IfBusy: agentd.IfBusyEnqueue, Input: "/system"})
	if err != nil {
		t.Fatal(err)
	}
	put("Version three.")
	if r := runEnded(t, c, queued.ID); output(r) != "Version two." || r.ManagedInstructions.Version != 2 {
		t.Fatalf("the queued run: %q, managed %+v", output(r), r.ManagedInstructions)
	}
	if r := system(client.CreateRun{Input: "/system"}); output(r) != "Version three." || r.ManagedInstructions.Version != 3 {
		t.Fatalf("a later run: %q", output(r))
	}
	if code, body := bearerDo(t, s.URL, "DELETE", "/instructions", "", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE /instructions: %d %s", code, body)
	}
	if r := system(client.CreateRun{Instructions: "Mine.", Input: "/system"}); output(r) != "Mine." || r.ManagedInstructions != nil {
		t.Fatalf("after the delete: %q, managed %+v", output(r), r.ManagedInstructions)
	}
}

// TestRunUserCarried: a run's user and its filled memory go to its
// sub-agents' runs (each with the namespaces its own definition names,
// filled for that user), its forks (under an overlay of their own) and
// its conversation's next runs;
// memory off stays off in its children; the Responses API's user, else
// its safety_identifier, is the run's user.
func TestRunUserCarried(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c, ctx := s.Client, testCtx(t)
	if _, err := c.CreateAgentJSON(ctx, json.RawMessage(`{"name": "researcher", "instructions": "research",
		"memory": {"search": [["users", "{{user}}"]], "write": [["users", "{{user}}", "notes"]]}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateAgentJSON(ctx, json.RawMessage(`{"name": "lead", "instructions": "lead",
		"tools": [{"type": "agent", "agent": "researcher"}], "memory": {"pinned": ["users/{{user}}/profile"]}}`)); err != nil {
		t.Fatal(err)
	}
	start := func(memory string) (*client.Run, *client.Run) {
		t.Helper()
		r, err := c.CreateRun(ctx, client.CreateRun{Agent: "lead", User: "ann", Memory: json.RawMessage(memory),
			Input: "/call researcher {\"task\": \"look it up\"}\n/say done"})
		if err != nil {
			t.Fatal(err)
		}
		r = runEnded(t, c, r.ID)
		kids, err := c.ListRuns(ctx, client.ListRuns{ParentRunID: r.ID})
		if err != nil || r.Status != agentd.StatusCompleted || len(kids.Data) != 1 {
			t.Fatalf("run %s %s, children %+v %v", r.ID, r.Status, kids, err)
		}
		return r, &kids.Data[0]
	}
	parent, child := start("")
	if parent.User == nil || *parent.User != "ann" || parent.Memory == nil ||
		!reflect.DeepEqual(parent.Memory.Pinned, [][]string{{"users", "ann", "profile"}}) {
		t.Fatalf("the parent: user %v, memory %+v", parent.User, parent.Memory)
	}
	if child.User == nil || *child.User != "ann" || child.Memory == nil || len(child.Memory.Pinned) != 0 ||
		!reflect.DeepEqual(child.Memory.Search, [][]string{{"users", "ann"}}) ||
		!reflect.DeepEqual(child.Memory.Write, [][]string{{"users", "ann", "notes"}}) {
		t.Fatalf("the child: user %v, memory %+v", child.User, child.Memory)
	}
	fork, err := c.ForkRun(ctx, parent.ID, client.Fork{AtStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The fork's memory is the parent's, under an overlay of its own.
	if fork.User == nil || *fork.User != "ann" || fork.Memory == nil || fork.Memory.Overlay == "" || fork.Memory.Base == nil {
		t.Fatalf("the fork: user %v, memory %+v", fork.User, fork.Memory)
	}
	forkMem := *fork.Memory
	forkMem.Overlay, forkMem.Base = "", nil
	if !reflect.DeepEqual(&forkMem, parent.Memory) {
		t.Fatalf("the fork's memory %+v, the parent's %+v", fork.Memory, parent.Memory)
	}
	sent, err := c.SendMessage(ctx, parent.ConversationID, client.SendMessage{Input: "/say again"})
	if err != nil {
		t.Fatal(err)
	}
	if next := sent.Run; next.ID == parent.ID || next.User == nil || *next.User != "ann" || !reflect.DeepEqual(next.Memory, parent.Memory) {
		t.Fatalf("the conversation's next run: %+v", next)
	}
	parent, child = start("false")
	if !parent.Memory.Off || child.Memory == nil || !child.Memory.Off || child.User == nil || *child.User != "ann" {
		t.Fatalf("memory off: the parent's %+v, the child's %+v", parent.Memory, child.Memory)
	}

	for body, user := range map[string]string{
		`{"model": "fake", "input": "hi", "safety_identifier": "sid-1"}`:                "sid-1",
		`{"model": "fake", "input": "hi", "user": "u-2", "safety_identifier": "sid-2"}`: "u-2",
	} {
		var resp struct {
			ID string `json:"id"`
		}
		postJSON(t, s.URL+"/v1/responses", body, http.StatusOK, &resp)
		hex := strings.TrimPrefix(resp.ID, "resp_")
		id := hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:]
		r, err := c.GetRun(ctx, id)
		if err != nil || r.User == nil || *r.User != user {
			t.Fatalf("%s: the run's user %v (%v), want %s", body, r, err, user)
		}
	}
	// The AI SDK's chat: an app adds user to the request's body.
	resp, err := http.Post(s.URL+"/ai-sdk/chat", "application/json", strings.NewReader(
		`{"id": "chat-1", "user": "chat-user", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if r, err := c.GetRun(ctx, strings.TrimPrefix(loc, "/runs/")); resp.StatusCode != http.StatusOK || err != nil || r.User == nil || *r.User != "chat-user" {
		t.Fatalf("the chat's run (%d, %s): %+v %v", resp.StatusCode, loc, r, err)
	}
}
