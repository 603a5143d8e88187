package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// actionRequest is the body of POST /runs/{id}/actions: a client's decision
// on the tool call a requires_action run asks about: whether a call that
// needs approval may run, or what became of a side effect whose outcome is
// unknown.
type actionRequest struct {
	// Type tool_outputs answers client tool calls with Outputs; absent,
	// the request is a decision.
	Type       *string         `json:"type"`
	Outputs    []toolOutput    `json:"outputs"`
	ToolCallID *string         `json:"tool_call_id"`
	CallID     *string         `json:"call_id"`
	Decision   *string         `json:"decision"`
	Result     json.RawMessage `json:"result"`
	Error      *string         `json:"error"`
}

func (s *server) runAction(w http.ResponseWriter, r *http.Request) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req actionRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	if req.Type != nil || req.Outputs != nil {
		return s.toolOutputs(w, r, id, req)
	}
	toolCallID, callID, err := actionCall(req)
	if err != nil {
		return err
	}
	if req.Decision == nil {
		return fieldError("decision", "is required: approve or reject (an approval); result, retry or fail (an unknown outcome)")
	}
	decision, err := oneOf("decision", req.Decision, agentd.Decisions())
	if err != nil {
		return err
	}
	p := agentd.ActionParams{TenantID: TenantFromContext(r.Context()), RunID: id, ToolCallID: toolCallID, CallID: callID,
		Decision: decision, Actor: ActorFromContext(r.Context())}
	if err := actionOutcome(req, &p); err != nil {
		return err
	}
	return s.resolve(w, r, p)
}

// actionCall names the call an action decides: agentd's id of it, or the
// model's.
func actionCall(req actionRequest) (toolCallID, callID string, err error) {
	switch {
	case req.ToolCallID == nil && req.CallID == nil:
		return "", "", fieldError("tool_call_id", "is required: the tool_call_id of the run's required_action (or send its call_id)")
	case req.ToolCallID != nil && uuid.Validate(*req.ToolCallID) != nil:
		return "", "", fieldError("tool_call_id", "must be agentd's id of the tool call, a UUID (required_action.tool_call_id), not %q; "+
			"to name the call by the model's id, send it as call_id (required_action.call_id)", clip(*req.ToolCallID, 64))
	case req.CallID != nil && (*req.CallID == "" || len(*req.CallID) > 256):
		return "", "", fieldError("call_id", "must be the model's id of the tool call (required_action.call_id): 1 to 256 bytes")
	}
	if req.ToolCallID != nil {
		toolCallID = *req.ToolCallID
	}
	if req.CallID != nil {
		if err := storable("call_id", *req.CallID); err != nil {
			return "", "", err
		}
		callID = *req.CallID
	}
	return toolCallID, callID, nil
}

// actionOutcome checks the result and the error an action carries against
// its decision, and sets them on p.
func actionOutcome(req actionRequest, p *agentd.ActionParams) error {
	switch p.Decision {
	case agentd.DecisionResult:
		if len(req.Result) == 0 {
			return fieldError("result", "is required with decision result: the tool's result as JSON")
		}
		if err := storableJSON("result", req.Result); err != nil {
			return err
		}
		// As a tool's own result would be: over the default limit, it is
		// kept whole as an artifact and the model sees a preview.
		p.Result, p.Artifact = tools.Offload(req.Result, tools.DefaultMaxResultBytes, uuid.NewString())
	default:
		if len(req.Result) > 0 {
			return fieldError("result", "is only allowed with decision result")
		}
	}
	if req.Error != nil {
		if p.Decision != agentd.DecisionFail && p.Decision != agentd.DecisionReject {
			return fieldError("error", "is only allowed with decision fail or reject")
		}
		if len(*req.Error) > 4096 {
			return fieldError("error", "must be at most 4096 bytes")
		}
		if err := storable("error", *req.Error); err != nil {
			return err
		}
		p.Message = *req.Error
	}
	return nil
}

// clip cuts s to at most n bytes (on a rune boundary), for echoing a value
// back in an error.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// toolOutput is one element of a tool_outputs action's outputs.
type toolOutput struct {
	ToolCallID *string         `json:"tool_call_id"`
	Output     json.RawMessage `json:"output"`
	Error      *string         `json:"error"`
}

// maxOutputs caps the outputs of one tool_outputs action.
const maxOutputs = 128

// toolOutputs answers a run's client tool calls (required_action type
// client_tool_calls): every call's output, or the error the model is told.
func (s *server) toolOutputs(w http.ResponseWriter, r *http.Request, runID string, req actionRequest) error {
	if req.Type == nil || *req.Type != "tool_outputs" {
		return fieldError("type", "must be tool_outputs (with outputs), or absent for a decision")
	}
	if req.ToolCallID != nil || req.CallID != nil || req.Decision != nil || req.Result != nil || req.Error != nil {
		return fieldError("type", "tool_outputs takes outputs only: one {tool_call_id, output | error} per client tool call")
	}
	if len(req.Outputs) == 0 || len(req.Outputs) > maxOutputs {
		return fieldError("outputs", "must hold 1 to %d outputs: one per client tool call the run waits for", maxOutputs)
	}
	p := agentd.ActionParams{TenantID: TenantFromContext(r.Context()), RunID: runID, Decision: agentd.DecisionOutputs,
		Actor: ActorFromContext(r.Context())}
	seen := map[string]bool{}
	for i, o := range req.Outputs {
		field := func(name string) string { return fmt.Sprintf("outputs[%d].%s", i, name) }
		if o.ToolCallID == nil || uuid.Validate(*o.ToolCallID) != nil {
			return fieldError(field("tool_call_id"), "must be the tool_call_id of one of required_action.calls, a UUID")
		}
		id := uuid.MustParse(*o.ToolCallID).String()
		if seen[id] {
			return fieldError(field("tool_call_id"), "names a call already answered in outputs")
		}
		seen[id] = true
		out := agentd.ToolOutput{ToolCallID: id}
		switch {
		case (len(o.Output) > 0) == (o.Error != nil):
			return fieldError(field("output"), "give either output (the tool's result, JSON) or error (what the model is told)")
		case o.Error != nil:
			if *o.Error == "" || len(*o.Error) > 4096 {
				return fieldError(field("error"), "must be 1 to 4096 bytes")
			}
			if err := storable(field("error"), *o.Error); err != nil {
				return err
			}
			out.Error = *o.Error
		default:
			if err := storableJSON(field("output"), o.Output); err != nil {
				return err
			}
			out.Output, out.Artifact = tools.Offload(o.Output, tools.DefaultMaxResultBytes, uuid.NewString())
		}
		p.Outputs = append(p.Outputs, out)
	}
	return s.resolve(w, r, p)
}

// resolve records decision p and answers with the run's view. On a run
// that waits for its sub-agents, the decision goes to the descendant that
// waits for it (delegate), and the answer is still the run's own view.
func (s *server) resolve(w http.ResponseWriter, r *http.Request, p agentd.ActionParams) error {
	ctx := r.Context()
	on, err := s.delegate(ctx, p)
	if err != nil {
		return err
	}
	run, err := s.runs.ResolveAction(ctx, on)
	if err == nil && on.RunID != p.RunID {
		run, err = s.store.RunGet(ctx, p.TenantID, p.RunID)
	}
	if err != nil {
		return err
	}
	v, err := s.viewWithChildren(ctx, run)
	if err == nil {
		err = s.withCosts(ctx, &v) // the run's cost by the ledger, as GET /runs/{id} shows it
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}
