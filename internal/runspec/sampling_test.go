package runspec_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// TestSampling: a run's sampling is kept as asked, its schema compacted;
// absent, it is the zero value (the model's defaults).
func TestSampling(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	spec, err := b.Build(runspec.Request{Input: user("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec.Params.Sampling, agentd.Sampling{}) {
		t.Fatalf("sampling %+v without a request's", spec.Params.Sampling)
	}
	for _, c := range []struct {
		name string
		in   runspec.Sampling
		want agentd.Sampling
	}{
		{"empty", runspec.Sampling{}, agentd.Sampling{}},
		{"bounds", runspec.Sampling{MaxOutputTokens: ptr(runspec.MaxOutputTokens), Temperature: ptr(0.0), TopP: ptr(1.0)},
			agentd.Sampling{MaxOutputTokens: runspec.MaxOutputTokens, Temperature: ptr(0.0), TopP: ptr(1.0)}},
		{"other bounds", runspec.Sampling{MaxOutputTokens: ptr(1), Temperature: ptr(2.0), TopP: ptr(0.0)},
			agentd.Sampling{MaxOutputTokens: 1, Temperature: ptr(2.0), TopP: ptr(0.0)}},
		{"text", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("text")}},
			agentd.Sampling{Format: &agentd.OutputFormat{Type: agentd.OutputText}}},
		{"json_object", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("json_object"), Schema: json.RawMessage("null")}},
			agentd.Sampling{Format: &agentd.OutputFormat{Type: agentd.OutputJSONObject}}},
		{"json_schema", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("json_schema"), Name: ptr("Answer_1-x"),
			Description: ptr("The answer."), Schema: json.RawMessage(` { "type" : "object" } `), Strict: ptr(true)}},
			agentd.Sampling{Format: &agentd.OutputFormat{Type: agentd.OutputJSONSchema, Name: "Answer_1-x",
				Description: "The answer.", Schema: json.RawMessage(`{"type":"object"}`), Strict: ptr(true)}}},
	} {
		in := c.in
		spec, err := b.Build(runspec.Request{Input: user("hi"), Sampling: &in})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(spec.Params.Sampling, c.want) {
			got, _ := json.Marshal(spec.Params.Sampling)
			want, _ := json.Marshal(c.want)
			t.Errorf("%s: sampling %s, want %s", c.name, got, want)
		}
	}
}

// TestSamplingRefusals: each bad sampling field is refused, named as the
// request's JSON names it.
func TestSamplingRefusals(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	schema := func(typ string) *runspec.OutputFormat {
		return &runspec.OutputFormat{Type: ptr(typ), Name: ptr("answer"), Schema: json.RawMessage(`{"type":"object"}`)}
	}
	with := func(f func(*runspec.OutputFormat)) *runspec.OutputFormat {
		o := schema("json_schema")
		f(o)
		return o
	}
	for _, c := range []struct {
		name  string
		in    runspec.Sampling
		field string
	}{
		{"temperature below 0", runspec.Sampling{Temperature: ptr(-0.1)}, "sampling.temperature"},
		{"temperature above 2", runspec.Sampling{Temperature: ptr(2.01)}, "sampling.temperature"},
		{"temperature NaN", runspec.Sampling{Temperature: ptr(math.NaN())}, "sampling.temperature"},
		{"top_p below 0", runspec.Sampling{TopP: ptr(-1.0)}, "sampling.top_p"},
		{"top_p above 1", runspec.Sampling{TopP: ptr(1.5)}, "sampling.top_p"},
		{"top_p infinite", runspec.Sampling{TopP: ptr(math.Inf(1))}, "sampling.top_p"},
		{"max_output_tokens 0", runspec.Sampling{MaxOutputTokens: ptr(0)}, "sampling.max_output_tokens"},
		{"max_output_tokens negative", runspec.Sampling{MaxOutputTokens: ptr(-5)}, "sampling.max_output_tokens"},
		{"max_output_tokens too many", runspec.Sampling{MaxOutputTokens: ptr(runspec.MaxOutputTokens + 1)}, "sampling.max_output_tokens"},
		{"format without a type", runspec.Sampling{Format: &runspec.OutputFormat{}}, "sampling.format.type"},
		{"format of an unknown type", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("xml")}}, "sampling.format.type"},
		{"text with a name", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("text"), Name: ptr("a")}}, "sampling.format.name"},
		{"text with a schema", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("text"), Schema: json.RawMessage(`{}`)}}, "sampling.format.schema"},
		{"json_object with a schema", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("json_object"),
			Schema: json.RawMessage(`{}`)}}, "sampling.format.schema"},
		{"json_object with a name", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("json_object"), Name: ptr("a")}}, "sampling.format.name"},
		{"json_object strict", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("json_object"), Strict: ptr(true)}}, "sampling.format.strict"},
		{"text with a description", runspec.Sampling{Format: &runspec.OutputFormat{Type: ptr("text"), Description: ptr("d")}}, "sampling.format.description"},
		{"json_schema without a name", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Name = nil })}, "sampling.format.name"},
		{"json_schema with an empty name", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Name = ptr("") })}, "sampling.format.name"},
		{"json_schema with a long name", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Name = ptr(strings.Repeat("a", 65)) })},
			"sampling.format.name"},
		{"json_schema with a space in its name", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Name = ptr("my answer") })},
			"sampling.format.name"},
		{"json_schema without a schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Schema = nil })}, "sampling.format.schema"},
		{"json_schema with a null schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Schema = json.RawMessage(" null ") })},
			"sampling.format.schema"},
		{"json_schema with an array schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Schema = json.RawMessage(`[]`) })},
			"sampling.format.schema"},
		{"json_schema with a string schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Schema = json.RawMessage(`"x"`) })},
			"sampling.format.schema"},
		{"json_schema with broken JSON", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Schema = json.RawMessage(`{"type":`) })},
			"sampling.format.schema"},
		{"json_schema with a NUL in its schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) {
			o.Schema = json.RawMessage(`{"description":"a\u0000b"}`)
		})}, "sampling.format.schema"},
		{"json_schema with a huge schema", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) {
			o.Schema = json.RawMessage(`{"description":"` + strings.Repeat("x", runspec.MaxFormatSchemaBytes) + `"}`)
		})}, "sampling.format.schema"},
		{"json_schema with a long description", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) {
			o.Description = ptr(strings.Repeat("d", runspec.MaxDescriptionBytes+1))
		})}, "sampling.format.description"},
		{"json_schema with a NUL in its description", runspec.Sampling{Format: with(func(o *runspec.OutputFormat) { o.Description = ptr("a\x00") })},
			"sampling.format.description"},
	} {
		in := c.in
		_, err := b.Build(runspec.Request{Input: user("x"), Sampling: &in})
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.name, err, c.field)
		}
	}
}

// TestSamplingStoredBefore: params stored before sampling existed decode
// with its zero value, and a zero sampling is not written.
func TestSamplingStoredBefore(t *testing.T) {
	var p agentd.RunParams
	if err := json.Unmarshal([]byte(`{"tools":null,"max_steps":3,"timeouts":{},"on_disconnect":"continue","if_busy":"reject",`+
		`"loop_limits":{"failures_in_a_row":3,"identical_calls":5}}`), &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Sampling, agentd.Sampling{}) {
		t.Fatalf("sampling %+v", p.Sampling)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "sampling") {
		t.Fatalf("a zero sampling was written: %s", b)
	}
	p.Sampling = agentd.Sampling{Temperature: ptr(0.0), Format: &agentd.OutputFormat{Type: agentd.OutputJSONObject}}
	b, _ = json.Marshal(p)
	if !strings.Contains(string(b), `"sampling":{"temperature":0,"format":{"type":"json_object"}}`) {
		t.Fatalf("params %s", b)
	}
}
