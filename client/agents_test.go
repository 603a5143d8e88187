package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// slowSystem makes the fake model answer with the run's instructions (its
// system prompt), streamed over about a second.
const slowSystem = "/system\n/stream 20 50"

// TestAgentVersions: against a real server, a run started from an agent's
// version 1 finishes on version 1 although version 2 is made while it
// runs; a run without a version takes the latest, a pinned one its
// version, and a run's own fields override the agent's; variables fill the
// instructions (one missing is refused, naming it); versions list newest
// first, a page at a time; a deleted agent's run in flight finishes on its
// version, the agent is then not found and no run can name it, and making
// it again goes on from its last version. A tool of the tenant's is made,
// replaced, listed (tenant true), deleted.
func TestAgentVersions(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url)
	store := persisttest.Open(t, persist.Config{URL: url})
	ctx := context.Background()
	c := client.New("http://" + addr)

	tools := []string{"calculator"}
	v1, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "greeter", Description: "greets", Instructions: "v1: greet {{who}}",
		Tools: &tools, MaxSteps: 4, Sampling: json.RawMessage(`{"temperature": 0.5}`)})
	if err != nil || v1.Version != 1 || v1.LatestVersion != 1 || v1.Description != "greets" || v1.CreatedBy != "local" {
		t.Fatalf("create: %+v %v", v1, err)
	}
	vars := map[string]string{"who": "Ann"}
	inFlight, err := c.CreateRun(ctx, client.CreateRun{Agent: "greeter", Variables: vars, Input: slowSystem})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := c.UpdateAgent(ctx, "greeter", client.AgentDefinition{Instructions: "v2: greet {{who}}", Tools: &tools})
	if err != nil || v2.Version != 2 || v2.Name != "greeter" {
		t.Fatalf("update: %+v %v", v2, err)
	}
	if r, err := c.GetRun(ctx, inFlight.ID); err != nil || r.Ended() {
		t.Fatalf("the run ended before version 2 was made (%+v, %v): the test proves nothing", r, err)
	}
	finished := func(id string) *client.Run {
		t.Helper()
		sameAsLog(t, store, id, collect(t, c, ctx, id))
		r, err := c.GetRun(ctx, id)
		if err != nil || r.Status != agentd.StatusCompleted || r.OutputText == nil {
			t.Fatalf("run %+v: %v", r, err)
		}
		return r
	}
	r := finished(inFlight.ID)
	if *r.OutputText != "v1: greet Ann" || r.Agent == nil || *r.Agent != (agentd.AgentRef{Name: "greeter", Version: 1}) ||
		r.MaxSteps != 4 || r.Instructions == nil || *r.Instructions != "v1: greet Ann" {
		t.Fatalf("the run in flight: output %q, agent %+v, max_steps %d, instructions %v", *r.OutputText, r.Agent, r.MaxSteps, r.Instructions)
	}

	for _, c2 := range []struct {
		req         client.CreateRun
		want        string
		version     int
		maxSteps    int
		temperature bool // the run samples at the agent's temperature
	}{
		{client.CreateRun{Agent: "greeter", Variables: vars}, "v2: greet Ann", 2, 16, false},
		{client.CreateRun{Agent: "greeter", AgentVersion: 1, Variables: vars}, "v1: greet Ann", 1, 4, true},
		{client.CreateRun{Agent: "greeter", AgentVersion: 1, Variables: vars, Instructions: "own {{who}}", MaxSteps: 2}, "own Ann", 1, 2, true},
	} {
		c2.req.Input = "/system"
		created, err := c.CreateRun(ctx, c2.req)
		if err != nil {
			t.Fatal(err)
		}
		r := finished(created.ID)
		if *r.OutputText != c2.want || r.Agent.Version != c2.version || r.MaxSteps != c2.maxSteps || len(r.Tools) != 1 {
			t.Errorf("%+v: output %q, agent %+v, max_steps %d, tools %v", c2.req, *r.OutputText, r.Agent, r.MaxSteps, r.Tools)
		}
		stored, err := store.RunGet(ctx, r.TenantID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if temp := stored.Params.Sampling.Temperature; (temp != nil && *temp == 0.5) != c2.temperature {
			t.Errorf("%+v: sampled at the agent's temperature: %v, want %v", c2.req, !c2.temperature, c2.temperature)
		}
	}
	// The runs of the agent, and of one version of it: version 1's are the
	// run in flight and two of the three above; version 2's the other.
	for version, want := range map[int]int{0: 4, 1: 3, 2: 1} {
		page, err := c.ListRuns(ctx, client.ListRuns{Agent: "greeter", AgentVersion: version})
		if err != nil || len(page.Data) != want {
			t.Fatalf("the runs of greeter version %d: %d, %v; want %d", version, len(page.Data), err, want)
		}
	}
	if page, err := c.ListRuns(ctx, client.ListRuns{Agent: "nobody"}); err != nil || len(page.Data) != 0 {
		t.Fatalf("the runs of no agent: %+v %v", page, err)
	}
	_, err = c.CreateRun(ctx, client.CreateRun{Agent: "greeter", Input: "x"})
	if !client.IsCode(err, "invalid_field") || !fieldIs(err, "variables.who") {
		t.Fatalf("a run without the variable: %v", err)
	}

	page, err := c.AgentVersions(ctx, "greeter", 1, "")
	if err != nil || len(page.Data) != 1 || page.Data[0].Version != 2 || !page.HasMore || page.NextCursor == nil {
		t.Fatalf("versions, first page: %+v %v", page, err)
	}
	page, err = c.AgentVersions(ctx, "greeter", 1, *page.NextCursor)
	if err != nil || len(page.Data) != 1 || page.Data[0].Version != 1 || page.HasMore || page.Data[0].LatestVersion != 2 {
		t.Fatalf("versions, second page: %+v %v", page, err)
	}
	if !strings.Contains(string(page.Data[0].Definition), `"v1: greet {{who}}"`) {
		t.Fatalf("version 1's definition: %s", page.Data[0].Definition)
	}
	if got, err := c.GetAgent(ctx, "greeter", 1); err != nil || got.Version != 1 || string(got.Definition) != string(page.Data[0].Definition) {
		t.Fatalf("version 1: %+v %v", got, err)
	}

	doomed, err := c.CreateRun(ctx, client.CreateRun{Agent: "greeter", Variables: vars, Input: slowSystem})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAgent(ctx, "greeter"); err != nil {
		t.Fatal(err)
	}
	if r := finished(doomed.ID); *r.OutputText != "v2: greet Ann" || r.Agent.Version != 2 {
		t.Fatalf("the run in flight at the delete: %q %+v", *r.OutputText, r.Agent)
	}
	if _, err := c.GetAgent(ctx, "greeter", 0); !client.IsCode(err, "agent_not_found") {
		t.Fatalf("a deleted agent: %v", err)
	}
	if _, err := c.CreateRun(ctx, client.CreateRun{Agent: "greeter", Input: "x"}); !fieldIs(err, "agent") {
		t.Fatalf("a run of a deleted agent: %v", err)
	}
	if list, err := c.ListAgents(ctx, 0, ""); err != nil || len(list.Data) != 0 {
		t.Fatalf("the agents after the delete: %+v %v", list, err)
	}
	again, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "greeter", Instructions: "back"})
	if err != nil || again.Version != 3 {
		t.Fatalf("made again: %+v %v", again, err)
	}
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "greeter"}); !client.IsCode(err, "agent_exists") {
		t.Fatalf("made twice: %v", err)
	}

	// A tool of the tenant's, through the SDK.
	tool, err := c.CreateTool(ctx, json.RawMessage(`{"name": "lookup", "url": "https://tools.example/lookup", "effect": "read_only"}`))
	if err != nil || tool.Name != "lookup" || tool.Effect != agentd.EffectReadOnly {
		t.Fatalf("create a tool: %+v %v", tool, err)
	}
	if tool, err = c.ReplaceTool(ctx, "lookup", json.RawMessage(`{"url": "https://tools.example/v2", "effect": "idempotent"}`)); err != nil ||
		tool.URL != "https://tools.example/v2" {
		t.Fatalf("replace it: %+v %v", tool, err)
	}
	listed, err := c.Tools(ctx)
	if err != nil || !slices.ContainsFunc(listed, func(t client.Tool) bool { return t.Name == "lookup" && t.Tenant }) {
		t.Fatalf("GET /tools: %+v %v", listed, err)
	}
	if err := c.DeleteTool(ctx, "lookup"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTool(ctx, "lookup"); !client.IsCode(err, "tool_not_found") {
		t.Fatalf("a deleted tool: %v", err)
	}
}

// fieldIs reports whether err is an answer of the server naming field.
func fieldIs(err error, field string) bool {
	var apiErr *client.Error
	return errors.As(err, &apiErr) && apiErr.Field == field
}

// TestSubAgentsThroughTheSDK: against a real server, an agent and a run
// name sub-agents through SubAgents, beside the server tools they name;
// the run hands work to its sub-agent and answers; an agent that would
// hand work back to itself is refused, naming tools.
func TestSubAgentsThroughTheSDK(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url)
	ctx := context.Background()
	c := client.New("http://" + addr)
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "researcher", Tools: &[]string{"calculator"}}); err != nil {
		t.Fatal(err)
	}
	lead, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "lead", Tools: &[]string{"clock"}, SubAgents: []string{"researcher"}})
	if err != nil {
		t.Fatal(err)
	}
	var def struct{ Tools []json.RawMessage }
	var sub struct{ Type, Agent string }
	if err := json.Unmarshal(lead.Definition, &def); err != nil || len(def.Tools) != 2 || string(def.Tools[0]) != `"clock"` ||
		json.Unmarshal(def.Tools[1], &sub) != nil || sub != (struct{ Type, Agent string }{"agent", "researcher"}) {
		t.Fatalf("lead's definition: %s %v", lead.Definition, err)
	}
	for _, req := range []client.CreateRun{
		{Agent: "lead"},
		{Tools: &[]string{"clock"}, SubAgents: []string{"researcher"}},
	} {
		req.Input, req.Wait = "/call researcher {\"task\":\"/say found\"}\n/say done", 10*time.Second
		r, err := c.CreateRun(ctx, req)
		if err == nil && !r.Status.Stopped() {
			r, err = c.WaitRun(ctx, r.ID, 20*time.Second)
		}
		if err != nil || r.Status != agentd.StatusCompleted || r.OutputText == nil || *r.OutputText != "done" ||
			len(r.SubAgents) != 1 || r.SubAgents[0].Name != "researcher" || !slices.Equal(r.Tools, []string{"clock"}) {
			t.Fatalf("a run with a sub-agent (%+v): %+v %v", req, r, err)
		}
		children, err := c.ListRuns(ctx, client.ListRuns{ParentRunID: r.ID})
		if err != nil || len(children.Data) != 1 || *children.Data[0].OutputText != "found" {
			t.Fatalf("its child: %+v %v", children, err)
		}
	}
	if _, err := c.UpdateAgent(ctx, "researcher", client.AgentDefinition{SubAgents: []string{"lead"}}); !fieldIs(err, "tools") {
		t.Fatalf("a cycle of agents: %v", err)
	}
}
