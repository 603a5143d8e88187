package agentd

import "strings"

// Role is who wrote a message.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
	RoleSystem    Role = "system"
)

// Roles lists every role.
func Roles() []Role { return []Role{RoleUser, RoleAssistant, RoleTool, RoleSystem} }

// PartType is the kind of one piece of a message's content.
type PartType string

// Part types.
const (
	PartText       PartType = "text"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
	// PartReasoning, in an assistant message, is a block of what the model
	// thought before that answer (extended thinking): Text with the
	// provider's Signature of it, or, redacted, the provider's opaque Data
	// alone. It is sent back to the model as it came, and never shown as
	// answer text (TextOf leaves it out).
	PartReasoning PartType = "reasoning"
)

// Part is one piece of a message's content: text, a tool call, or a tool
// result. It is agentd's own provider-neutral shape (DESIGN section 3).
type Part struct {
	Type       PartType `json:"type"`
	Text       string   `json:"text,omitempty"`
	ID         string   `json:"id,omitempty"`        // tool_call
	Name       string   `json:"name,omitempty"`      // tool_call
	Arguments  string   `json:"arguments,omitempty"` // tool_call: the model's JSON text
	ToolCallID string   `json:"tool_call_id,omitempty"`
	Content    string   `json:"content,omitempty"` // tool_result: JSON text given to the model
	IsError    bool     `json:"is_error,omitempty"`
	Signature  string   `json:"signature,omitempty"` // reasoning
	Data       string   `json:"data,omitempty"`      // reasoning: a redacted block's data
}

// TextOf is the text of parts: their text parts, joined with newlines.
func TextOf(parts []Part) string {
	var texts []string
	for _, p := range parts {
		if p.Type == PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Usage is token accounting, kept on runs and steps.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	ReasoningTokens   int64 `json:"reasoning_tokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens, ReasoningTokens: u.ReasoningTokens + v.ReasoningTokens}
}
