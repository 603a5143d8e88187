package runspec_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// TestMemoryFilled: a run's namespaces are filled with its user and its
// variables when it is built, and kept filled; memory off is kept off.
func TestMemoryFilled(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	spec, err := b.Build(runspec.Request{Input: user("hi"), InputText: true, User: ptr("u-1@example.com"),
		Variables: map[string]string{"team": "blue"},
		Memory: &runspec.Memory{
			Pinned: [][]string{{"users", "{{user}}", "profile"}, {"teams", "{{ team }}"}},
			Search: [][]string{{"users", "{{user}}"}, {"users", "{{user}}"}},
			Write:  [][]string{{"users", "{{user}}", "notes"}, {"teams", "{{team}}"}},
			Extract: &runspec.MemoryExtract{Namespace: []string{"users", "{{user}}", "facts"}, Model: ptr("small"),
				Instructions: ptr("names and dates")},
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := &agentd.RunMemory{
		Pinned:  [][]string{{"users", "u-1@example.com", "profile"}, {"teams", "blue"}},
		Search:  [][]string{{"users", "u-1@example.com"}},
		Write:   [][]string{{"users", "u-1@example.com", "notes"}, {"teams", "blue"}},
		Extract: &agentd.RunMemoryExtract{Namespace: []string{"users", "u-1@example.com", "facts"}, Model: "small", Instructions: "names and dates"},
	}
	if spec.Params.User != "u-1@example.com" || !reflect.DeepEqual(spec.Params.Memory, want) {
		t.Fatalf("user %q, memory %+v", spec.Params.User, spec.Params.Memory)
	}
	spec, err = b.Build(runspec.Request{Input: user("hi"), InputText: true, Memory: &runspec.Memory{Off: true}})
	if err != nil || spec.Params.Memory == nil || !spec.Params.Memory.Off || spec.Params.Memory.Readable([]string{"x"}) {
		t.Fatalf("memory off: %+v, %v", spec.Params.Memory, err)
	}
}

// TestMemoryRefused: what a run's memory cannot be is refused, naming the
// field.
func TestMemoryRefused(t *testing.T) {
	b := builder(t, runspec.Defaults{Model: "m"})
	long := strings.Repeat("x", 129)
	for _, c := range []struct {
		name  string
		user  *string
		mem   runspec.Memory
		field string
	}{
		{"no user", nil, runspec.Memory{Pinned: [][]string{{"users", "{{user}}"}}}, "memory.pinned[0]"},
		{"no variable", ptr("u"), runspec.Memory{Search: [][]string{{"a"}, {"teams", "{{team}}"}}}, "memory.search[1]"},
		{"a slash in the user", ptr("a/b"), runspec.Memory{Pinned: [][]string{{"users", "{{user}}"}}}, "memory.pinned[0][1]"},
		{"a space", nil, runspec.Memory{Pinned: [][]string{{"my users"}}}, "memory.pinned[0][0]"},
		{"an empty segment", nil, runspec.Memory{Pinned: [][]string{{"users", ""}}}, "memory.pinned[0][1]"},
		{"a long segment", nil, runspec.Memory{Pinned: [][]string{{long}}}, "memory.pinned[0][0]"},
		{"no segment", nil, runspec.Memory{Pinned: [][]string{{}}}, "memory.pinned[0]"},
		{"nine segments", nil, runspec.Memory{Search: [][]string{strings.Split("a/b/c/d/e/f/g/h/i", "/")}}, "memory.search[0]"},
		{"stray braces", nil, runspec.Memory{Pinned: [][]string{{"{{user"}}}, "memory.pinned[0][0]"},
		{"write unread", ptr("u"), runspec.Memory{Pinned: [][]string{{"users", "{{user}}", "profile"}},
			Write: [][]string{{"users", "{{user}}"}}}, "memory.write[0]"},
		{"write another user's", ptr("u"), runspec.Memory{Search: [][]string{{"users", "{{user}}"}},
			Write: [][]string{{"users", "v"}}}, "memory.write[0]"},
		{"extract without namespace", nil, runspec.Memory{Extract: &runspec.MemoryExtract{}}, "memory.extract.namespace"},
		{"extract for no user", nil, runspec.Memory{Extract: &runspec.MemoryExtract{Namespace: []string{"{{user}}"}}},
			"memory.extract.namespace"},
		{"extract model", nil, runspec.Memory{Extract: &runspec.MemoryExtract{Namespace: []string{"a"}, Model: ptr(" ")}},
			"memory.extract.model"},
	} {
		_, err := b.Build(runspec.Request{Input: user("hi"), InputText: true, User: c.user, Memory: &c.mem})
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
	_, err := b.Build(runspec.Request{Input: user("hi"), InputText: true, User: ptr(strings.Repeat("u", runspec.MaxUserBytes+1))})
	if fe := (*runspec.FieldError)(nil); !errors.As(err, &fe) || fe.Field != "user" {
		t.Errorf("a long user: %v", err)
	}
}

// TestCheckMemory: an agent's definition's memory is checked before any
// run fills it: its placeholders stand, its shapes must hold.
func TestCheckMemory(t *testing.T) {
	ok := &runspec.Memory{Pinned: [][]string{{"users", "{{user}}"}}, Write: [][]string{{"users", "{{user}}", "notes"}}}
	if err := runspec.CheckMemory(ok); err != nil {
		t.Fatal(err)
	}
	bad := &runspec.Memory{Search: [][]string{{"users", "{{user}}"}}, Write: [][]string{{"teams", "{{user}}"}}}
	if fe := (*runspec.FieldError)(nil); !errors.As(runspec.CheckMemory(bad), &fe) || fe.Field != "memory.write[0]" {
		t.Fatalf("a write namespace that is not read: %v", runspec.CheckMemory(bad))
	}
	bad = &runspec.Memory{Pinned: [][]string{{"user {{user}}"}}}
	if fe := (*runspec.FieldError)(nil); !errors.As(runspec.CheckMemory(bad), &fe) || fe.Field != "memory.pinned[0][0]" {
		t.Fatalf("a space: %v", runspec.CheckMemory(bad))
	}
}
