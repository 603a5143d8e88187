package responses

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/agentd/agentd"
)

// Response is the Responses API's response object. Every field OpenAI's
// has is present; those agentd has no value for are null or their
// documented default.
type Response struct {
	ID                 string           `json:"id"`
	Object             string           `json:"object"` // "response"
	CreatedAt          int64            `json:"created_at"`
	CompletedAt        *int64           `json:"completed_at"`
	Status             string           `json:"status"`
	Background         bool             `json:"background"`
	Error              *Error           `json:"error"`
	IncompleteDetails  *Incomplete      `json:"incomplete_details"`
	Instructions       *string          `json:"instructions"`
	MaxOutputTokens    *int             `json:"max_output_tokens"`
	MaxToolCalls       *int             `json:"max_tool_calls"`
	Model              string           `json:"model"`
	Output             []Item           `json:"output"`
	ParallelToolCalls  bool             `json:"parallel_tool_calls"`
	PreviousResponseID *string          `json:"previous_response_id"`
	Conversation       *ConversationRef `json:"conversation"`
	Reasoning          Reasoning        `json:"reasoning"`
	// Warnings say what agentd did otherwise than the request asked (a
	// hosted tool it left out); absent when none. Not OpenAI's.
	Warnings         []Warning         `json:"warnings,omitempty"`
	ServiceTier      string            `json:"service_tier"`
	Store            bool              `json:"store"`
	Temperature      float64           `json:"temperature"`
	Text             TextConfig        `json:"text"`
	ToolChoice       json.RawMessage   `json:"tool_choice"`
	Tools            []json.RawMessage `json:"tools"`
	TopLogprobs      int               `json:"top_logprobs"`
	TopP             float64           `json:"top_p"`
	FrequencyPenalty float64           `json:"frequency_penalty"`
	PresencePenalty  float64           `json:"presence_penalty"`
	Truncation       string            `json:"truncation"`
	Usage            *Usage            `json:"usage"`
	User             *string           `json:"user"`
	SafetyIdentifier *string           `json:"safety_identifier"`
	PromptCacheKey   *string           `json:"prompt_cache_key"`
	Metadata         map[string]string `json:"metadata"`
	// Prompt is the agent a response started from (its request's
	// prompt): its name as id, its version, and the variables its
	// instructions were filled with; absent for a response of none.
	Prompt *Prompt `json:"prompt,omitempty"`
}

// Prompt is the prompt of a response: an agent of agentd.
type Prompt struct {
	ID        string            `json:"id"`
	Version   string            `json:"version"`
	Variables map[string]string `json:"variables"`
}

// Statuses of a response.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
	StatusIncomplete = "incomplete"
)

// Error is a failed response's error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Incomplete says why a response is incomplete.
type Incomplete struct {
	Reason string `json:"reason"`
}

// ConversationRef names the conversation a response belongs to.
type ConversationRef struct {
	ID string `json:"id"`
}

// Reasoning is the request's reasoning configuration: agentd sends none.
type Reasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// TextConfig is the response's text configuration.
type TextConfig struct {
	Format    json.RawMessage `json:"format"`
	Verbosity string          `json:"verbosity"`
}

// Usage is a response's token accounting.
type Usage struct {
	InputTokens         int64        `json:"input_tokens"`
	InputTokensDetails  InputDetail  `json:"input_tokens_details"`
	OutputTokens        int64        `json:"output_tokens"`
	OutputTokensDetails OutputDetail `json:"output_tokens_details"`
	TotalTokens         int64        `json:"total_tokens"`
}

// InputDetail details a response's input tokens.
type InputDetail struct {
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"` // agentd's models do not say
}

// OutputDetail details a response's output tokens.
type OutputDetail struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// Item is an output item (or an input item, as listed): a message, or a
// function call or its output.
type Item struct {
	ID     string `json:"id"`
	Type   string `json:"type"` // ItemMessage, ItemFunctionCall, ...
	Status string `json:"status,omitempty"`
	// A message's.
	Role    string    `json:"role,omitempty"`
	Content []Content `json:"content,omitzero"`
	// A reasoning item's: what the model thought, as a summary (when the
	// request asked for one), and its encrypted_content (when the request
	// included it), which a client that keeps its history sends back.
	Summary          []Content `json:"summary,omitzero"`
	EncryptedContent *string   `json:"encrypted_content,omitempty"`
	// A custom tool call's input.
	Input *string `json:"input,omitempty"`
	// A function call's.
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
	// Namespace is the namespace tool a function call's function is one
	// of ("" for none).
	Namespace string `json:"namespace,omitempty"`
	// A function call output's, or the result of an mcp_call.
	Output *string `json:"output,omitempty"`
	// An mcp_call's (a call of one of the operator's tools): its
	// server_label, and its error when it failed.
	ServerLabel string          `json:"server_label,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	// An mcp_approval_response's (an input item): the decision on an
	// mcp_approval_request.
	ApprovalRequestID string  `json:"approval_request_id,omitempty"`
	Approve           *bool   `json:"approve,omitempty"`
	Reason            *string `json:"reason,omitempty"`
}

// Item types.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
	ItemMCPCall            = "mcp_call"
	ItemReasoning          = "reasoning"
	// A call of a custom tool (its input a text), and its output.
	ItemCustomToolCall       = "custom_tool_call"
	ItemCustomToolCallOutput = "custom_tool_call_output"
	// Tools a client offers in its input (Codex's), not an item of the
	// conversation.
	ItemAdditionalTools = "additional_tools"
	// A call of one of the operator's tools that waits for the client's
	// approval, and the input item that decides it.
	ItemMCPApprovalRequest  = "mcp_approval_request"
	ItemMCPApprovalResponse = "mcp_approval_response"
)

// Content is a part of a message: output_text of an answer, input_text of
// an input message.
type Content struct {
	Type        string            `json:"type"`
	Text        string            `json:"text"`
	Annotations []json.RawMessage `json:"annotations,omitzero"`
	Logprobs    []json.RawMessage `json:"logprobs,omitzero"`
	// An input_image's URL (its own, or agentd's route to the artifact
	// that holds it) and detail; an input_file's filename and URL (the
	// artifact's route).
	ImageURL, Detail, Filename, FileURL string `json:"-"`
}

// MarshalJSON writes an input_image or an input_file as the Responses API
// lists them (without text), any other part as it is.
func (c Content) MarshalJSON() ([]byte, error) {
	type plain Content
	switch c.Type {
	case "input_image":
		return json.Marshal(struct {
			Type     string  `json:"type"`
			ImageURL string  `json:"image_url"`
			Detail   string  `json:"detail"`
			FileID   *string `json:"file_id"`
		}{c.Type, c.ImageURL, c.Detail, nil})
	case "input_file":
		return json.Marshal(struct {
			Type     string  `json:"type"`
			Filename string  `json:"filename,omitempty"`
			FileURL  string  `json:"file_url"`
			FileID   *string `json:"file_id"`
		}{c.Type, c.Filename, c.FileURL, nil})
	}
	return json.Marshal(plain(c))
}

// contentOf is the content of a stored input message as input items show
// it: its text, or each of its parts, its images and files by URL (an
// image's own, or the route of the artifact that holds it).
func contentOf(m agentd.Message) []Content {
	if !slices.ContainsFunc(m.Content, agentd.Part.Attached) {
		return []Content{{Type: "input_text", Text: agentd.TextOf(m.Content)}}
	}
	out := make([]Content, 0, len(m.Content))
	for _, p := range m.Content {
		route := "/runs/" + m.RunID + "/artifacts/" + p.ArtifactID
		switch p.Type {
		case agentd.PartText:
			out = append(out, Content{Type: "input_text", Text: p.Text})
		case agentd.PartImage:
			c := Content{Type: "input_image", ImageURL: p.URL, Detail: cmp.Or(p.Detail, agentd.DetailAuto)}
			if p.ArtifactID != "" {
				c.ImageURL = route
			}
			out = append(out, c)
		case agentd.PartFile:
			out = append(out, Content{Type: "input_file", Filename: p.Filename, FileURL: route})
		}
	}
	return out
}

// outputText is an output_text part with text.
func outputText(text string) Content {
	return Content{Type: "output_text", Text: text, Annotations: []json.RawMessage{}, Logprobs: []json.RawMessage{}}
}

// Deleted is the answer of a DELETE.
type Deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// List is a page of items, as OpenAI pages them.
type List struct {
	Object  string  `json:"object"` // "list"
	Data    []Item  `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// InputItem is an input message as input_items lists it: an output of a
// function call, or a message.
func InputItem(m agentd.Message) Item {
	if m.Role == agentd.RoleTool {
		for _, p := range m.Content {
			if p.Type == agentd.PartToolResult {
				return Item{ID: prefixFunctionCallOutput + hexOf(m.ID), Type: ItemFunctionCallOutput, Status: StatusCompleted,
					CallID: p.ToolCallID, Output: ptr(p.Content)}
			}
		}
	}
	role := string(m.Role)
	return Item{ID: prefixMessage + hexOf(m.ID), Type: ItemMessage, Status: StatusCompleted, Role: role,
		Content: contentOf(m)}
}

// ApprovalItems are the mcp_approval_response items of a run's input: the
// decisions it brought (agentd.RunParams.Approvals).
func ApprovalItems(run agentd.Run) []Item {
	items := make([]Item, 0, len(run.Params.Approvals))
	for _, d := range run.Params.Approvals {
		it := Item{ID: prefixApprovalResponse + hexOf(d.ToolCallID), Type: ItemMCPApprovalResponse,
			ApprovalRequestID: ApprovalRequestID(d.ToolCallID), Approve: ptr(d.Approve)}
		if d.Reason != "" {
			it.Reason = ptr(d.Reason)
		}
		items = append(items, it)
	}
	return items
}

// ResultCallID is the call id that a tool message answers ("" for none).
func ResultCallID(m agentd.Message) string {
	for _, p := range m.Content {
		if p.Type == agentd.PartToolResult {
			return p.ToolCallID
		}
	}
	return ""
}

// Page is a page of items (given oldest first) in order ("asc" or
// "desc"), after or before the item with that id, at most limit of them.
func Page(items []Item, order, after, before string, limit int) (List, error) {
	if order == "desc" {
		items = slices.Clone(items)
		slices.Reverse(items)
	}
	start, end := 0, len(items)
	if after != "" {
		i := slices.IndexFunc(items, func(it Item) bool { return it.ID == after })
		if i < 0 {
			return List{}, field("after", "%q is not an item of this list", after)
		}
		start = i + 1
	}
	if before != "" {
		i := slices.IndexFunc(items, func(it Item) bool { return it.ID == before })
		if i < 0 {
			return List{}, field("before", "%q is not an item of this list", before)
		}
		end = i
	}
	if start > end {
		start = end
	}
	page := items[start:end]
	more := len(page) > limit
	if more {
		page = page[:limit]
	}
	l := List{Object: "list", Data: append([]Item{}, page...), HasMore: more}
	if len(page) > 0 {
		l.FirstID, l.LastID = &page[0].ID, &page[len(page)-1].ID
	}
	return l, nil
}
