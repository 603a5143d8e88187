package aisdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentd/agentd"
)

// HeaderStream marks a response as a UI message stream.
const HeaderStream = "x-vercel-ai-ui-message-stream"

// done is the stream's last line.
var done = []byte("data: [DONE]\n\n")

// Encoder writes one run's events as a UI message stream: the run is one
// assistant message, whose id is the run's id; each step is a step of it.
// It implements stream.Encoder. The stream ends after the run's terminal
// event, or when the run stops to wait for a client (requires_action)
// with nothing after it yet: the chat then shows what it waits for, and the
// client's answer (a new chat request) continues the same message.
type Encoder struct {
	runID   string
	started bool // the start chunk was written
	step    int  // the step whose start-step was written last
	text    string
	texts   int  // text parts of the run so far, for their ids
	said    bool // the step streamed text since it started (or was retracted)
	buf     bytes.Buffer
}

// NewEncoder returns the encoder of a stream of run runID.
func NewEncoder(runID string) *Encoder { return &Encoder{runID: runID} }

// Start sets the headers of a UI message stream.
func (e *Encoder) Start(h http.Header) []byte {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set(HeaderStream, "v1")
	return nil
}

// Heartbeat is an SSE comment: the AI SDK's parser skips it.
func (e *Encoder) Heartbeat() []byte { return []byte(": keep-alive\n\n") }

// Event writes the chunks of ev: the domain decodes its data into the
// struct of its type, and each chunk comes from that. An event of a type
// this build does not know (or whose data does not decode) adds no chunk
// of its own.
func (e *Encoder) Event(ev agentd.Event, followed bool) ([]byte, bool) {
	e.buf.Reset()
	env, err := ev.Decode()
	if err != nil {
		return nil, false // not an event of agentd's: nothing to show
	}
	if !e.started {
		e.started = true
		e.chunk(map[string]any{"type": "start", "messageId": e.runID, "messageMetadata": map[string]any{"run_id": e.runID}})
	}
	end := false
	if p, err := env.Payload(); err == nil {
		end = e.payload(env, p, followed)
	}
	return bytes.Clone(e.buf.Bytes()), end
}

// payload writes the chunks of the event env, whose data is p; it reports
// whether the stream ends with it.
func (e *Encoder) payload(env agentd.Envelope, p agentd.Payload, followed bool) bool {
	switch d := p.(type) {
	case agentd.StepStartedData:
		e.closeText()
		e.startStep(env.Step)
	case agentd.MessageDeltaData:
		if d.Text != "" {
			e.startStep(env.Step)
			e.openText()
			e.said = true
			e.chunk(map[string]any{"type": "text-delta", "id": e.text, "delta": d.Text})
		}
	case agentd.MessageCompletedData:
		if t := agentd.TextOf(d.Content); t != "" && !e.said && e.text == "" {
			// Not streamed: the whole text at once.
			e.startStep(env.Step)
			e.openText()
			e.chunk(map[string]any{"type": "text-delta", "id": e.text, "delta": t})
		}
		e.closeText()
	case agentd.ToolCallCreatedData:
		e.closeText()
		e.startStep(env.Step)
		e.chunk(map[string]any{"type": "tool-input-available", "toolCallId": d.ToolCallID, "toolName": d.Name,
			"input": rawOrNull(d.Arguments), "dynamic": true})
	case agentd.ToolCallApprovedData:
		e.chunk(map[string]any{"type": "tool-approval-response", "approvalId": d.ToolCallID, "approved": true})
	case agentd.ToolCallCompletedData:
		e.toolOutput(d)
	case agentd.StepCompletedData:
		e.closeText()
		e.chunk(map[string]any{"type": "finish-step"})
	case agentd.StepRetractedData:
		// What the step streamed is withdrawn: the text comes again.
		e.text, e.said = "", false
		e.chunk(map[string]any{"type": "reset-step"})
	case agentd.RunRequiresActionData:
		return e.requiresAction(d.RequiredAction, followed)
	case agentd.RunEndedData:
		if !followed {
			e.end(env.Type, d)
			return true
		}
	}
	return false
}

// toolOutput writes a tool call's outcome.
func (e *Encoder) toolOutput(d agentd.ToolCallCompletedData) {
	switch d.Status {
	case agentd.CallSucceeded:
		e.chunk(map[string]any{"type": "tool-output-available", "toolCallId": d.ToolCallID, "output": rawOrNull(d.Result), "dynamic": true})
	case agentd.CallRejected:
		e.chunk(map[string]any{"type": "tool-output-denied", "toolCallId": d.ToolCallID})
	default:
		msg := "the tool call failed"
		if d.Error != nil && d.Error.Message != "" {
			msg = d.Error.Message
		}
		e.chunk(map[string]any{"type": "tool-output-error", "toolCallId": d.ToolCallID, "errorText": msg, "dynamic": true})
	}
}

// requiresAction writes what the run waits for: an approval request, and,
// when no event follows yet, the message's finish; it reports whether the
// stream ends here.
func (e *Encoder) requiresAction(a agentd.RequiredAction, followed bool) bool {
	if a.Type == agentd.ActionToolApproval {
		e.chunk(map[string]any{"type": "tool-approval-request", "approvalId": a.ToolCallID, "toolCallId": a.ToolCallID})
	}
	if followed {
		return false
	}
	e.closeText()
	e.chunk(map[string]any{"type": "finish", "finishReason": "tool-calls", "messageMetadata": map[string]any{
		"run_id": e.runID, "status": agentd.StatusRequiresAction, "required_action": a}})
	e.buf.Write(done)
	return true
}

// end writes the run's end, of type t: its error or abort, and the
// message's finish.
func (e *Encoder) end(t agentd.EventType, d agentd.RunEndedData) {
	e.closeText()
	switch t {
	case agentd.EventRunFailed, agentd.EventRunTimedOut:
		msg := fmt.Sprintf("the run ended %s (%s)", d.Status, d.Reason)
		if d.Error != nil && d.Error.Message != "" {
			msg = d.Error.Message
		}
		e.chunk(map[string]any{"type": "error", "errorText": msg})
	case agentd.EventRunCancelled:
		e.chunk(map[string]any{"type": "abort", "reason": string(d.Reason)})
	}
	meta := map[string]any{"run_id": e.runID, "status": d.Status, "reason": d.Reason}
	e.chunk(map[string]any{"type": "finish", "finishReason": finishReason(t, d.Reason), "messageMetadata": meta})
	e.buf.Write(done)
}

// finishReason is the AI SDK's name for how a run ended.
func finishReason(t agentd.EventType, r agentd.Reason) string {
	switch t {
	case agentd.EventRunCompleted:
		if r == agentd.ReasonMaxOutputTokens || r == agentd.ReasonMaxSteps {
			return "length"
		}
		return "stop"
	case agentd.EventRunFailed:
		if r == agentd.ReasonContentFilter {
			return "content-filter"
		}
		return "error"
	case agentd.EventRunTimedOut:
		return "error"
	case agentd.EventRunInterrupted:
		return "interrupted"
	}
	return "other"
}

func (e *Encoder) startStep(step int) {
	if step > e.step {
		e.step, e.said = step, false
		e.chunk(map[string]any{"type": "start-step"})
	}
}

func (e *Encoder) openText() {
	if e.text == "" {
		e.texts++
		e.text = fmt.Sprintf("%s-t%d", e.runID, e.texts)
		e.chunk(map[string]any{"type": "text-start", "id": e.text})
	}
}

func (e *Encoder) closeText() {
	if e.text != "" {
		e.chunk(map[string]any{"type": "text-end", "id": e.text})
		e.text = ""
	}
}

// chunk appends one chunk as an SSE data line.
func (e *Encoder) chunk(c map[string]any) {
	b, err := json.Marshal(c)
	if err != nil {
		return // cannot happen: maps of JSON values
	}
	e.buf.WriteString("data: ")
	e.buf.Write(b)
	e.buf.WriteString("\n\n")
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
