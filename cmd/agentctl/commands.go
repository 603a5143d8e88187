package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// actionAbout says what each decision does.
var actionAbout = map[string]string{
	"approve": "Approve the tool call a run waits to have approved: it runs, and the run goes on.",
	"reject":  "Reject the tool call a run waits to have approved: it does not run, and the model\nis told -error.",
	"result":  "Say that a tool call whose outcome is unknown happened, with RESULT_JSON as its result.",
	"retry":   "Say that a tool call whose outcome is unknown did not happen: it is attempted again\nwith the same idempotency key.",
	"fail":    "Give up on a tool call whose outcome is unknown: the model is told -error.",
}

// actionCommand is agentctl actions DECISION RUN_ID [-call ID] [-error MSG]
// [RESULT_JSON].
func actionCommand(decision string) commandFunc {
	return func(ctx context.Context, a *app, args []string) int {
		synopsis := "RUN_ID [-call TOOL_CALL_ID]"
		switch decision {
		case "reject", "fail":
			synopsis += " [-error MSG]"
		case "result":
			synopsis += " RESULT_JSON"
		}
		f := a.newFlags("actions "+decision, synopsis, actionAbout[decision]+
			"\n\nThe run must be in requires_action; the call is its required_action's unless -call\nnames it. It prints the run, queued again.")
		call := f.String("call", "", "the tool call's `ID` (default: the run's required_action.tool_call_id)")
		var msg *string
		if decision == "reject" || decision == "fail" {
			msg = f.String("error", "", "what the model is told: a `message`")
		}
		nargs := 1
		if decision == "result" {
			nargs = 2
		}
		pos, code, ok := f.parse(args, nargs, nargs)
		if !ok {
			return code
		}
		act := client.Action{Decision: agentd.Decision(decision), ToolCallID: *call}
		if msg != nil {
			act.Error = *msg
		}
		if decision == "result" {
			if !json.Valid([]byte(pos[1])) {
				return f.usageError("RESULT_JSON is not valid JSON")
			}
			act.Result = json.RawMessage(pos[1])
		}
		runID := pos[0]
		if act.ToolCallID == "" {
			r, err := a.c.GetRun(ctx, runID)
			if err != nil {
				return a.fail(ctx, err)
			}
			if r.Status != agentd.StatusRequiresAction || r.RequiredAction == nil {
				fmt.Fprintf(a.stderr, "agentctl: run %s waits for no decision (it is %s)\n", runID, r.Status)
				return exitError
			}
			act.ToolCallID = r.RequiredAction.ToolCallID
		}
		r, err := a.c.Act(ctx, runID, act)
		if err != nil {
			return a.fail(ctx, err)
		}
		return a.printRun(r)
	}
}

// conversationsGet: agentctl conversations get ID.
func conversationsGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("conversations get", "ID", "Show a conversation.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	c, err := a.c.GetConversation(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printConversation(c)
}

// conversationsMessages: agentctl conversations messages [flags] ID.
func conversationsMessages(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("conversations messages", "[-limit N] [-cursor C] ID",
		"List a conversation's messages, oldest first: a page of them, and where the next page starts.")
	pg := f.pages("messages")
	pos, code, ok := pg.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := a.c.Messages(ctx, pos[0], *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMessages(p)
}

// toolsList: agentctl tools.
func toolsList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("tools", "", "List the tools runs may call.")
	if _, code, ok := f.parse(args, 0, 0); !ok {
		return code
	}
	tools, err := a.c.Tools(ctx)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printTools(tools)
}
