package main

import (
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// untilStreaming waits until run id has streamed text.
func untilStreaming(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ev, err := range c.Events(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == agentd.EventMessageDelta {
			return
		}
	}
	t.Fatalf("run %s ended without streaming", id)
}

// TestRunsSay: runs say sends a message to a run while it streams, printed
// as "key: value" lines or (-o json) as the API's input, the same key
// giving the same input; the run answers the last message; runs inputs
// lists them, and runs tail shows them accepted and applied. A run that
// ended refuses it, naming the command that sends it to its conversation.
func TestRunsSay(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()
	run := createRun(t, c, client.CreateRun{Input: "/stream 40 50"})
	untilStreaming(t, c, run.ID)

	r := ctl(t, base, "runs", "say", run.ID, "/say", "one")
	if r.code != exitOK || r.stderr != "" || !regexp.MustCompile(`(?m)^status: +pending$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^n: +1$`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^message: +/say one$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, run.ID) {
		t.Fatalf("runs say: %s", r)
	}
	var second, replay client.Input
	r = ctl(t, base, "runs", "say", "-o", "json", "-idempotency-key", "k-say", run.ID, "/say two")
	if err := json.Unmarshal([]byte(r.stdout), &second); err != nil || r.code != exitOK || second.N != 2 || second.RunID != run.ID ||
		second.Status != agentd.InputPending || second.When != agentd.InputNext {
		t.Fatalf("runs say -o json: %v %s", err, r)
	}
	r = ctl(t, base, "-o", "json", "runs", "say", run.ID, "-idempotency-key", "k-say", "/say two")
	if err := json.Unmarshal([]byte(r.stdout), &replay); err != nil || r.code != exitOK || replay.ID != second.ID {
		t.Fatalf("runs say with the same key: %v %s", err, r)
	}
	done, err := c.WaitRun(ctx, run.ID, 10*time.Second)
	if err != nil || done.Status != agentd.StatusCompleted || deref(done.OutputText) != "two" {
		t.Fatalf("the run: %+v %v", done, err)
	}

	r = ctl(t, base, "runs", "inputs", run.ID)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "N ") || strings.Count(r.stdout, "applied") != 2 ||
		!strings.Contains(r.stdout, "/say one") || !strings.Contains(r.stdout, second.ID) {
		t.Fatalf("runs inputs: %s", r)
	}
	var list struct{ Data []client.Input }
	if r := ctl(t, base, "-o", "json", "runs", "inputs", run.ID); json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Data) != 2 ||
		list.Data[1].ID != second.ID || list.Data[1].Status != agentd.InputApplied {
		t.Fatalf("runs inputs -o json: %s", r)
	}
	r = ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitOK || !strings.Contains(r.stdout, "· input 1 accepted by ") || !strings.Contains(r.stdout, "· input 2 accepted by ") ||
		!strings.Contains(r.stdout, "· input 2 applied\n") || !strings.HasSuffix(r.stdout, "\ntwo\n■ run completed\n") ||
		strings.Index(r.stdout, "· input 1 applied") < strings.Index(r.stdout, tokens(40)) {
		t.Fatalf("runs tail of the steered run: %s", r)
	}
	// The accepted mark waits for the end of the line of text streaming.
	if got := textLines(r.stdout); len(got) == 0 || got[0] != tokens(40) {
		t.Fatalf("the text lines: %q\n%s", got, r.stdout)
	}

	// -now cuts the answer under way.
	run = createRun(t, c, client.CreateRun{Input: "/stream 100 50"})
	untilStreaming(t, c, run.ID)
	if r := ctl(t, base, "runs", "say", "-now", run.ID, "/say", "now"); r.code != exitOK || !regexp.MustCompile(`(?m)^when: +now$`).MatchString(r.stdout) {
		t.Fatalf("runs say -now: %s", r)
	}
	if done, err := c.WaitRun(ctx, run.ID, 10*time.Second); err != nil || deref(done.OutputText) != "now" {
		t.Fatalf("the run cut short: %+v %v", done, err)
	}

	// A run that ended: 2, naming its conversation.
	r = ctl(t, base, "runs", "say", run.ID, "late")
	if r.code != exitError || !strings.Contains(r.stderr, "run_ended") || !strings.Contains(r.stderr, "agentctl chat "+run.ConversationID) {
		t.Fatalf("runs say to an ended run: %s", r)
	}
	if r := ctl(t, base, "runs", "say", run.ID); r.code != exitError || !strings.Contains(r.stderr, "missing arguments") {
		t.Fatalf("runs say without text: %s", r)
	}
}

// chatting runs agentctl chat against base with args, reading stdin, in a
// goroutine; its stdout is out, and the channel receives what it did.
func chatting(base string, stdin io.Reader, out *syncBuffer, args ...string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var stderr syncBuffer
		code := run(ctx, append([]string{"-url", base, "chat"}, args...), noEnv, stdin, out, &stderr)
		ch <- result{code, out.String(), stderr.String()}
	}()
	return ch
}

// actor matches the actor of an input.accepted line.
var actor = regexp.MustCompile(`(?m)^(· input \d+ accepted) by \S+$`)

// runLine matches the "· run ID (conversation C)" lines of chat's output.
var runLine = regexp.MustCompile(`(?m)^· run (\S+) \(conversation (\S+)\)$`)

// TestChat: chat reads lines from a pipe: the first starts a run whose
// answer it prints as it streams; a line typed while the agent answers
// steers that run, which answers it next; a line typed once the run ended
// starts the conversation's next run, which chat follows too. At EOF it
// ends once the run in flight has; the conversation holds every message,
// in order.
func TestChat(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()
	pr, pw := io.Pipe()
	defer pr.Close()
	var out syncBuffer
	done := chatting(base, pr, &out)

	io.WriteString(pw, "/stream 40 50\n")
	waitFor(t, &out, "tok3 ")
	io.WriteString(pw, "/say steered while answering\n")
	waitFor(t, &out, "■ run completed\n")
	io.WriteString(pw, "\n/say the next run\n")
	waitFor(t, &out, "the next run\n■ run completed\n")
	pw.Close()
	r := await(t, done)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("chat: %s", r)
	}
	t.Logf("chat:\n%s", r.stdout)

	runs := runLine.FindAllStringSubmatch(r.stdout, -1)
	if len(runs) != 2 || runs[0][1] == runs[1][1] || runs[0][2] != runs[1][2] {
		t.Fatalf("the runs chat followed: %q\n%s", runs, r.stdout)
	}
	first, next, conv := runs[0][1], runs[1][1], runs[0][2]
	// The mark of the accepted input waits for the end of the line of
	// text it came in; it names who sent it.
	want := "· run " + first + " (conversation " + conv + ")\n" + tokens(40) + "\n· input 1 accepted by ACTOR\n· input 1 applied\n" +
		"steered while answering\n■ run completed\n· run " + next + " (conversation " + conv + ")\nthe next run\n■ run completed\n"
	if got := actor.ReplaceAllString(r.stdout, "$1 by ACTOR"); got != want {
		t.Fatalf("chat wrote\n%s\nwant\n%s", r.stdout, want)
	}
	msgs, err := c.Messages(ctx, conv, 20, "")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range msgs.Data {
		texts = append(texts, string(m.Role)+": "+m.Text())
	}
	if strings.Join(texts, "\n") != "user: /stream 40 50\nassistant: "+tokens(40)+"\nuser: /say steered while answering\n"+
		"assistant: steered while answering\nuser: /say the next run\nassistant: the next run" {
		t.Fatalf("the conversation: %q", texts)
	}
	if got, err := c.GetRun(ctx, first); err != nil || got.Status != agentd.StatusCompleted || deref(got.OutputText) != "steered while answering" {
		t.Fatalf("the first run: %+v %v", got, err)
	}

	// chat CONVERSATION goes on with that conversation; EOF right after
	// the line ends chat once its run has ended.
	out = syncBuffer{}
	r = await(t, chatting(base, strings.NewReader("/stream 10 20\n"), &out, conv))
	if r.code != exitOK || r.stderr != "" || !strings.HasSuffix(r.stdout, "(conversation "+conv+")\n"+tokens(10)+"\n■ run completed\n") {
		t.Fatalf("chat CONVERSATION: %s", r)
	}
	if page, err := c.ListRuns(ctx, client.ListRuns{ConversationID: conv}); err != nil || len(page.Data) != 3 {
		t.Fatalf("the conversation's runs: %+v %v", page, err)
	}
	// A conversation that is not there: 2.
	out = syncBuffer{}
	if r := await(t, chatting(base, strings.NewReader("hi\n"), &out, "01a23158-24d0-755c-8953-5268112791c4")); r.code != exitError ||
		!strings.Contains(r.stderr, "conversation_not_found") {
		t.Fatalf("chat with a missing conversation: %s", r)
	}
}

// TestChatInterrupted: chat ends when its context does, while the agent
// answers and no EOF came: it stops following, and exits 130.
func TestChatInterrupted(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	defer pr.Close()
	var out, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan int, 1)
	go func() { ch <- run(ctx, []string{"-url", base, "chat"}, noEnv, pr, &out, &stderr) }()
	io.WriteString(pw, "/stream 200 50\n")
	waitFor(t, &out, "tok2 ")
	cancel()
	select {
	case code := <-ch:
		if code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") || strings.Contains(out.String(), "tok200") {
			t.Fatalf("chat interrupted: exit %d\n%s\n%s", code, out.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chat did not end with its context")
	}
}
