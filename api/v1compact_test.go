package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// compacted is POST /v1/responses/compact's answer, as the tests read it.
type compacted struct {
	ID, Object string
	CreatedAt  int64 `json:"created_at"`
	Output     []json.RawMessage
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}
}

// items reads c's output: its kept messages and its compaction item.
func (c compacted) items(t *testing.T) (kept []v1Item, compaction json.RawMessage) {
	t.Helper()
	for i, raw := range c.Output {
		var it v1Item
		if err := json.Unmarshal(raw, &it); err != nil {
			t.Fatal(err)
		}
		if it.Type == "compaction" {
			if i != len(c.Output)-1 {
				t.Fatalf("the compaction item is not last: %s", c.Output)
			}
			return kept, raw
		}
		kept = append(kept, it)
	}
	t.Fatalf("no compaction item in %s", c.Output)
	return nil, nil
}

// lastSent is what the fake model was last sent: its system prompt and
// its last message's text.
func lastSent(t *testing.T, fake *fakellm.Server) (system, last string) {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was sent nothing")
	}
	parts := strings.Split(sentString(t, reqs[len(reqs)-1]), " | ")
	return parts[0], parts[len(parts)-1]
}

// TestV1Compact: POST /v1/responses/compact summarizes a conversation with
// agentd's compaction (the model is sent its instructions and the quoted
// transcript), answers OpenAI's compacted response (the user messages,
// then a compaction item), keeps no run, and reads its own compaction item
// back: a second compaction is sent the first summary as the previous one.
func TestV1Compact(t *testing.T) {
	t.Parallel()
	b, fake := itemsSetup(t)
	body := `{"model":"fake","instructions":"Answer in French.","input":[
		{"role":"user","content":"Plan the trip to Lyon"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Train on Friday"}]},
		{"type":"function_call","call_id":"c1","name":"book","arguments":"{\"day\":\"fri\"}"},
		{"type":"function_call_output","call_id":"c1","output":"booked TGV 6601"},
		{"id":"msg_mine","type":"message","role":"user","content":[{"type":"input_text","text":"and the hotel?"}]}]}`
	c := want[compacted](t, b.do("POST", "/v1/responses/compact", body), http.StatusOK)
	if c.Object != "response.compaction" || !strings.HasPrefix(c.ID, "resp_") || c.CreatedAt <= 0 ||
		c.Usage.InputTokens <= 0 || c.Usage.OutputTokens <= 0 || c.Usage.TotalTokens != c.Usage.InputTokens+c.Usage.OutputTokens {
		t.Fatalf("compacted %+v", c)
	}
	kept, item := c.items(t)
	if got := itemsString(kept); got != "user:input_text=Plan the trip to Lyon | user:input_text=and the hotel?" || kept[1].ID != "msg_mine" {
		t.Fatalf("kept %s", got)
	}
	system, last := lastSent(t, fake)
	for _, w := range []string{"> Answer in French.", "> Plan the trip to Lyon", "> Train on Friday", "called tool book (call c1)",
		"> booked TGV 6601", "> and the hotel?"} {
		if !strings.Contains(last, w) {
			t.Errorf("the transcript lacks %q: %s", w, last)
		}
	}
	if !strings.HasPrefix(system, "system:You compact a conversation") {
		t.Fatalf("system prompt %.80s", system)
	}
	// The run that wrote the summary is not kept.
	v1Err(t, b.do("GET", "/v1/responses/"+c.ID, ""), http.StatusNotFound, "not_found")

	// The compaction item, sent back with what followed, is read: its
	// summary is the previous summary of the next compaction.
	var cmp struct {
		ID               string `json:"id"`
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(item, &cmp); err != nil || !strings.HasPrefix(cmp.ID, "cmp_") || cmp.EncryptedContent == "" {
		t.Fatalf("compaction item %s", item)
	}
	next := `{"model":"fake","input":[` + string(c.Output[0]) + `,` + string(c.Output[1]) + `,` + string(item) + `,
		{"role":"user","content":"book it"}]}`
	c2 := want[compacted](t, b.do("POST", "/v1/responses/compact", next), http.StatusOK)
	if kept2, _ := c2.items(t); len(kept2) != 3 {
		t.Fatalf("kept %s", itemsString(kept2))
	}
	_, last = lastSent(t, fake)
	if !strings.HasPrefix(last, "user:Previous summary:\n> ## Goal") || !strings.Contains(last, "> book it") {
		t.Fatalf("the second compaction was sent %s", last)
	}
}

// TestV1CompactContinues: a response given the compaction item in its
// input (with what followed) is sent its summary in place of what it
// stands for, and a create request's context_management sets its run's
// compaction threshold. Both are read by request.go, which calls
// internal/responses' CompactionItem and ContextManagement: until it does,
// the test is skipped.
func TestV1CompactContinues(t *testing.T) {
	t.Parallel()
	b, fake := itemsSetup(t)
	c := want[compacted](t, b.do("POST", "/v1/responses/compact", `{"model":"fake","input":[
		{"role":"user","content":"remember the code 4411"},{"role":"assistant","content":"noted"}]}`), http.StatusOK)
	_, item := c.items(t)
	r := b.do("POST", "/v1/responses", `{"model":"fake","input":[`+string(c.Output[0])+`,`+string(item)+`,
		{"role":"user","content":"/say ok"}]}`)
	resp := want[struct{ Status string }](t, r, http.StatusOK)
	if resp.Status != "completed" {
		t.Fatalf("status %s", resp.Status)
	}
	_, _ = lastSent(t, fake)
	reqs := fake.Requests()
	sent := sentString(t, reqs[len(reqs)-1])
	if !strings.Contains(sent, "system:Summary of the earlier conversation") || !strings.Contains(sent, "## Goal") ||
		!strings.HasSuffix(sent, "user:/say ok") {
		t.Fatalf("the response was sent %s", sent)
	}
	r = b.do("POST", "/v1/responses", `{"model":"fake","input":"/say ok","context_management":[{"type":"compaction","compact_threshold":5000}]}`)
	id := want[struct{ ID string }](t, r, http.StatusOK).ID
	run, err := b.store.RunGet(context.Background(), "default", responseRunID(id))
	if err != nil || run.Params.CompactThreshold != 5000 {
		t.Fatalf("run's compact_threshold %d (%v), want 5000", run.Params.CompactThreshold, err)
	}
}

// TestV1CompactRefusals: what a compaction request cannot be is refused
// with OpenAI's 400 naming the field (404 for a response that is not the
// tenant's), and runs nothing.
func TestV1CompactRefusals(t *testing.T) {
	t.Parallel()
	b, fake := itemsSetup(t)
	for _, c := range []struct{ body, param string }{
		{`{"model":"fake"}`, "input"},
		{`{"model":"fake","input":[]}`, "input"},
		{`{"model":"fake","input":"x","store":false}`, "store"},
		{`{"model":"fake","input":"x","reasoning":{"effort":"high"}}`, "reasoning"},
		{`{"model":"fake","input":[{"role":"user","content":"x"},{"type":"compaction","encrypted_content":"gAAAA"}]}`,
			"input[1].encrypted_content"},
		{`{"model":"fake","input":[{"type":"compaction","encrypted_content":"x"},{"role":"wizard","content":"x"}]}`,
			"input[0].encrypted_content"},
		{`{"model":"fake","input":[{"role":"user","content":"x"},{"role":"wizard","content":"x"}]}`, "input[1].role"},
		{`{"model":"fake","input":"x","previous_response_id":"nope"}`, "previous_response_id"},
		{`{"model":"` + strings.Repeat("m", 300) + `","input":"x"}`, "model"},
		{`{"model":"fake","input":"a\u0000b"}`, "input"},
		{`[1]`, ""},
	} {
		param, _ := v1Err(t, b.do("POST", "/v1/responses/compact", c.body), http.StatusBadRequest, "invalid_field")
		if param != c.param {
			t.Errorf("%s: param %q, want %q", c.body, param, c.param)
		}
	}
	v1Err(t, b.do("POST", "/v1/responses/compact", `{"model":"fake","previous_response_id":"resp_01a234dc98f771a3b8a0100ed5226eca"}`),
		http.StatusNotFound, "not_found")
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("the model was called %d times", n)
	}
}
