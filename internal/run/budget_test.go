package run

import (
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
)

// TestBudgetUsesTheReportedCount: after a model call that reported its
// prompt tokens, the next call's estimate is that count plus the estimate
// of what was added; a compaction since, or a history that shrank, goes
// back to the estimate alone.
func TestBudgetUsesTheReportedCount(t *testing.T) {
	t.Parallel()
	msg := func(n int) llm.Message { return llm.TextMessage(llm.RoleUser, strings.Repeat("x", n)) }
	first := []llm.Message{msg(4000)}
	grown := []llm.Message{msg(4000), msg(400)}
	st := agentd.RunState{}
	var p sentPrompt
	if got, want := p.estimate(st, grown), compact.EstimateRequest(grown); got != want {
		t.Fatalf("nothing sent yet: %d, want the estimate %d", got, want)
	}
	// The model counted 1,500 more tokens than the bytes show (its tool
	// definitions, its framing).
	reported := compact.EstimateRequest(first) + 1500
	p.record(st, first, int64(reported))
	added := compact.EstimateRequest(grown) - compact.EstimateRequest(first)
	if got := p.estimate(st, grown); got != reported+added || added <= 0 {
		t.Fatalf("after a reported call: %d, want %d + %d", got, reported, added)
	}
	if got, want := p.estimate(st, []llm.Message{msg(10)}), compact.EstimateRequest([]llm.Message{msg(10)}); got != want {
		t.Fatalf("a shorter history: %d, want the estimate %d", got, want)
	}
	compacted := agentd.RunState{Compaction: &agentd.Compaction{CoversToSeq: 7}}
	if got, want := p.estimate(compacted, grown), compact.EstimateRequest(grown); got != want {
		t.Fatalf("after a compaction: %d, want the estimate %d", got, want)
	}
	p.record(st, first, 0) // a response without usage changes nothing
	if got := p.estimate(st, grown); got != reported+added {
		t.Fatalf("after a call without usage: %d", got)
	}
}
