package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// chatResult is what test/aisdk/chat.mjs prints.
type chatResult struct {
	Status   string `json:"status"`
	Errors   []string
	Text     string `json:"text"`
	AfterCut *struct {
		Status, Text string
	} `json:"afterCut"`
	DeleteStatus int           `json:"deleteStatus"`
	First        string        `json:"first"`
	Messages     []chatMessage `json:"messages"`
}

// chatMessage is a UI message of the chat, as the AI SDK keeps it.
type chatMessage struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Metadata struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"metadata"`
	Parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ToolName string          `json:"toolName"`
		State    string          `json:"state"`
		Output   json.RawMessage `json:"output"`
		Data     json.RawMessage `json:"data"` // data-input: the input's id, n and status
	} `json:"parts"`
}

// chat runs one scenario of test/aisdk/chat.mjs, the AI SDK's own Chat
// and DefaultChatTransport under Node.js, against base.
func chat(t *testing.T, dir, base, scenario, chatID, text string) chatResult {
	t.Helper()
	cmd := exec.Command("node", "chat.mjs", base, scenario, chatID, text)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node chat.mjs %s: %v\n%s", scenario, err, stderr.String())
	}
	var r chatResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("chat.mjs %s printed %q: %v", scenario, out, err)
	}
	return r
}

// outputOf is a run's output_text, "" for none.
func outputOf(r *client.Run) string {
	if r.OutputText == nil {
		return ""
	}
	return *r.OutputText
}

// TestAISDKChat: the AI SDK's Chat talks to agentd unchanged: a tool call
// renders as its parts; a connection cut mid-answer and resumeStream() end
// with exactly the stored answer; a resume after the end gets 204; a second
// message continues the conversation; stop with the DELETE cancels; an
// approval asked by the run is answered from the chat. The chats are the
// AI SDK's own; what the test reads of agentd's runs it reads through the
// Go SDK.
func TestAISDKChat(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "aisdk", "ai")
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/guarded": webhooktest.OK()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`, sink.URL+"/guarded")))
	base, c := s.URL, s.Client

	t.Run("tools", func(t *testing.T) {
		r := chat(t, dir, base, "send", "chat-tools", "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42.")
		if r.Status != "ready" || len(r.Errors) > 0 || len(r.Messages) != 2 {
			t.Fatalf("chat ended %s with %d messages: %v", r.Status, len(r.Messages), r.Errors)
		}
		m := r.Messages[1]
		var kinds []string
		for _, p := range m.Parts {
			kinds = append(kinds, p.Type+":"+p.State)
		}
		if got := strings.Join(kinds, " "); got != "step-start: dynamic-tool:output-available step-start: text:done" {
			t.Fatalf("the answer's parts are %s", got)
		}
		if m.Parts[1].ToolName != "calculator" || string(m.Parts[1].Output) != `{"result":42}` || m.Parts[3].Text != "The answer is 42." {
			t.Fatalf("parts: %+v", m.Parts)
		}
		run := runEnded(t, c, m.Metadata.RunID)
		if m.ID != run.ID || m.Metadata.Status != "completed" || outputOf(run) != m.Parts[3].Text {
			t.Fatalf("message %s (%+v) of run %+v", m.ID, m.Metadata, run)
		}
	})

	t.Run("retracted text", func(t *testing.T) {
		// The first answer is cut after half its text and asked again: the
		// half streamed (step.retracted, reset-step) does not stay.
		r := chat(t, dir, base, "send", "chat-retract", "/say hello world again and again\n/stream 4 10\n/fault truncate")
		if r.Text != "hello world again and again" || len(r.Errors) > 0 {
			t.Fatalf("the answer reads %q (errors %v)", r.Text, r.Errors)
		}
		retracted := false
		for ev, err := range c.Events(testCtx(t), r.Messages[1].Metadata.RunID, 0) {
			if err != nil {
				t.Fatal(err)
			}
			retracted = retracted || ev.Type == agentd.EventStepRetracted
		}
		if !retracted {
			t.Fatal("the fake's cut did not retract the step: the test proves nothing")
		}
	})

	t.Run("cut then resume", func(t *testing.T) {
		r := chat(t, dir, base, "cut", "chat-cut", "/stream 40 25")
		if r.AfterCut == nil || r.AfterCut.Status != "error" || r.AfterCut.Text == "" {
			t.Fatalf("the cut did not land mid-answer: %+v", r.AfterCut)
		}
		if len(r.Messages) != 2 || r.Status != "ready" {
			t.Fatalf("after the resume: %s, %d messages", r.Status, len(r.Messages))
		}
		run := runEnded(t, c, r.Messages[1].Metadata.RunID)
		var want []string
		for i := 1; i <= 40; i++ {
			want = append(want, fmt.Sprintf("tok%d", i))
		}
		if r.Text != outputOf(run) || r.Text != strings.Join(want, " ") || len(r.AfterCut.Text) >= len(r.Text) {
			t.Fatalf("the resumed answer is %q (had %q at the cut); the run's is %q", r.Text, r.AfterCut.Text, outputOf(run))
		}
		// The answer has ended: resuming finds nothing.
		if again := chat(t, dir, base, "resume", "chat-cut", ""); again.Status != "ready" || len(again.Messages) != 0 {
			t.Fatalf("a resume after the end: %s with %d messages", again.Status, len(again.Messages))
		}
		// The AI SDK's resume route answers 204 so that its client stops:
		// the wire, read raw.
		resp, err := http.Get(base + "/ai-sdk/chat/chat-cut/stream")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("GET the ended chat's stream: %d, want 204", resp.StatusCode)
		}
	})

	t.Run("second message", func(t *testing.T) {
		r := chat(t, dir, base, "twice", "chat-twice", "hello")
		if len(r.Messages) != 4 || r.Messages[1].Metadata.RunID == r.Messages[3].Metadata.RunID {
			t.Fatalf("%d messages", len(r.Messages))
		}
		a, b := runEnded(t, c, r.Messages[1].Metadata.RunID), runEnded(t, c, r.Messages[3].Metadata.RunID)
		if a.ConversationID != b.ConversationID || a.Status != agentd.StatusCompleted || b.Status != agentd.StatusCompleted {
			t.Fatalf("runs %+v and %+v", a, b)
		}
		convs, err := c.ListConversations(testCtx(t), client.ListConversations{ChatID: "chat-twice"})
		if err != nil || len(convs.Data) != 1 || convs.Data[0].ID != a.ConversationID || convs.Data[0].ChatID == nil || *convs.Data[0].ChatID != "chat-twice" {
			t.Fatalf("the chat's conversation: %+v (%v), want %s", convs, err, a.ConversationID)
		}
		msgs, err := c.Messages(testCtx(t), a.ConversationID, 0, "")
		if err != nil || len(msgs.Data) != 4 {
			t.Fatalf("the conversation holds %+v (%v), want 4 messages", msgs, err)
		}
	})

	t.Run("stop", func(t *testing.T) {
		r := chat(t, dir, base, "stop", "chat-stop", "/stream 100 50")
		if r.DeleteStatus != http.StatusNoContent {
			t.Fatalf("DELETE the stream: %d", r.DeleteStatus)
		}
		if run := runEnded(t, c, r.Messages[1].Metadata.RunID); run.Status != agentd.StatusCancelled {
			t.Fatalf("the stopped run ended %s", run.Status)
		}
	})

	t.Run("approval", func(t *testing.T) {
		r := chat(t, dir, base, "approve", "chat-approve", "/call guarded {\"to\":\"bob\"}\n/say done")
		m := r.Messages[len(r.Messages)-1]
		if len(r.Messages) != 2 || r.Text != "done" || len(r.Errors) > 0 {
			t.Fatalf("after the approval: %d messages, text %q, errors %v", len(r.Messages), r.Text, r.Errors)
		}
		var tool string
		for _, p := range m.Parts {
			if p.Type == "dynamic-tool" {
				tool = p.ToolName + ":" + p.State
			}
		}
		if tool != "guarded:output-available" || sink.Count("/guarded") != 1 {
			t.Fatalf("the approved call: %s, the webhook ran %d times", tool, sink.Count("/guarded"))
		}
		if run := runEnded(t, c, m.Metadata.RunID); run.Status != agentd.StatusCompleted {
			t.Fatalf("run ended %s", run.Status)
		}
	})

	t.Run("files", func(t *testing.T) {
		// The fake's /media answers with what the model received: the
		// message's file parts, an image and a PDF; the next message,
		// without files, still shows them to the model, from the
		// conversation's artifacts.
		r := chat(t, dir, base, "files", "chat-files", "/media")
		want := "image image/png 70\nfile application/pdf 48 report.pdf"
		if r.First != want || r.Text != want || len(r.Errors) > 0 || len(r.Messages) != 4 {
			t.Fatalf("the answers %q and %q (errors %v, %d messages), want %q", r.First, r.Text, r.Errors, len(r.Messages), want)
		}
		// The same through a transport that sends the last message alone.
		if last := chat(t, dir, base, "fileslast", "chat-files-last", "/media"); last.First != want || last.Text != want || len(last.Errors) > 0 {
			t.Fatalf("sending the last message alone: %q and %q (errors %v)", last.First, last.Text, last.Errors)
		}
		run := runEnded(t, c, r.Messages[1].Metadata.RunID)
		msgs, err := c.Messages(testCtx(t), run.ConversationID, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, p := range msgs.Data[0].Content {
			if (p.Type == "text") == (p.ArtifactID != "") {
				t.Fatalf("part %+v: a text with an artifact, or an image or a file without one", p)
			}
			kinds = append(kinds, string(p.Type)+":"+p.MediaType)
		}
		if got := strings.Join(kinds, " "); got != "image:image/png file:application/pdf text:" {
			t.Fatalf("the user's stored message: %s", got)
		}
		bad := chat(t, dir, base, "badfile", "chat-badfile", "look")
		if len(bad.Errors) != 1 || !strings.Contains(bad.Errors[0], "messages[0].parts[0].url") {
			t.Fatalf("a bad data URL: %v", bad.Errors)
		}
	})
}

// TestAISDKClientTools: a run's client tool is run by the AI SDK's Chat
// (onToolCall, addToolOutput) and its output sent back through the same
// endpoint; the run goes on with it.
func TestAISDKClientTools(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "aisdk", "ai")
	s := setup(t)
	r := chat(t, dir, s.URL, "client", "chat-client", "/call pick_color {\"hint\":\"warm\"}\n/say done")
	if len(r.Messages) != 2 || r.Text != "done" || len(r.Errors) > 0 {
		t.Fatalf("%d messages, text %q, errors %v", len(r.Messages), r.Text, r.Errors)
	}
	m := r.Messages[1]
	var tool string
	for _, p := range m.Parts {
		if p.Type == "dynamic-tool" {
			tool = p.ToolName + ":" + p.State + ":" + string(p.Output)
		}
	}
	if tool != `pick_color:output-available:{"color":"amber","hint":"warm"}` {
		t.Fatalf("the client tool's part: %s", tool)
	}
	steps, err := s.Client.Steps(testCtx(t), m.Metadata.RunID)
	if err != nil {
		t.Fatal(err)
	}
	c := steps[0].ToolCalls[0]
	var result map[string]string
	json.Unmarshal(c.Result, &result)
	if c.Name != "pick_color" || c.Status != agentd.CallSucceeded || result["color"] != "amber" || result["hint"] != "warm" {
		t.Fatalf("the stored call: %+v", c)
	}
}

// TestAISDKStreamIsTheSameOnReplay: the chat's answer read live and its
// replay from the resume endpoint, at the same time, are the same bytes.
//
// Raw HTTP: the test is about the AI SDK door's bytes.
func TestAISDKStreamIsTheSameOnReplay(t *testing.T) {
	t.Parallel()
	base := setup(t).URL
	body := `{"id":"replay","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"/call calculator {\"expression\":\"1+1\"}\n/stream 30 20"}]}]}`
	resp, err := http.Post(base+"/ai-sdk/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
		t.Fatalf("POST /ai-sdk/chat: %d %v", resp.StatusCode, resp.Header)
	}
	var wg sync.WaitGroup
	var replay []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(200 * time.Millisecond) // mid-answer
		r, err := http.Get(base + "/ai-sdk/chat/replay/stream")
		if err != nil {
			return
		}
		defer r.Body.Close()
		replay, _ = io.ReadAll(r.Body)
	}()
	live, err := io.ReadAll(resp.Body)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(live, []byte("data: [DONE]\n\n")) || !bytes.Contains(live, []byte(`"type":"text-delta"`)) {
		t.Fatalf("the live stream:\n%s", live)
	}
	if !bytes.Equal(live, replay) {
		t.Fatalf("the replay differs from the live stream:\nlive:\n%s\nreplay:\n%s", live, replay)
	}
	// The same message again is the same run, replayed.
	again, err := http.Post(base+"/ai-sdk/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(again.Body)
	again.Body.Close()
	if !bytes.Equal(b, live) {
		t.Fatalf("the same message sent again answered:\n%s", b)
	}
}
