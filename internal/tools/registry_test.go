package tools

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

type fakeTool struct{ spec Spec }

func (f fakeTool) Spec() Spec { return f.spec }
func (f fakeTool) Invoke(context.Context, Call) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

func fake(name string, effect agentd.Effect, schema string) Tool {
	return fakeTool{Spec{Name: name, Effect: effect, Parameters: json.RawMessage(schema)}}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Clock(), Calculator(), HTTPRequest([]string{"example.com"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Names(), []string{"calculator", "clock", "http_request"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	specs := r.List()
	if len(specs) != 3 || specs[0].Name != "calculator" || specs[2].Effect != agentd.EffectSideEffect {
		t.Errorf("List() = %+v", specs)
	}
	if tool, ok := r.Get("clock"); !ok || tool.Spec().Name != "clock" {
		t.Errorf("Get(clock) = %v, %v", tool, ok)
	}
	if _, ok := r.Get("nope"); ok {
		t.Error("Get(nope) found a tool")
	}
}

func TestNewRegistryRejects(t *testing.T) {
	t.Parallel()
	obj := `{"type":"object"}`
	tests := []struct {
		name  string
		tools []Tool
		want  string
	}{
		{"duplicate", []Tool{fake("a", agentd.EffectReadOnly, obj), fake("a", agentd.EffectReadOnly, obj)}, `duplicate name "a"`},
		{"bad name", []Tool{fake("a b", agentd.EffectReadOnly, obj)}, "invalid name"},
		{"long name", []Tool{fake(strings.Repeat("x", 65), agentd.EffectReadOnly, obj)}, "invalid name"},
		{"empty name", []Tool{fake("", agentd.EffectReadOnly, obj)}, "invalid name"},
		{"bad effect", []Tool{fake("a", "maybe", obj)}, "invalid effect"},
		{"no effect", []Tool{fake("a", "", obj)}, "invalid effect"},
		{"schema not JSON", []Tool{fake("a", agentd.EffectReadOnly, `{`)}, "not valid JSON"},
		{"schema not object", []Tool{fake("a", agentd.EffectReadOnly, `[]`)}, "not a JSON object"},
		{"schema wrong type", []Tool{fake("a", agentd.EffectReadOnly, `{"type":"string"}`)}, `want "object"`},
		{"schema does not compile", []Tool{fake("a", agentd.EffectReadOnly, `{"type":"object","properties":{"x":{"type":"nonsense"}}}`)}, "does not compile"},
		{"schema bad pattern", []Tool{fake("a", agentd.EffectReadOnly, `{"type":"object","properties":{"x":{"pattern":"("}}}`)}, "does not compile"},
		{"schema remote ref", []Tool{fake("a", agentd.EffectReadOnly, `{"$ref":"file:///etc/passwd"}`)}, "does not compile"},
		{"schema empty", []Tool{fake("a", agentd.EffectReadOnly, ``)}, "empty"},
		{"nil tool", []Tool{nil}, "nil"},
	}
	for _, tt := range tests {
		_, err := NewRegistry(tt.tools...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	r, err := NewRegistry(Calculator(), HTTPRequest([]string{"example.com"}, nil), Clock())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool, args string
		want       string // "" means valid
	}{
		{"calculator", `{"expression":"1+1"}`, ""},
		{"clock", ``, ""},
		{"clock", `{}`, ""},
		{"calculator", `{}`, `argument "expression": missing property`},
		{"calculator", `{"expression":3}`, `argument "expression": wrong type: got number, want string`},
		{"calculator", `{"expression":"1","x":1}`, `argument "x": unknown property, not allowed`},
		{"calculator", `{"expression":`, "not valid JSON"},
		{"calculator", `{"expression":"1"} {}`, "not valid JSON"},
		{"calculator", `"1+1"`, "arguments: wrong type: got string, want object"},
		{"calculator", `{"expression":""}`, `argument "expression": `},
		{"http_request", `{"method":"GET","url":"http://x","headers":{"a":1}}`, `argument "headers.a": wrong type`},
		{"http_request", `{"method":"TRACE","url":"http://x"}`, `argument "method": `},
		{"http_request", `{}`, `argument "method": missing property; argument "url": missing property`},
		{"nope", `{}`, `unknown tool "nope"; available tools: calculator, clock, http_request`},
	}
	for _, tt := range tests {
		err := r.Validate(tt.tool, json.RawMessage(tt.args))
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%s, %s) = %v, want nil", tt.tool, tt.args, err)
			}
			continue
		}
		var te *Error
		if !errors.As(err, &te) || te.Kind != KindFinal {
			t.Errorf("Validate(%s, %s) = %v, want *Error KindFinal", tt.tool, tt.args, err)
			continue
		}
		if !strings.Contains(te.Message, tt.want) {
			t.Errorf("Validate(%s, %s) message = %q, want it to contain %q", tt.tool, tt.args, te.Message, tt.want)
		}
	}
}
