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

// Encoder writes one run's events as a UI message stream: one answer of
// the run is one assistant message; each step is a step of it. It
// implements stream.Encoder. A run's answers are its turns: the first is
// the answer to the run's input, whose message id is the run's id; a user
// message a client sent while the run worked (an input of source client,
// POST /runs/{id}/input or a steering chat request) starts the next turn
// where it is applied (input.applied), whose message id is the id of the
// first such input applied there. So a chat reads the turns in the order
// the conversation holds them: its message, the answer so far, the message
// sent meanwhile, the answer to it.
//
// The stream is of one turn. It ends after the run's terminal event, at
// the start of the next turn (finish, the run going on), or when the run
// stops to wait for a client (requires_action) with nothing after it yet:
// the chat then shows what it waits for, and the client's answer (a new
// chat request) continues the same message.
type Encoder struct {
	runID string
	input string // the turn's input; "" the run's first answer
	quiet int64  // events up to this seq are read, not written
	id    string // the turn's message id, once it has begun
	turn  int    // the step its input was applied before; 0 the run's start
	on    bool   // the turn has begun
	write bool   // the event at hand is written

	client map[string]int            // the run's inputs from clients, and their n
	at     int                       // the step before which the last client input was applied
	first  string                    // the first client input applied there
	group  []agentd.InputAppliedData // the client inputs applied there

	started bool // the start chunk was written
	step    int  // the step whose start-step was written last
	text    string
	texts   int  // text parts of the run so far, for their ids
	said    bool // the step streamed text since it started (or was retracted)
	buf     bytes.Buffer
}

// NewEncoder returns the encoder of the stream of run runID's first
// answer, as a run's events from its first on make it.
func NewEncoder(runID string) *Encoder {
	return &Encoder{runID: runID, id: runID, on: true, client: map[string]int{}, at: -1}
}

// NewTurnEncoder returns the encoder of the stream of the answer of run
// runID to its input inputID ("": the run's first answer): that answer
// from where the input is applied, read from the run's first event on.
// Nothing is written for the events up to seq quiet: the stream goes on
// from there with the message of the answer under way then (the answer
// to a decision the run waited for goes on in the same message).
func NewTurnEncoder(runID, inputID string, quiet int64) *Encoder {
	e := NewEncoder(runID)
	if inputID != "" {
		e.input, e.id, e.on = inputID, "", false
	}
	e.quiet = quiet
	return e
}

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
	e.write = e.on && ev.Seq > e.quiet
	e.begin()
	end := false
	if p, err := env.Payload(); err == nil {
		end = e.payload(ev.Seq, env, p, followed)
	}
	return bytes.Clone(e.buf.Bytes()), end
}

// begin writes the start chunk, once, when the stream writes its first
// event.
func (e *Encoder) begin() {
	if !e.write || e.started {
		return
	}
	e.started = true
	e.text = "" // a text the stream did not open is none of its own
	meta := map[string]any{"run_id": e.runID}
	if e.id != e.runID {
		meta["input_id"] = e.id
	}
	e.chunk(map[string]any{"type": "start", "messageId": e.id, "messageMetadata": meta})
}

// enter begins the turn at the event of seq, whose message id is id,
// applied before step at.
func (e *Encoder) enter(seq int64, id string, at int) {
	e.on, e.id, e.turn = true, id, at
	e.step, e.text, e.said = max(at-1, 0), "", false
	e.write = seq > e.quiet
	e.begin()
}

// inputs follows the turns: it writes what becomes of the run's inputs
// from clients (data-input parts), begins the stream's turn, and reports
// whether the turn ends at ev (the next one begins).
func (e *Encoder) inputs(seq int64, env agentd.Envelope, p agentd.Payload) (ends bool) {
	switch d := p.(type) {
	case agentd.InputAcceptedData:
		if d.Source != agentd.InputFromClient {
			return false
		}
		e.client[d.InputID] = d.N
		e.inputPart(d.InputID, d.N, agentd.InputPending, "")
	case agentd.InputAppliedData:
		if _, ok := e.client[d.InputID]; !ok {
			return false
		}
		if env.Step != e.at {
			e.at, e.first, e.group = env.Step, d.InputID, nil
		}
		e.group = append(e.group, d)
		switch {
		case e.on && env.Step != e.turn && seq <= e.quiet:
			// A later turn, before the stream writes: it goes on there.
			e.enter(seq, e.first, env.Step)
		case e.on && env.Step != e.turn:
			e.inputPart(d.InputID, d.N, agentd.InputApplied, "")
			return true
		case !e.on && d.InputID == e.input:
			// The stream's turn: the inputs applied with its input are
			// what it answers.
			e.enter(seq, e.first, env.Step)
			for _, g := range e.group[:len(e.group)-1] {
				e.inputPart(g.InputID, g.N, agentd.InputApplied, "")
			}
		}
		e.inputPart(d.InputID, d.N, agentd.InputApplied, "")
	case agentd.InputUnappliedData:
		if _, ok := e.client[d.InputID]; !ok {
			return false
		}
		if !e.on && d.InputID == e.input {
			e.enter(seq, d.InputID, env.Step)
		}
		e.inputPart(d.InputID, d.N, agentd.InputUnapplied, d.Reason)
	}
	return false
}

// inputPart writes an input's data-input part: its id is the input's, so
// that what becomes of it replaces what was said before.
func (e *Encoder) inputPart(id string, n int, status agentd.InputStatus, reason agentd.Reason) {
	data := map[string]any{"input_id": id, "n": n, "status": status}
	if reason != "" {
		data["reason"] = reason
	}
	e.chunk(map[string]any{"type": "data-input", "id": id, "data": data})
}

// beforeTurn handles event p of seq, which comes before the turn the
// stream follows began: handled false when the turn begins with it (the
// run ended, or waits, before it took the input), ended when the stream
// ends with it.
func (e *Encoder) beforeTurn(seq int64, p agentd.Payload, followed bool) (ended, handled bool) {
	switch d := p.(type) {
	case agentd.RunEndedData:
		if followed {
			return false, true
		}
		e.enter(seq, e.input, 0) // the input was never applied
		return false, false
	case agentd.RunRequiresActionData:
		if followed {
			return false, true
		}
		// The run waits for a decision before it took the input: the
		// message ends, its input pending.
		e.enter(seq, e.input, 0)
		if n, ok := e.client[e.input]; ok {
			e.inputPart(e.input, n, agentd.InputPending, "")
		}
		e.chunk(map[string]any{"type": "finish", "finishReason": "other", "messageMetadata": map[string]any{
			"run_id": e.runID, "status": agentd.StatusRequiresAction, "required_action": d.RequiredAction}})
		e.buf.Write(done)
		return true, true
	}
	return false, true
}

// payload writes the chunks of the event of seq env, whose data is p; it
// reports whether the stream ends with it.
func (e *Encoder) payload(seq int64, env agentd.Envelope, p agentd.Payload, followed bool) bool {
	if e.inputs(seq, env, p) {
		// The next turn begins: this one is over, the run goes on.
		e.closeText()
		e.chunk(map[string]any{"type": "finish", "finishReason": "stop", "messageMetadata": map[string]any{
			"run_id": e.runID, "status": agentd.StatusRunning, "next_input_id": e.first}})
		e.buf.Write(done)
		return true
	}
	if !e.on {
		if ended, handled := e.beforeTurn(seq, p, followed); handled {
			return ended
		}
	}
	switch d := p.(type) {
	case agentd.StepStartedData:
		// Its start-step comes with its first output: a step that starts
		// as a message sent meanwhile is applied is the next answer's.
		e.closeText()
		e.said = false
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
	if !e.write {
		return false // read only: the stream goes on past it
	}
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

// chunk appends one chunk as an SSE data line, when the event at hand is
// written.
func (e *Encoder) chunk(c map[string]any) {
	if !e.write {
		return
	}
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
