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
