package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// TestWSEncoder: over a WebSocket, a run's stream is the SSE stream's
// events, one JSON line each, byte for byte the SSE data but for the
// stream_id of its lane; resumed after any sequence number, the rest of
// the same lines; Last follows what was written.
func TestWSEncoder(t *testing.T) {
	t.Parallel()
	run := testRun()
	full, _ := encode(run, -1, answered)
	var sseData []string
	for _, line := range strings.Split(string(full), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
			sseData = append(sseData, d)
		}
	}
	lines := func(after int, lane string) ([]string, *WSEncoder) {
		e := NewWSEncoder(run, after, lane)
		var out bytes.Buffer
		for i, ev := range answered {
			b, end := e.Event(ev, false)
			out.Write(b)
			if end != (i == len(answered)-1) {
				t.Fatalf("event %d: end %v", i, end)
			}
		}
		return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"), e
	}
	got, e := lines(-1, "")
	if strings.Join(got, "\n") != strings.Join(sseData, "\n") {
		t.Fatalf("socket:\n%s\nSSE:\n%s", strings.Join(got, "\n"), strings.Join(sseData, "\n"))
	}
	if e.Last() != len(sseData)-1 || !e.Ended() || e.Response().Status != StatusCompleted {
		t.Fatalf("last %d ended %v status %s", e.Last(), e.Ended(), e.Response().Status)
	}
	laned, _ := lines(4, "a")
	if len(laned) != len(sseData)-5 {
		t.Fatalf("resumed after 4: %d lines, want %d", len(laned), len(sseData)-5)
	}
	for i, l := range laned {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["stream_id"] != "a" {
			t.Fatalf("line %d: %s", i, l)
		}
		delete(v, "stream_id")
		var w map[string]any
		_ = json.Unmarshal([]byte(sseData[i+5]), &w)
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(w)
		if string(a) != string(b) {
			t.Fatalf("line %d: %s, SSE %s", i, a, b)
		}
	}
	if e := NewWSEncoder(run, 7, ""); e.Last() != 7 || e.Heartbeat() != nil {
		t.Fatal("a new encoder's Last is its starting point, and it has no heartbeat")
	}
}

// TestSteerInput: a steer's input is a text or user messages, as OpenAI's
// steering takes it; anything else is refused naming the field.
func TestSteerInput(t *testing.T) {
	t.Parallel()
	msgs, text, err := SteerInput(json.RawMessage(`"go left"`))
	if err != nil || !text || len(msgs) != 1 || msgs[0].Role != agentd.RoleUser || msgs[0].Content != "go left" {
		t.Fatalf("a text: %+v %v %v", msgs, text, err)
	}
	msgs, text, err = SteerInput(json.RawMessage(`[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]},
		{"role":"user","content":"b"}]`))
	if err != nil || text || len(msgs) != 2 || msgs[0].Content != "a" || msgs[1].Content != "b" {
		t.Fatalf("messages: %+v %v %v", msgs, text, err)
	}
	for in, param := range map[string]string{
		``:                                     "input",
		`""`:                                   "input",
		`[]`:                                   "input",
		`7`:                                    "input",
		`[1]`:                                  "input[0]",
		`[{"role":"assistant","content":"x"}]`: "input[0].role",
		`[{"type":"function_call_output","call_id":"c","output":"x"}]`:    "input[0].type",
		`[{"role":"user","content":"x","extra":1}]`:                       "input[0].extra",
		`[{"role":"user","content":[{"type":"output_text","text":"x"}]}]`: "input[0].content[0].type",
	} {
		_, _, err := SteerInput(json.RawMessage(in))
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != param {
			t.Errorf("%s: %v, want an error naming %s", in, err, param)
		}
	}
	if id := SteerID("01a234dc-98f7-71a3-b8a0-100ed5226eca"); id != "steer_01a234dc98f771a3b8a0100ed5226eca" {
		t.Fatalf("SteerID: %s", id)
	}
}
