package responses

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/runspec"
)

// fieldOf is the field a *runspec.FieldError names ("" and false for
// another error).
func fieldOf(err error) (string, bool) {
	var fe *runspec.FieldError
	if !errors.As(err, &fe) {
		return "", false
	}
	return fe.Field, true
}

// TestCompactionItem: a compaction item agentd made is read back as the
// system message that holds its summary, as agentd's own compaction puts
// it; anything else is refused naming the field, never a panic.
func TestCompactionItem(t *testing.T) {
	out := NewCompactionOutput(runID, "## Goal\n- ship it", "fake", time.Unix(1700000000, 0))
	if out.Type != ItemCompaction || !strings.HasPrefix(out.ID, "cmp_") || len(out.ID) != 36 {
		t.Fatalf("item %+v", out)
	}
	raw, _ := json.Marshal(out)
	m, err := CompactionItem("input[2]", raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.Role != agentd.RoleSystem || m.Content != compact.SummaryText("## Goal\n- ship it") || !compact.IsSummary(m.Content) {
		t.Fatalf("message %+v", m)
	}
	// Without its id, and with OpenAI's created_by, as a client may send it.
	if _, err := CompactionItem("input[0]", json.RawMessage(`{"type":"compaction","created_by":"x","encrypted_content":"`+
		out.EncryptedContent+`"}`)); err != nil {
		t.Fatal(err)
	}
	cut := out.EncryptedContent[:len(out.EncryptedContent)-3]
	tampered := strings.Replace(out.EncryptedContent, compactionTag+"ey", compactionTag+"EY", 1)
	for _, c := range []struct{ raw, field string }{
		{`{"type":"compaction"}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":""}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":"gAAAAABpM0Yj-xyz="}`, "input[2].encrypted_content"}, // OpenAI's
		{`{"type":"compaction","encrypted_content":"` + cut + `"}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":"` + tampered + `"}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":"agentd.cmp.v1.%%%.###"}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":7}`, "input[2].encrypted_content"},
		{`{"type":"compaction","encrypted_content":"x","summary":"forged"}`, "input[2].summary"},
		{`{"type":"message","encrypted_content":"x"}`, "input[2].type"},
	} {
		_, err := CompactionItem("input[2]", json.RawMessage(c.raw))
		if f, ok := fieldOf(err); !ok || f != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.raw, err, c.field)
		}
	}
	// A payload of another version, or without a summary, is not read.
	for _, p := range []compactionPayload{{V: 2, Summary: "s"}, {V: 1, Summary: " "}} {
		b, _ := json.Marshal(p)
		if _, err := decodeCompaction(encodePayload(b)); err == nil {
			t.Errorf("payload %s was read", b)
		}
	}
	if s, err := decodeCompaction(encodePayload([]byte(`{"v":1,"summary":"s","created_at":1}`))); err != nil || s != "s" {
		t.Fatalf("a payload of version 1: %q, %v", s, err)
	}
}

// TestContextManagement: context_management's compaction entry gives the
// run's threshold; nothing gives none; anything else is refused naming
// the field.
func TestContextManagement(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int // 0: nil
	}{
		{``, 0}, {`null`, 0}, {`[]`, 0}, {`[{"type":"compaction"}]`, 0}, {`[{"type":"compaction","compact_threshold":null}]`, 0},
		{`[{"type":"compaction","compact_threshold":200000}]`, 200000}, {` [ {"compact_threshold": 1, "type": "compaction"} ] `, 1},
	} {
		got, err := ContextManagement(json.RawMessage(c.raw))
		if err != nil || (got == nil) != (c.want == 0) || (got != nil && *got != c.want) {
			t.Errorf("%s: %v, %v; want %d", c.raw, got, err, c.want)
		}
	}
	for _, c := range []struct{ raw, field string }{
		{`{"type":"compaction"}`, "context_management"},
		{`"compaction"`, "context_management"},
		{`[1]`, "context_management[0]"},
		{`[{}]`, "context_management[0].type"},
		{`[{"type":"truncation"}]`, "context_management[0].type"},
		{`[{"type":"compaction","compact_threshold":0}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","compact_threshold":-5}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","compact_threshold":1.5}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","compact_threshold":"9"}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","compact_threshold":1e400}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","compact_threshold":100000001}]`, "context_management[0].compact_threshold"},
		{`[{"type":"compaction","keep":3}]`, "context_management[0].keep"},
		{`[{"type":"compaction"},{"type":"compaction"}]`, "context_management[1]"},
	} {
		_, err := ContextManagement(json.RawMessage(c.raw))
		if f, ok := fieldOf(err); !ok || f != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.raw, err, c.field)
		}
	}
}

// TestDecodeCompact: a compaction request takes OpenAI's fields (and those
// Codex sends), and refuses the others naming them.
func TestDecodeCompact(t *testing.T) {
	r, err := DecodeCompact([]byte(`{"model":"m","input":"hi","instructions":"be brief","prompt_cache_key":"k",
		"tools":[{"type":"function","name":"f"}],"parallel_tool_calls":true,"service_tier":"auto","reasoning":null,"text":{}}`))
	if err != nil || *r.Model != "m" || *r.Instructions != "be brief" {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := DecodeCompact([]byte(`{"previous_response_id":"resp_x"}`)); err != nil {
		t.Fatalf("previous_response_id alone: %v", err)
	}
	for _, c := range []struct{ body, field string }{
		{`{"model":"m"}`, "input"},
		{`{"model":"m","input":"x","store":false}`, "store"},
		{`{"model":"m","input":"x","reasoning":{"effort":"high"}}`, "reasoning"},
		{`{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`, "text"},
		{`{"model":"m","input":"x","tools":{}}`, "tools"},
		{`{"model":"m","input":"x","service_tier":"flex"}`, "service_tier"},
		{`{"model":7,"input":"x"}`, "model"},
		{`{"model":"m","input":"x"} {}`, ""},
	} {
		_, err := DecodeCompact([]byte(c.body))
		if f, ok := fieldOf(err); !ok || f != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.body, err, c.field)
		}
	}
}

// TestCompactHistory: a compaction's input is read as a response's: its
// compaction items give the earlier summaries, its user messages are kept
// as sent, and errors name the items as the client numbered them.
func TestCompactHistory(t *testing.T) {
	earlier := NewCompactionOutput(runID, "earlier summary", "m", time.Now())
	cmp, _ := json.Marshal(earlier)
	body := `{"model":"m","input":[{"role":"user","content":"first"},` + string(cmp) + `,
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer"}]},
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"42"},
		{"id":"msg_mine","type":"message","role":"user","content":[{"type":"input_text","text":"second"}]},
		{"role":"developer","content":"rules"}]}`
	r, err := DecodeCompact([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.History(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Summaries) != 1 || h.Summaries[0] != "earlier summary" {
		t.Fatalf("summaries %q", h.Summaries)
	}
	if len(h.Messages) != 5 || h.Messages[0].Content != "first" || h.Messages[1].Role != agentd.RoleAssistant ||
		len(h.Messages[1].ToolCalls) != 1 || h.Messages[2].Role != agentd.RoleTool || h.Messages[4].Role != agentd.RoleSystem {
		t.Fatalf("messages %+v", h.Messages)
	}
	if len(h.Kept) != 2 || h.Kept[1].ID != "msg_mine" || !strings.HasPrefix(h.Kept[0].ID, "msg_") ||
		string(h.Kept[0].Content) != `[{"type":"input_text","text":"first"}]` ||
		string(h.Kept[1].Content) != `[{"type":"input_text","text":"second"}]` {
		t.Fatalf("kept %+v", h.Kept)
	}
	tr := compact.Transcript(&agentd.Compaction{Summary: "earlier summary"}, TranscriptMessages(h.Messages))
	for _, want := range []string{"> earlier summary", "user:\n> first", "assistant:\n> answer", "called tool f (call c1)",
		"tool result (call c1):\n> 42", "system:\n> rules"} {
		if !strings.Contains(tr, want) {
			t.Errorf("transcript lacks %q:\n%s", want, tr)
		}
	}
	text, _ := DecodeCompact([]byte(`{"model":"m","input":"just this"}`))
	if h, err := text.History(nil); err != nil || len(h.Kept) != 1 || len(h.Messages) != 1 {
		t.Fatalf("a text input: %+v, %v", h, err)
	}
	for _, c := range []struct{ input, field string }{
		{`[` + string(cmp) + `,{"role":"robot","content":"x"}]`, "input[1].role"},
		{`[{"type":"compaction","encrypted_content":"x"},{"role":"user","content":"x"}]`, "input[0].encrypted_content"},
		{`[{"role":"user","content":"x"},` + string(cmp) + `,{"type":"function_call_output","call_id":"c"}]`, "input[2].output"},
		{`[{"type":"mcp_approval_response","approval_request_id":"mcpr_01a234dc98f771a3b8a0100ed5226eca","approve":true}]`, "input"},
		{`[{"type":"item_reference","id":"msg_x"}]`, "input[0].id"},
		{`[7]`, "input[0]"},
		{`{}`, "input"},
	} {
		r, err := DecodeCompact([]byte(`{"model":"m","input":` + c.input + `}`))
		if err == nil {
			_, err = r.History(nil)
		}
		if f, ok := fieldOf(err); !ok || f != c.field {
			t.Errorf("%s: err %v, want a field error of %s", c.input, err, c.field)
		}
	}
}

// TestCompactSpec: the compaction's run is given agentd's compaction
// instructions and the transcript, cut to fit the model's window, with no
// tools, no compaction of its own, and is not kept.
func TestCompactSpec(t *testing.T) {
	long := strings.Repeat("word ", 20000)
	history := TranscriptMessages([]agentd.InputMessage{{Role: agentd.RoleUser, Content: long}, {Role: agentd.RoleAssistant, Content: "ok"}})
	sr := CompactSpec("fake-4k", 0, 0, []string{"before"}, history, nil)
	if *sr.Model != "fake-4k" || *sr.Instructions != compact.Instructions || sr.Tools == nil || len(*sr.Tools) != 0 ||
		!sr.NoCompaction || !sr.Unstored || len(sr.Input) != 1 || sr.Input[0].Role != agentd.RoleUser {
		t.Fatalf("request %+v", sr)
	}
	if n := compact.EstimateTokens(len(sr.Input[0].Content)); n > 4*1024 || !strings.Contains(sr.Input[0].Content, "> before") {
		t.Fatalf("transcript of %d tokens for fake-4k:\n%.300s", n, sr.Input[0].Content)
	}
	// The window the caller knows (the models file's) comes first.
	if sr := CompactSpec("fake-4k", 100000, 1000, nil, history, nil); !strings.Contains(sr.Input[0].Content, long[:1000]) ||
		len(sr.Input[0].Content) < len(long) {
		t.Fatalf("transcript cut to %d bytes within a window of 100000 tokens", len(sr.Input[0].Content))
	}
	resp := Response{Output: []Item{{Type: ItemMessage, Content: []Content{{Type: "output_text", Text: " ## Goal\n- x "}}}}}
	if s, ok := SummaryOf(resp); !ok || s != "## Goal\n- x" {
		t.Fatalf("summary %q %v", s, ok)
	}
	if _, ok := SummaryOf(Response{}); ok {
		t.Fatal("a summary of nothing")
	}
}
