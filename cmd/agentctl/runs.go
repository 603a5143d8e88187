package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// runsCreate: agentctl runs create [flags] TEXT.
func runsCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs create", "[flags] TEXT",
		"Start a run with TEXT (its words joined by spaces) as the new user message, with the\n"+
			"images and files of -image and -file after it, and print the run. -wait waits until\n"+
			"the run ends (or waits for a decision) and prints it then; -tail follows its events\n"+
			"as \"runs tail\" does. With either, the exit status says how the run ended.")
	conversation := f.String("conversation", "", "the `ID` of the conversation to continue (default: a new one)")
	model := f.String("model", "", "the `model` (default: the server's)")
	instructions := f.String("instructions", "", "the run's system `instructions`")
	var tools listFlag
	f.Var(&tools, "tools", "comma-separated `names` of the tools the run may call; \"\" for none (default: all)")
	maxSteps := f.Int("max-steps", 0, "the most `steps` the run may take (default: the server's)")
	ifBusy := f.String("if-busy", "", "what to do when the conversation has a run in flight, as a `mode`: reject, enqueue, interrupt, or steer: send TEXT to that run (default: the server's)")
	key := f.String("idempotency-key", "", "the Idempotency-Key: the same `key` again gives the same run (default: a new one)")
	metadata := f.String("metadata", "", "a `JSON` object kept with the run")
	agent := f.String("agent", "", "start from the agent of this `name` (its definition, with the flags given over it)")
	agentVersion := f.Int("agent-version", 0, "with -agent, this `version` of it (default: the latest)")
	vars := map[string]string{}
	f.Func("var", "a `name=value` filling {{name}} in the instructions; repeat it for more", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want name=value, not %q", s)
		}
		vars[k] = v
		return nil
	})
	attached := f.attachments()
	wait := f.Bool("wait", false, "wait for the run's end, then print it")
	tail := f.Bool("tail", false, "follow the run's events live, as \"runs tail\"")
	pos, code, ok := f.parse(args, 1, -1)
	if !ok {
		return code
	}
	switch {
	case *wait && *tail:
		return f.usageError("-wait and -tail exclude each other")
	case *maxSteps < 0:
		return f.usageError("-max-steps must not be negative")
	case *metadata != "" && !json.Valid([]byte(*metadata)):
		return f.usageError("-metadata is not valid JSON")
	case *agentVersion != 0 && *agent == "":
		return f.usageError("-agent-version needs -agent")
	}
	req := client.CreateRun{
		Input:          strings.Join(pos, " "),
		ConversationID: *conversation,
		Model:          *model,
		Instructions:   *instructions,
		MaxSteps:       *maxSteps,
		IfBusy:         agentd.IfBusy(*ifBusy),
		IdempotencyKey: *key,
		Agent:          *agent,
		AgentVersion:   *agentVersion,
	}
	attached.apply(&req)
	if len(vars) > 0 {
		req.Variables = vars
	}
	if tools.set {
		req.Tools = &tools.vals
	}
	if *metadata != "" {
		req.Metadata = json.RawMessage(*metadata)
	}
	r, err := a.c.CreateRun(ctx, req)
	if err != nil {
		return a.fail(ctx, err)
	}
	switch {
	case *tail:
		if !a.json {
			fmt.Fprintf(a.stdout, "%s run %s (conversation %s)\n", markInfo, r.ID, r.ConversationID)
		}
		return a.tail(ctx, r.ID, 0)
	case *wait:
		return a.waitRun(ctx, r.ID)
	}
	return a.printRun(r)
}

// waitRound is how long one read of a run that -wait waits for asks the
// server to hold (the server caps it: AGENTD_MAX_WAIT).
const waitRound = time.Minute

// waitRun waits until run id ends or waits for a decision, prints it, and
// returns the exit status of its state.
func (a *app) waitRun(ctx context.Context, id string) int {
	r, err := a.c.WaitRun(ctx, id, waitRound) // GET /runs/{id}?wait=N, again until it has settled
	if err != nil {
		return a.fail(ctx, err)
	}
	if code := a.printRun(r); code != exitOK {
		return code
	}
	return statusCode(r.Status)
}

// runsGet: agentctl runs get ID.
func runsGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs get", "ID", "Show a run.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	r, err := a.c.GetRun(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printRun(r)
}

// runsList: agentctl runs list [flags].
func runsList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs list", "[flags]", "List runs, newest first: a page of them, and where the next page starts.")
	status := f.String("status", "", "only runs in this `status`")
	conversation := f.String("conversation", "", "only the runs of the conversation of this `ID`")
	agent := f.String("agent", "", "only the runs started from the agent of this `name`")
	agentVersion := f.Int("agent-version", 0, "with -agent, only those of this `version` of it")
	parent := f.String("parent", "", "only the child runs of the run of this `ID`'s sub-agents")
	pg := f.pages("runs")
	_, code, ok := pg.parse(args, 0, 0)
	if !ok {
		return code
	}
	p, err := a.c.ListRuns(ctx, client.ListRuns{Status: agentd.RunStatus(*status), ConversationID: *conversation, Agent: *agent, ParentRunID: *parent,
		AgentVersion: *agentVersion, Limit: *pg.limit, Cursor: *pg.cursor})
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printRuns(p)
}

// runsSteps: agentctl runs steps ID.
func runsSteps(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs steps", "ID", "Show a run's steps, each with its tool calls and their attempts.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	steps, err := a.c.Steps(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printSteps(steps)
}

// runsTail: agentctl runs tail [-after N] ID.
func runsTail(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs tail", "[-after N] ID",
		"Follow a run's events live: the model's text as it streams, a line for each tool call,\n"+
			"attempt and outcome, and the run's end. It goes on across lost connections and server\n"+
			"restarts. It stops when the run ends, or when it waits for a decision (it then prints\n"+
			"the agentctl command that answers). With -o json, each event is one line of JSON.\n"+
			"The exit status says how the run ended: 0 completed, 1 failed or timed out,\n"+
			"3 cancelled or interrupted, 4 waiting for a decision.")
	after := f.Int64("after", 0, "start after the event of this `seq` (default: from the first)")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *after < 0 {
		return f.usageError("-after must not be negative")
	}
	return a.tail(ctx, pos[0], *after)
}

// runsCancel: agentctl runs cancel ID.
func runsCancel(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs cancel", "ID", "Cancel a run, and print it.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	r, err := a.c.CancelRun(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printRun(r)
}

// runsResume: agentctl runs resume ID.
func runsResume(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs resume", "ID", "Queue an interrupted, failed or cancelled run again, and print it.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	r, err := a.c.ResumeRun(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printRun(r)
}
