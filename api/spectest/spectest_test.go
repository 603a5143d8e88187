package spectest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
)

// recorder is a testing.TB that records what would fail a test instead of
// failing it, so that a test can show that a check does fail.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

const (
	runID  = "0190f5a6-7b1c-7d2e-8f3a-4b5c6d7e8f90"
	convID = "0190f5a6-7b1c-7d2e-8f3a-4b5c6d7e8f91"
	callID = "0190f5a6-7b1c-7d2e-8f3a-4b5c6d7e8f92"
	msgID  = "0190f5a6-7b1c-7d2e-8f3a-4b5c6d7e8f93"
)

// envelope is an event as the store writes it.
func envelope(seq int, typ string, step int, data string) []byte {
	return fmt.Appendf(nil, `{"seq":%d,"type":%q,"run_id":%q,"step":%d,"at":"2025-01-02T03:04:05.123456Z","data":%s}`,
		seq, typ, runID, step, data)
}

func TestValidEventsPass(t *testing.T) {
	t.Parallel()
	evs := []agentd.Event{
		{Type: "run.created", Data: envelope(1, "run.created", 0, `{"conversation_id":"`+convID+`","model":"fake","status":"queued"}`)},
		{Type: "run.started", Data: envelope(2, "run.started", 0, `{"epoch":1,"worker":"host:1:abc"}`)},
		{Type: "step.started", Data: envelope(3, "step.started", 1, `{"transition":null}`)},
		{Type: "message.delta", Data: envelope(4, "message.delta", 1, `{"text":"Hel"}`)},
		{Type: "message.completed", Data: envelope(5, "message.completed", 1, `{"message_id":"`+msgID+`","role":"assistant",`+
			`"content":[{"type":"text","text":"Hello"},{"type":"tool_call","id":"call_0","name":"clock","arguments":"{}"}],`+
			`"finish_reason":"tool_calls","usage":{"input_tokens":3,"output_tokens":2,"cached_input_tokens":0,"reasoning_tokens":0}}`)},
		{Type: "tool_call.completed", Data: envelope(6, "tool_call.completed", 1, `{"tool_call_id":"`+callID+`","call_id":"call_0",`+
			`"name":"clock","status":"succeeded","result":{"now":"2025-01-02T03:04:05Z"}}`)},
		{Type: "run.completed", Data: envelope(7, "run.completed", 1, `{"status":"completed","reason":"completed","output_text":"4"}`)},
	}
	r := &recorder{TB: t}
	CheckEvents(r, evs)
	if len(r.errs) != 0 {
		t.Fatalf("valid events were refused:\n%s", strings.Join(r.errs, "\n"))
	}
}

func TestInvalidEventsFail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, typ string
		envelope  []byte
		want      string // in the error
	}{
		{"missing required field", "run.created",
			envelope(1, "run.created", 0, `{"conversation_id":"`+convID+`","status":"queued"}`), "model"},
		{"wrong enum value", "run.completed",
			envelope(9, "run.completed", 2, `{"status":"completed","reason":"finished","output_text":""}`), "reason"},
		{"wrong const", "run.cancelled",
			envelope(9, "run.cancelled", 2, `{"status":"failed","reason":"cancelled"}`), "status"},
		{"unknown type", "run.exploded",
			envelope(9, "run.exploded", 2, `{}`), "x-event-types"},
		{"type other than the row's", "run.completed",
			envelope(9, "run.failed", 2, `{"status":"completed","reason":"completed"}`), `want "run.completed"`},
		{"key the spec does not describe", "step.started",
			envelope(3, "step.started", 1, `{"transition":null,"note":"x"}`), "note"},
		{"nested key the spec does not describe", "run.failed",
			envelope(4, "run.failed", 1, `{"status":"failed","reason":"model_error","error":{"message":"m","kind":"auth","code":1}}`), "code"},
		{"envelope without seq", "run.started",
			[]byte(`{"type":"run.started","run_id":"` + runID + `","step":0,"at":"2025-01-02T03:04:05Z","data":{"epoch":1,"worker":"w"}}`), "seq"},
		{"run id not a uuid", "run.started",
			[]byte(`{"seq":2,"type":"run.started","run_id":"r1","step":0,"at":"2025-01-02T03:04:05Z","data":{"epoch":1,"worker":"w"}}`), "uuid"},
		{"heartbeat is not stored", "heartbeat",
			envelope(9, "heartbeat", 1, `{"status":"running","step":1,"updated_at":"2025-01-02T03:04:05Z"}`), "envelope"},
		{"not JSON", "run.started", []byte(`{"seq":`), "JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			CheckEvent(r, c.typ, c.envelope)
			if len(r.errs) != 1 {
				t.Fatalf("%d errors for %s, want 1: %q", len(r.errs), c.envelope, r.errs)
			}
			if !strings.Contains(r.errs[0], c.want) || !strings.Contains(r.errs[0], string(c.envelope)) ||
				!strings.Contains(r.errs[0], c.typ) {
				t.Fatalf("the error does not name the type, the envelope and %q:\n%s", c.want, r.errs[0])
			}
		})
	}
}

// TestEventTypesAreTheStoredTypes checks the spec against itself:
// x-event-types (without heartbeat), the EventType enum and the data anyOf
// of EventEnvelope name the same types and schemas.
func TestEventTypesAreTheStoredTypes(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas struct {
				EventType struct {
					Enum []string `json:"enum"`
				} `json:"EventType"`
				EventEnvelope struct {
					Types      map[string]string `json:"x-event-types"`
					Properties struct {
						Data struct {
							AnyOf []struct {
								Ref string `json:"$ref"`
							} `json:"anyOf"`
						} `json:"data"`
					} `json:"properties"`
				} `json:"EventEnvelope"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	got := EventTypes()
	if len(got) < 20 || slices.Contains(got, "heartbeat") || !slices.IsSorted(got) {
		t.Fatalf("EventTypes() = %v", got)
	}
	enum := slices.Sorted(slices.Values(doc.Components.Schemas.EventType.Enum))
	if !slices.Equal(got, enum) {
		t.Errorf("x-event-types lists %v, the EventType enum %v", got, enum)
	}
	env := doc.Components.Schemas.EventEnvelope
	var refs, anyOf []string
	for _, typ := range got {
		refs = append(refs, env.Types[typ])
	}
	for _, a := range env.Properties.Data.AnyOf {
		anyOf = append(anyOf, a.Ref)
	}
	slices.Sort(refs)
	slices.Sort(anyOf)
	if !slices.Equal(refs, anyOf) {
		t.Errorf("x-event-types refers to %v, the data anyOf to %v", refs, anyOf)
	}
}
