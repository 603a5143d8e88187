package aisdk

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/persist"
)

// ev builds a stored event of step with data, in its envelope.
func ev(seq int64, t event.Type, step int, data string) persist.Event {
	return persist.Event{Seq: seq, Type: t, Data: json.RawMessage(fmt.Sprintf(
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
		events   []persist.Event
		followed []bool // per event; default false
		want     string
		ends     bool
	}{
		{"retracted text", []persist.Event{
			ev(1, event.RunCreated, 0, `{"conversation_id":"c","model":"m","status":"queued"}`),
			ev(2, event.StepStarted, 1, `{"transition":null}`),
			ev(3, event.MessageDelta, 1, `{"text":"hel"}`),
			ev(4, event.StepRetracted, 1, `{"reason":"model_retry"}`),
			ev(5, event.MessageDelta, 1, `{"text":"hello"}`),
			ev(6, event.MessageCompleted, 1, `{"content":[{"type":"text","text":"hello"}],"finish_reason":"stop","message_id":"m","role":"assistant","usage":{}}`),
			ev(7, event.StepCompleted, 1, `{"finish_reason":"stop"}`),
			ev(8, event.RunCompleted, 1, `{"output_text":"hello","reason":"completed","status":"completed"}`),
		}, nil, "start start-step text-start text-delta reset-step text-start text-delta text-end finish-step finish", true},
		{"not streamed", []persist.Event{
			ev(1, event.StepStarted, 1, `{"transition":null}`),
			ev(2, event.MessageCompleted, 1, `{"content":[{"type":"text","text":"all at once"}],"finish_reason":"stop","message_id":"m","role":"assistant","usage":{}}`),
		}, nil, "start start-step text-start text-delta text-end", false},
		{"waits for an approval", []persist.Event{
			ev(1, event.StepStarted, 1, `{"transition":null}`),
			ev(2, event.ToolCallCreated, 1, `{"arguments":{},"call_id":"c","effect":"side_effect","idempotency_key":"k","name":"guarded","status":"awaiting_approval","tool_call_id":"tc"}`),
			ev(3, event.RunRequiresAction, 1, approval),
		}, nil, "start start-step tool-input-available tool-approval-request finish", true},
		{"an approval in a replay goes on", []persist.Event{
			ev(1, event.RunRequiresAction, 1, approval),
			ev(2, event.ToolCallApproved, 1, `{"resolved_by":"client","status":"planned","tool_call_id":"tc"}`),
			ev(3, event.ToolCallCompleted, 1, `{"result":{"ok":true},"status":"succeeded","tool_call_id":"tc"}`),
		}, []bool{true, true, true}, "start tool-approval-request tool-approval-response tool-output-available", false},
		{"failed", []persist.Event{
			ev(1, event.RunFailed, 0, `{"error":{"message":"the model refused the key"},"reason":"model_error","status":"failed"}`),
		}, nil, "start error finish", true},
		{"cancelled", []persist.Event{
			ev(1, event.ToolCallCompleted, 1, `{"status":"rejected","tool_call_id":"tc"}`),
			ev(2, event.ToolCallCompleted, 1, `{"error":{"message":"boom"},"status":"failed","tool_call_id":"tc2"}`),
			ev(3, event.RunCancelled, 1, `{"reason":"cancelled","status":"cancelled"}`),
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
