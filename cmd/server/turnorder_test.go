package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// TestEnqueuedRunReadsAfterTheTurnBefore, over HTTP: a run waits for its
// client tool's output (requires_action, between the assistant's call and
// its result) when a second run is enqueued on its conversation. GET
// /conversations/{id}/messages lists the second run's input last, pending;
// once the output is given, both runs complete, the conversation reads
// Q1, A1 (call), result, A1, Q2, A2 with seqs 1 to 6, and every request the
// model got has each tool message right after the call it answers.
func TestEnqueuedRunReadsAfterTheTurnBefore(t *testing.T) {
	model := fakellm.New()
	msrv := httptest.NewServer(model)
	defer msrv.Close()
	base, stop := startServer(t, map[string]string{"OPENAI_API_KEY": "test", "OPENAI_BASE_URL": msrv.URL + "/v1",
		"AGENTD_MODEL": "fake"})
	defer stop()

	first := postRun(t, base, `{"input":"/call pick {}\n/say first done","client_tools":[{"name":"pick","description":"ask","parameters":{"type":"object"}}]}`)
	var waiting struct {
		Status         string `json:"status"`
		RequiredAction struct {
			Calls []struct {
				ToolCallID string `json:"tool_call_id"`
			} `json:"calls"`
		} `json:"required_action"`
	}
	waitFor(t, base+"/runs/"+first.ID, &waiting, func() bool { return waiting.Status == "requires_action" })
	second := postRun(t, base, fmt.Sprintf(`{"conversation_id":%q,"if_busy":"enqueue","input":"/say second done"}`, first.ConversationID))

	if got := listMessages(t, base, first.ConversationID, first.ID, second.ID); got != "1:user 1:assistant(call) 2:user(pending)" {
		t.Errorf("messages while the first run waits: %s", got)
	}
	if len(waiting.RequiredAction.Calls) != 1 {
		t.Fatalf("required action %+v", waiting.RequiredAction)
	}
	resp, err := http.Post(base+"/runs/"+first.ID+"/actions", "application/json", strings.NewReader(fmt.Sprintf(
		`{"type":"tool_outputs","outputs":[{"tool_call_id":%q,"output":{"picked":"red"}}]}`, waiting.RequiredAction.Calls[0].ToolCallID)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST actions: %d %s", resp.StatusCode, body)
	}
	for _, id := range []string{first.ID, second.ID} {
		var r struct {
			Status     string `json:"status"`
			OutputText string `json:"output_text"`
		}
		waitFor(t, base+"/runs/"+id, &r, func() bool { return r.Status == "completed" || r.Status == "failed" })
		if r.Status != "completed" {
			t.Fatalf("run %s ended %s", id, r.Status)
		}
	}
	byRun := "1:user 1:assistant(call) 1:tool 1:assistant 2:user 2:assistant"
	if got := listMessages(t, base, first.ConversationID, first.ID, second.ID); got != byRun {
		t.Errorf("conversation reads %s, want %s", got, byRun)
	}
	want := "1:user 2:assistant(call) 3:tool 4:assistant 5:user 6:assistant"
	if got := listSeqs(t, base, first.ConversationID); got != want {
		t.Errorf("conversation by seq reads %s, want %s", got, want)
	}
	reqs := model.Requests()
	if len(reqs) != 3 {
		t.Errorf("the model got %d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		// The fake refuses, as OpenAI does, a tool message that does not
		// follow its call, and a call not answered.
		if r.Status != http.StatusOK || r.Error != "" {
			t.Errorf("the model refused request %d (%d): %s", r.Seq, r.Status, r.Error)
		}
	}
}

type createdRun struct {
	ID             string `json:"id"`
	ConversationID string `json:"conversation_id"`
}

func postRun(t *testing.T, base, body string) createdRun {
	t.Helper()
	resp, err := http.Post(base+"/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r createdRun
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(data, &r) != nil {
		t.Fatalf("POST /runs: %d %s", resp.StatusCode, data)
	}
	return r
}

// waitFor reads url into v until done says so, for at most 15 s.
func waitFor(t *testing.T, url string, v any, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(v)
		resp.Body.Close()
		if err == nil && done() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %+v", url, v)
		}
	}
}

type messageItem struct {
	Seq     int    `json:"seq"`
	RunID   string `json:"run_id"`
	Role    string `json:"role"`
	Status  string `json:"status"`
	Content []struct {
		Type string `json:"type"`
	} `json:"content"`
}

func getMessages(t *testing.T, base, conv string) []messageItem {
	t.Helper()
	resp, err := http.Get(base + "/conversations/" + conv + "/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Data []messageItem `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET messages: %d %v", resp.StatusCode, err)
	}
	return page.Data
}

// listMessages writes the conversation's messages, in the API's order, as
// run:role, the runs named 1 and 2, a call and a status other than
// completed noted.
func listMessages(t *testing.T, base, conv, first, second string) string {
	t.Helper()
	var out []string
	for _, m := range getMessages(t, base, conv) {
		s := map[string]string{first: "1", second: "2"}[m.RunID] + ":" + m.Role + note(m)
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// listSeqs writes the conversation's messages as seq:role.
func listSeqs(t *testing.T, base, conv string) string {
	t.Helper()
	var out []string
	for _, m := range getMessages(t, base, conv) {
		out = append(out, fmt.Sprintf("%d:%s%s", m.Seq, m.Role, note(m)))
	}
	return strings.Join(out, " ")
}

func note(m messageItem) string {
	var s string
	for _, p := range m.Content {
		if p.Type == "tool_call" {
			s = "(call)"
		}
	}
	if m.Status != "completed" {
		s += "(" + m.Status + ")"
	}
	return s
}
