package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

// TestCreateRunSampling: POST /runs keeps a run's sampling with its
// params, and refuses a bad sampling field with 422 invalid_field naming
// it, creating nothing.
func TestCreateRunSampling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.createRun(`{"input": "hi", "sampling": {"max_output_tokens": 64, "temperature": 0, "top_p": 0.9,
		"format": {"type": "json_schema", "name": "answer", "description": "The answer.",
			"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}, "strict": true}}}`)
	run, err := b.store.RunGet(context.Background(), "default", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := run.Params.Sampling
	if s.MaxOutputTokens != 64 || s.Temperature == nil || *s.Temperature != 0 || s.TopP == nil || *s.TopP != 0.9 ||
		s.Format == nil || s.Format.Type != agentd.OutputJSONSchema || s.Format.Name != "answer" || s.Format.Description != "The answer." ||
		s.Format.Strict == nil || !*s.Format.Strict {
		got, _ := json.Marshal(s)
		t.Fatalf("stored sampling %s", got)
	}
	var schema map[string]any
	if err := json.Unmarshal(s.Format.Schema, &schema); err != nil || schema["type"] != "object" {
		t.Fatalf("stored schema %s (%v)", s.Format.Schema, err)
	}

	runs, msgs := b.counts("default")
	for _, c := range []struct {
		name, body, field string
	}{
		{"temperature above 2", `{"input": "x", "sampling": {"temperature": 2.5}}`, "sampling.temperature"},
		{"temperature a string", `{"input": "x", "sampling": {"temperature": "hot"}}`, "sampling.temperature"},
		{"top_p above 1", `{"input": "x", "sampling": {"top_p": 1.1}}`, "sampling.top_p"},
		{"max_output_tokens 0", `{"input": "x", "sampling": {"max_output_tokens": 0}}`, "sampling.max_output_tokens"},
		{"max_output_tokens too many", `{"input": "x", "sampling": {"max_output_tokens": 1000001}}`, "sampling.max_output_tokens"},
		{"max_output_tokens a fraction", `{"input": "x", "sampling": {"max_output_tokens": 1.5}}`, "sampling.max_output_tokens"},
		{"unknown format type", `{"input": "x", "sampling": {"format": {"type": "yaml"}}}`, "sampling.format.type"},
		{"format without a type", `{"input": "x", "sampling": {"format": {}}}`, "sampling.format.type"},
		{"json_schema without a name", `{"input": "x", "sampling": {"format": {"type": "json_schema", "schema": {}}}}`, "sampling.format.name"},
		{"json_schema with a bad name", `{"input": "x", "sampling": {"format": {"type": "json_schema", "name": "a b", "schema": {}}}}`,
			"sampling.format.name"},
		{"json_schema without a schema", `{"input": "x", "sampling": {"format": {"type": "json_schema", "name": "a"}}}`, "sampling.format.schema"},
		{"json_schema of an array", `{"input": "x", "sampling": {"format": {"type": "json_schema", "name": "a", "schema": [1]}}}`,
			"sampling.format.schema"},
		{"json_object with a schema", `{"input": "x", "sampling": {"format": {"type": "json_object", "schema": {}}}}`, "sampling.format.schema"},
		{"a lone surrogate in a schema", `{"input": "x", "sampling": {"format": {"type": "json_schema", "name": "a",
			"schema": {"description": "\udc00"}}}}`, "sampling.format.schema"},
	} {
		p := wantProblem(t, b.do("POST", "/runs", c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field || !strings.Contains(p.Detail, c.field) {
			t.Errorf("%s: field %q (detail %q), want %s", c.name, p.Field, p.Detail, c.field)
		}
	}
	// A field sampling does not have is refused as any unknown field is.
	if p := wantProblem(t, b.do("POST", "/runs", `{"input": "x", "sampling": {"seed": 1}}`), http.StatusUnprocessableEntity,
		"invalid_field"); p.Field != "seed" {
		t.Errorf("unknown sampling field: field %q", p.Field)
	}
	if rn, m := b.counts("default"); rn != runs || m != msgs {
		t.Fatalf("refused requests wrote: %d runs and %d messages, had %d and %d", rn, m, runs, msgs)
	}
}
