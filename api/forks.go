package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// forkRequest is the body of POST /runs/{id}/fork.
type forkRequest struct {
	AtStep       *int            `json:"at_step"`
	Input        json.RawMessage `json:"input"`
	Model        *string         `json:"model"`
	AgentVersion *int            `json:"agent_version"`
	Metadata     json.RawMessage `json:"metadata"`
	Stream       *bool           `json:"stream"`
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
	input, err := s.forkInput(ctx, orig, *req.AtStep, req.Input)
	if err != nil {
		return err
	}
	spec, err := s.forkSpec(ctx, orig, req.Model, req.AgentVersion, req.Metadata, input)
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
// agentVersion, that version of its agent's, filled with the run's
// variables), its model unless model names another, and its metadata
// unless metadata is given.
func (s *server) forkSpec(ctx context.Context, orig agentd.Run, model *string, agentVersion *int, metadata json.RawMessage,
	input []agentd.InputMessage) (agentd.RunSpec, error) {
	sr := runspec.RequestOf(orig.Model, orig.Params)
	if agentVersion != nil {
		if orig.Params.Agent == nil {
			return agentd.RunSpec{}, fieldError("agent_version", "the run was not started from an agent")
		}
		var err error
		if sr, err = s.withAgent(ctx, runspec.Request{Variables: orig.Params.Variables},
			agentFields{Agent: &orig.Params.Agent.Name, AgentVersion: agentVersion}); err != nil {
			return agentd.RunSpec{}, err
		}
	}
	if model != nil {
		sr.Model = model
	}
	if !isNull(metadata) {
		sr.Metadata = metadata
	}
	sr.Input = input
	spec, err := s.build(ctx, sr)
	if err != nil {
		return spec, err
	}
	if agentVersion == nil {
		spec.Params.Agent, spec.Params.Variables = orig.Params.Agent, orig.Params.Variables
	}
	return spec, nil
}

// forkInput is a fork's input: the messages of the run's conversation up
// to the end of step atStep, then the messages of input (raw, as POST
// /runs takes it; nothing: none, which a step that ended with an answer
// does not allow).
func (s *server) forkInput(ctx context.Context, orig agentd.Run, atStep int, raw json.RawMessage) ([]agentd.InputMessage, error) {
	steps, err := s.store.StepsList(ctx, orig.ID)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(steps, func(st agentd.StepDetail) bool { return st.Seq == atStep })
	if i < 0 || steps[i].Status != agentd.StepCompleted {
		return nil, fieldError("at_step", "step %d of the run is not completed: a fork starts after a completed step", atStep)
	}
	calls := map[string]bool{}
	for _, c := range steps[i].Calls {
		calls[c.CallID] = true
	}
	msgs, err := s.forkMessages(ctx, orig, atStep, calls)
	if err != nil {
		return nil, err
	}
	if isNull(raw) {
		if len(calls) == 0 {
			return nil, fieldError("input", "is required: step %d ended the run with its answer, so the fork needs a new message", atStep)
		}
		return msgs, nil
	}
	more, _, err := parseInput(raw)
	if err != nil {
		return nil, err
	}
	return append(msgs, more...), nil
}

// forkMessages reads the run's conversation up to the end of step atStep,
// as input messages: every completed message before the run's, then the
// run's through the results of that step's calls, or, for a step without
// calls (the run's answer), through its atStep-th answer.
func (s *server) forkMessages(ctx context.Context, orig agentd.Run, atStep int, calls map[string]bool) ([]agentd.InputMessage, error) {
	var out []agentd.InputMessage
	waiting := maps.Clone(calls) // the step's calls whose results are still to come
	answers := 0                 // the run's assistant messages so far
	for after := 0; ; {
		page, err := s.store.MessagesList(ctx, orig.ConversationID, after, forkPage)
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			after = m.Seq
			if m.Status != agentd.MessageCompleted {
				continue
			}
			out = append(out, inputOf(m)...)
			if m.RunID != orig.ID {
				continue
			}
			for _, p := range m.Content {
				if p.Type == agentd.PartToolResult {
					delete(waiting, p.ToolCallID)
				}
			}
			if m.Role == agentd.RoleAssistant {
				answers++
			}
			if (len(calls) > 0 && len(waiting) == 0) || (len(calls) == 0 && m.Role == agentd.RoleAssistant && answers == atStep) {
				return out, nil
			}
		}
		if len(page) < forkPage {
			return nil, fieldError("at_step", "the conversation does not hold the whole of step %d (its messages were deleted)", atStep)
		}
	}
}

// inputOf is a stored message as input messages: its text, its tool calls,
// and one message per tool result.
func inputOf(m agentd.Message) []agentd.InputMessage {
	in := agentd.InputMessage{Role: m.Role}
	var out []agentd.InputMessage
	for _, p := range m.Content {
		switch p.Type {
		case agentd.PartText:
			in.Content += p.Text
		case agentd.PartToolCall:
			in.ToolCalls = append(in.ToolCalls, agentd.InputCall{ID: p.ID, Name: p.Name, Arguments: p.Arguments})
		case agentd.PartToolResult:
			out = append(out, agentd.InputMessage{Role: agentd.RoleTool, ToolCallID: p.ToolCallID, Content: p.Content})
		}
	}
	if in.Content != "" || len(in.ToolCalls) > 0 {
		out = append([]agentd.InputMessage{in}, out...)
	}
	return out
}
