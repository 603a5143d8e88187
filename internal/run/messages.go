package run

import (
	"slices"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
)

// unansweredResult answers a tool call that has no committed result (its run
// ended before the tool finished): the model's API requires an answer for
// every call.
const unansweredResult = `{"error":"the tool call did not complete: its run ended first"}`

// buildMessages rebuilds the model's input from committed state: the
// run's system prompt (its tenant's managed instructions first, then its
// own, both as the run was created with them: a stable prefix), then the
// conversation's messages in order, as the latest compaction leaves them
// (compact.Visible).
func buildMessages(st agentd.RunState) []llm.Message {
	var out []llm.Message
	if system := st.Run.Params.SystemPrompt(); system != "" {
		out = append(out, llm.TextMessage(llm.RoleSystem, system))
	}
	// Calls of the latest assistant message not yet answered, in order. Call
	// ids may repeat across responses, so they are matched only against the
	// tool messages that directly follow their assistant message.
	var pending []string
	flush := func() {
		for _, id := range pending {
			out = append(out, toolMessage(llm.ToolResult(id, unansweredResult)))
		}
		pending = nil
	}
	for _, m := range compact.Visible(st.Messages, st.Compaction) {
		if m.Role != agentd.RoleTool {
			flush()
		}
		switch m.Role {
		case agentd.RoleTool:
			for _, p := range m.Content {
				if p.Type != agentd.PartToolResult {
					continue
				}
				out = append(out, toolMessage(llm.Part{Type: llm.PartToolResult, ToolCallID: p.ToolCallID, Text: p.Content, IsError: p.IsError}))
				if i := slices.Index(pending, p.ToolCallID); i >= 0 {
					pending = slices.Delete(pending, i, i+1)
				}
			}
		case agentd.RoleAssistant:
			msg := llm.Message{Role: llm.RoleAssistant, Parts: make([]llm.Part, 0, len(m.Content))}
			for _, p := range m.Content {
				switch p.Type {
				case agentd.PartText:
					msg.Parts = append(msg.Parts, llm.Text(p.Text))
				case agentd.PartToolCall:
					msg.Parts = append(msg.Parts, llm.Part{Type: llm.PartToolCall, Call: llm.ToolCall{ID: p.ID, Name: p.Name, Arguments: p.Arguments}})
					pending = append(pending, p.ID)
				case agentd.PartReasoning:
					msg.Parts = append(msg.Parts, llm.Reasoning(reasoningBlock(p)))
				}
			}
			out = append(out, msg)
		default:
			out = append(out, userMessage(m, st.Attachments))
		}
	}
	flush()
	return out
}

// stableBreakpoints are the indexes of msgs after which what the model is
// sent does not change until the next compaction: the compaction's
// summary (llm.Request.CacheBreakpoints; a provider with a prompt cache
// caches the prefix up to it). None without a compaction.
func stableBreakpoints(msgs []llm.Message) []int {
	for i, m := range msgs {
		if m.Role == llm.RoleSystem && i > 0 && len(m.Parts) == 1 && compact.IsSummary(m.Parts[0].Text) {
			return []int{i}
		}
	}
	return nil
}

// toolMessage is the tool message that gives the model result.
func toolMessage(result llm.Part) llm.Message {
	return llm.Message{Role: llm.RoleTool, Parts: []llm.Part{result}}
}

// reasoningBlock is the block of the model's thinking that part p keeps:
// a redacted one when it holds only the provider's data.
func reasoningBlock(p agentd.Part) llm.ReasoningBlock {
	if p.Data != "" && p.Text == "" && p.Signature == "" {
		return llm.ReasoningBlock{Type: llm.ReasoningRedacted, Data: p.Data}
	}
	return llm.ReasoningBlock{Type: llm.ReasoningThinking, Text: p.Text, Signature: p.Signature}
}
