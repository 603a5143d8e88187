package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentd/agentd/client"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // the run failed or timed out
	exitError       = 2   // a usage error, or an error of the API
	exitCancelled   = 3   // the run was cancelled or interrupted
	exitWaiting     = 4   // the run waits for a decision (requires_action)
	exitInterrupted = 130 // agentctl itself was interrupted (Ctrl-C)
)

const defaultURL = "http://127.0.0.1:8080"

const usageText = `agentctl is the command-line client of agentd.

Usage:
  agentctl [-url URL] [-key KEY] [-o table|json] COMMAND [flags] [args]

Runs:
  runs create [flags] TEXT       start a run with TEXT as the user message
                                 (-wait: wait for its end; -tail: follow it;
                                 -agent NAME: start from an agent)
  runs get ID                    show a run
  runs list [flags]              list runs, newest first
  runs steps ID                  show a run's steps, tool calls and attempts
  runs tail [-after N] ID        follow a run live until it ends or waits
  runs cancel ID                 cancel a run
  runs resume ID                 queue an interrupted, failed or cancelled run again
  runs fork ID STEP [TEXT]       a new run from ID's conversation after step STEP,
                                 then TEXT (-model, -agent-version: what changes)
  runs say [-now] ID TEXT        send TEXT to a run while it works (steering): it
                                 takes it at its next step (-now: at once)
  runs inputs ID                 list the inputs sent to a run, and where each is

Chat:
  chat [CONVERSATION]            talk with an agent in the terminal: each line typed
                                 is a message, sent even while the agent answers
                                 (-agent, -model, -instructions: the first run's)

Decisions on a run in requires_action (the tool call is the run's
required_action unless -call names it):
  actions approve RUN_ID [-call ID]               let the tool call run
  actions reject RUN_ID [-call ID] [-error MSG]   do not run it; the model is told MSG
  actions result RUN_ID [-call ID] RESULT_JSON    the call of unknown outcome happened,
                                                  with this result
  actions retry RUN_ID [-call ID]                 it did not happen: attempt it again
  actions fail RUN_ID [-call ID] [-error MSG]     give up on it; the model is told MSG

Agents (named, versioned run definitions):
  agents create FILE             make an agent from its JSON definition ("-": stdin)
  agents update NAME FILE        make its next version from a whole definition
  agents get [-version N] NAME   show an agent (its latest version, or version N)
  agents list [flags]            list the tenant's agents
  agents versions [flags] NAME   list an agent's versions, newest first
  agents delete NAME             delete an agent (runs in flight finish)

Schedules (runs that start themselves at the slots of a cron expression):
  schedules create FILE          make a schedule from its JSON definition ("-": stdin)
  schedules list [flags]         list the tenant's schedules
  schedules get ID               show a schedule, its next slot and latest runs
  schedules pause ID             pause it; schedules resume ID resumes it
  schedules runs [flags] ID      list its runs, newest slot first
  schedules delete ID            delete it (its runs stay)

Webhooks (events of runs and schedules POSTed, signed, to a URL):
  webhooks create -url URL -events TYPES   subscribe a URL; prints its secret, once
  webhooks list [flags]                    list the tenant's webhooks
  webhooks get ID                          show a webhook (disabled: when and why)
  webhooks enable ID                       enable it again; webhooks disable ID disables it
  webhooks deliveries [flags] ID           list its deliveries and their attempts
  webhooks redeliver ID DELIVERY_ID        deliver again, under the same id
  webhooks delete ID                       delete it and its deliveries

Usage and budgets (the cost ledger: one row per model call):
  usage [-from T] [-to T] [-by KEYS]   tokens and cost, this month by default, by
                                       tenant, model, agent, day, provider or run
  budgets get TENANT                   a tenant's monthly budget and spend (admin)
  budgets set TENANT AMOUNT|default    set it, or fall back to the default (admin)

Memory (versioned items under namespaces such as users/u-42):
  memory put [flags] NS KEY VALUE      write an item's next version (-data, -expires,
                                       -if-version)
  memory get [-as-of T] NS KEY         show an item, now or as of a time
  memory versions [flags] NS KEY       list its versions, newest first
  memory ls [flags] [PREFIX]           list the live items under a prefix
  memory search [flags] QUERY          search them (-prefix, -filter, -limit)
  memory rm NS KEY                     delete an item (a tombstone version)
  memory purge -confirm PREFIX PREFIX  remove every version under a prefix, for good
  memory extractions [-run ID]         list what was extracted from completed runs, newest first

Datasets (evaluation cases, versioned: each change of the cases is a version):
  datasets create NAME [FILE]          make a dataset from a JSONL file of cases ("-": stdin)
  datasets ls [flags]                  list the tenant's datasets
  datasets show [flags] NAME           show a dataset and its cases (-version N; -jsonl:
                                       the cases, one a line, as create reads them)
  datasets add-case [flags] NAME       add a case: -from-run ID [-at-step N] captures a
                                       run's conversation; -input TEXT; -file FILE (JSONL)
  datasets rm-case NAME CASE_ID        remove a case (the versions before keep it)
  datasets rm NAME                     delete a dataset and its cases

Evaluations (an agent's versions on a dataset's cases, without side effects):
  eval run [flags]                     evaluate -version N [-version M] of -agent NAME on
                                       -dataset NAME against -baseline B, wait, print the
                                       report, regressions first, and gate on it: exit 1
                                       below -fail-under F or on a regression (unless
                                       -allow-regressions); -candidate FILE, -repeat K,
                                       -concurrency C, -dataset-version N
  eval show ID                         show an evaluation and its report
  eval ls [flags]                      list the tenant's evaluations, newest first
  eval cancel ID                       cancel a running evaluation and its runs

Conversations and tools:
  conversations get ID                 show a conversation
  conversations messages [flags] ID    list a conversation's messages, oldest first
  tools                                list the tools runs may call
  tools create FILE                    declare a webhook tool of the tenant's
  tools update NAME FILE               replace it (headers included)
  tools get NAME / tools delete NAME   show or delete one

  help [COMMAND]                       show this help, or a command's flags

Global flags (before COMMAND):
  -url URL        agentd's address (default $AGENTD_URL, else ` + defaultURL + `)
  -key KEY        API key, sent as a bearer token (default $AGENTD_API_KEY)
  -o table|json   output: aligned tables and "key: value" lines, or the API's
                  objects as indented JSON (runs tail: one event per line)

Flags of a command may come before or after its arguments; -o may also
follow COMMAND.

Exit status:
  0  done (for create -wait, create -tail and tail: the run completed;
     for eval run: the evaluation passed the gate)
  1  the run failed or timed out; eval run: the evaluation failed the gate
     (a version under -fail-under, a regression) or failed
  2  usage error, or an error of the API
  3  the run (eval run: the evaluation) was cancelled or interrupted
  4  the run waits for a decision (requires_action)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// app is what every command needs: the client, the output format and the
// input and output streams.
type app struct {
	c      *client.Client
	json   bool      // -o json
	stdin  io.Reader // read by chat alone
	stdout io.Writer
	stderr io.Writer
}

// run is agentctl: args are the arguments after the program's name, env
// reads the environment. It returns the exit status.
func run(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("agentctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	url := fs.String("url", cmp.Or(env("AGENTD_URL"), defaultURL), "agentd's address")
	key := fs.String("key", env("AGENTD_API_KEY"), "API key")
	format := fs.String("o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		fmt.Fprintf(stderr, "agentctl: %v\n\n%s", err, usageText)
		return exitError
	}
	switch *format {
	case "table":
	case "json":
		a.json = true
	default:
		fmt.Fprintf(stderr, "agentctl: -o %q: want table or json\n", *format)
		return exitError
	}
	var opts []client.Option
	if *key != "" {
		opts = append(opts, client.WithAPIKey(*key))
	}
	a.c = client.New(*url, opts...)

	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintf(stderr, "agentctl: no command\n\n%s", usageText)
		return exitError
	}
	if rest[0] == "help" {
		if len(rest) == 1 {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		if cmd, _, ok := lookup(rest[1:]); ok {
			return cmd(ctx, a, []string{"-h"})
		}
		fmt.Fprintf(stderr, "agentctl: no command %q\n\n%s", strings.Join(rest[1:], " "), usageText)
		return exitError
	}
	cmd, cmdArgs, ok := lookup(rest)
	if !ok {
		fmt.Fprintf(stderr, "agentctl: no command %q\n\n%s", strings.Join(rest[:min(len(rest), 2)], " "), usageText)
		return exitError
	}
	return cmd(ctx, a, cmdArgs)
}

// commandFunc runs one command with the arguments after its name and
// returns the exit status.
type commandFunc func(ctx context.Context, a *app, args []string) int

// commands maps each command's name (one or two words) to its function.
var commands = map[string]commandFunc{
	"runs create":            runsCreate,
	"runs get":               runsGet,
	"runs list":              runsList,
	"runs steps":             runsSteps,
	"runs tail":              runsTail,
	"runs cancel":            runsCancel,
	"runs resume":            runsResume,
	"runs fork":              runsFork,
	"runs say":               runsSay,
	"runs inputs":            runsInputs,
	"chat":                   chat,
	"actions approve":        actionCommand("approve"),
	"actions reject":         actionCommand("reject"),
	"actions result":         actionCommand("result"),
	"actions retry":          actionCommand("retry"),
	"actions fail":           actionCommand("fail"),
	"conversations get":      conversationsGet,
	"conversations messages": conversationsMessages,
	"tools":                  toolsList,
	"tools create":           toolsCreate,
	"tools update":           toolsUpdate,
	"tools get":              toolsGet,
	"tools delete":           toolsDelete,
	"agents create":          agentsCreate,
	"agents update":          agentsUpdate,
	"agents get":             agentsGet,
	"agents list":            agentsList,
	"agents versions":        agentsVersions,
	"agents delete":          agentsDelete,
	"schedules create":       schedulesCreate,
	"schedules list":         schedulesList,
	"schedules get":          schedulesGet,
	"schedules pause":        schedulesPause,
	"schedules resume":       schedulesResume,
	"schedules delete":       schedulesDelete,
	"schedules runs":         schedulesRuns,
	"webhooks create":        webhooksCreate,
	"webhooks list":          webhooksList,
	"webhooks get":           webhooksGet,
	"webhooks enable":        webhooksEnable,
	"webhooks disable":       webhooksDisable,
	"webhooks delete":        webhooksDelete,
	"webhooks deliveries":    webhooksDeliveries,
	"webhooks redeliver":     webhooksRedeliver,
	"usage":                  usageList,
	"budgets get":            budgetsGet,
	"budgets set":            budgetsSet,
	"memory put":             memoryPut,
	"memory extractions":     memoryExtractions,
	"memory get":             memoryGet,
	"memory versions":        memoryVersions,
	"memory ls":              memoryList,
	"memory search":          memorySearch,
	"memory rm":              memoryRemove,
	"memory purge":           memoryPurge,
	"datasets create":        datasetsCreate,
	"datasets ls":            datasetsList,
	"datasets show":          datasetsShow,
	"datasets add-case":      datasetsAddCase,
	"datasets rm-case":       datasetsRemoveCase,
	"datasets rm":            datasetsRemove,
	"eval run":               evalRun,
	"eval show":              evalShow,
	"eval ls":                evalList,
	"eval cancel":            evalCancel,
}

// lookup finds the command that args start with: its function and the
// arguments after its name.
func lookup(args []string) (commandFunc, []string, bool) {
	if len(args) >= 2 {
		if cmd, ok := commands[args[0]+" "+args[1]]; ok {
			return cmd, args[2:], true
		}
	}
	if len(args) >= 1 {
		if cmd, ok := commands[args[0]]; ok {
			return cmd, args[1:], true
		}
	}
	return nil, nil, false
}

// fail prints err and returns exitError, or exitInterrupted when ctx ended
// (agentctl was interrupted).
func (a *app) fail(ctx context.Context, err error) int {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		fmt.Fprintln(a.stderr, "agentctl: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(a.stderr, "agentctl: %s\n", describeError(err))
	return exitError
}

// describeError says what err is; for an error answer of the server, its
// status, code, field, detail and request id.
func describeError(err error) string {
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		return err.Error()
	}
	var b strings.Builder
	code := cmp.Or(apiErr.Code, apiErr.Title, "error")
	fmt.Fprintf(&b, "%s", code)
	if apiErr.Field != "" {
		fmt.Fprintf(&b, " (field %s)", apiErr.Field)
	}
	if apiErr.Tool != "" {
		fmt.Fprintf(&b, " (tool %s)", apiErr.Tool)
	}
	if apiErr.Detail != "" {
		fmt.Fprintf(&b, ": %s", apiErr.Detail)
	}
	if apiErr.BusyRunID != "" {
		fmt.Fprintf(&b, " (busy with run %s)", apiErr.BusyRunID)
	}
	if apiErr.ConversationID != "" {
		fmt.Fprintf(&b, " (agentctl chat %s sends it there)", apiErr.ConversationID)
	}
	fmt.Fprintf(&b, " [HTTP %d", apiErr.Status)
	if apiErr.RequestID != "" {
		fmt.Fprintf(&b, ", request %s", apiErr.RequestID)
	}
	b.WriteString("]")
	return b.String()
}
