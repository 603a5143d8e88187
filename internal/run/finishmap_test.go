package run

import (
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
)

// Every finish reason of the model port has the domain's of the same
// words, and one the adapter did not know has none; the end of a final
// answer follows it.
func TestFinishOf(t *testing.T) {
	t.Parallel()
	for f, want := range map[llm.FinishReason]agentd.FinishReason{
		llm.FinishStop:          agentd.FinishStop,
		llm.FinishToolCalls:     agentd.FinishToolCalls,
		llm.FinishLength:        agentd.FinishLength,
		llm.FinishContentFilter: agentd.FinishContentFilter,
		llm.FinishUnknown:       "",
		"eos":                   "",
	} {
		if got := finishOf(f); got != want {
			t.Errorf("finishOf(%q) = %q, want %q", f, got, want)
		}
	}
	for f, want := range map[llm.FinishReason]agentd.Reason{
		llm.FinishStop:          agentd.ReasonCompleted,
		llm.FinishUnknown:       agentd.ReasonCompleted,
		llm.FinishLength:        agentd.ReasonMaxOutputTokens,
		llm.FinishContentFilter: agentd.ReasonContentFilter,
	} {
		if e := answerEnd(f); e.reason != want {
			t.Errorf("answerEnd(%q) ends %s/%s, want reason %s", f, e.status, e.reason, want)
		}
	}
}
