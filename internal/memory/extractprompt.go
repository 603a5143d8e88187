package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
)

// ExtractionPrompt is the system prompt of an extraction's model call,
// before the run's own extract instructions. Its first line is what the
// fake model knows an extraction request by (fakellm.ExtractionMarker).
const ExtractionPrompt = `You are agentd's memory extractor.
You read one turn of a conversation: what a user sent an assistant, and the assistant's answer. Decide what of it is worth remembering in later conversations with the same user: lasting facts about them, their preferences and their decisions, not the details of this one task.
Answer with a JSON object alone, of this shape:
{"memories": [{"key": "home_city", "value": "Lives in Porto since May."}]}
- key: a short, stable name of what is remembered (letters, digits and _); to change a memory listed as remembered, give its key again with the new value.
- value: what is remembered, in a sentence or two that stand on their own.
Leave out what is remembered already as it stands. Answer {"memories": []} when nothing is worth remembering.`

// Bounds of an extraction's request and answer.
const (
	// MaxExtractedItems caps the memories one extraction writes: those
	// past it in the model's answer are left out.
	MaxExtractedItems = 20
	// maxKnown is how many of the namespace's items the model is shown,
	// each value cut at maxKnownBytes.
	maxKnown      = 50
	maxKnownBytes = 300
	// maxTurnMessages is how many of the run's input messages the model
	// is shown (the last ones), each cut at maxTurnBytes, as the answer.
	maxTurnMessages = 20
	maxTurnBytes    = 8 << 10
	// maxExtractionOutput caps the tokens of the model's answer.
	maxExtractionOutput = 4096
)

// turn is what an extraction reads of a run: the namespace's items, the
// run's input and its answer.
type turn struct {
	namespace agentd.Namespace
	known     []agentd.MemoryItem
	input     []agentd.Message
	output    []agentd.Part
}

// extractionRequest is the model call of an extraction of t by model,
// following instructions (the run's memory.extract.instructions; "":
// none beyond the prompt's).
func extractionRequest(model, instructions string, t turn) llm.Request {
	system := ExtractionPrompt
	if instructions != "" {
		system += "\n\nWhat to remember, as this memory's owner says:\n" + instructions
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Remembered now in %s:\n", t.namespace)
	if len(t.known) == 0 {
		b.WriteString("nothing yet.\n")
	}
	for _, it := range t.known {
		fmt.Fprintf(&b, "- %s: %s\n", oneLine(it.Key, maxKnownBytes), oneLine(it.Value, maxKnownBytes))
	}
	b.WriteString("\nThe turn:\n")
	input := t.input
	if len(input) > maxTurnMessages {
		input = input[len(input)-maxTurnMessages:]
	}
	for _, m := range input {
		fmt.Fprintf(&b, "\n[user]\n%s\n", clip(partsText(m.Content), maxTurnBytes))
	}
	fmt.Fprintf(&b, "\n[assistant]\n%s\n", clip(partsText(t.output), maxTurnBytes))
	return llm.Request{Model: model,
		Messages: []llm.Message{llm.TextMessage(llm.RoleSystem, system), llm.TextMessage(llm.RoleUser, b.String())},
		Sampling: llm.Sampling{MaxOutputTokens: maxExtractionOutput, Format: &llm.OutputFormat{Type: llm.FormatJSONObject}}}
}

// partsText is the text parts of parts, apart by blank lines.
func partsText(parts []agentd.Part) string {
	var texts []string
	for _, p := range parts {
		if p.Type == agentd.PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n\n")
}

// oneLine is s on one line, cut at n bytes.
func oneLine(s string, n int) string {
	return clip(strings.Join(strings.Fields(s), " "), n)
}

// clip cuts s at n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + " [...]"
}

// extracted is a memory the model's answer gives.
type extracted struct {
	Key   string          `json:"key"`
	Value string          `json:"value"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// errNoJSON: the model's answer is not the JSON the prompt asks for.
var errNoJSON = errors.New("the model's answer is not the JSON asked for")

// parseMemories reads the model's answer: {"memories": [{"key", "value",
// "data"?}]}, alone or in a Markdown code block. Memories whose key is not
// a memory key, or whose value is empty, are left out, as is a data that
// is not an object; a key given twice keeps its last value in its first
// place; at most MaxExtractedItems are kept.
func parseMemories(text string) ([]extracted, error) {
	start, end := strings.IndexByte(text, '{'), strings.LastIndexByte(text, '}')
	if start < 0 || end < start {
		return nil, errNoJSON
	}
	var answer struct {
		Memories []extracted `json:"memories"`
	}
	if err := json.Unmarshal([]byte(text[start:end+1]), &answer); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoJSON, err)
	}
	var out []extracted
	at := map[string]int{}
	for _, m := range answer.Memories {
		m.Key, m.Value = storableText(m.Key), strings.TrimSpace(storableText(m.Value))
		if agentd.ValidateMemoryKey(m.Key) != nil || m.Value == "" {
			continue
		}
		if t := bytes.TrimSpace(m.Data); len(t) == 0 || t[0] != '{' || bytes.Contains(t, []byte(`\u0000`)) {
			m.Data = nil
		}
		if i, ok := at[m.Key]; ok {
			out[i] = m
			continue
		}
		if len(out) == MaxExtractedItems {
			continue
		}
		at[m.Key] = len(out)
		out = append(out, m)
	}
	return out, nil
}

// storableText is s as PostgreSQL's text keeps it: valid UTF-8, without
// NUL.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
