package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintf(a.stderr, "agentctl: encode the answer: %v\n", err)
		return exitError
	}
	b = append(b, '\n')
	a.stdout.Write(b)
	return exitOK
}

// newTable returns a writer of aligned columns (tab-separated cells); the
// caller flushes it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one row of cells to a table.
func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(tw, "\t")
		}
		io.WriteString(tw, oneLine(c))
	}
	io.WriteString(tw, "\n")
}

// kvWriter writes "key: value" lines, their values aligned.
type kvWriter struct{ tw *tabwriter.Writer }

func newKV(w io.Writer) *kvWriter { return &kvWriter{tw: newTable(w)} }

// line writes key and value; a value of several lines goes on as many,
// under the first. An empty value writes nothing.
func (k *kvWriter) line(key, value string) {
	if value == "" {
		return
	}
	lines := strings.Split(strings.TrimRight(value, "\n"), "\n")
	for i, l := range lines {
		l = strings.ReplaceAll(l, "\t", "    ")
		if i == 0 {
			fmt.Fprintf(k.tw, "%s:\t%s\n", key, l)
		} else {
			fmt.Fprintf(k.tw, "\t%s\n", l)
		}
	}
}

func (k *kvWriter) flush() { k.tw.Flush() }

// oneLine is s on one line, for a table cell.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r\n", " ")
	return strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace(s)
}

// shorten cuts s to n runes, marking the cut with "…".
func shorten(s string, n int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// compactJSON is raw on one line, or "" for nothing or null.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// when formats a time in the local zone, or "" for none.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// took is the time from start to end, or "" when either is missing.
func took(start, end *time.Time) string {
	if start == nil || end == nil || start.IsZero() || end.IsZero() {
		return ""
	}
	d := end.Sub(*start)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func deref[T ~string](s *T) string {
	if s == nil {
		return ""
	}
	return string(*s)
}

func itoa(n int) string { return fmt.Sprint(n) }

// errorText says what an error detail holds: its kind and message, and what
// the model's provider said.
func errorText(e *client.ErrorDetail) string {
	if e == nil {
		return ""
	}
	s := e.Message
	if e.Kind != "" {
		s = string(e.Kind) + ": " + s
	}
	if e.Status != 0 && !strings.Contains(s, fmt.Sprint(e.Status)) {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.ProviderCode != "" && !strings.Contains(s, e.ProviderCode) {
		s += " [" + e.ProviderCode + "]"
	}
	return s
}

// toolsText says which tools a run may call.
func toolsText(tools []string) string {
	switch {
	case tools == nil:
		return "all"
	case len(tools) == 0:
		return "none"
	}
	return strings.Join(tools, ", ")
}

// usageLine sums up token counts.
func usageLine(u client.Usage) string {
	s := fmt.Sprintf("%d in, %d out", u.InputTokens, u.OutputTokens)
	if u.CachedInputTokens > 0 {
		s += fmt.Sprintf(", %d cached", u.CachedInputTokens)
	}
	if u.ReasoningTokens > 0 {
		s += fmt.Sprintf(", %d reasoning", u.ReasoningTokens)
	}
	return s
}

// printRun writes one run: as JSON, or as "key: value" lines.
func (a *app) printRun(r *client.Run) int {
	if a.json {
		return a.printJSON(r)
	}
	k := newKV(a.stdout)
	k.line("id", r.ID)
	k.line("status", string(r.Status))
	k.line("reason", deref(r.TerminalReason))
	k.line("conversation", r.ConversationID)
	k.line("model", r.Model)
	if r.Agent != nil {
		k.line("agent", fmt.Sprintf("%s version %d", r.Agent.Name, r.Agent.Version))
	}
	if r.ForkedFrom != nil {
		k.line("forked_from", fmt.Sprintf("run %s after step %d", r.ForkedFrom.RunID, r.ForkedFrom.Step))
	}
	k.line("instructions", deref(r.Instructions))
	k.line("tools", toolsText(r.Tools))
	k.line("steps", fmt.Sprintf("%d of at most %d", r.StepCount, r.MaxSteps))
	tokens := usageLine(r.Usage.Usage)
	if r.Usage.CacheWriteTokens > 0 {
		tokens += fmt.Sprintf(", %d written to the cache", r.Usage.CacheWriteTokens)
	}
	k.line("tokens", tokens)
	k.line("cost", agentd.FormatCost(r.Cost))
	k.line("if_busy", string(r.IfBusy))
	k.line("metadata", compactJSON(r.Metadata))
	k.line("created", when(&r.CreatedAt))
	k.line("started", when(r.StartedAt))
	if f := when(r.FinishedAt); f != "" {
		if d := took(r.StartedAt, r.FinishedAt); d != "" {
			f += " (" + d + ")"
		}
		k.line("finished", f)
	}
	k.line("deadline", when(r.DeadlineAt))
	k.line("created_by", deref(r.CreatedBy))
	k.line("cancelled_by", deref(r.CancelledBy))
	k.line("resumed_by", deref(r.ResumedBy))
	k.line("last_event", fmt.Sprint(r.LastEventSeq))
	k.line("error", errorText(r.Error))
	if ra := r.RequiredAction; ra != nil && r.Status == agentd.StatusRequiresAction {
		k.line("waits_for", waitText(ra))
		k.line("tool_call", ra.ToolCallID)
		k.line("answer_with", strings.Join(answerCommands(r.ID, ra), "\n"))
	}
	if r.OutputText != nil {
		k.line("output", *r.OutputText)
	}
	k.flush()
	return exitOK
}

// waitText says what a run in requires_action waits for.
func waitText(ra *client.RequiredAction) string {
	call := ra.Name
	if args := compactJSON(ra.Arguments); args != "" {
		call += " " + args
	}
	switch ra.Type {
	case agentd.ActionToolApproval:
		return "approval of " + call
	case agentd.ActionToolOutcomeUnknown:
		return "a decision on " + call + ", whose outcome is unknown (did it happen?)"
	}
	return string(ra.Type) + " of " + call
}

// answerCommands are the agentctl commands that answer ra, a required
// action of run runID.
func answerCommands(runID string, ra *client.RequiredAction) []string {
	switch ra.Type {
	case agentd.ActionToolApproval:
		return []string{
			"agentctl actions approve " + runID,
			"agentctl actions reject " + runID + " -error 'WHY'",
		}
	case agentd.ActionToolOutcomeUnknown:
		return []string{
			"agentctl actions result " + runID + " 'RESULT_JSON'   (it happened)",
			"agentctl actions retry " + runID + "                  (it did not: attempt it again)",
			"agentctl actions fail " + runID + " -error 'WHY'      (give up)",
		}
	}
	return []string{"agentctl actions DECISION " + runID}
}

// printRuns writes a page of runs as a table.
func (a *app) printRuns(p *client.Page[client.Run]) int {
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "STATUS", "REASON", "MODEL", "STEPS", "CREATED", "CONVERSATION")
	for _, r := range p.Data {
		row(tw, r.ID, string(r.Status), deref(r.TerminalReason), r.Model, itoa(r.StepCount), when(&r.CreatedAt), r.ConversationID)
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// printNext says where the next page starts, when there is one.
func (a *app) printNext(more bool, cursor *string) {
	if more && cursor != nil {
		fmt.Fprintf(a.stdout, "\nmore: -cursor %s\n", *cursor)
	}
}

// printSteps writes a run's steps, each followed by its tool calls and
// their attempts, as one table.
func (a *app) printSteps(steps []client.Step) int {
	if a.json {
		return a.printJSON(struct {
			Data []client.Step `json:"data"`
		}{steps})
	}
	tw := newTable(a.stdout)
	row(tw, "STEP", "KIND", "ID", "NAME", "STATUS", "TOOK", "DETAIL")
	for _, s := range steps {
		var detail []string
		if s.FinishReason != nil {
			detail = append(detail, "finish "+string(*s.FinishReason))
		}
		if s.Transition != nil && *s.Transition != "" {
			detail = append(detail, "after "+string(*s.Transition))
		}
		detail = append(detail, fmt.Sprintf("model attempts %d", s.ModelAttempts), "tokens "+usageLine(s.Usage))
		if e := errorText(s.Error); e != "" {
			detail = append(detail, "error "+e)
		}
		row(tw, itoa(s.Seq), "step", s.ID, "", string(s.Status), took(&s.StartedAt, s.FinishedAt), strings.Join(detail, "; "))
		for _, c := range s.ToolCalls {
			d := shorten(compactJSON(c.Arguments), 60)
			if res := compactJSON(c.Result); res != "" {
				d += " → " + shorten(res, 60)
			}
			if e := errorText(c.Error); e != "" {
				d += " → " + shorten(e, 80)
			}
			row(tw, itoa(s.Seq), "  call", c.ID, c.Name, string(c.Status), took(&c.CreatedAt, c.FinishedAt), d)
			for _, at := range c.AttemptLog {
				d := "worker " + at.Worker
				if e := errorText(at.Error); e != "" {
					d += "; " + shorten(e, 80)
				}
				row(tw, itoa(s.Seq), "    attempt", itoa(at.N), c.Name, string(at.Status), took(&at.StartedAt, at.FinishedAt), d)
			}
		}
	}
	tw.Flush()
	return exitOK
}

// printConversation writes one conversation.
func (a *app) printConversation(c *client.Conversation) int {
	if a.json {
		return a.printJSON(c)
	}
	k := newKV(a.stdout)
	k.line("id", c.ID)
	k.line("title", c.Title)
	k.line("chat_id", deref(c.ChatID))
	k.line("metadata", compactJSON(c.Metadata))
	k.line("created", when(&c.CreatedAt))
	k.line("updated", when(&c.UpdatedAt))
	k.flush()
	return exitOK
}

// printMessages writes a page of messages as a table.
func (a *app) printMessages(p *client.Page[client.Message]) int {
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "SEQ", "ID", "ROLE", "STATUS", "RUN", "CONTENT")
	for _, m := range p.Data {
		status := string(m.Status)
		if !m.InContext {
			status += " (summarized)"
		}
		row(tw, itoa(m.Seq), m.ID, string(m.Role), status, deref(m.RunID), shorten(partsText(m.Content), 80))
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// partsText says what a message's parts hold: its text, its tool calls and
// their results.
func partsText(parts []client.Part) string {
	var out []string
	for _, p := range parts {
		switch p.Type {
		case agentd.PartText:
			out = append(out, p.Text)
		case agentd.PartToolCall:
			out = append(out, "→ "+p.Name+" "+p.Arguments)
		case agentd.PartToolResult:
			s := "← " + p.Content
			if p.IsError {
				s = "← error " + p.Content
			}
			out = append(out, s)
		default:
			out = append(out, "["+string(p.Type)+"]")
		}
	}
	return strings.Join(out, " ")
}

// printTools writes the tools as a table.
func (a *app) printTools(tools []client.Tool) int {
	if a.json {
		return a.printJSON(struct {
			Data []client.Tool `json:"data"`
		}{tools})
	}
	tw := newTable(a.stdout)
	row(tw, "NAME", "OWNER", "EFFECT", "APPROVAL", "TIMEOUT", "DESCRIPTION")
	for _, t := range tools {
		approval := "no"
		if t.NeedsApproval {
			approval = "needed"
		}
		timeout := "run's"
		if t.TimeoutMS != nil {
			timeout = (time.Duration(*t.TimeoutMS) * time.Millisecond).String()
		}
		owner := "server"
		if t.Tenant {
			owner = "tenant"
		}
		row(tw, t.Name, owner, string(t.Effect), approval, timeout, shorten(t.Description, 80))
	}
	tw.Flush()
	return exitOK
}
