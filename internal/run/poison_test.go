package run_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// TestPoisonOutputDoesNotWedgeARun: model output and tool results holding
// what PostgreSQL cannot store (a \u0000 escape, a NUL, a raw 0xff byte, a
// number past float64) are stored cleaned, and every run ends at its first
// execution: each tool runs once, and nothing that was stored still holds
// the poison.
func TestPoisonOutputDoesNotWedgeARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bodies := map[string]struct{ contentType, body string }{
		"/escaped_nul": {"application/json", `{"k":"\u0000","n":1e999999}`},
		"/raw_ff":      {"application/json", "{\"k\":\"a\xffb\"}"},
		"/text_nul":    {"text/plain", "plain\x00text"},
		"/surrogate":   {"application/json", `["\ud800"]`},
	}
	behaviours := map[string]webhooktest.Behaviour{}
	for path, reply := range bodies {
		behaviours[path] = webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", reply.contentType)
			fmt.Fprint(w, reply.body)
		})
	}
	sink := webhooktest.New(t, behaviours)
	list := []tools.Tool{tools.Clock()}
	for path := range bodies {
		hook, err := tools.NewWebhook(tools.WebhookConfig{Name: strings.TrimPrefix(path, "/"), Description: "poison",
			Parameters: json.RawMessage(`{"type":"object"}`), URL: sink.URL + path, Effect: agentd.EffectSideEffect}, nil)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, hook)
	}
	reg, err := tools.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, run.Config{Tools: reg, LeaseTTL: 2 * time.Second, PollInterval: 100 * time.Millisecond, Workers: 4})
	// The fake model answers with what its input says; arguments are JSON
	// text, so an escape in them is the model's output (the input itself
	// is checked at the API).
	inputs := []string{"/call clock {\"timezone\":\"\\u0000\"}\n/say done"}
	for path := range bodies {
		inputs = append(inputs, "/call "+strings.TrimPrefix(path, "/")+" {}\n/say done")
	}
	var ids []string
	for _, in := range inputs {
		ids = append(ids, b.create(t, in, agentd.RunParams{}).ID)
	}
	for _, id := range ids {
		r := b.wait(t, id, func(r agentd.Run) bool { return r.Status.Terminal() })
		if r.Status != agentd.StatusCompleted || r.Epoch != 1 {
			t.Errorf("run %s: %s (%s) at epoch %d, want completed at its first claim", id, r.Status, r.TerminalReason, r.Epoch)
		}
		steps, err := b.store.StepsList(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			for _, c := range st.Calls {
				for what, raw := range map[string][]byte{"arguments": c.Arguments, "result": c.Result} {
					if p := clean.JSONProblem(raw); len(raw) > 0 && p != "" {
						t.Errorf("run %s: call %s's %s %s: %s", id, c.Name, what, raw, p)
					}
				}
			}
		}
		for _, ev := range b.events(t, id) {
			if p := clean.JSONProblem(ev.Data); p != "" {
				t.Errorf("run %s: event %d %s: %s", id, ev.Seq, ev.Data, p)
			}
			if ev.Type != agentd.EventToolCallCompleted {
				continue
			}
			var d agentd.ToolCallCompletedData
			if err := json.Unmarshal(envelopeData(t, ev.Data), &d); err != nil {
				t.Fatal(err)
			}
			if reply, ok := bodies["/"+d.Name]; ok {
				want := []byte(reply.body) // the webhook tool returns a JSON body as it is
				if reply.contentType != "application/json" {
					want, _ = json.Marshal(reply.body) // and another body as a JSON string
				}
				raw, err := base64.StdEncoding.DecodeString(d.ResultRaw)
				if err != nil || string(raw) != string(want) {
					t.Errorf("run %s: %s's result_raw %q is not what it returned (%q)", id, d.Name, raw, reply.body)
				}
			}
		}
	}
	for path := range bodies {
		if n := sink.Count(path); n != 1 {
			t.Errorf("webhook %s was called %d times, want once", path, n)
		}
	}
}
