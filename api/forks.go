package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
)

// forkRequest is the body of POST /runs/{id}/fork.
type forkRequest struct {
	AtStep       *int            `json:"at_step"`
	Input        json.RawMessage `json:"input"`
	Model        *string         `json:"model"`
	AgentVersion *int            `json:"agent_version"`
	Metadata     json.RawMessage `json:"metadata"`
	Stream       *bool           `json:"stream"`
	// Variables, Instructions and Tools change the run's: its agent's
	// instructions filled again with other variables; instructions and
	// tools of the fork's own, as POST /runs takes them.
	Variables    map[string]string  `json:"variables"`
	Instructions *string            `json:"instructions"`
	Tools        *[]json.RawMessage `json:"tools"`
}

// forkPage is how many messages a fork reads at once.
const forkPage = 500

// runFork starts a new run in a new conversation whose input is the run's
// conversation up to the end of step at_step (its tool results as they were
// recorded: no tool runs again), then the request's input, with the run's
// parameters, or those of another version of its agent, and maybe another
// model.
func (s *server) runFork(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	key := r.Header.Get(HeaderIdempotencyKey)
	if key != "" && !validKey(key) {
		return fieldError(HeaderIdempotencyKey, "must be 1 to %d printable ASCII characters", maxKeyLen)
	}
	orig, err := s.runFor(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req forkRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	if req.AtStep == nil || *req.AtStep < 1 || *req.AtStep > orig.StepCount {
		return fieldError("at_step", "must be a step of the run, from 1 to %d", orig.StepCount)
	}
	input, copied, base, err := s.forkInput(ctx, orig, *req.AtStep, req.Input)
	if err != nil {
		return err
	}
	spec, err := s.forkSpec(ctx, orig, req, input, copied, base)
	if err != nil {
		return err
	}
	spec.Params.ForkedFrom = &agentd.ForkRef{RunID: orig.ID, Step: *req.AtStep}
	var fp string
	if key != "" {
		if fp, err = fingerprint(tenant, "POST /runs/"+orig.ID+"/fork", body); err != nil {
			return err
		}
	}
	stream := req.Stream != nil && *req.Stream
	done, err := s.streamSlot(w, tenant, stream)
	if err != nil {
		return err
	}
	defer done()
	return s.createAndAnswer(w, r, newRun(ctx, spec, key, fp), stream, 0, false, "")
}

// forkSpec builds a fork's spec: the run's parameters (or, with
// req.AgentVersion, that version of its agent's, filled with the run's
// variables), its model unless req.Model names another, and its metadata
// unless req.Metadata is given. Its input is input, whose first copied
// messages the run's conversation held; it reads memory as it was at base,
// when the forked step committed.
func (s *server) forkSpec(ctx context.Context, orig agentd.Run, req forkRequest, input []agentd.InputMessage,
	copied int, base time.Time) (agentd.RunSpec, error) {
	rc, err := s.compose.Fork(ctx, callerOf(ctx), orig, compose.Fork{AgentVersion: req.AgentVersion, Model: req.Model,
		Metadata: req.Metadata, Input: input, PartField: forkPartField(copied), Base: base, Variables: req.Variables,
		Override: compose.Fields{Instructions: req.Instructions, Tools: req.Tools}})
	return rc.Spec, err
}

// forkPartField names the parts of a fork's input messages in the errors
// about them (runspec.Request.PartField), the first copied of which the
// run's conversation held: those by "at_step", the step that copies them
// (a model that does not take their images is refused so); the
// request's own as POST /runs does, input[i].content[j].
func forkPartField(copied int) func(i, j int) string {
	return func(i, j int) string {
		switch {
		case i < copied:
			return "at_step"
		case j < 0:
			return fmt.Sprintf("input[%d].content", i-copied)
		}
		return fmt.Sprintf("input[%d].content[%d]", i-copied, j)
	}
}

// forkInput is a fork's input: the messages of the run's conversation up
// to the end of step atStep, with their images and files (forkFiles), then
// the messages of input (raw, as POST /runs takes it; nothing: none, which
// a step that ended with an answer does not allow). copied is how many
// of them the conversation held.
func (s *server) forkInput(ctx context.Context, orig agentd.Run, atStep int, raw json.RawMessage) (
	input []agentd.InputMessage, copied int, base time.Time, err error) {
	rec, err := s.recorded(ctx, orig, atStep)
	if err != nil {
		return nil, 0, base, err
	}
	var more []agentd.InputMessage
	switch {
	case !isNull(raw):
		if more, _, err = compose.ParseInput(raw); err != nil {
			return nil, 0, rec.base, err
		}
	case rec.answered:
		return nil, 0, rec.base, fieldError("input", "is required: step %d ended the run with its answer, so the fork needs a new message", atStep)
	}
	room := s.compose.Defaults().MaxInputFilesBytes
	for _, m := range more {
		for _, p := range m.Parts {
			room -= int64(len(p.Data))
		}
	}
	files, err := s.forkFiles(ctx, rec.msgs, room)
	if err != nil {
		return nil, 0, rec.base, err
	}
	for _, m := range rec.msgs {
		input = append(input, inputOf(m, files)...)
	}
	copied = len(input)
	return append(input, more...), copied, rec.base, nil
}

// recording is what a run's conversation holds up to the end of one of
// its steps, which a fork and a case captured from the run copy.
type recording struct {
	step int              // the step (0: before the run's first, after its input)
	msgs []agentd.Message // the conversation's completed messages up to its end
	// answered says that the step ended the run with its answer: what
	// starts after it needs a new message.
	answered bool
	base     time.Time // when the step committed (step 0: when the run was created)
}

// recorded reads the run's conversation up to the end of step atStep,
// which must be completed; step 0 is the conversation through the run's
// input, and a negative atStep the run's last completed step (0 when it
// has none).
func (s *server) recorded(ctx context.Context, orig agentd.Run, atStep int) (recording, error) {
	rec := recording{step: atStep, base: orig.CreatedAt}
	calls := map[string]bool{}
	if atStep != 0 {
		steps, err := s.store.StepsList(ctx, orig.ID)
		if err != nil {
			return rec, err
		}
		if atStep < 0 {
			rec.step = 0
			for _, st := range steps {
				if st.Status == agentd.StepCompleted {
					rec.step = max(rec.step, st.Seq)
				}
			}
		}
		if rec.step > 0 {
			i := slices.IndexFunc(steps, func(st agentd.StepDetail) bool { return st.Seq == rec.step })
			if i < 0 || steps[i].Status != agentd.StepCompleted {
				return rec, fieldError("at_step", "step %d of the run is not completed: what is copied ends with a completed step", rec.step)
			}
			if f := steps[i].FinishedAt; f != nil {
				rec.base = *f
			}
			for _, c := range steps[i].Calls {
				calls[c.CallID] = true
			}
			rec.answered = len(calls) == 0
		}
	}
	msgs, err := s.forkMessages(ctx, orig, rec.step, calls)
	rec.msgs = msgs
	return rec, err
}

// forkMessages reads the run's conversation up to the end of step atStep:
// every completed message before the run's, then the run's through the
// results of that step's calls, or, for a step without calls (the run's
// answer), through its atStep-th answer; for step 0, through the run's
// input (the messages before its first answer).
func (s *server) forkMessages(ctx context.Context, orig agentd.Run, atStep int, calls map[string]bool) ([]agentd.Message, error) {
	var out []agentd.Message
	waiting := maps.Clone(calls) // the step's calls whose results are still to come
	answers := 0                 // the run's assistant messages so far
	done := atStep == 0          // step 0 ends at the run's first answer, or at the conversation's end
	err := s.completedMessages(ctx, orig.ConversationID, 0, func(m agentd.Message) bool {
		if atStep == 0 && m.RunID == orig.ID && m.Role == agentd.RoleAssistant {
			return false
		}
		out = append(out, m)
		if m.RunID != orig.ID || atStep == 0 {
			return true
		}
		for _, p := range m.Content {
			if p.Type == agentd.PartToolResult {
				delete(waiting, p.ToolCallID)
			}
		}
		if m.Role == agentd.RoleAssistant {
			answers++
		}
		done = (len(calls) > 0 && len(waiting) == 0) || (len(calls) == 0 && m.Role == agentd.RoleAssistant && answers == atStep)
		return !done
	})
	switch {
	case err != nil:
		return nil, err
	case !done:
		return nil, fieldError("at_step", "the conversation does not hold the whole of step %d (its messages were deleted)", atStep)
	}
	return out, nil
}

// completedMessages calls f with each completed message of conversation
// conv after seq after in order, page by page, until f returns false.
func (s *server) completedMessages(ctx context.Context, conv string, after int, f func(agentd.Message) bool) error {
	for {
		page, err := s.store.MessagesList(ctx, conv, after, forkPage)
		if err != nil {
			return err
		}
		for _, m := range page {
			after = m.Seq
			if m.Status == agentd.MessageCompleted && !f(m) {
				return nil
			}
		}
		if len(page) < forkPage {
			return nil
		}
	}
}

// forkFiles loads the bytes of the images and files of the user messages
// msgs that a fork copies, by artifact id: the newest first, each whole,
// within room bytes in all and the server's cap of one. The fork's
// creation stores them again, as artifacts of the fork (an artifact is
// its run's, and goes with its conversation). An older one past room is
// left out, as a request of the run would leave it out (inputOf notes
// it); so is one whose artifact is gone.
func (s *server) forkFiles(ctx context.Context, msgs []agentd.Message, room int64) (map[string][]byte, error) {
	tenant, most := TenantFromContext(ctx), s.compose.Defaults().MaxInputFileBytes
	files := map[string][]byte{}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != agentd.RoleUser {
			continue
		}
		for _, p := range msgs[i].Content {
			if !p.Attached() || p.ArtifactID == "" || p.Size > most || p.Size > room {
				continue
			}
			a, err := s.store.ArtifactGet(ctx, tenant, msgs[i].RunID, p.ArtifactID)
			switch {
			case errors.Is(err, agentd.ErrArtifactNotFound):
				continue
			case err != nil:
				return nil, err
			}
			files[p.ArtifactID] = a.Content
			room -= int64(len(a.Content))
		}
	}
	return files, nil
}

// inputOf is a stored message as input messages: its text, its tool calls,
// and one message per tool result; a user message with images or files
// as its parts, whose bytes are those of files (forkFiles), an image by
// URL by its URL, and an image or a file without its bytes a text that
// names it.
func inputOf(m agentd.Message, files map[string][]byte) []agentd.InputMessage {
	in := agentd.InputMessage{Role: m.Role}
	attached := m.Role == agentd.RoleUser && slices.ContainsFunc(m.Content, agentd.Part.Attached)
	var out []agentd.InputMessage
	for _, p := range m.Content {
		switch {
		case attached && (p.Type == agentd.PartText || p.Attached()):
			in.Parts = append(in.Parts, inputPartOf(p, files))
		case p.Type == agentd.PartText:
			in.Content += p.Text
		case p.Type == agentd.PartToolCall:
			in.ToolCalls = append(in.ToolCalls, agentd.InputCall{ID: p.ID, Name: p.Name, Arguments: p.Arguments})
		case p.Type == agentd.PartToolResult:
			out = append(out, agentd.InputMessage{Role: agentd.RoleTool, ToolCallID: p.ToolCallID, Content: p.Content})
		}
	}
	if in.Content != "" || len(in.Parts) > 0 || len(in.ToolCalls) > 0 {
		out = append([]agentd.InputMessage{in}, out...)
	}
	return out
}

// inputPartOf is a text, image or file part of a stored message as a part
// of an input message (see inputOf).
func inputPartOf(p agentd.Part, files map[string][]byte) agentd.InputPart {
	switch {
	case p.Type == agentd.PartText:
		return agentd.InputPart{Type: agentd.PartText, Text: p.Text}
	case p.Type == agentd.PartImage && p.ArtifactID == "":
		return agentd.InputPart{Type: agentd.PartImage, URL: p.URL, Detail: p.Detail, Filename: p.Filename}
	}
	data, ok := files[p.ArtifactID]
	if !ok {
		what := string(p.Type)
		if p.Filename != "" {
			what += " " + p.Filename
		}
		return agentd.InputPart{Type: agentd.PartText, Text: fmt.Sprintf("[%s (%s, %d bytes) of the copied conversation "+
			"is left out: a copy (a fork, a dataset's case) keeps the newest images and files within its cap]", what, p.MediaType, p.Size)}
	}
	return agentd.InputPart{Type: p.Type, Data: data, MediaType: p.MediaType, Filename: p.Filename, Detail: p.Detail}
}
