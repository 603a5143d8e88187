package responses

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/runspec"
)

// This file reads and writes what OpenAI's standalone compaction
// (POST /v1/responses/compact) deals in: the request, the compacted
// response, and the compaction item a later request sends back in its
// input, whose summary then stands for the conversation it replaced. It
// also reads a create request's context_management.

// ItemCompaction is the type of a compaction item.
const ItemCompaction = "compaction"

// ObjectCompaction is the object of POST /v1/responses/compact's answer.
const ObjectCompaction = "response.compaction"

// prefixCompaction prefixes a compaction item's id.
const prefixCompaction = "cmp_"

// compactionTag opens agentd's encrypted_content: its format and version.
// The content is opaque to clients but not a secret: it is the summary of
// the client's own conversation, which the client could send as a
// developer message as well; its checksum catches a damaged or cut copy,
// not a forged one, which would gain nothing a message does not.
const compactionTag = "agentd.cmp.v1."

// compactionPayload is what encrypted_content holds.
type compactionPayload struct {
	V         int    `json:"v"`
	Summary   string `json:"summary"`
	Model     string `json:"model,omitempty"` // the model that wrote the summary
	CreatedAt int64  `json:"created_at"`
}

// EncodeCompaction is the encrypted_content of a compaction item whose
// summary model wrote at created.
func EncodeCompaction(summary, model string, created time.Time) string {
	b, _ := json.Marshal(compactionPayload{V: 1, Summary: summary, Model: model, CreatedAt: created.Unix()})
	return encodePayload(b)
}

// encodePayload is the encrypted_content of payload b: the tag, then b
// and the first 12 bytes of its SHA-256, each in unpadded base64url.
func encodePayload(b []byte) string {
	sum := sha256.Sum256(b)
	enc := base64.RawURLEncoding
	return compactionTag + enc.EncodeToString(b) + "." + enc.EncodeToString(sum[:12])
}

// errNotOurs says that an encrypted_content is not one agentd wrote (or
// was damaged on the way).
var errNotOurs = errors.New("not a compaction of this server")

// decodeCompaction returns the summary of an encrypted_content that
// EncodeCompaction wrote.
func decodeCompaction(content string) (string, error) {
	rest, ok := strings.CutPrefix(content, compactionTag)
	if !ok {
		return "", errNotOurs
	}
	body, check, ok := strings.Cut(rest, ".")
	if !ok {
		return "", errNotOurs
	}
	enc := base64.RawURLEncoding
	b, err1 := enc.DecodeString(body)
	c, err2 := enc.DecodeString(check)
	sum := sha256.Sum256(b)
	if err1 != nil || err2 != nil || !bytes.Equal(c, sum[:12]) {
		return "", errNotOurs
	}
	var p compactionPayload
	if err := json.Unmarshal(b, &p); err != nil || p.V != 1 || strings.TrimSpace(p.Summary) == "" {
		return "", errNotOurs
	}
	return p.Summary, nil
}

// CompactionSummary reads a compaction item (name is its place in the
// request, such as input[3]) and returns the summary it carries.
func CompactionSummary(name string, raw json.RawMessage) (string, error) {
	var it struct {
		Type             string  `json:"type"`
		ID               *string `json:"id"`
		EncryptedContent *string `json:"encrypted_content"`
		CreatedBy        *string `json:"created_by"`
	}
	if err := strict(raw, &it); err != nil {
		return "", decodeItemError(name, err)
	}
	if it.Type != ItemCompaction {
		return "", field(name+".type", "must be %q", ItemCompaction)
	}
	if it.EncryptedContent == nil || *it.EncryptedContent == "" {
		return "", field(name+".encrypted_content", "is required: the encrypted_content of a compaction item this server made")
	}
	summary, err := decodeCompaction(*it.EncryptedContent)
	if err != nil {
		return "", field(name+".encrypted_content", "is not the content of a compaction item this server made "+
			"(POST /v1/responses/compact): agentd reads its own compactions only, whole and unchanged")
	}
	return summary, nil
}

// CompactionItem reads a compaction item of a request's input: the
// message the model is then sent in its place, a system message that
// holds its summary, as agentd's own compaction puts one in place of the
// turns it covers (compact.SummaryText).
func CompactionItem(name string, raw json.RawMessage) (agentd.InputMessage, error) {
	summary, err := CompactionSummary(name, raw)
	if err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: agentd.RoleSystem, Content: compact.SummaryText(summary)}, nil
}

// ContextManagement reads a create request's context_management: a list
// of at most one entry, {"type": "compaction", "compact_threshold": N},
// whose N (tokens, absent: the model's own threshold) is returned as the
// run's compaction threshold (runspec.Request.CompactThreshold). Nothing
// (or null, or an empty list) is nil.
func ContextManagement(raw json.RawMessage) (threshold *int, err error) {
	if runspec.IsNull(raw) {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, field("context_management", `must be a list of entries such as {"type": "compaction", "compact_threshold": 200000}`)
	}
	seen := false
	for i, e := range entries {
		name := fmt.Sprintf("context_management[%d]", i)
		var it struct {
			Type             *string         `json:"type"`
			CompactThreshold json.RawMessage `json:"compact_threshold"`
		}
		if err := strict(e, &it); err != nil {
			var obj map[string]json.RawMessage
			if json.Unmarshal(e, &obj) != nil {
				return nil, field(name, "must be an object")
			}
			return nil, decodeItemError(name, err)
		}
		if it.Type == nil || *it.Type != ItemCompaction {
			return nil, field(name+".type", `must be "compaction", the one kind of context management agentd does`)
		}
		if seen {
			return nil, field(name, "a second compaction entry: give one")
		}
		seen = true
		if threshold, err = compactThreshold(name+".compact_threshold", it.CompactThreshold); err != nil {
			return nil, err
		}
	}
	return threshold, nil
}

// compactThreshold reads a compaction entry's compact_threshold: a whole
// number of tokens from 1 to runspec.MaxCompactThreshold, or nothing.
func compactThreshold(name string, raw json.RawMessage) (*int, error) {
	if runspec.IsNull(raw) {
		return nil, nil
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n < 1 || n > runspec.MaxCompactThreshold {
		return nil, field(name, "must be a whole number of tokens from 1 to %d", runspec.MaxCompactThreshold)
	}
	v := int(n)
	return &v, nil
}

// CompactRequest is the body of POST /v1/responses/compact, as far as
// agentd reads it. DecodeCompact refuses any other field, naming it.
type CompactRequest struct {
	Model              *string         `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	PromptCacheKey     *string         `json:"prompt_cache_key"`
	ServiceTier        *string         `json:"service_tier"`
	// Tools and ParallelToolCalls describe the conversation's tools (Codex
	// sends them): accepted, and unused, since a compaction calls none.
	Tools             json.RawMessage `json:"tools"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Reasoning         json.RawMessage `json:"reasoning"`
	Text              json.RawMessage `json:"text"`
}

// DecodeCompact reads a compaction request strictly: a field agentd does
// not know is refused, named; so are values it does not take.
func DecodeCompact(body []byte) (CompactRequest, error) {
	var r CompactRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		if fe, ok := decodeError(err).(*runspec.FieldError); ok && fe.Field != "" {
			fe.Message = strings.Replace(fe.Message, "a response request", "a compaction request", 1)
			return r, fe
		}
		return r, decodeError(err)
	}
	if dec.More() {
		return r, field("", "the body must be one JSON object")
	}
	switch {
	case r.ServiceTier != nil && *r.ServiceTier != "auto" && *r.ServiceTier != "default":
		return r, field("service_tier", `must be "auto" or "default"`)
	case !runspec.IsNull(r.Reasoning) && string(bytes.TrimSpace(r.Reasoning)) != "{}":
		return r, field("reasoning", "reasoning options are not supported by this server")
	case !runspec.IsNull(r.Text) && string(bytes.TrimSpace(r.Text)) != "{}":
		return r, field("text", "a compaction's output is agentd's summary: text options do not apply")
	case !runspec.IsNull(r.Tools) && !bytes.HasPrefix(bytes.TrimSpace(r.Tools), []byte("[")):
		return r, field("tools", "must be a list of tools")
	case runspec.IsNull(r.Input) && (r.PreviousResponseID == nil || *r.PreviousResponseID == ""):
		return r, field("input", "is required without previous_response_id: the conversation to compact")
	}
	return r, nil
}

// PreviousRunID returns the run of previous_response_id ("" when none).
func (r CompactRequest) PreviousRunID() (string, error) {
	return Request{PreviousResponseID: r.PreviousResponseID}.PreviousRunID()
}

// CompactHistory is what a compaction request's input holds.
type CompactHistory struct {
	// Summaries are those of its compaction items, in order: what an
	// earlier compaction made of the conversation before.
	Summaries []string
	// Messages are its other items, in order, as a response's input reads
	// them: what the new summary is made of.
	Messages []agentd.InputMessage
	// Kept are its user messages, as output items: the compacted
	// response's output keeps them, before the compaction item.
	Kept []Kept
}

// Kept is a user message that a compacted response's output keeps, as the
// client sent it (its content as sent; a text as one input_text).
type Kept struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Compacted is the answer of POST /v1/responses/compact.
type Compacted struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // ObjectCompaction
	CreatedAt int64  `json:"created_at"`
	// Output is the user messages kept, then one compaction item.
	Output []any `json:"output"`
	Usage  Usage `json:"usage"`
}

// CompactionOutput is the output item of a compaction.
type CompactionOutput struct {
	ID               string `json:"id"`
	Type             string `json:"type"` // ItemCompaction
	EncryptedContent string `json:"encrypted_content"`
}

// NewCompactionOutput is the compaction item of the compaction made by
// run runID, whose summary model wrote at created.
func NewCompactionOutput(runID, summary, model string, created time.Time) CompactionOutput {
	return CompactionOutput{ID: prefixCompaction + hexOf(runID), Type: ItemCompaction,
		EncryptedContent: EncodeCompaction(summary, model, created)}
}

// KeptOf is the output item that keeps stored user message m.
func KeptOf(m agentd.Message) Kept {
	content, _ := json.Marshal(contentOf(m))
	return Kept{ID: prefixMessage + hexOf(m.ID), Type: ItemMessage, Status: StatusCompleted, Role: "user", Content: content}
}

// History reads the request's input (none: an empty history), resolving
// item references with resolve (nil: none resolve); errors name the
// input's items as the client numbered them.
func (r CompactRequest) History(resolve func(id string) (*Item, error)) (CompactHistory, error) {
	var h CompactHistory
	raw := bytes.TrimSpace(r.Input)
	if runspec.IsNull(raw) {
		return h, nil
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return h, field("input", "is not a valid string")
		}
		h.Messages = []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}
		h.Kept = []Kept{keptText(text)}
		return h, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return h, field("input", "must be a text or a list of input items")
	}
	rest := make([]json.RawMessage, 0, len(items))
	var at []int // the index in items of each of rest
	for i, it := range items {
		name := fmt.Sprintf("input[%d]", i)
		var probe struct {
			Type    *string         `json:"type"`
			Role    *string         `json:"role"`
			Content json.RawMessage `json:"content"`
			ID      *string         `json:"id"`
		}
		if err := json.Unmarshal(it, &probe); err != nil {
			return h, field(name, "must be an input item (an object)")
		}
		if probe.Type != nil && *probe.Type == ItemCompaction {
			s, err := CompactionSummary(name, it)
			if err != nil {
				return h, err
			}
			h.Summaries = append(h.Summaries, s)
			continue
		}
		if probe.Role != nil && *probe.Role == "user" && (probe.Type == nil || *probe.Type == ItemMessage) {
			h.Kept = append(h.Kept, kept(probe.ID, probe.Content))
		}
		rest, at = append(rest, it), append(at, i)
	}
	return h, h.read(rest, at, resolve)
}

// read reads items (the input's items but its compaction items, each at
// its index at of the input) into h.Messages.
func (h *CompactHistory) read(items []json.RawMessage, at []int, resolve func(id string) (*Item, error)) error {
	if len(items) == 0 {
		return nil
	}
	b, err := json.Marshal(items)
	if err != nil {
		return err
	}
	var p refusals
	msgs, _, approvals, _ := Request{Input: b, Resolve: resolve}.input(&p)
	err = p.err()
	if fe := (*runspec.FieldError)(nil); errors.As(err, &fe) {
		fe.Field = renumber(fe.Field, at)
		return fe
	}
	if err != nil {
		return err
	}
	if len(approvals) > 0 {
		return field("input", "mcp_approval_response items decide calls of a response: they are not compacted")
	}
	h.Messages = msgs
	return nil
}

var itemIndex = regexp.MustCompile(`^input\[(\d+)\]`)

// renumber gives a field of the input's i-th item but its compaction
// items the index at[i] of that item in the whole input.
func renumber(name string, at []int) string {
	m := itemIndex.FindStringSubmatch(name)
	if m == nil {
		return name
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(at) {
		return name
	}
	return fmt.Sprintf("input[%d]", at[i]) + name[len(m[0]):]
}

// kept is the output item of a user message of the input, with its id
// (a new one when it has none) and its content as sent.
func kept(id *string, content json.RawMessage) Kept {
	var text string
	if json.Unmarshal(content, &text) == nil {
		k := keptText(text)
		if id != nil && *id != "" {
			k.ID = *id
		}
		return k
	}
	k := Kept{ID: prefixMessage + hexOf(agentd.NewID()), Type: ItemMessage, Status: StatusCompleted, Role: "user", Content: content}
	if id != nil && *id != "" {
		k.ID = *id
	}
	return k
}

// keptText is the output item of a user message given as a text.
func keptText(text string) Kept {
	content, _ := json.Marshal([]Content{{Type: "input_text", Text: text}})
	return Kept{ID: prefixMessage + hexOf(agentd.NewID()), Type: ItemMessage, Status: StatusCompleted, Role: "user", Content: content}
}

// TranscriptMessages are msgs (an input's messages) as a compaction's
// transcript reads messages (compact.TranscriptWithin): texts, tool calls
// and results, and images and files by name.
func TranscriptMessages(msgs []agentd.InputMessage) []agentd.Message {
	out := make([]agentd.Message, 0, len(msgs))
	for i, m := range msgs {
		msg := agentd.Message{Seq: i + 1, Role: m.Role, Status: agentd.MessageCompleted}
		switch {
		case m.Role == agentd.RoleTool:
			msg.Content = []agentd.Part{{Type: agentd.PartToolResult, ToolCallID: m.ToolCallID, Content: m.Content}}
		case len(m.Parts) > 0:
			for _, p := range m.Parts {
				msg.Content = append(msg.Content, agentd.Part{Type: p.Type, Text: p.Text, URL: p.URL,
					MediaType: p.MediaType, Size: int64(len(p.Data)), Filename: p.Filename})
			}
		case m.Content != "":
			msg.Content = []agentd.Part{{Type: agentd.PartText, Text: m.Content}}
		}
		for _, c := range m.ToolCalls {
			msg.Content = append(msg.Content, agentd.Part{Type: agentd.PartToolCall, ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, msg)
	}
	return out
}

// CompactSpec is the request of the run that writes a compaction's
// summary with agentd's own compaction (internal/compact): model, given
// compact.Instructions and one user message, the transcript of history
// after the summaries of earlier compactions (each message quoted), cut to
// fit the model's window: window and maxOutput tokens when the caller
// knows them (the models file's), else the built-in profile of model's.
// The run calls no tool, never compacts, and is not kept.
func CompactSpec(model string, window, maxOutput int, summaries []string, history []agentd.Message, cacheKey *string) runspec.Request {
	prof := compact.DefaultProfiles().For(model)
	if window > 0 {
		prof.ContextWindow, prof.MaxOutputTokens = window, maxOutput
	}
	room := 0
	if prof.ContextWindow > 0 {
		room = max((prof.ContextWindow-prof.MaxOutputTokens-compact.EstimateTokens(len(compact.Instructions)))*9/10, 1)
	}
	var prev *agentd.Compaction
	if len(summaries) > 0 {
		prev = &agentd.Compaction{Summary: strings.Join(summaries, "\n\n")}
	}
	instructions := compact.Instructions
	none := []string{}
	onDisconnect := string(agentd.OnDisconnectContinue)
	return runspec.Request{Model: &model, Instructions: &instructions, Tools: &none, NoCompaction: true, Unstored: true,
		OnDisconnect: &onDisconnect, CacheKey: cacheKey, InputText: true,
		Input: []agentd.InputMessage{{Role: agentd.RoleUser, Content: compact.TranscriptWithin(prev, history, room)}}}
}

// SummaryOf is the summary that a compaction's run answered with (resp
// its response): the text of its last message; ok false when it has none.
func SummaryOf(resp Response) (summary string, ok bool) {
	for i := len(resp.Output) - 1; i >= 0; i-- {
		it := resp.Output[i]
		if it.Type != ItemMessage {
			continue
		}
		var texts []string
		for _, c := range it.Content {
			if c.Type == "output_text" {
				texts = append(texts, c.Text)
			}
		}
		summary = strings.TrimSpace(strings.Join(texts, ""))
		return summary, summary != ""
	}
	return "", false
}
