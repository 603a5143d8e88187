package run

import (
	"slices"
	"testing"

	"github.com/agentd/agentd"
)

// TestStableBreakpointIsTheSummary: the model is told that what it is sent
// up to a compaction's summary stays as it is (a prompt cache's breakpoint
// there); without a compaction, nothing is said, and a system message of
// the run's own is not taken for a summary.
func TestStableBreakpointIsTheSummary(t *testing.T) {
	t.Parallel()
	msg := func(seq int, role agentd.Role, text string) agentd.Message {
		return agentd.Message{Seq: seq, Role: role, Status: agentd.MessageCompleted,
			Content: []agentd.Part{{Type: agentd.PartText, Text: text}}}
	}
	st := agentd.RunState{Run: agentd.Run{Params: agentd.RunParams{Instructions: "be brief"}},
		Messages: []agentd.Message{msg(1, agentd.RoleUser, "first"), msg(2, agentd.RoleAssistant, "one"),
			msg(3, agentd.RoleSystem, "a system note"), msg(4, agentd.RoleUser, "second"), msg(5, agentd.RoleAssistant, "two")}}
	if got := stableBreakpoints(buildMessages(st)); got != nil {
		t.Fatalf("without a compaction: %v, want none", got)
	}
	st.Compaction = &agentd.Compaction{CoversToSeq: 3, Summary: "they said one"}
	msgs := buildMessages(st)
	// instructions, the first user message, the summary, then seq 4 and 5
	if got := stableBreakpoints(msgs); !slices.Equal(got, []int{2}) || len(msgs) != 5 {
		t.Fatalf("with a compaction: %v over %d messages, want [2] (the summary)", got, len(msgs))
	}
}
