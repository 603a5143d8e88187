package fakeanthropic

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// refusal is an error answer: its status, Anthropic's error type and
// message, and a retry-after header when it has one.
type refusal struct {
	status     int
	typ        string
	msg        string
	retryAfter string
}

func invalid(msg string) *refusal {
	return &refusal{status: http.StatusBadRequest, typ: "invalid_request_error", msg: msg}
}

func (f *refusal) write(w http.ResponseWriter) {
	var e apiError
	e.Type, e.Error.Type, e.Error.Message = "error", f.typ, f.msg
	b, _ := json.Marshal(e) // our own types always encode
	if f.retryAfter != "" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = w.Write(b)
}

// signingKey signs the fake's thinking: a constant, so that a signature
// holds across servers and processes, as a real one does across the
// API's.
var signingKey = []byte("agentd fakeanthropic thinking")

// sign returns the signature of a thinking block of text (or, with
// redacted, the data of a redacted one).
func sign(kind, text string) string {
	mac := hmac.New(sha256.New, signingKey)
	mac.Write([]byte(kind + "\x00" + text))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// redactedData is the data of a redacted thinking block of text: the text,
// encoded, and its signature.
func redactedData(text string) string {
	return base64.StdEncoding.EncodeToString([]byte(text)) + "." + sign("redacted", text)
}

// validRedacted reports whether data is the fake's own redacted thinking.
func validRedacted(data string) bool {
	enc, sig, ok := strings.Cut(data, ".")
	raw, err := base64.StdEncoding.DecodeString(enc)
	return ok && err == nil && hmac.Equal([]byte(sig), []byte(sign("redacted", string(raw))))
}

// refuse checks what the real API checks of a request, in the order the
// package doc gives; nil when the request is valid.
func refuse(req *request) *refusal {
	if req.MaxTokens == nil {
		return invalid("max_tokens: Field required")
	}
	if *req.MaxTokens < 1 {
		return invalid(fmt.Sprintf("max_tokens: Input should be greater than or equal to 1, got %d", *req.MaxTokens))
	}
	if t := req.Thinking; t.on() && t.Type == "enabled" {
		if t.BudgetTokens < 1024 {
			return invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		}
		if *req.MaxTokens <= t.BudgetTokens {
			return invalid("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
		}
	}
	if len(req.Messages) == 0 {
		return invalid("messages: at least one message is required")
	}
	for _, check := range []func(*request) *refusal{roles, emptyText, toolPairs, breakpoints, signatures, thinkingFirst} {
		if no := check(req); no != nil {
			return no
		}
	}
	return nil
}

// roles: user and assistant alternate, starting with user.
func roles(req *request) *refusal {
	for i, m := range req.Messages {
		switch {
		case m.Role != "user" && m.Role != "assistant":
			return invalid(fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
		case i == 0 && m.Role != "user":
			return invalid(`messages: first message must use the "user" role`)
		case i > 0 && m.Role == req.Messages[i-1].Role:
			return invalid(fmt.Sprintf(`messages: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, m.Role))
		}
	}
	return nil
}

// emptyText: no message and no text block is empty (a final assistant
// message, which the model continues, may be).
func emptyText(req *request) *refusal {
	for i, m := range req.Messages {
		if len(m.blocks) == 0 && i != len(req.Messages)-1 {
			return invalid(fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i))
		}
		for _, b := range m.blocks {
			if b.Type == "text" && b.Text == "" {
				return invalid("messages: text content blocks must be non-empty")
			}
		}
	}
	return nil
}

// toolPairs: each tool_use is answered by a tool_result in the next
// message, and each tool_result answers a tool_use of the message before.
func toolPairs(req *request) *refusal {
	for i, m := range req.Messages {
		var asked []string
		if i > 0 && req.Messages[i-1].Role == "assistant" {
			for _, b := range req.Messages[i-1].blocks {
				if b.Type == "tool_use" {
					asked = append(asked, b.ID)
				}
			}
		}
		var answered []string
		for j, b := range m.blocks {
			if b.Type != "tool_result" {
				continue
			}
			if m.Role != "user" || !slices.Contains(asked, b.ToolUseID) {
				return invalid(fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
					"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID))
			}
			answered = append(answered, b.ToolUseID)
		}
		var missing []string
		for _, id := range asked {
			if !slices.Contains(answered, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return invalid(fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
				"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", ")))
		}
	}
	if n := len(req.Messages); req.Messages[n-1].Role == "assistant" {
		for _, b := range req.Messages[n-1].blocks {
			if b.Type == "tool_use" {
				return invalid(fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
					"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", n-1, b.ID))
			}
		}
	}
	return nil
}

// breakpoints: at most MaxBreakpoints blocks carry cache_control.
func breakpoints(req *request) *refusal {
	if n := countBreakpoints(req); n > MaxBreakpoints {
		return invalid(fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", MaxBreakpoints, n))
	}
	return nil
}

// signatures: every thinking block sent back is one the fake signed.
func signatures(req *request) *refusal {
	for i, m := range req.Messages {
		for j, b := range m.blocks {
			switch {
			case b.Type == "thinking" && (m.Role != "assistant" || !hmac.Equal([]byte(b.Signature), []byte(sign("thinking", b.Thinking)))):
				return invalid(fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j))
			case b.Type == "redacted_thinking" && (m.Role != "assistant" || !validRedacted(b.Data)):
				return invalid(fmt.Sprintf("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j))
			}
		}
	}
	return nil
}

// thinkingFirst: with thinking on, the assistant message whose tool use
// the last message answers starts with its thinking.
func thinkingFirst(req *request) *refusal {
	n := len(req.Messages)
	if !req.Thinking.on() || n < 2 || req.Messages[n-1].Role != "user" {
		return nil
	}
	prev := req.Messages[n-2]
	uses := slices.ContainsFunc(prev.blocks, func(b block) bool { return b.Type == "tool_use" })
	if !uses || prev.blocks[0].Type == "thinking" || prev.blocks[0].Type == "redacted_thinking" {
		return nil
	}
	return invalid(fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
		"When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of "+
		"`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this "+
		"requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
		n-2, prev.blocks[0].Type))
}
