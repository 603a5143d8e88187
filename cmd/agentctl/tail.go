package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// Marks that start the lines the renderer writes for events; the model's
// text is written as it streams, without a mark.
const (
	markCall      = "→" // a tool call
	markResult    = "←" // its outcome
	markRetracted = "↺" // the step's streamed text is withdrawn
	markWait      = "⏸" // the run waits for a decision
	markInfo      = "·" // something happened to the run
	markEnd       = "■" // the run's end
)

// follow reads the events of run id after seq after and hands each to show
// (when not nil), until the run's end, or until the run waits for a
// decision: its stream stays open then, so follow stops at the
// run.requires_action after which nothing has happened yet (stop true). A
// run.requires_action the run has since moved past is shown with stop
// false, and following goes on; so does a terminal event after which the
// run was resumed. The SDK's iterator reconnects by itself when the
// connection breaks or the server restarts.
//
// It returns the run's status at the end: the terminal event's, or
// requires_action.
func (a *app) follow(ctx context.Context, id string, after int64, show func(ev client.Event, stop bool)) (agentd.RunStatus, error) {
	for {
		resumed := false
		for ev, err := range a.c.Events(ctx, id, after) {
			if err != nil {
				return "", err
			}
			after = ev.Seq
			if ev.Type == agentd.EventRunRequiresAction {
				r, err := a.getRun(ctx, id)
				if err != nil {
					return "", err
				}
				if r.Status == agentd.StatusRequiresAction && r.LastEventSeq <= ev.Seq {
					if show != nil {
						show(ev, true)
					}
					return r.Status, nil
				}
			}
			if show != nil {
				show(ev, false)
			}
			if ev.Terminal() {
				// The stream ends here; the run may have been resumed since.
				r, err := a.getRun(ctx, id)
				if err != nil {
					return "", err
				}
				if r.Ended() && r.LastEventSeq <= ev.Seq {
					return endStatus(ev), nil
				}
				resumed = true
			}
		}
		if !resumed {
			break
		}
	}
	// The run had ended with nothing after seq after.
	r, err := a.getRun(ctx, id)
	if err != nil {
		return "", err
	}
	return r.Status, nil
}

// getRun reads run id while following it: it tries again, for as long as
// ctx lasts, while the server cannot be reached or answers that it is
// unavailable (as during a restart), as the SDK's event iterator does.
func (a *app) getRun(ctx context.Context, id string) (*client.Run, error) {
	wait := 200 * time.Millisecond
	for {
		r, err := a.c.GetRun(ctx, id)
		var apiErr *client.Error
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests:
			return nil, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// endStatus is the status a terminal event ends its run with.
func endStatus(ev client.Event) agentd.RunStatus {
	p, err := ev.Payload()
	if d, ok := p.(agentd.RunEndedData); err == nil && ok {
		return d.Status
	}
	return ""
}

// statusCode is the exit status for a run that is in status.
func statusCode(status agentd.RunStatus) int {
	switch status {
	case agentd.StatusCompleted:
		return exitOK
	case agentd.StatusFailed, agentd.StatusTimedOut:
		return exitFailed
	case agentd.StatusCancelled, agentd.StatusInterrupted:
		return exitCancelled
	case agentd.StatusRequiresAction:
		return exitWaiting
	}
	return exitError
}

// tail follows run id after seq after, writing its events as they come: as
// the renderer shows them, or (-o json) one envelope per line. It returns
// the exit status of the run's end.
func (a *app) tail(ctx context.Context, id string, after int64) int {
	r, err := a.c.GetRun(ctx, id)
	if err != nil {
		return a.fail(ctx, err)
	}
	out := newRenderer(a.stdout, id)
	if r.Status == agentd.StatusRequiresAction && r.LastEventSeq <= after {
		// Nothing will come until a decision: say what it waits for.
		if a.json {
			return exitWaiting
		}
		out.waiting(r.RequiredAction)
		return exitWaiting
	}
	status, err := a.follow(ctx, id, after, a.show(out))
	out.endLine()
	if err != nil {
		return a.fail(ctx, err)
	}
	return statusCode(status)
}

// show is what follow hands each event to: it writes the event as out
// renders it, or (-o json) as one envelope per line.
func (a *app) show(out *renderer) func(ev client.Event, stop bool) {
	return func(ev client.Event, stop bool) {
		if a.json {
			b, err := json.Marshal(ev)
			if err == nil {
				fmt.Fprintf(a.stdout, "%s\n", b)
			}
			return
		}
		if stop {
			var ra *agentd.RequiredAction
			if p, err := ev.Payload(); err == nil {
				if d, ok := p.(agentd.RunRequiresActionData); ok {
					ra = &d.RequiredAction
				}
			}
			out.waiting(ra)
			return
		}
		out.event(ev)
	}
}

// renderer writes a run's events for a person: the model's text as it
// streams, and a line for each tool call, attempt, outcome, retraction,
// wait and end.
type renderer struct {
	w       io.Writer
	runID   string
	midLine bool              // text was written and its line is not ended
	notes   []string          // lines that wait for the end of the line of text
	streams map[int]bool      // the steps whose text came as deltas (since their last retraction)
	names   map[string]string // tool call id -> tool name
}

func newRenderer(w io.Writer, runID string) *renderer {
	return &renderer{w: w, runID: runID, streams: map[int]bool{}, names: map[string]string{}}
}

// endLine ends the line of streamed text, when one is open, and writes the
// notes that waited for it.
func (r *renderer) endLine() {
	if r.midLine {
		io.WriteString(r.w, "\n")
		r.midLine = false
	}
	for _, n := range r.notes {
		fmt.Fprintf(r.w, "%s\n", n)
	}
	r.notes = r.notes[:0]
}

// note writes a line of its own that need not cut the text streaming: at
// once, or when the text's line ends.
func (r *renderer) note(format string, args ...any) {
	if !r.midLine {
		r.line(format, args...)
		return
	}
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// line writes one line of its own.
func (r *renderer) line(format string, args ...any) {
	r.endLine()
	fmt.Fprintf(r.w, format+"\n", args...)
}

// text writes streamed text.
func (r *renderer) text(s string) {
	if s == "" {
		return
	}
	io.WriteString(r.w, s)
	r.midLine = !strings.HasSuffix(s, "\n")
	if !r.midLine {
		r.endLine() // the notes that waited for the line's end
	}
}

// event writes ev: the domain decodes its data into the struct of its type,
// and each kind of event has its own writer. An event of a type this build
// does not know (a newer server's) shows nothing.
func (r *renderer) event(ev client.Event) {
	p, err := ev.Payload()
	switch {
	case errors.Is(err, agentd.ErrUnknownEventType):
		return
	case err != nil:
		r.line("%s event %d (%s): unreadable data: %v", markInfo, ev.Seq, ev.Type, err)
		return
	}
	switch d := p.(type) {
	case agentd.MessageDeltaData:
		r.streams[ev.Step] = true
		r.text(d.Text)
	case agentd.MessageCompletedData:
		r.messageCompleted(ev.Step, d)
	case agentd.StepCompletedData:
		r.endLine()
	case agentd.StepRetractedData:
		r.streams[ev.Step] = false
		r.line("%s the text streamed so far in step %d is withdrawn (%s); the step starts over", markRetracted, ev.Step, d.Reason)
	case agentd.RunRequiresActionData:
		// A wait the run has since moved past.
		r.line("%s the run waited for %s", markWait, waitText(&d.RequiredAction))
	case agentd.RunResumedData:
		if d.Reason == agentd.ResumedRecovery {
			r.line("%s run recovered by another worker", markInfo)
		} else {
			r.line("%s run resumed%s", markInfo, actorText(d.Actor))
		}
	case agentd.ModelFallbackData:
		why := "it kept failing"
		if d.Error != nil {
			why = d.Error.Message
		}
		r.line("%s step %d falls back from %s to %s after %d attempts: %s", markInfo, ev.Step, d.From, d.To, d.Attempts, why)
	case agentd.ContextCompactedData:
		r.line("%s context compacted: %d messages summarized (%d → %d tokens)", markInfo, d.MessagesCovered, d.TokensBefore, d.TokensAfter)
	case agentd.InputAcceptedData:
		r.note("%s input %d accepted%s%s", markInfo, d.N, inputWhenText(d.When), actorText(d.Actor))
	case agentd.InputAppliedData:
		r.line("%s input %d applied", markInfo, d.N)
	case agentd.InputUnappliedData:
		r.line("%s input %d not applied: the run ended (%s)", markInfo, d.N, d.Reason)
	case agentd.RunEndedData:
		r.runEnded(d)
	default:
		r.toolEvent(p)
	}
}

// messageCompleted writes the end of a step's answer: its text, when it did
// not stream (or came before -after), and why it was cut, if it was.
func (r *renderer) messageCompleted(step int, d agentd.MessageCompletedData) {
	if !r.streams[step] {
		r.text(agentd.TextOf(d.Content))
	}
	r.endLine()
	switch d.FinishReason {
	case agentd.FinishLength:
		r.line("%s the answer was cut at the model's output limit", markInfo)
	case agentd.FinishContentFilter:
		r.line("%s the model's content filter stopped the answer", markInfo)
	}
}

// toolEvent writes the events of tool calls and their attempts.
func (r *renderer) toolEvent(p agentd.Payload) {
	switch d := p.(type) {
	case agentd.ToolCallCreatedData:
		r.names[d.ToolCallID] = d.Name
		suffix := ""
		if d.Status == agentd.CallAwaitingApproval {
			suffix = "  (needs approval)"
		}
		r.line("%s %s %s%s", markCall, d.Name, compactJSON(d.Arguments), suffix)
	case agentd.ToolAttemptStartedData:
		if d.Attempt > 1 {
			r.line("  attempt %d of %s", d.Attempt, r.name(d.ToolCallID, d.Name))
		}
	case agentd.ToolAttemptFailedData:
		then := ""
		if d.WillRetry {
			then = " (retrying)"
		}
		r.line("  attempt %d failed: %s%s", d.Attempt, errorText(&d.Error), then)
	case agentd.ToolCallCompletedData:
		r.callCompleted(d)
	case agentd.ToolCallReusedData:
		r.line("%s %s reused: its result was already committed", markResult, r.name(d.ToolCallID, d.Name))
	case agentd.ToolCallUnknownData:
		s := fmt.Sprintf("? %s: the outcome is unknown", r.name(d.ToolCallID, d.Name))
		if d.Error != nil {
			s += ": " + errorText(d.Error)
		}
		r.line("%s", s)
	case agentd.ToolCallApprovedData:
		r.line("  %s approved%s", r.name(d.ToolCallID, ""), actorText(d.Actor))
	case agentd.ToolCallRetryAllowedData:
		r.line("  %s will be attempted again (%s%s)", r.name(d.ToolCallID, ""), d.ResolvedBy, actorText(d.Actor))
	}
}

// callCompleted writes a tool call's outcome, and who decided it when the
// executor did not.
func (r *renderer) callCompleted(d agentd.ToolCallCompletedData) {
	name := r.name(d.ToolCallID, d.Name)
	by := ""
	switch {
	case d.ResolvedBy == agentd.ResolvedByClient && d.Actor != "":
		by = " (decided by " + d.Actor + ")"
	case d.ResolvedBy == agentd.ResolvedByClient:
		by = " (a client's decision)"
	case d.ResolvedBy != "":
		by = " (" + d.ResolvedBy + ")"
	}
	if d.Error == nil {
		r.line("%s %s %s %s%s", markResult, name, d.Status, compactJSON(d.Result), by)
		return
	}
	e := *d.Error
	if string(e.Kind) == string(d.Status) {
		e.Kind = "" // "rejected: rejected: no" says it twice
	}
	r.line("%s %s %s: %s%s", markResult, name, d.Status, errorText(&e), by)
}

// runEnded writes the run's end: its status, its reason when that says
// more, who asked for it, its error, and the side effects left in doubt.
func (r *renderer) runEnded(d agentd.RunEndedData) {
	s := fmt.Sprintf("%s run %s", markEnd, strings.ReplaceAll(string(d.Status), "_", " "))
	if d.Reason != "" && string(d.Reason) != string(d.Status) {
		s += " (" + string(d.Reason) + ")"
	}
	s += actorText(d.Actor)
	if d.Error != nil {
		s += ": " + errorText(d.Error)
	}
	r.line("%s", s)
	if len(d.UnresolvedToolCalls) > 0 {
		r.line("  these side-effect calls may have happened: %s", strings.Join(d.UnresolvedToolCalls, ", "))
	}
}

// waiting writes what a run in requires_action waits for, and the commands
// that answer it.
func (r *renderer) waiting(ra *client.RequiredAction) {
	r.endLine()
	if ra == nil {
		r.line("%s the run waits for a decision", markWait)
		return
	}
	r.line("%s the run waits for %s (tool call %s); answer with:", markWait, waitText(ra), ra.ToolCallID)
	for _, c := range answerCommands(r.runID, ra) {
		r.line("    %s", c)
	}
}

// name is the name of tool call id: as the event gives it, else as its
// tool_call.created said, else its id.
func (r *renderer) name(id, given string) string {
	switch {
	case given != "":
		return given
	case r.names[id] != "":
		return r.names[id]
	}
	return "tool call " + id
}

// inputWhenText says when an input is applied, when not at the next step
// boundary, as it is by default.
func inputWhenText(w agentd.InputWhen) string {
	if w == agentd.InputNow {
		return " (now)"
	}
	return ""
}

func actorText(actor string) string {
	if actor == "" {
		return ""
	}
	return " by " + actor
}
