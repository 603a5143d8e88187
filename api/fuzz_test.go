package api

import (
	"context"
	"testing"

	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/runspec"

	"github.com/prometheus/client_golang/prometheus"
)

// nopRuns is a Runs the decoder never calls.
type nopRuns struct{ Runs }

// FuzzCreateRunBody: whatever body POST /runs decodes and accepts is
// storable: every text passes clean.TextProblem and the metadata
// clean.JSONProblem, so that no accepted run can fail its first commit on a
// value; and no body makes the decoder panic.
func FuzzCreateRunBody(f *testing.F) {
	for _, seed := range []string{
		`{"input":"hi"}`,
		`{"input":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"model":"m","instructions":"be brief"}`,
		`{"input":"x","metadata":{"k":"v","n":1.5,"deep":{"a":[1,2,{"b":null}]}}}`,
		`{"input":"a\u0000b"}`,
		`{"input":"x","metadata":{"n":1e999999}}`,
		`{"input":"x","metadata":{"k":"\ud800"}}`,
		"{\"input\":\"x\",\"metadata\":{\"k\":\"\xff\"}}",
		`{"input":"x","timeouts":{"total_ms":1,"step_ms":0},"max_steps":3,"if_busy":"enqueue","on_disconnect":"interrupt"}`,
		`{"input":"x","conversation_id":"0193f2a4-7c1e-7b52-9d0a-3f6c2e8b1a70","tools":[]}`,
	} {
		f.Add([]byte(seed))
	}
	// Its composer reads no tenant's managed instructions: the store has
	// no database.
	s := newServer(Config{Store: &persist.Store{}, Runs: nopRuns{}, Defaults: RunDefaults{Model: "m"},
		Registerer: prometheus.NewRegistry(),
		Composer:   compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "m"}, nil), Agents: &persist.Store{}})})
	f.Fuzz(func(t *testing.T, body []byte) {
		var req createRunRequest
		if decodeStrict(body, &req, "") != nil || req.Agent != nil {
			return // an agent is read from the store, which this server has not
		}
		rc, _, err := s.runSpec(context.Background(), req)
		if err != nil {
			return
		}
		p := rc.Spec
		texts := []string{p.Model, p.Params.Instructions}
		for _, m := range p.Input {
			texts = append(texts, m.Content, string(m.Role))
		}
		for _, text := range texts {
			if problem := clean.TextProblem(text); problem != "" {
				t.Fatalf("accepted a text that %s: %q (body %q)", problem, text, body)
			}
		}
		if len(p.Params.Metadata) > 0 {
			if problem := clean.JSONProblem(p.Params.Metadata); problem != "" {
				t.Fatalf("accepted metadata that %s: %s (body %q)", problem, p.Params.Metadata, body)
			}
		}
	})
}
