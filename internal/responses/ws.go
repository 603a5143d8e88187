package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/agentd/agentd"
)

// WebSocket mode: the same stream events as the SSE stream, one JSON
// object per text frame, with the stream_id of the response.create that
// asked for them (OpenAI's lanes); and the input of a response.steer.

// WSEncoder writes a run's events as a response's stream over a
// WebSocket: each stream event is one line of JSON (the SSE stream's data,
// byte for byte but for stream_id), which the socket sends as one text
// frame. It implements stream.Encoder; the stream ends after the
// response's last event.
type WSEncoder struct {
	b        *Builder
	after    int // events numbered up to this one are not written
	streamID string
	buf      bytes.Buffer
	last     atomic.Int64 // the sequence_number of the last event written; -1: none
}

// NewWSEncoder returns the encoder of run's stream over a WebSocket, which
// writes the events numbered after startingAfter (-1: all of them), each
// with streamID ("": none) as its stream_id. As with NewEncoder, the
// stream read from agentd must start at the run's first event.
func NewWSEncoder(run agentd.Run, startingAfter int, streamID string) *WSEncoder {
	e := &WSEncoder{after: startingAfter, streamID: streamID}
	e.last.Store(int64(startingAfter))
	e.b = NewBuilder(run, func(typ string, v map[string]any) {
		n, _ := v["sequence_number"].(int)
		if n <= e.after {
			return
		}
		if e.streamID != "" {
			v["stream_id"] = e.streamID
		}
		data, err := json.Marshal(v)
		if err != nil {
			return // cannot happen: values of this package's types
		}
		e.buf.Write(data)
		e.buf.WriteByte('\n')
		e.last.Store(int64(n))
	})
	return e
}

// Start sets no header: the socket is open already.
func (e *WSEncoder) Start(http.Header) []byte { return nil }

// Heartbeat is nothing: the socket's pings keep it alive.
func (e *WSEncoder) Heartbeat() []byte { return nil }

// Event writes the stream events of ev, a line each.
func (e *WSEncoder) Event(ev agentd.Event, followed bool) ([]byte, bool) {
	e.buf.Reset()
	e.b.Add(ev)
	return bytes.Clone(e.buf.Bytes()), e.b.Ended()
}

// Last is the sequence_number of the last event written (the
// startingAfter it was made with when none was). It may be read from any
// goroutine.
func (e *WSEncoder) Last() int { return int(e.last.Load()) }

// Ended reports whether the response's last event was written.
func (e *WSEncoder) Ended() bool { return e.b.Ended() }

// Response is the response as the events read so far make it.
func (e *WSEncoder) Response() Response { return e.b.Response() }

// SteerInput reads the input of a response.steer: a text, or a non-empty
// list of user messages (content a text or input_text, input_image and
// input_file parts), as OpenAI's steering takes them; text says it was a
// text. Errors name the field (input, input[i].role, ...).
func SteerInput(raw json.RawMessage) (msgs []agentd.InputMessage, text bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, field("input", "is required: a text or a list of user messages")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, field("input", "is not a valid string")
		}
		if s == "" {
			return nil, false, field("input", "must not be empty")
		}
		return []agentd.InputMessage{{Role: agentd.RoleUser, Content: s}}, true, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, false, field("input", "must be a text or a non-empty list of user messages")
	}
	for i, it := range items {
		name := fmt.Sprintf("input[%d]", i)
		var probe struct {
			Type string `json:"type"`
			Role string `json:"role"`
		}
		if err := json.Unmarshal(it, &probe); err != nil {
			return nil, false, field(name, "must be a message (an object)")
		}
		if probe.Type != "" && probe.Type != ItemMessage {
			return nil, false, field(name+".type", "steering takes messages only, not %q items", probe.Type)
		}
		if probe.Role != "user" {
			return nil, false, field(name+".role", "steering takes user messages only, not %q", probe.Role)
		}
		m, err := inputItem(name, it)
		if err != nil {
			return nil, false, err
		}
		msgs = append(msgs, m)
	}
	return msgs, false, nil
}

// SteerID is the id of a response.steer that agentd accepted as the input
// inputID of the response's run.
func SteerID(inputID string) string { return "steer_" + hexOf(inputID) }
