package responses

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentd/agentd"

	"github.com/agentd/agentd/internal/runspec"
)

// Efforts are the values of reasoning.effort, and Summaries those of
// reasoning.summary.
var (
	Efforts   = []string{"none", "minimal", "low", "medium", "high", "xhigh"}
	Summaries = []string{"auto", "concise", "detailed"}
)

// reasoningConfig reads a request's reasoning: its effort, which the run
// asks its model for, and its summary, which agentd echoes (a model's
// reasoning comes whole, as a summary, where its provider gives it).
func (r Request) reasoningConfig() (effort, summary string, err error) {
	raw := bytes.TrimSpace(r.Reasoning)
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", nil
	}
	var c struct {
		Effort          *string `json:"effort"`
		Summary         *string `json:"summary"`
		GenerateSummary *string `json:"generate_summary"` // OpenAI's older name of summary
		// Context is which earlier turns' reasoning the model is to see
		// (Codex sends all_turns): agentd gives back what a client sends.
		Context *string `json:"context"`
	}
	if err := strict(raw, &c); err != nil {
		return "", "", decodeItemError("reasoning", err)
	}
	if c.Effort != nil {
		if !slices.Contains(Efforts, *c.Effort) {
			return "", "", field("reasoning.effort", "must be one of %v", Efforts)
		}
		effort = *c.Effort
	}
	for _, s := range []*string{c.Summary, c.GenerateSummary} {
		if s == nil {
			continue
		}
		if !slices.Contains(Summaries, *s) {
			return "", "", field("reasoning.summary", "must be one of %v", Summaries)
		}
		summary = *s
	}
	return effort, summary, nil
}

// reasoningItem reads a reasoning item a client sends back with the
// history it keeps (store: false): accepted, and, when its
// encrypted_content is agentd's (EncryptReasoning), the block it holds
// (ok) goes back to the model with the assistant message it came with.
func reasoningItem(name string, raw json.RawMessage) (_ agentd.Part, ok bool, _ error) {
	var it struct {
		Type             string            `json:"type"`
		ID               *string           `json:"id"`
		Summary          []json.RawMessage `json:"summary"`
		Content          []json.RawMessage `json:"content"`
		EncryptedContent *string           `json:"encrypted_content"`
		Status           *string           `json:"status"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.Part{}, false, decodeItemError(name, err)
	}
	if it.EncryptedContent == nil {
		return agentd.Part{}, false, nil
	}
	p, ok := DecryptReasoning(*it.EncryptedContent)
	return p, ok, nil
}

// ResentApproval reads an mcp_approval_request item a client sends back
// with the history it keeps: the tool call it asked a decision on.
func ResentApproval(name string, raw json.RawMessage) (callID string, err error) {
	var it struct {
		Type        string  `json:"type"`
		ID          string  `json:"id"`
		ServerLabel *string `json:"server_label"`
		Name        *string `json:"name"`
		Arguments   *string `json:"arguments"`
		Status      *string `json:"status"`
	}
	if err := strict(raw, &it); err != nil {
		return "", decodeItemError(name, err)
	}
	id, ok := ApprovalCallOf(it.ID)
	if !ok {
		return "", &runspec.FieldError{Field: name + ".id", Message: "is not an approval request agentd issued (mcpr_ and 32 hex digits)"}
	}
	return id, nil
}

// ResentApprovals returns the tool calls of the approval requests a
// request's input sends back, in order (none for a text input, or one
// that cannot be read: Spec says why).
func (r Request) ResentApprovals() []string {
	var items []json.RawMessage
	if json.Unmarshal(r.Input, &items) != nil {
		return nil
	}
	var ids []string
	for _, it := range items {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(it, &probe) != nil || probe.Type != ItemMCPApprovalRequest {
			continue
		}
		if id, err := ResentApproval("", it); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// reasoning adds the output item of a block of the model's reasoning,
// with its events: its text as the summary when the request asked for
// one, the block itself as encrypted_content when it asked for that.
func (b *Builder) reasoning(p agentd.Part) {
	index := b.items
	id := prefixReasoning + hexOf(b.run.ID) + "_" + strconv.Itoa(index)
	b.items++
	item := Item{ID: id, Type: ItemReasoning, Summary: []Content{}}
	b.event("response.output_item.added", map[string]any{"output_index": index, "item": item})
	if b.summary && p.Text != "" {
		part := Content{Type: "summary_text", Text: p.Text}
		ids := map[string]any{"item_id": id, "output_index": index, "summary_index": 0}
		b.event("response.reasoning_summary_part.added", with(ids, "part", Content{Type: "summary_text"}))
		b.event("response.reasoning_summary_text.delta", with(ids, "delta", p.Text))
		b.event("response.reasoning_summary_text.done", with(ids, "text", p.Text))
		b.event("response.reasoning_summary_part.done", with(ids, "part", part))
		item.Summary = []Content{part}
	}
	if b.encrypted {
		item.EncryptedContent = ptr(EncryptReasoning(p))
	}
	b.resp.Output = append(b.resp.Output, item)
	b.event("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

func with(m map[string]any, k string, v any) map[string]any {
	out := maps.Clone(m)
	out[k] = v
	return out
}

// reasoningPrefix starts the encrypted_content of agentd's reasoning
// items: what follows is the block, as JSON, in base64url. It is opaque
// to clients, not secret: the provider's own signature of a block is what
// makes it trusted when it goes back to the model.
const reasoningPrefix = "agentd.r1."

type reasoningBlock struct {
	Text      string `json:"text,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"` // a redacted block's
}

// EncryptReasoning is a reasoning part as a reasoning item's
// encrypted_content.
func EncryptReasoning(p agentd.Part) string {
	b, _ := json.Marshal(reasoningBlock{Text: p.Text, Signature: p.Signature, Data: p.Data}) // never fails
	return reasoningPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// DecryptReasoning is the reasoning part of encrypted_content agentd
// wrote (ok false: it is not agentd's, and gives nothing back).
func DecryptReasoning(s string) (agentd.Part, bool) {
	rest, ok := strings.CutPrefix(s, reasoningPrefix)
	if !ok {
		return agentd.Part{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return agentd.Part{}, false
	}
	var blk reasoningBlock
	if err := strict(raw, &blk); err != nil || (blk.Text == "" && blk.Data == "") {
		return agentd.Part{}, false
	}
	return agentd.Part{Type: agentd.PartReasoning, Text: blk.Text, Signature: blk.Signature, Data: blk.Data}, true
}
