package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools"
)

// toolByName returns the memory tool called name.
func toolByName(t *testing.T, svc *memory.Service, name string) tools.Tool {
	t.Helper()
	for _, tool := range svc.Tools() {
		if tool.Spec().Name == name {
			return tool
		}
	}
	t.Fatalf("no memory tool %s", name)
	return nil
}

// call invokes a memory tool as run r's call, with a call id of its own.
func call(t *testing.T, svc *memory.Service, r *agentd.Run, name, args string) (json.RawMessage, error) {
	t.Helper()
	tool := toolByName(t, svc, name)
	if err := tools.ValidateArgs(name, tool.Spec().Parameters, []byte(args)); err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	return tool.Invoke(context.Background(), tools.Call{RunID: r.ID, CallID: "c", Attempt: 1, Arguments: json.RawMessage(args),
		Run: r, Step: 1, ToolCallID: agentd.NewID()})
}

// TestToolsStayInTheRunsTenantAndNamespaces: the memory tools act within
// their call's run: its tenant (another tenant's items under the same
// namespace are never found or changed), its namespaces (a namespace it
// does not reach is refused by name, a search of its own finds nothing
// of another user's, however the query ranks them), and its fork's
// overlay (what it writes there real memory never shows).
func TestToolsStayInTheRunsTenantAndNamespaces(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	svc := memory.New(memory.Config{Store: store})
	ctx := context.Background()
	for _, tenant := range []string{"t1", "t2"} {
		for _, user := range []string{"ann", "bob"} {
			if _, err := svc.Put(ctx, tenant, agentd.MemoryWrite{Namespace: agentd.Namespace{"users", user}, Key: "secret",
				Value: "the " + tenant + " secret of " + user, Source: agentd.MemoryFromAPI}); err != nil {
				t.Fatal(err)
			}
		}
	}
	runOf := func(tenant, user string) *agentd.Run {
		ns := []string{"users", user}
		return &agentd.Run{ID: agentd.NewID(), TenantID: tenant, CreatedBy: "local", Params: agentd.RunParams{
			Memory: &agentd.RunMemory{Search: [][]string{ns}, Write: [][]string{ns}}}}
	}
	ann1 := runOf("t1", "ann")
	out, err := call(t, svc, ann1, agentd.MemorySearchTool, `{"query": "secret", "limit": 20}`)
	if err != nil || !strings.Contains(string(out), "the t1 secret of ann") || strings.Count(string(out), `"key"`) != 1 {
		t.Fatalf("ann's search in t1: %s %v", out, err)
	}
	for _, args := range []string{`{"query": "secret bob", "namespace": "users/bob"}`, `{"query": "secret", "namespace": "users"}`} {
		if _, err := call(t, svc, ann1, agentd.MemorySearchTool, args); !isFinal(err, "is not one this run may search") {
			t.Fatalf("ann's search %s: %v", args, err)
		}
	}
	for name, args := range map[string]string{agentd.MemoryWriteTool: `{"namespace": "users/bob", "key": "secret", "value": "x"}`,
		agentd.MemoryDeleteTool: `{"namespace": "users/bob", "key": "secret"}`} {
		if _, err := call(t, svc, ann1, name, args); !isFinal(err, `"users/bob" is not one this run may write`) {
			t.Fatalf("ann's %s of bob's item: %v", name, err)
		}
	}
	// ann's write in t2 changes t2's item alone.
	if _, err := call(t, svc, runOf("t2", "ann"), agentd.MemoryWriteTool, `{"key": "secret", "value": "changed"}`); err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]string{"t1": "the t1 secret of ann", "t2": "changed"} {
		it, err := svc.Get(ctx, tenant, agentd.Namespace{"users", "ann"}, "secret", agentd.MemoryRead{})
		if err != nil || it.Value != want {
			t.Fatalf("%s's item: %+v %v, want %q", tenant, it, err, want)
		}
	}
	// Under a fork's overlay: the write is the overlay's.
	fork := runOf("t1", "ann")
	base := time.Now()
	fork.Params.Memory.Overlay, fork.Params.Memory.Base = agentd.NewID(), &base
	if _, err := call(t, svc, fork, agentd.MemoryWriteTool, `{"key": "secret", "value": "forked"}`); err != nil {
		t.Fatal(err)
	}
	if out, _ := call(t, svc, fork, agentd.MemorySearchTool, `{"query": "secret forked"}`); !strings.Contains(string(out), "forked") {
		t.Fatalf("the fork's search: %s", out)
	}
	if it, _ := svc.Get(ctx, "t1", agentd.Namespace{"users", "ann"}, "secret", agentd.MemoryRead{}); it.Value != "the t1 secret of ann" {
		t.Fatalf("real memory after the fork's write: %+v", it)
	}
	// A run without memory reaches nothing.
	if _, err := call(t, svc, &agentd.Run{ID: agentd.NewID(), TenantID: "t1"}, agentd.MemorySearchTool, `{"query": "secret"}`); !isFinal(err, "no memory") {
		t.Fatalf("a run without memory: %v", err)
	}
}

// isFinal reports whether err is a final tool error whose message holds
// want.
func isFinal(err error, want string) bool {
	var te *tools.Error
	return errors.As(err, &te) && te.Kind == tools.KindFinal && strings.Contains(te.Message, want)
}
