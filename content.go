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
	// PartImage, in a user message, is an image: by URL (an http(s) URL
	// agentd passes on without fetching it), or stored once as an
	// artifact (ArtifactID, with its MediaType and Size), never inline.
	// Detail is the resolution asked of the model (ImageDetails), "" for
	// its default.
	PartImage PartType = "image"
	// PartFile, in a user message, is a document (a PDF or a text file),
	// stored once as an artifact (ArtifactID, MediaType, Size), with the
	// Filename it was sent under.
	PartFile PartType = "file"
)

// Resolutions an image part may ask of the model (Part.Detail).
const (
	DetailAuto = "auto"
	DetailLow  = "low"
	DetailHigh = "high"
)

// ImageDetails lists the resolutions an image part may ask for.
func ImageDetails() []string { return []string{DetailAuto, DetailLow, DetailHigh} }

// Part is one piece of a message's content: text, a tool call, a tool
// result, the model's reasoning, an image or a file. It is agentd's own
// provider-neutral shape (DESIGN section 3): an image or a file holds a
// reference to its bytes (an artifact of the run whose input it was),
// never the bytes.
type Part struct {
	Type       PartType `json:"type"`
	Text       string   `json:"text,omitempty"`
	ID         string   `json:"id,omitempty"`        // tool_call
	Name       string   `json:"name,omitempty"`      // tool_call
	Arguments  string   `json:"arguments,omitempty"` // tool_call: the model's JSON text
	ToolCallID string   `json:"tool_call_id,omitempty"`
	Content    string   `json:"content,omitempty"` // tool_result: JSON text given to the model
	IsError    bool     `json:"is_error,omitempty"`
	Signature  string   `json:"signature,omitempty"`   // reasoning
	Data       string   `json:"data,omitempty"`        // reasoning: a redacted block's data
	ArtifactID string   `json:"artifact_id,omitempty"` // image, file: the artifact that holds its bytes
	MediaType  string   `json:"media_type,omitempty"`  // image, file: of the artifact
	Size       int64    `json:"size,omitempty"`        // image, file: the artifact's bytes
	Filename   string   `json:"filename,omitempty"`    // file (an image's, when it came with one)
	URL        string   `json:"url,omitempty"`         // image: an http(s) URL, not fetched by agentd
	Detail     string   `json:"detail,omitempty"`      // image: auto, low or high
}

// Attached reports whether p is an image or a file: content the model
// takes beside text.
func (p Part) Attached() bool { return p.Type == PartImage || p.Type == PartFile }

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
