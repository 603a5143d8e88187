package run_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// boundedEngine starts an engine on b's store with its own tools and
// bounds on tool calls.
func boundedEngine(t *testing.T, b *bundle, reg *tools.Registry, perStep, concurrency int) {
	t.Helper()
	b.start(t, run.Config{Tools: reg, LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond, Workers: 2,
		ToolCallsPerStep: perStep, ToolConcurrency: concurrency})
}

// TestToolCallsPastTheStepCapAreNotRun: of a step's calls, only the cap
// are planned and run; the model is told, in one tool message, that each
// of the others was not run, and the run goes on.
func TestToolCallsPastTheStepCapAreNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	boundedEngine(t, b, b.reg, 3, 0)
	input := strings.Repeat("/call calculator {\"expression\":\"1+1\"}\n", 5) + "/say done"
	r := b.wait(t, b.create(t, input, agentd.RunParams{}).ID, nil)
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if len(steps[0].Calls) != 3 {
		t.Fatalf("%d calls planned, want 3", len(steps[0].Calls))
	}
	msgs, _ := b.store.MessagesList(context.Background(), r.ConversationID, 0, 100)
	answered, refused := 0, 0
	for _, m := range msgs {
		for _, p := range m.Content {
			if p.Type != agentd.PartToolResult {
				continue
			}
			answered++
			if p.IsError && strings.Contains(p.Content, "at most 3 tool calls") {
				refused++
			}
		}
	}
	if answered != 5 || refused != 2 {
		t.Fatalf("%d calls answered, %d of them refused; want 5 and 2", answered, refused)
	}
}

// TestToolConcurrencyIsBounded: parallel calls of many runs make at most
// ToolConcurrency attempts at once on the instance, and all of them end.
func TestToolConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var inflight, peak atomic.Int64
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/slow": webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(30 * time.Millisecond)
		inflight.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})})
	hook, err := tools.NewWebhook(tools.WebhookConfig{Name: "slow", Description: "slow", URL: sink.URL + "/slow",
		Parameters: json.RawMessage(`{"type":"object"}`), Effect: agentd.EffectIdempotent}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(hook)
	if err != nil {
		t.Fatal(err)
	}
	boundedEngine(t, b, reg, 0, 2)
	input := strings.Repeat("/call slow {}\n", 6) + "/say done"
	ids := []string{b.create(t, input, agentd.RunParams{}).ID, b.create(t, input, agentd.RunParams{}).ID}
	for _, id := range ids {
		if r := b.wait(t, id, nil); r.Status != agentd.StatusCompleted {
			t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
		}
	}
	if p := peak.Load(); p > 2 || sink.Count("/slow") != 12 {
		t.Fatalf("%d attempts at once (cap 2), %d in all (want 12)", p, sink.Count("/slow"))
	}
}

// TestToolCallsPastTheRunCapEndTheRun: once a run has made as many tool
// calls as it may, the calls beyond are not run (the model is told), and
// a model that asks for more ends the run with tool_limit.
func TestToolCallsPastTheRunCapEndTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(t, run.Config{LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond, ToolCallsPerStep: 2, ToolCallsPerRun: 3})
	calc := "/call calculator {\"expression\":\"1+1\"}\n"
	r := b.wait(t, b.create(t, calc+calc+"/next\n"+calc+calc+"/next\n"+calc+"/say done", agentd.RunParams{}).ID, nil)
	if r.Status != agentd.StatusFailed || r.TerminalReason != agentd.ReasonToolLimit {
		t.Fatalf("run ended %s/%s, want failed/tool_limit", r.Status, r.TerminalReason)
	}
	steps, _ := b.store.StepsList(context.Background(), r.ID)
	if len(steps) != 3 || len(steps[0].Calls) != 2 || len(steps[1].Calls) != 1 || len(steps[2].Calls) != 0 {
		t.Fatalf("%d steps; calls per step not 2, 1, 0", len(steps))
	}
	msgs, _ := b.store.MessagesList(context.Background(), r.ConversationID, 0, 100)
	told := 0
	for _, m := range msgs {
		for _, p := range m.Content {
			if p.Type == agentd.PartToolResult && p.IsError && strings.Contains(p.Content, "a run may make at most 3") {
				told++
			}
		}
	}
	if told != 1 {
		t.Fatalf("the model was told %d times that a call past the run's cap was not run, want 1", told)
	}
}
