package responses

import (
	"bytes"
	"net/http"

	"github.com/agentd/agentd"
)

// Encoder writes a run's events as a response's stream: the events of the
// Responses API, each with its sequence_number, framed as Server-Sent
// Events (event: and data: lines; data: [DONE] after the last). It implements
// stream.Encoder. The stream ends after the response's last event
// (response.completed, .incomplete, .failed or .cancelled).
type Encoder struct {
	b     *Builder
	after int // events numbered up to this one are not written
	buf   bytes.Buffer
}

// NewEncoder returns the encoder of run's stream, which writes the events
// numbered after startingAfter (-1: all of them). The stream is derived
// from the run's events from the first: the stream read from agentd must
// start there.
func NewEncoder(run agentd.Run, startingAfter int) *Encoder {
	e := &Encoder{after: startingAfter}
	e.b = NewBuilder(run, func(typ string, v map[string]any) {
		if n, _ := v["sequence_number"].(int); n > e.after {
			sseEvent(&e.buf, typ, v)
		}
	})
	return e
}

// Start sets the headers of an event stream.
func (e *Encoder) Start(h http.Header) []byte {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	return nil
}

// Heartbeat is an SSE comment, which clients skip.
func (e *Encoder) Heartbeat() []byte { return []byte(": keep-alive\n\n") }

// Event writes the stream events of ev.
func (e *Encoder) Event(ev agentd.Event, followed bool) ([]byte, bool) {
	e.buf.Reset()
	e.b.Add(ev)
	if e.b.Ended() {
		// The Open Responses specification ends a stream so; OpenAI's SDKs
		// stop there too.
		e.buf.WriteString("data: [DONE]\n\n")
	}
	return bytes.Clone(e.buf.Bytes()), e.b.Ended()
}
