package api_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

// memoryRunBody is what the memory tests read of a run.
type memoryRunBody struct {
	ID                  string            `json:"id"`
	User                *string           `json:"user"`
	Memory              *agentd.RunMemory `json:"memory"`
	ManagedInstructions *struct {
		Version int `json:"version"`
	} `json:"managed_instructions"`
}

// TestRunUserAndMemory: POST /runs takes a run's user and its memory,
// whose namespaces (lists or paths) are filled with the user and the
// run's variables when it is created and shown filled; an agent's memory
// is its runs', which a run's own replaces, or "memory": false turns off;
// a schedule's template is checked as a run.
func TestRunUserAndMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := want[memoryRunBody](t, b.do("POST", "/runs", `{"input": "hi", "user": "ann@example.com", "variables": {"team": "blue"},
		"memory": {"pinned": ["users/{{user}}/profile", ["teams", "{{ team }}"]], "search": [["users", "{{user}}"]],
		"write": [["users", "{{user}}", "notes"]], "extract": {"namespace": "users/{{user}}/facts", "model": "small"}}}`), http.StatusAccepted)
	wantMem := &agentd.RunMemory{
		Pinned: [][]string{{"users", "ann@example.com", "profile"}, {"teams", "blue"}},
		Search: [][]string{{"users", "ann@example.com"}}, Write: [][]string{{"users", "ann@example.com", "notes"}},
		Extract: &agentd.RunMemoryExtract{Namespace: []string{"users", "ann@example.com", "facts"}, Model: "small"},
	}
	if r.User == nil || *r.User != "ann@example.com" || !reflect.DeepEqual(r.Memory, wantMem) {
		t.Fatalf("run: user %v, memory %+v", r.User, r.Memory)
	}
	if got := want[memoryRunBody](t, b.do("GET", "/runs/"+r.ID, ""), http.StatusOK); !reflect.DeepEqual(got, r) {
		t.Fatalf("read back: %+v, want %+v", got, r)
	}
	plain := want[memoryRunBody](t, b.do("POST", "/runs", `{"input": "hi"}`), http.StatusAccepted)
	if plain.User != nil || plain.Memory != nil || plain.ManagedInstructions != nil {
		t.Fatalf("a run without them: %+v", plain)
	}

	want[json.RawMessage](t, b.do("POST", "/agents", `{"name": "rememberer", "instructions": "hi",
		"memory": {"pinned": [["users", "{{user}}"]], "write": [["users", "{{user}}", "notes"]]}}`), http.StatusCreated)
	r = want[memoryRunBody](t, b.do("POST", "/runs", `{"agent": "rememberer", "user": "bob", "input": "hi"}`), http.StatusAccepted)
	if r.Memory == nil || !reflect.DeepEqual(r.Memory.Pinned, [][]string{{"users", "bob"}}) ||
		!reflect.DeepEqual(r.Memory.Write, [][]string{{"users", "bob", "notes"}}) {
		t.Fatalf("the agent's memory for bob: %+v", r.Memory)
	}
	r = want[memoryRunBody](t, b.do("POST", "/runs", `{"agent": "rememberer", "user": "bob", "input": "hi", "memory": false}`),
		http.StatusAccepted)
	if r.Memory == nil || !r.Memory.Off || len(r.Memory.Pinned)+len(r.Memory.Write) != 0 {
		t.Fatalf("memory false: %+v", r.Memory)
	}
	r = want[memoryRunBody](t, b.do("POST", "/runs", `{"agent": "rememberer", "input": "hi", "memory": {"search": ["org"]}}`),
		http.StatusAccepted)
	if r.Memory == nil || !reflect.DeepEqual(r.Memory.Search, [][]string{{"org"}}) || r.Memory.Pinned == nil || len(r.Memory.Pinned) != 0 {
		t.Fatalf("a run's own memory over the agent's: %+v", r.Memory)
	}
	if p := wantProblem(t, b.do("POST", "/runs", `{"agent": "rememberer", "input": "hi"}`), http.StatusUnprocessableEntity,
		"invalid_field"); p.Field != "memory.pinned[0]" || !strings.Contains(p.Detail, "no user") {
		t.Fatalf("the agent's {{user}} without a user: %+v", p)
	}
	p := wantProblem(t, b.do("POST", "/schedules", `{"name": "nightly", "cron": "@daily", "paused": true,
		"run": {"agent": "rememberer", "input": "hi"}}`), http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "run.memory.pinned[0]" {
		t.Fatalf("a schedule's template without a user: %+v", p)
	}
	want[json.RawMessage](t, b.do("POST", "/schedules", `{"name": "nightly", "cron": "@daily", "paused": true,
		"run": {"agent": "rememberer", "user": "bob", "input": "hi"}}`), http.StatusCreated)
}

// TestRunMemoryRefused: a run's user and memory that cannot be are
// refused, naming the field; so is an agent's memory whose shapes cannot
// hold, when it is saved.
func TestRunMemoryRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ body, field string }{
		{`"memory": {"pinned": [["users", "{{user}}"]]}`, "memory.pinned[0]"},
		{`"user": "u", "memory": {"search": ["org", "teams/{{team}}"]}`, "memory.search[1]"},
		{`"user": "u", "memory": {"pinned": [["users", "{{user}}", "profile"]], "write": [["users", "{{user}}"]]}`, "memory.write[0]"},
		{`"user": "u", "memory": {"search": [["users", "{{user}}"]], "write": [["users", "eve"]]}`, "memory.write[0]"},
		{`"user": "a b", "memory": {"pinned": [["users", "{{user}}"]]}`, "memory.pinned[0][1]"},
		{`"user": "../x", "memory": {"pinned": ["users/{{user}}"]}`, "memory.pinned[0][1]"},
		{`"memory": {"pinned": ["a/b/c/d/e/f/g/h/i"]}`, "memory.pinned[0]"},
		{`"memory": {"pinned": ["users//x"]}`, "memory.pinned[0][1]"},
		{`"memory": {"pinned": [5]}`, "memory.pinned[0]"},
		{`"memory": {"pinned": [[]]}`, "memory.pinned[0]"},
		{`"memory": {"extract": {"model": "small"}}`, "memory.extract.namespace"},
		{`"memory": {"recall": []}`, "memory.recall"},
		{`"memory": true`, "memory"},
		{`"user": "` + strings.Repeat("u", 257) + `"`, "user"},
	} {
		p := wantProblem(t, b.do("POST", "/runs", `{"input": "hi", `+c.body+`}`), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Errorf("%s: refused naming %q (%s), want %q", c.body, p.Field, p.Detail, c.field)
		}
	}
	p := wantProblem(t, b.do("POST", "/agents", `{"name": "leaky", "memory": {"search": [["users", "{{user}}"]],
		"write": [["teams", "{{user}}"]]}}`), http.StatusUnprocessableEntity, "invalid_field")
	if p.Field != "memory.write[0]" {
		t.Fatalf("an agent writing what it cannot read: %+v", p)
	}
}

// TestManagedInstructionsPerTenant: an admin sets a tenant's managed
// instructions, versioned; the tenant's runs created afterwards record
// the version they were given, another tenant's none; the text is
// bounded; keys without the admin scope may not read or change them.
func TestManagedInstructionsPerTenant(t *testing.T) {
	f := newTenantFixture(t)
	asA := []string{"X-Tenant-ID", tenantA}
	for i, text := range []string{"Never write to production.", "Answer in French."} {
		v := want[agentd.InstructionsView](t, f.do("admin", "PUT", "/instructions", `{"text": "`+text+`"}`, asA...), http.StatusOK)
		if v.Version != i+1 || v.Text == nil || *v.Text != text || v.TenantID != tenantA || v.UpdatedBy == nil {
			t.Fatalf("put %d: %+v", i, v)
		}
	}
	if v := want[agentd.InstructionsView](t, f.do("admin", "GET", "/instructions", "", "X-Tenant-ID", tenantB), http.StatusOK); v.Text != nil || v.Version != 0 {
		t.Fatalf("tenant B has A's instructions: %+v", v)
	}
	ra := want[memoryRunBody](t, f.do("a", "POST", "/runs", `{"input": "hi"}`), http.StatusAccepted)
	rb := want[memoryRunBody](t, f.do("b", "POST", "/runs", `{"input": "hi"}`), http.StatusAccepted)
	if ra.ManagedInstructions == nil || ra.ManagedInstructions.Version != 2 || rb.ManagedInstructions != nil {
		t.Fatalf("A's run %+v, B's run %+v", ra.ManagedInstructions, rb.ManagedInstructions)
	}
	for _, body := range []string{`{"text": ""}`, `{}`, `{"text": "` + strings.Repeat("x", agentd.MaxManagedInstructionsBytes+1) + `"}`} {
		if p := wantProblem(t, f.do("admin", "PUT", "/instructions", body, asA...), http.StatusUnprocessableEntity, "invalid_field"); p.Field != "text" {
			t.Fatalf("%.40s: %+v", body, p)
		}
	}
	for _, key := range []string{"a", "a-write", "b"} {
		wantProblem(t, f.do(key, "PUT", "/instructions", `{"text": "mine"}`), http.StatusForbidden, "insufficient_scope")
		wantProblem(t, f.do(key, "GET", "/instructions", ""), http.StatusForbidden, "insufficient_scope")
	}
	if r := f.do("admin", "DELETE", "/instructions", "", asA...); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if v := want[agentd.InstructionsView](t, f.do("admin", "GET", "/instructions", "", asA...), http.StatusOK); v.Text != nil || v.Version != 3 {
		t.Fatalf("deleted: %+v", v)
	}
	if r := want[memoryRunBody](t, f.do("a", "POST", "/runs", `{"input": "hi"}`), http.StatusAccepted); r.ManagedInstructions != nil {
		t.Fatalf("a run after the delete: %+v", r.ManagedInstructions)
	}
	if r := want[memoryRunBody](t, f.do("a", "GET", "/runs/"+ra.ID, ""), http.StatusOK); r.ManagedInstructions == nil || r.ManagedInstructions.Version != 2 {
		t.Fatalf("the run before the delete: %+v", r.ManagedInstructions)
	}
}
