package agentd_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentd/agentd"
)

// TestEveryEventTypeDecodes: Envelope.Payload reads every stored type into
// the payload that names that type, so that a client's type switch and the
// stored type cannot disagree.
func TestEveryEventTypeDecodes(t *testing.T) {
	ends := map[agentd.EventType]agentd.RunStatus{}
	for _, s := range agentd.RunStatuses() {
		if e := s.EndEvent(); e != "" {
			ends[e] = s
		}
	}
	for _, typ := range agentd.EventTypes() {
		data := `{}`
		if s, ok := ends[typ]; ok {
			data = `{"status":"` + string(s) + `","reason":"completed"}`
		} else if typ.Terminal() {
			t.Errorf("%s is terminal, but no status ends with it", typ)
		}
		env, err := agentd.DecodeEnvelope([]byte(`{"seq":3,"type":"` + string(typ) + `","run_id":"r","step":1,"at":"2026-01-02T03:04:05.000006Z","data":` + data + `}`))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		p, err := env.Payload()
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if p.EventType() != typ {
			t.Errorf("%s decodes as %T, whose type is %s", typ, p, p.EventType())
		}
		if env.Terminal() != typ.Terminal() || env.Seq != 3 || env.Step != 1 {
			t.Errorf("%s: envelope %+v", typ, env)
		}
	}
	if len(ends) != 5 {
		t.Errorf("%d statuses end a run with an event, want 5: %v", len(ends), ends)
	}
}

// TestPayloadOfAnUnknownType: a type this build does not know (a newer
// server's) is ErrUnknownEventType, not a zero payload.
func TestPayloadOfAnUnknownType(t *testing.T) {
	_, err := agentd.Envelope{Type: "run.exploded", Data: json.RawMessage(`{}`)}.Payload()
	if !errors.Is(err, agentd.ErrUnknownEventType) {
		t.Fatalf("err %v, want ErrUnknownEventType", err)
	}
	_, err = agentd.Envelope{Type: agentd.EventMessageDelta, Data: json.RawMessage(`{"text":5}`)}.Payload()
	if err == nil {
		t.Fatal("a text of 5 decoded")
	}
}

// TestStoredEventRoundTrip: what EventIn's payload marshals to is what
// Payload reads back.
func TestStoredEventRoundTrip(t *testing.T) {
	in := agentd.RunEndEvent(4, agentd.StatusFailed, agentd.ReasonModelError,
		&agentd.ErrorDetail{Kind: agentd.ModelErrAuth, Message: "no"}, "key:abc")
	data, err := json.Marshal(in.Data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := agentd.Envelope{Type: in.Type(), Data: data}.Payload()
	if err != nil {
		t.Fatal(err)
	}
	d, ok := p.(agentd.RunEndedData)
	if !ok || d.Status != agentd.StatusFailed || d.Error == nil || d.Error.Kind != agentd.ModelErrAuth || d.Actor != "key:abc" {
		t.Fatalf("read back %#v", p)
	}
	if in.Type() != agentd.EventRunFailed {
		t.Fatalf("type %s", in.Type())
	}
}
