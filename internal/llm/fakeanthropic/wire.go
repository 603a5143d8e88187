package fakeanthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// request is the part of a Messages API request the fake reads.
type request struct {
	Model        string            `json:"model"`
	MaxTokens    *int64            `json:"max_tokens"`
	Messages     []message         `json:"messages"`
	System       json.RawMessage   `json:"system"`
	Tools        []json.RawMessage `json:"tools"`
	ToolChoice   json.RawMessage   `json:"tool_choice"`
	Thinking     *thinking         `json:"thinking"`
	OutputConfig json.RawMessage   `json:"output_config"`
	Temperature  *float64          `json:"temperature"`
	TopP         *float64          `json:"top_p"`
	Stream       bool              `json:"stream"`
}

type thinking struct {
	Type         string `json:"type"`
	BudgetTokens int64  `json:"budget_tokens"`
}

// on reports whether t asks for thinking.
func (t *thinking) on() bool { return t != nil && (t.Type == "enabled" || t.Type == "adaptive") }

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	blocks  []block
}

// block is one content block as the fake reads it; raw is its JSON.
type block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Thinking     string          `json:"thinking"`
	Signature    string          `json:"signature"`
	Data         string          `json:"data"`
	CacheControl json.RawMessage `json:"cache_control"`
	Source       json.RawMessage `json:"source"` // image, document
	Title        string          `json:"title"`  // document
	raw          json.RawMessage
}

// cached reports whether b carries a cache breakpoint.
func (b block) cached() bool {
	return len(b.CacheControl) > 0 && string(b.CacheControl) != "null"
}

// readBlocks reads content: a string (one text block) or a list of blocks.
func readBlocks(content json.RawMessage) ([]block, error) {
	content = bytes.TrimSpace(content)
	if len(content) == 0 || string(content) == "null" {
		return nil, nil
	}
	if content[0] == '"' {
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(map[string]string{"type": "text", "text": s})
		return []block{{Type: "text", Text: s, raw: raw}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(content, &raws); err != nil {
		return nil, err
	}
	out := make([]block, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("content.%d: %w", i, err)
		}
		out[i].raw = r
	}
	return out, nil
}

// text returns the text of the text blocks of blocks, joined with "\n".
func text(blocks []block) string {
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// canonical returns raw without its cache_control, with sorted keys and no
// spacing: what a block is, for the cache, whatever marks it.
func canonical(raw json.RawMessage) []byte {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "cache_control")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// apiError is Anthropic's error body.
type apiError struct {
	Type  string `json:"type"` // "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// wireUsage is the usage of message_start and message_delta.
type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	OutputTokensDetails      struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}
