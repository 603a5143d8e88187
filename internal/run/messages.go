package run

import (
	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
)

// unansweredResult answers a tool call that has no committed result (its run
// ended before the tool finished): the model's API requires an answer for
// every call.
const unansweredResult = `{"error":"the tool call did not complete: its run ended first"}`

// buildMessages rebuilds the model's input from committed state: the run's
// instructions, then the conversation's messages in order, as the latest
// compaction leaves them (compact.Visible).
func buildMessages(st agentd.RunState) []llm.Message {
	var out []llm.Message
	if st.Run.Params.Instructions != "" {
		out = append(out, llm.Message{Role: llm.RoleSystem, Content: st.Run.Params.Instructions})
	}
	// Calls of the latest assistant message not yet answered, in order. Call
	// ids may repeat across responses, so they are matched only against the
	// tool messages that directly follow their assistant message.
	var pending []string
	flush := func() {
		for _, id := range pending {
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: unansweredResult})
		}
		pending = nil
	}
	for _, m := range compact.Visible(st.Messages, st.Compaction) {
		if m.Role != "tool" {
			flush()
		}
		switch m.Role {
		case "tool":
			for _, p := range m.Content {
				if p.Type != "tool_result" {
					continue
				}
				out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: p.ToolCallID, Content: p.Content})
				for i, id := range pending {
					if id == p.ToolCallID {
						pending = append(pending[:i], pending[i+1:]...)
						break
					}
				}
			}
		case "assistant":
			msg := llm.Message{Role: llm.RoleAssistant}
			for _, p := range m.Content {
				switch p.Type {
				case "text":
					msg.Content += p.Text
				case "tool_call":
					msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: p.ID, Name: p.Name, Arguments: p.Arguments})
					pending = append(pending, p.ID)
				}
			}
			out = append(out, msg)
		default:
			var text string
			for _, p := range m.Content {
				if p.Type == "text" {
					text += p.Text
				}
			}
			out = append(out, llm.Message{Role: llm.Role(m.Role), Content: text})
		}
	}
	flush()
	return out
}
