package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/compose"
)

// capture fills case c, which names run fromRun (and atStep; nil: the
// run's last completed step), with what it copies of the run: the
// conversation up to the end of the step as a fork of the run would have
// it for input (recorded), its images and files with their bytes, the
// calls the run made after the step with their results, and the run's
// variables and user unless the case gives its own. The case then works
// after the run is deleted. prefix names the case in errors.
func (s *server) capture(r *http.Request, c *agentd.DatasetCase, fromRun string, atStep *int, prefix string) error {
	ctx := r.Context()
	field := fieldAt(prefix, "from_run")
	if cl, _ := ctx.Value(keyCaller).(*caller); cl == nil || !cl.Has(auth.RunsRead) {
		return newError(http.StatusForbidden, CodeInsufficientScope, "Insufficient scope",
			field+" copies a run's conversation into the dataset: it needs the "+string(auth.RunsRead)+" scope too")
	}
	id, err := uuid.Parse(fromRun)
	if err != nil {
		return fieldError(field, "must be the id of a run of the tenant's")
	}
	run, err := s.store.RunGet(ctx, TenantFromContext(ctx), id.String())
	if errors.Is(err, agentd.ErrRunNotFound) {
		e := *errRunNotFound
		e.field = field
		return &e
	}
	if err != nil {
		return err
	}
	step := -1
	if atStep != nil {
		if *atStep < 0 || *atStep > run.StepCount {
			return fieldError(fieldAt(prefix, "at_step"), "must be 0 (the run's input) or a step of the run, up to %d", run.StepCount)
		}
		step = *atStep
	}
	rec, err := s.recorded(ctx, run, step)
	if err != nil {
		return under(err, prefix)
	}
	if len(rec.msgs) == 0 {
		return fieldError(field, "the run's conversation holds no completed message up to step %d: nothing to start from", rec.step)
	}
	if rec.answered && isNull(c.Input) {
		return fieldError(fieldAt(prefix, "input"), "is required: step %d ended the run with its answer, so the case needs a "+
			"message to follow it; or give at_step 0 to start from the run's input, or an earlier step", rec.step)
	}
	calls, err := s.laterCalls(ctx, run, rec)
	if err != nil {
		return err
	}
	msgs, err := s.recordedMessages(ctx, rec.msgs, s.fileRoom(rec.msgs, calls, len(c.Input)))
	if err != nil {
		return err
	}
	in, err := compose.RecordedInput(msgs, "recorded.messages")
	if err == nil {
		err = s.compose.CheckInput(in, false, "recorded.messages")
	}
	if err != nil {
		return fieldError(field, "the run's conversation up to step %d is not an input a run can start from (%v)", rec.step, err)
	}
	c.FromRun, c.AtStep = run.ID, &rec.step
	c.Recorded = &agentd.Recorded{Agent: run.Params.Agent, Model: run.Model, AsOf: rec.base.UTC(), Messages: msgs, Calls: calls}
	if c.Variables == nil {
		c.Variables = maps.Clone(run.Params.Variables)
	}
	if c.User == "" {
		c.User = run.Params.User
	}
	return nil
}

// fileRoom is how many bytes of images and files a case whose recorded
// messages are msgs may copy, as their base64 within the bytes a case may
// hold besides its text (and the server's cap of a run's files).
func (s *server) fileRoom(msgs []agentd.Message, calls []agentd.RecordedCall, input int) int64 {
	text := int64(input) + 4096
	for _, m := range msgs {
		for _, p := range m.Content {
			text += int64(len(p.Text) + len(p.Content) + len(p.Arguments) + len(p.URL) + 64)
		}
	}
	for _, c := range calls {
		text += int64(len(c.Arguments) + len(c.Result) + 64)
	}
	room := (int64(s.datasets.BytesPerCase) - text) * 3 / 4
	return max(0, min(room, s.compose.Defaults().MaxInputFilesBytes))
}

// recordedMessages is msgs as a case keeps them: as a fork's input would
// have them (inputOf), with the bytes of their images and files within
// room (forkFiles: an older one past it is a text that names it), and
// whether each tool result was an error.
func (s *server) recordedMessages(ctx context.Context, msgs []agentd.Message, room int64) ([]agentd.CaseMessage, error) {
	files, err := s.forkFiles(ctx, msgs, room)
	if err != nil {
		return nil, err
	}
	var out []agentd.CaseMessage
	for _, m := range msgs {
		failed := map[string]bool{}
		for _, p := range m.Content {
			if p.Type == agentd.PartToolResult && p.IsError {
				failed[p.ToolCallID] = true
			}
		}
		for _, cm := range compose.CaseMessages(inputOf(m, files)) {
			cm.IsError = cm.Role == agentd.RoleTool && failed[cm.ToolCallID]
			out = append(out, cm)
		}
	}
	return out, nil
}

// laterCalls reads the tool calls the run made after the step rec ends
// with, each with the result its model was given (a call without one is
// left out), numbering the steps by the run's answers after it.
func (s *server) laterCalls(ctx context.Context, run agentd.Run, rec recording) ([]agentd.RecordedCall, error) {
	after := 0
	if n := len(rec.msgs); n > 0 {
		after = rec.msgs[n-1].Seq
	}
	var out []agentd.RecordedCall
	answered := map[int]bool{}
	open := map[string]int{} // the calls of the latest answer, by id, to their place in out
	step, seen := rec.step, false
	err := s.completedMessages(ctx, run.ConversationID, after, func(m agentd.Message) bool {
		if m.RunID != run.ID {
			return !seen // the run's messages are contiguous: another's after them ends them
		}
		seen = true
		if m.Role == agentd.RoleAssistant {
			step++
			clear(open)
		}
		for _, p := range m.Content {
			switch i, ok := open[p.ToolCallID]; {
			case p.Type == agentd.PartToolCall:
				open[p.ID] = len(out)
				out = append(out, agentd.RecordedCall{Step: step, Tool: p.Name, Arguments: p.Arguments})
			case p.Type == agentd.PartToolResult && ok:
				out[i].Result, out[i].IsError, answered[i] = p.Content, p.IsError, true
			}
		}
		return true
	})
	kept := []agentd.RecordedCall{}
	for i, c := range out {
		if answered[i] {
			kept = append(kept, c)
		}
	}
	return kept, err
}

// under is err with the field it names put under prefix: a case's place
// in a list.
func under(err error, prefix string) error {
	var ae *apiError
	if prefix == "" || !errors.As(err, &ae) || ae.field == "" {
		return err
	}
	cp := *ae
	cp.field = prefix + "." + ae.field
	if rest, ok := strings.CutPrefix(ae.detail, ae.field+": "); ok {
		cp.detail = fmt.Sprintf("%s: %s", cp.field, rest)
	}
	return &cp
}
