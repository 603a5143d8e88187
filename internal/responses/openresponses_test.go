package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/agentd/agentd"
)

// The Open Responses specification's OpenAPI document (testdata/openresponses
// says where it comes from). What this package emits is checked against its
// schemas as they are: objects stay open, as the document writes them.
const (
	orPath = "testdata/openresponses/openapi.json"
	// orURL names the document for the schema compiler; nothing is fetched.
	orURL = "https://openresponses.invalid/openapi.json"
	// orResponse is the schema of a response object.
	orResponse = "#/components/schemas/ResponseResource"
)

// orSchemas are the compiled schemas of the document.
type orSchemas struct {
	doc      any                           // the document, as JSON
	response *jsonschema.Schema            // ResponseResource
	events   map[string]*jsonschema.Schema // event type -> the schema of its event
	names    map[string]string             // event type -> that schema's $ref
}

var (
	orOnce   sync.Once
	orLoaded *orSchemas
	errOR    error
)

// openResponses compiles the document's schemas once per test binary.
func openResponses(t *testing.T) *orSchemas {
	t.Helper()
	orOnce.Do(func() { orLoaded, errOR = loadOpenResponses(orPath) })
	if errOR != nil {
		t.Fatalf("%s: %v", orPath, errOR)
	}
	return orLoaded
}

// loadOpenResponses compiles, as JSON Schema draft 2020-12 (the dialect of
// OpenAPI 3.1), the ResponseResource schema of the document at path and the
// schema of each stream event: those that the text/event-stream answer of
// POST /responses lists (a oneOf discriminated by type), each mapped from
// the value(s) its type property allows (enum or const).
func loadOpenResponses(path string) (*orSchemas, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // the document refers to nothing outside itself
	if err := c.AddResource(orURL, doc); err != nil {
		return nil, err
	}
	s := &orSchemas{doc: doc, events: map[string]*jsonschema.Schema{}, names: map[string]string{}}
	if s.response, err = c.Compile(orURL + orResponse); err != nil {
		return nil, fmt.Errorf("compile %s: %w", orResponse, err)
	}
	stream, _ := dig(doc, "paths", "/responses", "post", "responses", "200", "content", "text/event-stream", "schema").(map[string]any)
	if stream == nil {
		return nil, fmt.Errorf("no schema for POST /responses's text/event-stream answer")
	}
	if p := dig(stream, "discriminator", "propertyName"); p != "type" {
		return nil, fmt.Errorf("the stream's events are discriminated by %v, not type", p)
	}
	alts, _ := stream["oneOf"].([]any)
	if len(alts) == 0 {
		return nil, fmt.Errorf("the stream's schema has no oneOf of events")
	}
	for i, alt := range alts {
		ref, _ := dig(alt, "$ref").(string)
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if !ok {
			return nil, fmt.Errorf("stream event %d: %v is not a $ref to a component schema", i, alt)
		}
		types := typeValues(dig(doc, "components", "schemas", name, "properties", "type"))
		if len(types) == 0 {
			return nil, fmt.Errorf("%s has no type const or enum", ref)
		}
		sch, err := c.Compile(orURL + ref)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", ref, err)
		}
		for _, typ := range types {
			if other, dup := s.names[typ]; dup {
				return nil, fmt.Errorf("event type %s is both %s and %s", typ, other, ref)
			}
			s.events[typ], s.names[typ] = sch, ref
		}
	}
	return s, nil
}

// typeValues are the strings a type property's schema allows.
func typeValues(prop any) []string {
	var out []string
	if c, ok := dig(prop, "const").(string); ok {
		out = append(out, c)
	}
	enum, _ := dig(prop, "enum").([]any)
	for _, v := range enum {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
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

// at is the value at the JSON pointer tokens toks of v, and whether there
// is one.
func at(v any, toks []string) (any, bool) {
	for _, tok := range toks {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// validate checks data, exactly as emitted, against sch. It returns nil,
// or one line per failure: where in data, the offending value, the schema
// keyword that refuses it (its path in the document), what that keyword
// says and the validator's message.
func (s *orSchemas) validate(sch *jsonschema.Schema, data []byte) []string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return []string{fmt.Sprintf("not one JSON value: %v", err)}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range leaves(ve) {
		inst := "/" + strings.Join(l.InstanceLocation, "/")
		got := "(absent)"
		if x, ok := at(v, l.InstanceLocation); ok {
			got = excerptJSON(x)
		}
		kw := strings.TrimPrefix(l.SchemaURL, orURL) + pointerOf(l.ErrorKind.KeywordPath())
		want := "?"
		if frag, ok := strings.CutPrefix(kw, "#"); ok {
			if x, ok := at(s.doc, splitPointer(frag)); ok {
				want = excerptJSON(x)
			}
		}
		out = append(out, fmt.Sprintf("at %s: value %s; schema %s = %s: %s", inst, got, kw, want, message(l)))
	}
	return out
}

// leaves are the failures that explain e: its innermost errors. Of the
// alternatives of a oneOf or anyOf none of which holds, those refused at
// their discriminator (the type of the value) are left out when another
// is not, and of the rest only those that got deepest into the value are
// kept, so that a message refused for its role is not also reported as
// not being a function call.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	causes := e.Causes
	switch e.ErrorKind.(type) {
	case *kind.OneOf, *kind.AnyOf:
		var matched []*jsonschema.ValidationError
		for _, c := range causes {
			if !refusedType(c, len(e.InstanceLocation)) {
				matched = append(matched, c)
			}
		}
		if len(matched) > 0 {
			causes = matched
		}
		best := -1
		var deepest []*jsonschema.ValidationError
		for _, c := range causes {
			switch d := depth(c); {
			case d > best:
				best, deepest = d, []*jsonschema.ValidationError{c}
			case d == best:
				deepest = append(deepest, c)
			}
		}
		causes = deepest
	}
	var out []*jsonschema.ValidationError
	for _, c := range causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// refusedType reports whether the alternative e fails on the value's type
// property (its discriminator) not being the one it allows.
func refusedType(e *jsonschema.ValidationError, n int) bool {
	for _, l := range leaves(e) {
		if len(l.InstanceLocation) == n+1 && l.InstanceLocation[n] == "type" {
			switch l.ErrorKind.(type) {
			case *kind.Enum, *kind.Const:
				return true
			}
		}
	}
	return false
}

// depth is how deep into the value e's failures are.
func depth(e *jsonschema.ValidationError) int {
	d := len(e.InstanceLocation)
	for _, c := range e.Causes {
		d = max(d, depth(c))
	}
	return d
}

// message is the validator's message of one failure, without its location.
func message(e *jsonschema.ValidationError) string {
	m := (&jsonschema.ValidationError{ErrorKind: e.ErrorKind}).Error()
	if rest, ok := strings.CutPrefix(m, "at '': "); ok {
		return rest
	}
	return m
}

func pointerOf(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func splitPointer(ptr string) []string {
	if ptr == "" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// excerptJSON is v as JSON, cut for a message.
func excerptJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// orFrame is one event of a stream as written: its event: name and the
// exact bytes of its data: line.
type orFrame struct {
	event string
	data  []byte
}

// orFrames splits a stream into its events, which must each be an event:
// line and one data: line, and end with data: [DONE].
func orFrames(t *testing.T, stream []byte) []orFrame {
	t.Helper()
	frames := strings.Split(strings.TrimSuffix(string(stream), "\n\n"), "\n\n")
	if len(frames) == 0 || frames[len(frames)-1] != "data: [DONE]" {
		t.Fatalf("the stream does not end with data: [DONE]: %q", stream)
	}
	var out []orFrame
	for _, f := range frames[:len(frames)-1] {
		name, data, ok := strings.Cut(f, "\n")
		name, okName := strings.CutPrefix(name, "event: ")
		data, okData := strings.CutPrefix(data, "data: ")
		if !ok || !okName || !okData || strings.Contains(data, "\n") {
			t.Fatalf("not an event: and one data: line: %q", f)
		}
		out = append(out, orFrame{event: name, data: []byte(data)})
	}
	return out
}

// orCase is a run whose response and stream are checked.
type orCase struct {
	name      string
	run       agentd.Run
	events    []agentd.Event
	status    string // the final response's
	lastEvent string // the stream's last event's type
}

func orCases(t *testing.T) []orCase {
	t.Helper()
	// A run ending with a call of a function tool, the tool as a request
	// names it (its echo is the one Request.Spec keeps).
	calls := testRun()
	r, err := Decode([]byte(`{"model":"fake","input":"weather?","tools":[{"type":"function","name":"weather",
		"description":"The weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := r.Spec("")
	if err != nil {
		t.Fatal(err)
	}
	calls.Params.Echo = spec.Echo
	calls.Params.ClientTools = []agentd.ClientTool{{Name: "weather", Description: "The weather of a city.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	calls.Params.ClientToolsEnd = true

	failed := testRun()
	failed.Status = agentd.StatusFailed

	incomplete := testRun()
	incomplete.Params.Sampling.MaxOutputTokens = 2
	incomplete.Params.Instructions = "Be brief."

	cancelled := testRun()
	cancelled.Status = agentd.StatusCancelled

	background := testRun()
	echo, err := json.Marshal(Echo{Background: true, Truncation: "auto", Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	background.Params.Echo = echo

	start := answered[:3] // run.created, run.started, step.started
	with := func(evs ...agentd.Event) []agentd.Event { return append(slices.Clone(start), evs...) }
	return []orCase{
		{"completed", testRun(), answered, StatusCompleted, "response.completed"},
		{"function_calls", calls, with(
			ev(4, agentd.EventMessageCompleted, 1, `{"content":[{"type":"tool_call","id":"call_1","name":"weather","arguments":"{}"}],
				"finish_reason":"tool_calls","message_id":"m","role":"assistant","usage":{"input_tokens":10,"output_tokens":5}}`),
			ev(5, agentd.EventStepCompleted, 1, `{"finish_reason":"tool_calls"}`),
			ev(6, agentd.EventRunCompleted, 1, `{"reason":"client_tool_calls","status":"completed"}`),
		), StatusCompleted, "response.completed"},
		{"failed", failed, with(
			ev(4, agentd.EventMessageDelta, 1, `{"text":"hel"}`),
			ev(5, agentd.EventRunFailed, 1, `{"error":{"kind":"server_error","message":"the model's endpoint answered 500","status":500},
				"reason":"model_error","status":"failed"}`),
		), StatusFailed, "response.failed"},
		{"incomplete", incomplete, with(
			ev(4, agentd.EventMessageDelta, 1, `{"text":"hello"}`),
			ev(5, agentd.EventMessageCompleted, 1, `{"content":[{"type":"text","text":"hello"}],"finish_reason":"length",
				"message_id":"m","role":"assistant","usage":{"input_tokens":10,"output_tokens":2}}`),
			ev(6, agentd.EventStepCompleted, 1, `{"finish_reason":"length"}`),
			ev(7, agentd.EventRunCompleted, 1, `{"output_text":"hello","reason":"max_output_tokens","status":"completed"}`),
		), StatusIncomplete, "response.incomplete"},
		{"cancelled", cancelled, with(
			ev(4, agentd.EventMessageDelta, 1, `{"text":"hel"}`),
			ev(5, agentd.EventRunCancelled, 1, `{"actor":"client","reason":"cancelled","status":"cancelled"}`),
		), StatusCancelled, "response.failed"},
		{"background", background, answered, StatusCompleted, "response.completed"},
	}
}

// TestOpenResponsesSchemas: the response object this package builds is a
// ResponseResource of the Open Responses OpenAPI document, as it ends and
// as it stands after each event, and every event its Encoder writes is the
// event of its type that the document describes, for runs that complete,
// end at function calls, fail, end incomplete, are cancelled or ran in the
// background. An event type the document has no schema for fails.
func TestOpenResponsesSchemas(t *testing.T) {
	t.Parallel()
	s := openResponses(t)
	var mu sync.Mutex
	unknown := map[string][]string{} // event type -> the runs that emit it
	t.Cleanup(func() {
		// Listed together, as well as by each run's sub-test.
		if len(unknown) > 0 {
			var list []string
			for _, typ := range slices.Sorted(maps.Keys(unknown)) {
				list = append(list, fmt.Sprintf("%s (%s)", typ, strings.Join(unknown[typ], ", ")))
			}
			t.Errorf("event types with no schema in the Open Responses document: %s", strings.Join(list, "; "))
		}
	})
	for _, c := range orCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			t.Run("response", func(t *testing.T) {
				b := NewBuilder(c.run, nil)
				for _, e := range c.events {
					b.Add(e)
				}
				resp := b.Response()
				if resp.Status != c.status {
					t.Fatalf("the final response is %s, want %s", resp.Status, c.status)
				}
				data, err := json.Marshal(resp)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range s.validate(s.response, data) {
					t.Errorf("the final response is not a %s: %s", orResponse, f)
				}
			})
			t.Run("snapshots", func(t *testing.T) {
				// As GET shows the response while its run goes on.
				run := c.run
				run.Status = agentd.StatusRunning
				b := NewBuilder(run, nil)
				for _, e := range c.events[:len(c.events)-1] {
					b.Add(e)
					data, err := json.Marshal(b.Response())
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range s.validate(s.response, data) {
						t.Errorf("the response after event %d is not a %s: %s", e.Seq, orResponse, f)
					}
				}
			})
			t.Run("stream", func(t *testing.T) {
				stream, end := encode(c.run, -1, c.events)
				if !end {
					t.Fatal("the stream does not end")
				}
				frames := orFrames(t, stream)
				var types []string
				for _, f := range frames {
					types = append(types, f.event)
				}
				t.Logf("%d events: %s", len(frames), strings.Join(types, " "))
				if last := frames[len(frames)-1].event; last != c.lastEvent {
					t.Errorf("the stream ends with %s, want %s", last, c.lastEvent)
				}
				for i, f := range frames {
					var head struct {
						Type string `json:"type"`
					}
					if err := json.Unmarshal(f.data, &head); err != nil || head.Type != f.event {
						t.Errorf("event %d (%s): its data's type is %q (%v)", i, f.event, head.Type, err)
						continue
					}
					sch, ok := s.events[f.event]
					if !ok {
						t.Errorf("event %d: the Open Responses document has no schema for event type %s: %s", i, f.event, f.data)
						mu.Lock()
						if !slices.Contains(unknown[f.event], c.name) {
							unknown[f.event] = append(unknown[f.event], c.name)
						}
						mu.Unlock()
						continue
					}
					for _, fail := range s.validate(sch, f.data) {
						t.Errorf("event %d (%s) is not a %s: %s", i, f.event, s.names[f.event], fail)
					}
				}
			})
		})
	}
}

// TestOpenResponsesRefuses: the checks above can fail: a response or an
// event with a value the document refuses is refused, and the failure
// names where.
func TestOpenResponsesRefuses(t *testing.T) {
	t.Parallel()
	s := openResponses(t)
	b := NewBuilder(testRun(), nil)
	for _, e := range answered {
		b.Add(e)
	}
	good, err := json.Marshal(b.Response())
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := encode(testRun(), -1, answered)
	var delta []byte
	for _, f := range orFrames(t, stream) {
		if f.event == "response.output_text.delta" {
			delta = f.data
			break
		}
	}
	if delta == nil {
		t.Fatal("no response.output_text.delta in the stream")
	}
	// corrupt is data (a JSON object) with key set to v, at the path keys.
	corrupt := func(t *testing.T, data []byte, v any, keys ...string) []byte {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		obj := m
		for _, k := range keys[:len(keys)-1] {
			switch x := obj[k].(type) {
			case map[string]any:
				obj = x
			case []any:
				obj = x[0].(map[string]any)
			default:
				t.Fatalf("no object at %s", k)
			}
		}
		if v == nil {
			delete(obj, keys[len(keys)-1])
		} else {
			obj[keys[len(keys)-1]] = v
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if f := s.validate(s.response, good); f != nil {
		t.Logf("the uncorrupted response already fails: %v", f)
	}
	for _, c := range []struct {
		name  string
		sch   *jsonschema.Schema
		data  []byte
		where string // the failure's location
	}{
		{"status_7", s.response, corrupt(t, good, 7, "status"), "at /status: value 7"},
		{"no_model", s.response, corrupt(t, good, nil, "model"), "at /: "},
		{"message_role", s.response, corrupt(t, good, "robot", "output", "role"), `at /output/0/role: value "robot"`},
		{"usage_tokens", s.response, corrupt(t, good, 1.5, "usage", "input_tokens"), "at /usage/input_tokens: value 1.5"},
		{"delta_number", s.events["response.output_text.delta"], corrupt(t, delta, 7, "delta"), "at /delta: value 7"},
		{"no_sequence_number", s.events["response.output_text.delta"], corrupt(t, delta, nil, "sequence_number"), "at /: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.sch == nil {
				t.Fatal("no schema")
			}
			fails := s.validate(c.sch, c.data)
			if len(fails) == 0 {
				t.Fatalf("the validator takes %s", c.data)
			}
			if !slices.ContainsFunc(fails, func(f string) bool { return strings.HasPrefix(f, c.where) }) {
				t.Errorf("no failure %s…: %q", c.where, fails)
			}
			t.Logf("refused: %s", strings.Join(fails, "; "))
		})
	}
}
