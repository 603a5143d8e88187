package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd/client"
)

// schedulesCreate: agentctl schedules create FILE.
func schedulesCreate(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("schedules create", "FILE",
		"Make a schedule from its JSON definition in FILE (\"-\": standard input): its name, cron\n"+
			"expression (5 fields, or \"@every 30s\"), timezone, the body of POST /runs that each slot\n"+
			"starts, and its overlap and catch_up policies, e.g. {\"name\": \"nightly\", \"cron\": \"0 3 * * *\",\n"+
			"\"timezone\": \"Europe/Paris\", \"run\": {\"agent\": \"reporter\", \"input\": \"Report.\"}}.")
	return sendFile(ctx, a, f, args, 1, func(_ []string, def json.RawMessage) (*client.Schedule, error) {
		return a.c.CreateScheduleJSON(ctx, def)
	}, a.printSchedule)
}

// schedulesGet: agentctl schedules get ID.
func schedulesGet(ctx context.Context, a *app, args []string) int {
	return a.scheduleCommand(ctx, "schedules get", "Show a schedule: its next slot and its latest runs.", args,
		a.c.GetSchedule)
}

// schedulesPause: agentctl schedules pause ID.
func schedulesPause(ctx context.Context, a *app, args []string) int {
	return a.scheduleCommand(ctx, "schedules pause", "Pause a schedule: its slots start no runs until it is resumed.", args,
		a.c.PauseSchedule)
}

// schedulesResume: agentctl schedules resume ID.
func schedulesResume(ctx context.Context, a *app, args []string) int {
	return a.scheduleCommand(ctx, "schedules resume",
		"Resume a schedule (paused by a client or by itself): its failures are forgotten, and its\n"+
			"next slot is the first from now.", args, a.c.ResumeSchedule)
}

// scheduleCommand runs a command of one argument, a schedule's ID, whose
// call answers the schedule, and prints it.
func (a *app) scheduleCommand(ctx context.Context, name, help string, args []string,
	call func(ctx context.Context, id string) (*client.Schedule, error)) int {
	f := a.newFlags(name, "ID", help)
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	s, err := call(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printSchedule(s)
}

// schedulesList: agentctl schedules list [-limit N] [-cursor C].
func schedulesList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("schedules list", "[-limit N] [-cursor C]", "List the tenant's schedules, by name.")
	pg := f.pages("schedules")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.ListSchedules(ctx, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "NAME", "CRON", "TIMEZONE", "NEXT", "STATE")
	for _, s := range p.Data {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		row(tw, s.ID, s.Name, s.Cron, s.Timezone, when(s.NextAt), state)
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// schedulesRuns: agentctl schedules runs [-limit N] [-cursor C] ID.
func schedulesRuns(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("schedules runs", "[-limit N] [-cursor C] ID", "List the runs of a schedule's slots, the newest slot first.")
	pg := f.pages("runs")
	pos, code, ok := pg.parse(args, 1, 1)
	if !ok {
		return code
	}
	p, err := a.c.ScheduleRuns(ctx, pos[0], *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "SLOT", "ID", "STATUS", "REASON", "STEPS", "CREATED")
	for _, r := range p.Data {
		row(tw, when(r.ScheduledFor), r.ID, string(r.Status), deref(r.TerminalReason), itoa(r.StepCount), when(&r.CreatedAt))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// schedulesDelete: agentctl schedules delete ID.
func schedulesDelete(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("schedules delete", "ID", "Delete a schedule; its runs stay.")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if err := a.c.DeleteSchedule(ctx, pos[0]); err != nil {
		return a.fail(ctx, err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "deleted schedule %s\n", pos[0])
	}
	return exitOK
}

// printSchedule writes a schedule.
func (a *app) printSchedule(s *client.Schedule) int {
	if a.json {
		return a.printJSON(s)
	}
	k := newKV(a.stdout)
	k.line("id", s.ID)
	k.line("name", s.Name)
	k.line("cron", s.Cron+" ("+s.Timezone+")")
	k.line("run", compactJSON(s.Run))
	k.line("policies", "overlap "+string(s.Overlap)+", catch_up "+string(s.CatchUp))
	state := "active, next " + when(s.NextAt)
	if s.Paused {
		state = "paused"
		if s.PausedReason != nil {
			state += ": " + *s.PausedReason
		}
	}
	k.line("state", state)
	k.line("failures", fmt.Sprintf("%d in a row", s.ConsecutiveFailures))
	if s.LastError != nil {
		k.line("last_error", *s.LastError)
	}
	var last []string
	for _, o := range s.LastRuns {
		last = append(last, fmt.Sprintf("%s  %s  %s", when(&o.ScheduledFor), o.RunID, o.Status))
	}
	k.line("last_runs", strings.Join(last, "\n"))
	k.line("created", when(&s.CreatedAt))
	k.line("created_by", s.CreatedBy)
	k.flush()
	return exitOK
}
