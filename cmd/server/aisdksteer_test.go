package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// steerScript drives /ai-sdk/chat with the AI SDK's own Chat and
// DefaultChatTransport (the `ai` package of test/aisdk), as
// test/aisdk/chat.mjs does, for the chat's steering: it sends FIRST and,
// while its answer streams, SECOND; it prints what the chat ended with as
// one JSON line.
//
//	node --input-type=module -e steerScript BASE_URL SCENARIO CHAT_ID FIRST SECOND
//
// Scenarios:
//
//	steer    the transport's body has if_busy: "steer"; SECOND is sent as
//	         useChat sends a message while an answer streams: at once,
//	         the first stream still read
//	sendnow  the same, through the AI SDK's message queue
//	         (experimental_queue): SECOND waits in the queue, and
//	         experimental_sendQueuedMessageNow stops the first stream
//	         (the connection closes; the run goes on) and sends it
//	plain    no if_busy: SECOND is sent at once, as in steer
const steerScript = `
import { AbstractChat, DefaultChatTransport } from "ai";

const [base, scenario, chatId, first, second] = process.argv.slice(1);
const api = base + "/ai-sdk/chat";

class MemoryState {
  constructor() { this.messages = []; this.status = "ready"; this.error = undefined; }
  pushMessage = (m) => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (x) => structuredClone(x);
}
class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new MemoryState() }); }
}

async function until(cond, what, ms = 20000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function textOf(m) {
  if (!m || m.role !== "assistant") return "";
  return m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
}

const errors = [];
const body = scenario === "plain" ? {} : { if_busy: "steer" };
const chat = new Chat({ id: chatId, transport: new DefaultChatTransport({ api, body }),
  experimental_queue: scenario === "sendnow", onError: (e) => errors.push(String(e)) });
const out = {};
const firstSent = chat.sendMessage({ text: first });
await until(() => textOf(chat.messages.at(-1)) !== "", "the first answer's text");
out.textAtSecond = textOf(chat.messages.at(-1));
if (scenario === "sendnow") {
  await chat.sendMessage({ text: second });
  const queued = chat.experimental_queuedMessages;
  if (queued.length !== 1) throw new Error("the second message was not queued: " + JSON.stringify(queued));
  await chat.experimental_sendQueuedMessageNow(queued[0].id);
} else {
  await chat.sendMessage({ text: second });
}
await firstSent;
out.status = chat.status;
out.errors = errors;
out.messages = chat.messages;
out.text = textOf(chat.messages.at(-1));
process.stdout.write(JSON.stringify(out) + "\n");
`

// steerResult is what steerScript prints.
type steerResult struct {
	chatResult
	TextAtSecond string `json:"textAtSecond"`
}

// chatSteer runs one scenario of steerScript against base, in dir (whose
// node_modules has the ai package).
func chatSteer(t *testing.T, dir, base, scenario, chatID, first, second string) steerResult {
	t.Helper()
	cmd := exec.Command("node", "--input-type=module", "-e", steerScript, base, scenario, chatID, first, second)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node steerScript %s: %v\n%s", scenario, err, stderr.String())
	}
	var r steerResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("steerScript %s printed %q: %v", scenario, out, err)
	}
	return r
}

// textOfParts is the text of a chat message's text parts.
func textOfParts(m chatMessage) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// TestAISDKSteer: with if_busy: "steer" in the chat request's body (the
// transport's body option), a message the AI SDK's Chat sends while an
// answer streams is input of the run in flight, not a new run: the run
// takes it at its next step boundary and answers it, GET
// /runs/{id}/inputs shows it applied, the conversation reads in turn
// order, and the chat shows the first answer, the message, and the answer
// to it (a message of its own, whose id is the input's). So it is whether
// the chat reads the first stream to its end or stops it to send
// (experimental_sendQueuedMessageNow). Without the setting the second
// message is refused, as before: the conversation is busy.
func TestAISDKSteer(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "aisdk", "ai")
	s := setup(t)
	base, c := s.URL, s.Client
	const first, second = "/stream 40 100", "/say steered"
	var toks []string
	for i := 1; i <= 40; i++ {
		toks = append(toks, fmt.Sprintf("tok%d", i))
	}
	whole := strings.Join(toks, " ")

	for _, scenario := range []string{"steer", "sendnow"} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			r := chatSteer(t, dir, base, scenario, "chat-"+scenario, first, second)
			if r.Status != "ready" || len(r.Errors) > 0 || len(r.Messages) != 4 {
				t.Fatalf("the chat ended %s with %d messages, errors %v: %+v", r.Status, len(r.Messages), r.Errors, r.Messages)
			}
			var roles []string
			for _, m := range r.Messages {
				roles = append(roles, m.Role)
			}
			if got := strings.Join(roles, " "); got != "user assistant user assistant" {
				t.Fatalf("the chat's messages are %s", got)
			}
			a1, a2 := r.Messages[1], r.Messages[3]
			runID := a1.Metadata.RunID
			if runID == "" || a1.ID != runID || a2.Metadata.RunID != runID {
				t.Fatalf("the answers are of runs %s (message %s) and %s: one run answers both", runID, a1.ID, a2.Metadata.RunID)
			}
			// What the chat shows: the answer to the second message follows
			// its directive; the first answer is whole when the chat read
			// its stream to the end, and as far as it read when it stopped.
			if r.Text != "steered" || textOfParts(a2) != "steered" || a2.Metadata.Status != "completed" {
				t.Fatalf("the last answer reads %q (%+v), want %q", r.Text, a2.Metadata, "steered")
			}
			a1Text := textOfParts(a1)
			if scenario == "steer" && (a1Text != whole || a1.Metadata.Status != "running") {
				t.Fatalf("the first answer reads %q (%+v), want the whole of it", a1Text, a1.Metadata)
			}
			if scenario == "sendnow" && (a1Text == "" || !strings.HasPrefix(whole, a1Text)) {
				t.Fatalf("the first answer reads %q", a1Text)
			}
			// Each answer says what became of the message: the first, read
			// to its end, that the run took it (the chat that stopped it
			// first never read that); the second that it answers it.
			applied := `{"input_id":"` + a2.ID + `","n":1,"status":"applied"}`
			took := applied
			if scenario == "sendnow" {
				took = ""
			}
			if inputParts(a1) != took || inputParts(a2) != applied || a2.Parts[0].Type != "data-input" {
				t.Fatalf("the answers' data-input parts: %s and %s, want %q and %s", inputParts(a1), inputParts(a2), took, applied)
			}
			if r.TextAtSecond == "" || len(r.TextAtSecond) >= len(whole) {
				t.Fatalf("the second message was sent when the first answer read %q: not while it streamed", r.TextAtSecond)
			}

			// The run took the message as input, and answered it.
			run := runEnded(t, c, runID)
			if run.Status != agentd.StatusCompleted || outputOf(run) != "steered" {
				t.Fatalf("the run ended %s with %q", run.Status, outputOf(run))
			}
			ins, err := c.ListInputs(testCtx(t), runID)
			if err != nil || len(ins) != 1 {
				t.Fatalf("the run's inputs: %+v (%v)", ins, err)
			}
			if in := ins[0]; in.Status != agentd.InputApplied || in.Source != agentd.InputFromClient || in.ID != a2.ID ||
				len(in.Messages) != 1 || agentd.TextOf(in.Messages[0].Content) != second {
				t.Fatalf("the input %+v, want the second message applied, its id the last answer's (%s)", in, a2.ID)
			}
			runs, err := c.ListRuns(testCtx(t), client.ListRuns{ConversationID: run.ConversationID})
			if err != nil || len(runs.Data) != 1 {
				t.Fatalf("the conversation's runs: %+v (%v), want one", runs, err)
			}
			// The conversation reads in turn order.
			msgs, err := c.Messages(testCtx(t), run.ConversationID, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			var turns []string
			for _, m := range msgs.Data {
				turns = append(turns, string(m.Role)+":"+agentd.TextOf(m.Content))
			}
			if got, want := strings.Join(turns, " | "), "user:"+first+" | assistant:"+whole+" | user:"+second+" | assistant:steered"; got != want {
				t.Fatalf("the conversation:\n got %s\nwant %s", got, want)
			}
		})
	}

	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		r := chatSteer(t, dir, base, "plain", "chat-plain", first, second)
		if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "conversation_busy") {
			t.Fatalf("without if_busy, the second message while the first is answered: errors %v", r.Errors)
		}
		run := runEnded(t, c, r.Messages[1].Metadata.RunID)
		if ins, err := c.ListInputs(testCtx(t), run.ID); err != nil || len(ins) != 0 || outputOf(run) != whole {
			t.Fatalf("the run took %+v (%v) and answered %q", ins, err, outputOf(run))
		}
	})
}

// inputParts are the data of a chat message's data-input parts.
func inputParts(m chatMessage) string {
	var out []string
	for _, p := range m.Parts {
		if p.Type == "data-input" {
			out = append(out, string(p.Data))
		}
	}
	return strings.Join(out, " ")
}

// TestAISDKSteerStreams: the wire of a steered chat. The first answer's
// stream ends where the run takes the message sent meanwhile (finish, the
// run going on); the steering request's stream is the answer to it, a
// message whose id is the input's (Agentd-Input-Id); a resume then replays
// that answer, the same bytes, and so does the same message sent again.
//
// Raw HTTP: the test is about the AI SDK door's bytes.
func TestAISDKSteerStreams(t *testing.T) {
	t.Parallel()
	base := setup(t).URL
	m1 := `{"id":"m1","role":"user","parts":[{"type":"text","text":"/stream 30 50"}]}`
	m2 := `{"id":"m2","role":"user","parts":[{"type":"text","text":"/say the second answer\n/stream 20 50"}]}`
	post := func(msgs string) *http.Response {
		resp, err := http.Post(base+"/ai-sdk/chat", "application/json",
			strings.NewReader(`{"id":"steer-wire","if_busy":"steer","messages":[`+msgs+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("POST /ai-sdk/chat: %d %s", resp.StatusCode, b)
		}
		return resp
	}
	first := post(m1)
	defer first.Body.Close()
	runID := strings.TrimPrefix(first.Header.Get("Location"), "/runs/")
	var live1 []byte
	read1 := make(chan struct{})
	go func() {
		defer close(read1)
		live1, _ = io.ReadAll(first.Body)
	}()
	time.Sleep(300 * time.Millisecond) // mid-answer
	second := post(m1 + "," + m2)
	defer second.Body.Close()
	inputID := second.Header.Get("Agentd-Input-Id")
	if second.Header.Get("Location") != "/runs/"+runID || inputID == "" {
		t.Fatalf("the steering request's Location %q and input %q, want run %s", second.Header.Get("Location"), inputID, runID)
	}
	var replay []byte
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		<-read1                            // the first answer is over: the run took the message
		time.Sleep(200 * time.Millisecond) // mid-answer to it
		r, err := http.Get(base + "/ai-sdk/chat/steer-wire/stream")
		if err != nil {
			return
		}
		defer r.Body.Close()
		replay, _ = io.ReadAll(r.Body)
	}()
	live2, err := io.ReadAll(second.Body)
	<-resumed
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(live1, []byte(`"messageMetadata":{"next_input_id":"`+inputID+`","run_id":"`+runID+`","status":"running"},"type":"finish"}`+"\n\ndata: [DONE]\n\n")) ||
		!bytes.Contains(live1, []byte(` tok30"`)) {
		t.Fatalf("the first answer's stream:\n%s", live1)
	}
	if !bytes.HasPrefix(live2, []byte(`data: {"messageId":"`+inputID+`","messageMetadata":{"input_id":"`+inputID+`","run_id":"`+runID+`"},"type":"start"}`)) ||
		bytes.Contains(live2, []byte("tok")) || !bytes.HasSuffix(live2, []byte("data: [DONE]\n\n")) ||
		!bytes.Contains(live2, []byte(`"status":"completed"`)) {
		t.Fatalf("the steering request's stream:\n%s", live2)
	}
	if !bytes.Equal(replay, live2) {
		t.Fatalf("the resume differs from the answer's stream:\nlive:\n%s\nresume:\n%s", live2, replay)
	}
	again := post(m1 + "," + m2)
	b, _ := io.ReadAll(again.Body)
	again.Body.Close()
	if again.Header.Get("Agentd-Input-Id") != inputID || !bytes.Equal(b, live2) {
		t.Fatalf("the same message sent again answered (input %s):\n%s", again.Header.Get("Agentd-Input-Id"), b)
	}
}
