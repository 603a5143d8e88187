package run

import (
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
)

// TestManagedInstructionsOpenTheSystemPrompt: a run's tenant's managed
// instructions, as the run was created with them, open the one system
// message it is sent, before its own instructions; no more messages are
// sent for them, and a run without either sends no system message.
func TestManagedInstructionsOpenTheSystemPrompt(t *testing.T) {
	t.Parallel()
	user := agentd.Message{Seq: 1, Role: agentd.RoleUser, Status: agentd.MessageCompleted,
		Content: []agentd.Part{{Type: agentd.PartText, Text: "hi"}}}
	for _, c := range []struct {
		params agentd.RunParams
		want   string
	}{
		{agentd.RunParams{Instructions: "be brief", Managed: &agentd.RunManaged{Version: 2, Text: "never drop tables"}},
			"never drop tables\n\nbe brief"},
		{agentd.RunParams{Managed: &agentd.RunManaged{Version: 1, Text: "never drop tables"}}, "never drop tables"},
		{agentd.RunParams{Instructions: "be brief"}, "be brief"},
		{agentd.RunParams{}, ""},
	} {
		msgs := buildMessages(agentd.RunState{Run: agentd.Run{Params: c.params}, Messages: []agentd.Message{user}})
		var system string
		if msgs[0].Role == llm.RoleSystem {
			system = msgs[0].Parts[0].Text
		}
		if system != c.want || len(msgs) != 1+min(len(c.want), 1) {
			t.Errorf("%+v: system %q over %d messages, want %q", c.params, system, len(msgs), c.want)
		}
	}
}
