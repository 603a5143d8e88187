package aisdk

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

// ev builds a stored event of step with data, in its envelope.
func ev(seq int64, t agentd.EventType, step int, data string) agentd.Event {
	return agentd.Event{Seq: seq, Type: t, Data: json.RawMessage(fmt.Sprintf(
		`{"seq":%d,"type":%q,"run_id":"r","step":%d,"at":"2026-12-01T00:00:00Z","data":%s}`, seq, t, step, data))}
}

// types returns the chunk types of out, and whether it ends with [DONE].
func types(t *testing.T, out []byte) (string, bool) {
	t.Helper()
	var got []string
	done := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not a data line: %q", line)
		}
		if payload == "[DONE]" {
			done = true
			continue
		}
		var c struct{ Type string }
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			t.Fatalf("chunk %q: %v", payload, err)
		}
		got = append(got, c.Type)
	}
	return strings.Join(got, " "), done
}

func TestEncoderChunks(t *testing.T) {
	t.Parallel()
	approval := `{"required_action":{"arguments":{},"call_id":"c","idempotency_key":"k","name":"guarded","step":1,"tool_call_id":"tc","type":"tool_approval"}}`
	for _, c := range []struct {
		name     string
		events   []agentd.Event
		followed []bool // per event; default false
		want     string
		ends     bool
	}{
		{"retracted text", []agentd.Event{
			ev(1, agentd.EventRunCreated, 0, `{"conversation_id":"c","model":"m","status":"queued"}`),
			ev(2, agentd.EventStepStarted, 1, `{"transition":null}`),
			ev(3, agentd.EventMessageDelta, 1, `{"text":"hel"}`),
			ev(4, agentd.EventStepRetracted, 1, `{"reason":"model_retry"}`),
			ev(5, agentd.EventMessageDelta, 1, `{"text":"hello"}`),
			ev(6, agentd.EventMessageCompleted, 1, `{"content":[{"type":"text","text":"hello"}],"finish_reason":"stop","message_id":"m","role":"assistant","usage":{}}`),
			ev(7, agentd.EventStepCompleted, 1, `{"finish_reason":"stop"}`),
			ev(8, agentd.EventRunCompleted, 1, `{"output_text":"hello","reason":"completed","status":"completed"}`),
		}, nil, "start start-step text-start text-delta reset-step text-start text-delta text-end finish-step finish", true},
		{"not streamed", []agentd.Event{
			ev(1, agentd.EventStepStarted, 1, `{"transition":null}`),
			ev(2, agentd.EventMessageCompleted, 1, `{"content":[{"type":"text","text":"all at once"}],"finish_reason":"stop","message_id":"m","role":"assistant","usage":{}}`),
		}, nil, "start start-step text-start text-delta text-end", false},
		{"waits for an approval", []agentd.Event{
			ev(1, agentd.EventStepStarted, 1, `{"transition":null}`),
			ev(2, agentd.EventToolCallCreated, 1, `{"arguments":{},"call_id":"c","effect":"side_effect","idempotency_key":"k","name":"guarded","status":"awaiting_approval","tool_call_id":"tc"}`),
			ev(3, agentd.EventRunRequiresAction, 1, approval),
		}, nil, "start start-step tool-input-available tool-approval-request finish", true},
		{"an approval in a replay goes on", []agentd.Event{
			ev(1, agentd.EventRunRequiresAction, 1, approval),
			ev(2, agentd.EventToolCallApproved, 1, `{"resolved_by":"client","status":"planned","tool_call_id":"tc"}`),
			ev(3, agentd.EventToolCallCompleted, 1, `{"result":{"ok":true},"status":"succeeded","tool_call_id":"tc"}`),
		}, []bool{true, true, true}, "start tool-approval-request tool-approval-response tool-output-available", false},
		{"failed", []agentd.Event{
			ev(1, agentd.EventRunFailed, 0, `{"error":{"message":"the model refused the key"},"reason":"model_error","status":"failed"}`),
		}, nil, "start error finish", true},
		{"cancelled", []agentd.Event{
			ev(1, agentd.EventToolCallCompleted, 1, `{"status":"rejected","tool_call_id":"tc"}`),
			ev(2, agentd.EventToolCallCompleted, 1, `{"error":{"message":"boom"},"status":"failed","tool_call_id":"tc2"}`),
			ev(3, agentd.EventRunCancelled, 1, `{"reason":"cancelled","status":"cancelled"}`),
		}, nil, "start tool-output-denied tool-output-error abort finish", true},
	} {
		e := NewEncoder("r")
		h := http.Header{}
		e.Start(h)
		if h.Get(HeaderStream) != "v1" || h.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("headers %v", h)
		}
		var out []byte
		ended := false
		for i, x := range c.events {
			if ended {
				t.Fatalf("%s: the stream ended before event %d", c.name, i)
			}
			followed := c.followed != nil && c.followed[i]
			b, end := e.Event(x, followed)
			out, ended = append(out, b...), end
		}
		got, done := types(t, out)
		if got != c.want || ended != c.ends || done != c.ends {
			t.Errorf("%s:\n got %s (end %v, [DONE] %v)\nwant %s (end %v)", c.name, got, ended, done, c.want, c.ends)
		}
	}
}

// steered is a run whose first answer took an input from a client (in1)
// while it streamed, and a hook's input (not a user turn) after.
func steered() []agentd.Event {
	return []agentd.Event{
		ev(1, agentd.EventRunCreated, 0, `{"conversation_id":"c","model":"m","status":"queued"}`),
		ev(2, agentd.EventStepStarted, 1, `{"transition":null}`),
		ev(3, agentd.EventMessageDelta, 1, `{"text":"a"}`),
		ev(4, agentd.EventInputAccepted, 1, `{"input_id":"in1","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"n":1,"source":"client","when":"next"}`),
		ev(5, agentd.EventMessageDelta, 1, `{"text":"b"}`),
		ev(6, agentd.EventMessageCompleted, 1, `{"content":[{"type":"text","text":"ab"}],"finish_reason":"stop","message_id":"m1","role":"assistant","usage":{}}`),
		ev(7, agentd.EventStepCompleted, 1, `{"finish_reason":"stop"}`),
		ev(8, agentd.EventStepStarted, 2, `{"transition":"input"}`),
		ev(9, agentd.EventInputApplied, 2, `{"input_id":"in1","message_ids":["u2"],"n":1}`),
		ev(10, agentd.EventInputAccepted, 2, `{"input_id":"h1","messages":[{"role":"user","content":[{"type":"text","text":"go on"}]}],"n":2,"source":"hook","when":"next"}`),
		ev(11, agentd.EventMessageDelta, 2, `{"text":"c"}`),
		ev(12, agentd.EventMessageCompleted, 2, `{"content":[{"type":"text","text":"c"}],"finish_reason":"stop","message_id":"m2","role":"assistant","usage":{}}`),
		ev(13, agentd.EventStepCompleted, 2, `{"finish_reason":"stop"}`),
		ev(14, agentd.EventStepStarted, 3, `{"transition":"input"}`),
		ev(15, agentd.EventInputApplied, 3, `{"input_id":"h1","message_ids":["u3"],"n":2}`),
		ev(16, agentd.EventMessageCompleted, 3, `{"content":[{"type":"text","text":"d"}],"finish_reason":"stop","message_id":"m3","role":"assistant","usage":{}}`),
		ev(17, agentd.EventStepCompleted, 3, `{"finish_reason":"stop"}`),
		ev(18, agentd.EventRunCompleted, 3, `{"output_text":"d","reason":"completed","status":"completed"}`),
	}
}

// encode feeds events to e as a replay does, until e ends the stream: its
// chunks, and the seq it ended at (0: it did not).
func encode(e *Encoder, events []agentd.Event) (out []byte, endedAt int64) {
	for i, x := range events {
		b, end := e.Event(x, i < len(events)-1)
		out = append(out, b...)
		if end {
			return out, x.Seq
		}
	}
	return out, 0
}

// messageIDs returns the messageId of each start chunk of out.
func messageIDs(out []byte) []string {
	var ids []string
	for _, line := range strings.Split(string(out), "\n\n") {
		var c struct{ Type, MessageID string }
		if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &c) == nil && c.Type == "start" {
			ids = append(ids, c.MessageID)
		}
	}
	return ids
}

// TestEncoderTurns: a message a client sent while the run answered ends
// the answer's message where it is applied, and the answer to it is a
// message of its own, whose id is the input's; a hook's input is no turn.
// A stream that goes on from a decision is the message of the turn under
// way then.
func TestEncoderTurns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		enc     *Encoder
		want    string
		ids     string
		endedAt int64
	}{
		{"first answer", NewEncoder("r"),
			"start start-step text-start text-delta data-input text-delta text-end finish-step data-input finish", "r", 9},
		{"the answer to in1", NewTurnEncoder("r", "in1", 0),
			"start data-input start-step text-start text-delta text-end finish-step start-step text-start text-delta text-end finish-step finish", "in1", 18},
		{"on from seq 9", NewTurnEncoder("r", "", 9),
			"start start-step text-start text-delta text-end finish-step start-step text-start text-delta text-end finish-step finish", "in1", 18},
		{"an input never seen", NewTurnEncoder("r", "in9", 0), "start finish", "in9", 18},
	} {
		out, endedAt := encode(c.enc, steered())
		got, done := types(t, out)
		if got != c.want || !done || endedAt != c.endedAt || strings.Join(messageIDs(out), " ") != c.ids {
			t.Errorf("%s:\n got %s (ids %v, ended at %d, [DONE] %v)\nwant %s (ids %s, ended at %d)", c.name, got, messageIDs(out), endedAt, done, c.want, c.ids, c.endedAt)
		}
	}
	// The first answer's message says in1 was taken: pending, then applied.
	out, _ := encode(NewEncoder("r"), steered())
	if !strings.Contains(string(out), `{"data":{"input_id":"in1","n":1,"status":"pending"},"id":"in1","type":"data-input"}`) ||
		!strings.Contains(string(out), `"messageMetadata":{"next_input_id":"in1","run_id":"r","status":"running"}`) {
		t.Errorf("the first answer:\n%s", out)
	}
}

// TestEncoderTurnWaits: a stream of an input that the run has not applied
// when it stops to wait for a decision ends there, the input pending; one
// whose run ended without it says so.
func TestEncoderTurnWaits(t *testing.T) {
	t.Parallel()
	approval := `{"required_action":{"arguments":{},"call_id":"c","idempotency_key":"k","name":"guarded","step":1,"tool_call_id":"tc","type":"tool_approval"}}`
	waits := []agentd.Event{
		ev(1, agentd.EventStepStarted, 1, `{"transition":null}`),
		ev(2, agentd.EventInputAccepted, 1, `{"input_id":"in1","messages":[],"n":1,"source":"client","when":"next"}`),
		ev(3, agentd.EventToolCallCreated, 1, `{"arguments":{},"call_id":"c","effect":"side_effect","idempotency_key":"k","name":"guarded","status":"awaiting_approval","tool_call_id":"tc"}`),
		ev(4, agentd.EventRunRequiresAction, 1, approval),
	}
	out, endedAt := encode(NewTurnEncoder("r", "in1", 0), waits)
	if got, _ := types(t, out); got != "start data-input finish" || endedAt != 4 || !strings.Contains(string(out), `"status":"requires_action"`) {
		t.Errorf("waits: %s (ended at %d)\n%s", got, endedAt, out)
	}
	cancelled := []agentd.Event{
		ev(1, agentd.EventStepStarted, 1, `{"transition":null}`),
		ev(2, agentd.EventInputAccepted, 1, `{"input_id":"in1","messages":[],"n":1,"source":"client","when":"next"}`),
		ev(3, agentd.EventInputUnapplied, 1, `{"input_id":"in1","n":1,"reason":"cancelled"}`),
		ev(4, agentd.EventRunCancelled, 1, `{"reason":"cancelled","status":"cancelled"}`),
	}
	out, endedAt = encode(NewTurnEncoder("r", "in1", 0), cancelled)
	if got, _ := types(t, out); got != "start data-input abort finish" || endedAt != 4 || !strings.Contains(string(out), `"status":"unapplied"`) {
		t.Errorf("cancelled: %s (ended at %d)\n%s", got, endedAt, out)
	}
}
