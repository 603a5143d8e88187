package spectest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
)

// docURL names the spec for the schema compiler; nothing is fetched from it.
const docURL = "https://agentd.invalid/api/openapi.json"

// specSchemas are the compiled schemas of the spec: those of the stored
// events, and those of the operations' responses.
type specSchemas struct {
	schemas  map[string]any // components.schemas, as JSON
	envelope *jsonschema.Schema
	data     map[string]*jsonschema.Schema // x-event-types: event type -> its data schema
	types    []string                      // the stored types, sorted (x-event-types without heartbeat)

	paths []*pathItem // paths, each with its operations and their responses (responses.go)

	mu       sync.Mutex           // guards c and compiled: a Compiler is not safe for concurrent use
	c        *jsonschema.Compiler // compiles response schemas on first use (schemaAt)
	compiled map[string]compiled  // by JSON pointer
}

var (
	loadOnce sync.Once
	loaded   *specSchemas
	errLoad  error
)

// schemas compiles the schemas of api.OpenAPI once per test binary.
func schemas() (*specSchemas, error) {
	loadOnce.Do(func() { loaded, errLoad = compile(api.OpenAPI()) })
	return loaded, errLoad
}

// compile reads an OpenAPI document (YAML) and compiles, as JSON Schema
// draft 2020-12 (the dialect of OpenAPI 3.1), its EventEnvelope schema and
// the data schema of each entry of EventEnvelope's x-event-types. It indexes
// the operations of its paths, whose response schemas are compiled when a
// response first needs one (schemaAt), so that a schema the compiler refuses
// fails the responses that use it, not every check.
func compile(spec []byte) (*specSchemas, error) {
	js, err := yaml.YAMLToJSON(spec)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml to JSON: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, fmt.Errorf("decode openapi.yaml: %w", err)
	}
	all, _ := dig(doc, "components", "schemas").(map[string]any)
	xt, _ := dig(all, "EventEnvelope", "x-event-types").(map[string]any)
	if len(xt) == 0 {
		return nil, errors.New("openapi.yaml: components.schemas.EventEnvelope has no x-event-types")
	}
	closeObjects(all)
	// Response schemas may be written in place under paths (and, in
	// principle, under components.responses); they are held to the same rule.
	closeObjects(dig(doc, "paths"))
	closeObjects(dig(doc, "components", "responses"))
	// check validates data against its type's own schema, one of this anyOf
	// (TestEventTypesAreTheStoredTypes keeps them the same list), so the
	// envelope is checked without it: its errors would only repeat the data's,
	// less precisely.
	if data, ok := dig(all, "EventEnvelope", "properties", "data").(map[string]any); ok {
		delete(data, "anyOf")
	}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()                          // uuid and date-time are part of the contract
	c.UseLoader(jsonschema.SchemeURLLoader{}) // the spec refers to nothing outside itself
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	s := &specSchemas{schemas: all, data: map[string]*jsonschema.Schema{}}
	if s.envelope, err = c.Compile(docURL + "#/components/schemas/EventEnvelope"); err != nil {
		return nil, fmt.Errorf("compile EventEnvelope: %w", err)
	}
	for typ, v := range xt {
		ref, _ := v.(string)
		if !strings.HasPrefix(ref, "#/") {
			return nil, fmt.Errorf("x-event-types: %s maps to %v, want a local $ref such as #/components/schemas/X", typ, v)
		}
		if s.data[typ], err = c.Compile(docURL + ref); err != nil {
			return nil, fmt.Errorf("compile the data schema of %s (%s): %w", typ, ref, err)
		}
		if typ != "heartbeat" { // never stored, so it has no envelope
			s.types = append(s.types, typ)
		}
	}
	slices.Sort(s.types)
	if s.paths, err = indexPaths(doc); err != nil {
		return nil, err
	}
	s.c, s.compiled = c, map[string]compiled{}
	return s, nil
}

// dig follows keys down nested JSON objects; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// closeObjects adds "unevaluatedProperties": false to every schema under v
// that lists properties and says nothing of others, so that a key the spec
// does not describe fails validation. Literal values (examples, enums,
// defaults) are left alone.
func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		_, props := v["properties"].(map[string]any)
		_, ap := v["additionalProperties"]
		_, up := v["unevaluatedProperties"]
		if props && !ap && !up {
			v["unevaluatedProperties"] = false
		}
		for k, sub := range v {
			switch k {
			case "example", "examples", "enum", "const", "default":
			default:
				closeObjects(sub)
			}
		}
	case []any:
		for _, sub := range v {
			closeObjects(sub)
		}
	}
}

// Enum returns the string values (null left out) of the enum found by
// following path from components.schemas of the spec, e.g. "RunStatus", or
// "Run", "properties", "terminal_reason"; it fails t when there is none.
func Enum(t testing.TB, path ...string) []string {
	t.Helper()
	s, err := schemas()
	if err != nil {
		t.Fatalf("spectest: %v", err)
	}
	values, ok := dig(s.schemas, append(path, "enum")...).([]any)
	if !ok {
		t.Fatalf("spectest: no enum at components.schemas.%s", strings.Join(path, "."))
	}
	var out []string
	for _, v := range values {
		if str, ok := v.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// EventTypes returns the event types that x-event-types lists, sorted,
// without heartbeat (which is never stored and has no envelope).
func EventTypes() []string {
	s, err := schemas()
	if err != nil {
		return nil
	}
	return slices.Clone(s.types)
}

// CheckEvent fails t unless envelope, an event as stored and streamed, is
// valid against EventEnvelope, its type is typ, typ has an entry in
// x-event-types, and its data is valid against that entry's schema.
func CheckEvent(t testing.TB, typ string, envelope []byte) {
	t.Helper()
	s, err := schemas()
	if err != nil {
		t.Errorf("spectest: %v", err)
		return
	}
	if err := s.check(typ, envelope); err != nil {
		t.Errorf("event %s does not match openapi.yaml: %s\nenvelope: %s", typ, explain(err), envelope)
	}
}

// explain is err's text, with a word on the error of a closed object.
func explain(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "false schema") {
		msg += "\n(\"false schema\": a key that openapi.yaml does not describe)"
	}
	return msg
}

// CheckEvents calls CheckEvent on each of evs.
func CheckEvents(t testing.TB, evs []agentd.Event) {
	t.Helper()
	for _, e := range evs {
		CheckEvent(t, string(e.Type), e.Data)
	}
}

func (s *specSchemas) check(typ string, envelope []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(envelope))
	if err != nil {
		return fmt.Errorf("not one JSON value: %w", err)
	}
	env, ok := v.(map[string]any)
	if !ok {
		return errors.New("not a JSON object")
	}
	if got, _ := env["type"].(string); got != typ {
		return fmt.Errorf("its type is %q, want %q", env["type"], typ)
	}
	sch, ok := s.data[typ]
	if !ok {
		return fmt.Errorf("type %q has no entry in EventEnvelope's x-event-types", typ)
	}
	// The data against its type's schema; the envelope is compiled without
	// the anyOf of every data schema that the spec gives it.
	if err := sch.Validate(env["data"]); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if err := s.envelope.Validate(v); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	return nil
}
