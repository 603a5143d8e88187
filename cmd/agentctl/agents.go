package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agentd/agentd/client"
)

// readDefinition reads an agent's JSON definition from path ("-": standard
// input).
func readDefinition(f *cmdFlags, path string) (json.RawMessage, int, bool) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		fmt.Fprintf(f.a.stderr, "agentctl %s: %v\n", f.name, err)
		return nil, exitError, false
	}
	if !json.Valid(b) {
		return nil, f.usageError(path + " is not valid JSON"), false
	}
	return b, exitOK, true
}

// sendFile runs a command whose nargs arguments are names, then the FILE
// of a JSON definition ("-": standard input): send sends them, and the
// answer is printed.
func sendFile[T any](ctx context.Context, a *app, f *cmdFlags, args []string, nargs int,
	send func(names []string, def json.RawMessage) (*T, error), print func(*T) int) int {
	pos, code, ok := f.parse(args, nargs, nargs)
	if !ok {
		return code
	}
	def, code, ok := readDefinition(f, pos[nargs-1])
	if !ok {
		return code
	}
	v, err := send(pos[:nargs-1], def)
	if err != nil {
		return a.fail(ctx, err)
	}
	return print(v)
}

// agentsCreate: agentctl agents create FILE.
func agentsCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents create", "FILE",
		"Make an agent at version 1 from its JSON definition in FILE (\"-\": standard input): its\n"+
			"name, description, and the fields of the runs it defines, as POST /runs takes them,\n"+
			"e.g. {\"name\": \"helper\", \"instructions\": \"Help {{who}}.\", \"tools\": [\"calculator\"]}.")
	return sendFile(ctx, a, f, args, 1, func(_ []string, def json.RawMessage) (*client.Agent, error) {
		return a.c.CreateAgentJSON(ctx, def)
	}, a.printAgent)
}

// agentsUpdate: agentctl agents update NAME FILE.
func agentsUpdate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents update", "NAME FILE",
		"Make the next version of agent NAME from its whole JSON definition in FILE (\"-\":\n"+
			"standard input); \"agents get NAME -o json\" prints one to start from. Runs in flight\n"+
			"finish on the version they started with.")
	return sendFile(ctx, a, f, args, 2, func(names []string, def json.RawMessage) (*client.Agent, error) {
		return a.c.UpdateAgentJSON(ctx, names[0], def)
	}, a.printAgent)
}

// agentsGet: agentctl agents get [-version N] NAME.
func agentsGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents get", "[-version N] NAME", "Show an agent: its latest version, or version N.")
	version := f.Int("version", 0, "the `version` to show (default: the latest)")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *version < 0 {
		return f.usageError("-version must not be negative")
	}
	ag, err := a.c.GetAgent(ctx, pos[0], *version)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printAgent(ag)
}

// agentsList: agentctl agents list [-limit N] [-cursor C].
func agentsList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents list", "[-limit N] [-cursor C]", "List the tenant's agents, at their latest versions, by name.")
	pg := f.pages("agents")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.ListAgents(ctx, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printAgents(p)
}

// agentsVersions: agentctl agents versions [-limit N] [-cursor C] NAME.
func agentsVersions(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents versions", "[-limit N] [-cursor C] NAME", "List an agent's versions, newest first.")
	pg := f.pages("versions")
	pos, code, ok := pg.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := a.c.AgentVersions(ctx, pos[0], *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printAgents(p)
}

// agentsDelete: agentctl agents delete NAME.
func agentsDelete(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("agents delete", "NAME",
		"Delete an agent: runs can no longer name it; runs in flight finish on their version.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if err := a.c.DeleteAgent(ctx, pos[0]); err != nil {
		return a.fail(ctx, err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "deleted agent %s\n", pos[0])
	}
	return exitOK
}

// printAgent writes one version of an agent.
func (a *app) printAgent(ag *client.Agent) int {
	if a.json {
		return a.printJSON(ag)
	}
	var def map[string]json.RawMessage
	_ = json.Unmarshal(ag.Definition, &def)
	str := func(key string) string {
		var s string
		_ = json.Unmarshal(def[key], &s)
		return s
	}
	k := newKV(a.stdout)
	k.line("name", ag.Name)
	k.line("version", fmt.Sprintf("%d (latest %d)", ag.Version, ag.LatestVersion))
	k.line("description", ag.Description)
	k.line("model", str("model"))
	k.line("instructions", str("instructions"))
	k.line("tools", compactJSON(def["tools"]))
	var rest []string
	for _, key := range []string{"client_tools", "sampling", "max_steps", "timeouts", "loop_limits", "compact_at",
		"on_disconnect", "if_busy", "on_quota", "metadata"} {
		if v, ok := def[key]; ok {
			rest = append(rest, key+": "+compactJSON(v))
		}
	}
	k.line("also", strings.Join(rest, "\n"))
	k.line("created", when(&ag.CreatedAt))
	k.line("created_by", ag.CreatedBy)
	k.flush()
	return exitOK
}

// printAgents writes a page of agents (or of an agent's versions) as a
// table.
func (a *app) printAgents(p *client.Page[client.Agent]) int {
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "NAME", "VERSION", "CREATED", "BY", "DESCRIPTION")
	for _, ag := range p.Data {
		row(tw, ag.Name, itoa(ag.Version), when(&ag.CreatedAt), ag.CreatedBy, shorten(ag.Description, 60))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// runsFork: agentctl runs fork [flags] RUN_ID STEP [TEXT].
func runsFork(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs fork", "[flags] RUN_ID STEP [TEXT]",
		"Start a new run in a new conversation holding RUN_ID's conversation up to the end of\n"+
			"step STEP (its tool results reused: no tool runs again), then TEXT as a new user\n"+
			"message (required after the step that answered), and print it. -wait waits for its end.")
	model := f.String("model", "", "another `model` (default: the run's)")
	agentVersion := f.Int("agent-version", 0, "another `version` of the run's agent (default: the run's)")
	wait := f.Bool("wait", false, "wait for the fork's end, then print it")
	pos, code, ok := f.parse(args, 2, -1)
	if !ok {
		return code
	}
	step, err := strconv.Atoi(pos[1])
	if err != nil || step < 1 {
		return f.usageError("STEP must be a step number, 1 or more")
	}
	r, err := a.c.ForkRun(ctx, pos[0], client.Fork{AtStep: step, Input: strings.Join(pos[2:], " "), Model: *model,
		AgentVersion: *agentVersion})
	if err != nil {
		return a.fail(ctx, err)
	}
	if *wait {
		return a.waitRun(ctx, r.ID)
	}
	return a.printRun(r)
}

// toolsCreate: agentctl tools create FILE.
func toolsCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("tools create", "FILE",
		"Declare a webhook tool of the tenant's from its JSON definition in FILE (\"-\": standard\n"+
			"input), as an entry of a tools file: {\"name\", \"description\", \"parameters\", \"url\", \"effect\",\n"+
			"\"headers\", ...}. Only the tenant's runs see it; its headers' values are never shown again.")
	return sendFile(ctx, a, f, args, 1, func(_ []string, def json.RawMessage) (*client.TenantTool, error) {
		return a.c.CreateTool(ctx, def)
	}, a.printTenantTool)
}

// toolsUpdate: agentctl tools update NAME FILE.
func toolsUpdate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("tools update", "NAME FILE", "Replace the tenant's tool NAME with the whole JSON definition in FILE, headers included.")
	return sendFile(ctx, a, f, args, 2, func(names []string, def json.RawMessage) (*client.TenantTool, error) {
		return a.c.ReplaceTool(ctx, names[0], def)
	}, a.printTenantTool)
}

// toolsGet: agentctl tools get NAME.
func toolsGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("tools get", "NAME", "Show a tool of the tenant's (its headers' names, never their values).")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	t, err := a.c.GetTool(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printTenantTool(t)
}

// toolsDelete: agentctl tools delete NAME.
func toolsDelete(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("tools delete", "NAME", "Delete a tool of the tenant's.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if err := a.c.DeleteTool(ctx, pos[0]); err != nil {
		return a.fail(ctx, err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "deleted tool %s\n", pos[0])
	}
	return exitOK
}

// printTenantTool writes a tool of the tenant's.
func (a *app) printTenantTool(t *client.TenantTool) int {
	if a.json {
		return a.printJSON(t)
	}
	k := newKV(a.stdout)
	k.line("name", t.Name)
	k.line("description", t.Description)
	k.line("url", t.URL)
	k.line("effect", string(t.Effect))
	k.line("headers", strings.Join(t.HeaderNames, ", "))
	k.line("parameters", compactJSON(t.Parameters))
	k.line("updated", when(&t.UpdatedAt))
	k.line("created_by", t.CreatedBy)
	k.flush()
	return exitOK
}
