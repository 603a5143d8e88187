package main

import (
	"context"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// runsSay: agentctl runs say [-now] [-idempotency-key K] ID TEXT.
func runsSay(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs say", "[-now] [-idempotency-key K] ID TEXT",
		"Send TEXT (its words joined by spaces) to a run while it works, with the images and\n"+
			"files of -image and -file after it, and print the input: the run takes it at its next\n"+
			"step boundary, after the tool calls under way (-now: at once, cutting the model's\n"+
			"answer under way, which is asked again with it), and goes on after an answer it was\n"+
			"about to end with. A run that has ended takes no input: send the message to its\n"+
			"conversation (agentctl chat CONVERSATION) to start the next run.")
	now := f.Bool("now", false, "apply it at once: cut the model's answer under way (tool calls are never cut)")
	key := f.String("idempotency-key", "", "the Idempotency-Key: the same `key` again gives the same input, sent once (default: a new one)")
	attached := f.attachments()
	pos, code, ok := f.parse(args, 2, -1)
	if !ok {
		return code
	}
	in := client.SteerInput{Text: strings.Join(pos[1:], " "), IdempotencyKey: *key}
	if *now {
		in.When = agentd.InputNow
	}
	if len(attached.parts) > 0 {
		in.Messages = []client.InputMessage{{Role: agentd.RoleUser, Content: in.Text, Parts: attached.parts}}
	}
	got, err := a.c.SteerRun(ctx, pos[0], in)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printInput(got)
}

// runsInputs: agentctl runs inputs ID.
func runsInputs(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("runs inputs", "ID",
		"List the inputs sent to a run while it worked, in the order it accepted them: when each\n"+
			"was to be applied, and whether it was (before which step), or why not.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	inputs, err := a.c.ListInputs(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printInputs(inputs)
}

// printInput writes one input: as JSON, or as "key: value" lines.
func (a *app) printInput(in *client.Input) int {
	if a.json {
		return a.printJSON(in)
	}
	k := newKV(a.stdout)
	k.line("id", in.ID)
	k.line("run", in.RunID)
	k.line("n", itoa(in.N))
	k.line("status", string(in.Status))
	k.line("when", string(in.When))
	k.line("source", string(in.Source))
	if in.Step != nil {
		k.line("applied_before_step", itoa(*in.Step))
	}
	k.line("reason", deref(in.Reason))
	k.line("carried_to", deref(in.CarriedTo))
	k.line("created_by", deref(in.CreatedBy))
	k.line("created", when(&in.CreatedAt))
	k.line("applied", when(in.AppliedAt))
	k.line("message", inputText(in))
	k.flush()
	return exitOK
}

// printInputs writes a run's inputs as a table.
func (a *app) printInputs(inputs []client.Input) int {
	if a.json {
		return a.printJSON(struct {
			Data []client.Input `json:"data"`
		}{inputs})
	}
	tw := newTable(a.stdout)
	row(tw, "N", "ID", "STATUS", "WHEN", "SOURCE", "STEP", "CREATED", "MESSAGE")
	for _, in := range inputs {
		step := ""
		if in.Step != nil {
			step = itoa(*in.Step)
		}
		status := string(in.Status)
		if in.Reason != nil {
			status += " (" + string(*in.Reason) + ")"
		}
		row(tw, itoa(in.N), in.ID, status, string(in.When), string(in.Source), step, when(&in.CreatedAt), shorten(inputText(&in), 80))
	}
	tw.Flush()
	return exitOK
}

// inputText says what an input's messages hold, one line each.
func inputText(in *client.Input) string {
	lines := make([]string, 0, len(in.Messages))
	for _, m := range in.Messages {
		lines = append(lines, partsText(m.Content))
	}
	return strings.Join(lines, "\n")
}
