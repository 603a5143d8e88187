package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// The tests run agentctl against real agentd processes, each on its own
// database, with the server's built-in fake model.

func TestMain(m *testing.M) { servertest.Main(m) }

// newServer starts agentd on a fresh database and returns its base URL.
func newServer(t *testing.T, env ...string) string {
	t.Helper()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t), env...)
	return "http://" + addr
}

// syncBuffer is a bytes.Buffer that may be written and read at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is what one agentctl invocation did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// ctl runs agentctl against base with args, and returns what it did.
func ctl(t *testing.T, base string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	code := run(ctx, append([]string{"-url", base}, args...), noEnv, strings.NewReader(""), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// background runs agentctl against base with args in a goroutine; its
// stdout is out, and the channel receives what it did.
func background(base string, out *syncBuffer, args ...string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var stderr syncBuffer
		code := run(ctx, append([]string{"-url", base}, args...), noEnv, strings.NewReader(""), out, &stderr)
		ch <- result{code, out.String(), stderr.String()}
	}()
	return ch
}

// waitFor waits until out contains s.
func waitFor(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output:\n%s", s, out.String())
		}
	}
}

// await waits for a background invocation.
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("agentctl did not end")
		return result{}
	}
}

// tokens is the fake model's streamed answer of n chunks: "tok1 … tokN".
func tokens(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "tok%d", i)
	}
	return b.String()
}

// createRun starts a run with the SDK.
func createRun(t *testing.T, c *client.Client, req client.CreateRun) *client.Run {
	t.Helper()
	r, err := c.CreateRun(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// textLines are the lines of the renderer's output that hold the model's
// text: those that start with none of its marks.
func textLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, " ") {
			continue
		}
		marked := false
		for _, m := range []string{markCall, markResult, markRetracted, markWait, markInfo, markEnd, "?"} {
			marked = marked || strings.HasPrefix(l, m)
		}
		if !marked {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestCreateWait: runs create -wait prints the run once it has completed,
// as "key: value" lines and, with -o json, as the API's JSON.
func TestCreateWait(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	text := "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."

	r := ctl(t, base, "runs", "create", "-wait", text)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("runs create -wait: %s", r)
	}
	for _, want := range []string{"status:", "completed", "steps:", "2 of at most", "output:", "The answer is 42."} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("no %q in:\n%s", want, r.stdout)
		}
	}

	r = ctl(t, base, "-o", "json", "runs", "create", "-wait", "-metadata", `{"app":"agentctl"}`, text)
	if r.code != exitOK {
		t.Fatalf("-o json runs create -wait: %s", r)
	}
	var run client.Run
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("the output is no run: %v\n%s", err, r.stdout)
	}
	if run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != "The answer is 42." || run.StepCount != 2 ||
		compactJSON(run.Metadata) != `{"app":"agentctl"}` {
		t.Fatalf("the run: %+v", run)
	}
	// It is the server's run, as it is stored.
	stored, err := client.New(base).GetRun(context.Background(), run.ID)
	if err != nil || stored.Status != agentd.StatusCompleted || stored.LastEventSeq != run.LastEventSeq {
		t.Fatalf("the stored run: %+v %v", stored, err)
	}
	// The -o flag may also follow the command; -tools "" offers no tool.
	r = ctl(t, base, "runs", "create", "-o", "json", "-tools", "", "-wait", "/say hi")
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || r.code != exitOK || run.Tools == nil || len(run.Tools) != 0 {
		t.Fatalf("runs create -tools '': %+v %v %s", run, err, r)
	}
}

// TestTailStreams: runs tail shows the tool call, its result and the
// streamed answer, once, and exits 0; with -o json it prints the envelopes.
func TestTailStreams(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)
	run := createRun(t, c, client.CreateRun{Input: "/call calculator {\"expression\":\"2+2\"}\n/stream 20 20"})

	r := ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("runs tail: %s", r)
	}
	want := tokens(20)
	for _, s := range []string{`→ calculator {"expression":"2+2"}` + "\n", `← calculator succeeded {"result":4}` + "\n", "\n" + want + "\n", "■ run completed\n"} {
		if !strings.Contains(r.stdout, s) {
			t.Fatalf("no %q in:\n%s", s, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "tok1 "); n != 1 {
		t.Fatalf("the text shows %d times:\n%s", n, r.stdout)
	}
	if got := textLines(r.stdout); len(got) != 1 || got[0] != want {
		t.Fatalf("the text lines: %q", got)
	}
	if final, err := c.GetRun(context.Background(), run.ID); err != nil || deref(final.OutputText) != want {
		t.Fatalf("the run: %+v %v", final, err)
	}

	// -o json: each stored event, one per line, in order, ending with the end.
	r = ctl(t, base, "-o", "json", "runs", "tail", run.ID)
	if r.code != exitOK {
		t.Fatalf("-o json runs tail: %s", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var last client.Event
	var text strings.Builder
	for i, l := range lines {
		var ev client.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Seq != int64(i+1) || ev.RunID != run.ID {
			t.Fatalf("line %d: %q: %v", i, l, err)
		}
		if p, err := ev.Payload(); err != nil || p.EventType() != ev.Type {
			t.Fatalf("line %d: %q decodes as %#v: %v", i, l, p, err)
		} else if d, ok := p.(agentd.MessageDeltaData); ok {
			text.WriteString(d.Text)
		}
		last = ev
	}
	if last.Type != agentd.EventRunCompleted || text.String() != want {
		t.Fatalf("the last event is %s; the deltas say %q", last.Type, text.String())
	}
	// After the end there is nothing to follow: it exits at once.
	if r := ctl(t, base, "runs", "tail", "-after", fmt.Sprint(last.Seq), run.ID); r.code != exitOK || r.stdout != "" {
		t.Fatalf("runs tail -after the end: %s", r)
	}
	// runs create -tail does the same in one command.
	r = ctl(t, base, "runs", "create", "-tail", "/stream 5 10")
	if r.code != exitOK || !strings.Contains(r.stdout, "\n"+tokens(5)+"\n■ run completed\n") || !strings.HasPrefix(r.stdout, "· run ") {
		t.Fatalf("runs create -tail: %s", r)
	}
}

// TestTailSurvivesRestart: the server is killed while tail follows a
// streaming run, and a new one takes over on the same address and
// database; tail goes on by itself and ends with the run, exit 0. Text
// the new server streams again is announced by the retraction line first.
func TestTailSurvivesRestart(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	first := servertest.Start(t, addr, url)
	base := "http://" + addr
	c := client.New(base)
	run := createRun(t, c, client.CreateRun{Input: "/stream 80 25"})

	var out syncBuffer
	done := background(base, &out, "runs", "tail", run.ID)
	waitFor(t, &out, "tok5 ")
	first.Kill()
	servertest.Start(t, addr, url)
	r := await(t, done)
	if r.code != exitOK {
		t.Fatalf("runs tail across a restart: %s", r)
	}
	t.Logf("runs tail across the restart:\n%s", r.stdout)
	want := tokens(80)
	final, err := c.GetRun(context.Background(), run.ID)
	if err != nil || final.Status != agentd.StatusCompleted || deref(final.OutputText) != want {
		t.Fatalf("the run after the restart: %+v %v", final, err)
	}
	if !strings.Contains(r.stdout, markInfo+" run recovered by another worker") {
		t.Fatalf("the second server did not take the run over: the test proved nothing:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, want); n != 1 {
		t.Fatalf("the whole answer shows %d times:\n%s", n, r.stdout)
	}
	// The text after the last retraction is the answer, alone; what came
	// before it is a beginning of it, withdrawn.
	after, before := r.stdout, ""
	if i := strings.LastIndex(r.stdout, markRetracted); i >= 0 {
		after, before = r.stdout[i:], r.stdout[:i]
	}
	if got := textLines(after); len(got) != 1 || got[0] != want {
		t.Fatalf("the text after the last retraction: %q\n%s", got, r.stdout)
	}
	for _, l := range textLines(before) {
		if !strings.HasPrefix(want, l) {
			t.Fatalf("withdrawn text %q is no beginning of the answer:\n%s", l, r.stdout)
		}
	}
	if !strings.HasSuffix(r.stdout, want+"\n■ run completed\n") {
		t.Fatalf("the output does not end with the answer and the end:\n%s", r.stdout)
	}
}

// TestExitCodes: tail's exit status says how the run ended; an error of
// the API or of usage is 2, with the error on stderr.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)

	// Cancelled: 3.
	run := createRun(t, c, client.CreateRun{Input: "/stream 40 50"})
	var out syncBuffer
	done := background(base, &out, "runs", "tail", run.ID)
	waitFor(t, &out, "tok3")
	if r := ctl(t, base, "runs", "cancel", run.ID); r.code != exitOK || !strings.Contains(r.stdout, run.ID) {
		t.Fatalf("runs cancel: %s", r)
	}
	r := await(t, done)
	if r.code != exitCancelled || !strings.Contains(r.stdout, "■ run cancelled") {
		t.Fatalf("tail of a cancelled run: %s", r)
	}
	if strings.Contains(r.stdout, tokens(40)) {
		t.Fatalf("the cancelled run streamed its whole answer:\n%s", r.stdout)
	}
	if got, err := c.GetRun(context.Background(), run.ID); err != nil || got.Status != agentd.StatusCancelled {
		t.Fatalf("the cancelled run: %+v %v", got, err)
	}
	// Resumed, the run goes on after its end: tail from the start follows
	// it past the cancellation to its new end.
	if r := ctl(t, base, "runs", "resume", run.ID); r.code != exitOK {
		t.Fatalf("runs resume: %s", r)
	}
	r = ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitOK || !strings.Contains(r.stdout, "■ run cancelled") || !strings.Contains(r.stdout, "· run resumed by ") ||
		!strings.HasSuffix(r.stdout, "\n"+tokens(40)+"\n■ run completed\n") {
		t.Fatalf("tail of a resumed run: %s", r)
	}

	// Timed out: 1.
	run = createRun(t, c, client.CreateRun{Input: "/stream 100 50", Timeouts: &client.Timeouts{TotalMS: 500}})
	if r := ctl(t, base, "runs", "tail", run.ID); r.code != exitFailed || !strings.Contains(r.stdout, "■ run timed out") {
		t.Fatalf("tail of a timed-out run: %s", r)
	}

	// An unknown run: 2, with the error's code on stderr.
	const missing = "01a23158-24d0-755c-8953-5268112791c4"
	for _, args := range [][]string{{"runs", "get", missing}, {"runs", "tail", missing}, {"actions", "approve", missing}} {
		r := ctl(t, base, args...)
		if r.code != exitError || !strings.HasPrefix(r.stderr, "agentctl: ") || !strings.Contains(r.stderr, "run_not_found") || r.stdout != "" {
			t.Fatalf("%v: %s", args, r)
		}
	}
	// A field the server refuses: 2, with the field.
	if r := ctl(t, base, "runs", "create", "-max-steps", "100000", "hi"); r.code != exitError ||
		!strings.Contains(r.stderr, "invalid_field") || !strings.Contains(r.stderr, "max_steps") {
		t.Fatalf("a bad -max-steps: %s", r)
	}
	// A server that is not there: 2.
	if r := ctl(t, "http://"+servertest.FreeAddr(t), "runs", "get", missing); r.code != exitError || !strings.HasPrefix(r.stderr, "agentctl: ") {
		t.Fatalf("no server: %s", r)
	}
	// Usage errors: 2.
	for _, args := range [][]string{{}, {"runs"}, {"runs", "nope"}, {"runs", "get"}, {"runs", "get", "a", "b"}, {"runs", "list", "-limit", "x"},
		{"runs", "create", "-metadata", "{", "hi"}, {"actions", "result", missing}, {"-o", "yaml", "tools"}} {
		if r := ctl(t, base, args...); r.code != exitError || r.stderr == "" {
			t.Fatalf("%v: %s", args, r)
		}
	}
	// Help lists every command, on stdout, with status 0.
	for _, args := range [][]string{{"help"}, {"-h"}} {
		r := ctl(t, base, args...)
		if r.code != exitOK {
			t.Fatalf("%v: %s", args, r)
		}
		for name := range commands {
			if !strings.Contains(r.stdout, name+" ") && !strings.Contains(r.stdout, name+"\n") {
				t.Fatalf("%v does not list %q:\n%s", args, name, r.stdout)
			}
		}
	}
	if r := ctl(t, base, "help", "runs", "tail"); r.code != exitOK || !strings.Contains(r.stdout, "-after") {
		t.Fatalf("help runs tail: %s", r)
	}
}

// TestTables: the lists print aligned tables holding the ids and names the
// API gives.
func TestTables(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()

	r := ctl(t, base, "-o", "json", "runs", "create", "-wait", "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42.")
	var first client.Run
	if err := json.Unmarshal([]byte(r.stdout), &first); err != nil || r.code != exitOK {
		t.Fatalf("runs create: %v %s", err, r)
	}
	r = ctl(t, base, "-o", "json", "runs", "create", "-wait", "-conversation", first.ConversationID, "/say again")
	var second client.Run
	if err := json.Unmarshal([]byte(r.stdout), &second); err != nil || r.code != exitOK || second.ConversationID != first.ConversationID {
		t.Fatalf("runs create -conversation: %v %s", err, r)
	}

	// runs list: both runs, newest first; by pages of one.
	r = ctl(t, base, "runs", "list")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "ID ") || strings.Index(r.stdout, second.ID) > strings.Index(r.stdout, first.ID) ||
		!strings.Contains(r.stdout, first.ID) || strings.Contains(r.stdout, "more:") {
		t.Fatalf("runs list: %s", r)
	}
	r = ctl(t, base, "runs", "list", "-conversation", first.ConversationID, "-limit", "1")
	if r.code != exitOK || !strings.Contains(r.stdout, second.ID) || strings.Contains(r.stdout, first.ID) || !strings.Contains(r.stdout, "more: -cursor ") {
		t.Fatalf("runs list -limit 1: %s", r)
	}
	cursor := strings.TrimSpace(r.stdout[strings.Index(r.stdout, "-cursor ")+len("-cursor "):])
	r = ctl(t, base, "runs", "list", "-conversation", first.ConversationID, "-limit", "1", "-cursor", cursor)
	if r.code != exitOK || !strings.Contains(r.stdout, first.ID) || strings.Contains(r.stdout, second.ID) {
		t.Fatalf("runs list -cursor: %s", r)
	}
	if r := ctl(t, base, "runs", "list", "-status", "failed"); r.code != exitOK || strings.Contains(r.stdout, first.ID) {
		t.Fatalf("runs list -status failed: %s", r)
	}
	var page client.Page[client.Run]
	if r := ctl(t, base, "-o", "json", "runs", "list"); json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Data) != 2 {
		t.Fatalf("-o json runs list: %s", r)
	}

	// runs steps: the steps, the tool call and its attempt.
	steps, err := c.Steps(ctx, first.ID)
	if err != nil || len(steps) != 2 || len(steps[0].ToolCalls) != 1 {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	r = ctl(t, base, "runs", "steps", first.ID)
	call := steps[0].ToolCalls[0]
	for _, want := range []string{"STEP", steps[0].ID, steps[1].ID, call.ID, "calculator", "succeeded", `{"result":42}`, "attempt", "finish tool_calls"} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("runs steps: no %q in %s", want, r)
		}
	}

	// conversations messages: every message of the conversation.
	msgs, err := c.Messages(ctx, first.ConversationID, 0, "")
	if err != nil || len(msgs.Data) < 6 {
		t.Fatalf("messages: %+v %v", msgs, err)
	}
	r = ctl(t, base, "conversations", "messages", first.ConversationID)
	for _, want := range []string{"SEQ", "ROLE", "The answer is 42.", "again", "→ calculator"} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("conversations messages: no %q in %s", want, r)
		}
	}
	for _, m := range msgs.Data {
		if !strings.Contains(r.stdout, m.ID) {
			t.Fatalf("conversations messages: no message %s in %s", m.ID, r)
		}
	}
	r = ctl(t, base, "conversations", "messages", "-limit", "2", first.ConversationID)
	if r.code != exitOK || !strings.Contains(r.stdout, msgs.Data[1].ID) || strings.Contains(r.stdout, msgs.Data[2].ID) || !strings.Contains(r.stdout, "more: -cursor") {
		t.Fatalf("conversations messages -limit 2: %s", r)
	}
	if r := ctl(t, base, "conversations", "get", first.ConversationID); r.code != exitOK || !strings.Contains(r.stdout, "id:") ||
		!strings.Contains(r.stdout, first.ConversationID) {
		t.Fatalf("conversations get: %s", r)
	}

	// tools: the built-in tools.
	r = ctl(t, base, "tools")
	for _, want := range []string{"NAME", "EFFECT", "calculator", "clock", "read_only"} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("tools: no %q in %s", want, r)
		}
	}

	// runs get: "key: value" lines.
	r = ctl(t, base, "runs", "get", first.ID)
	for _, want := range []string{"id:", first.ID, "conversation:", first.ConversationID, "status:", "completed", "output:", "The answer is 42."} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("runs get: no %q in %s", want, r)
		}
	}
}

// TestActions: a run whose tool needs approval makes tail stop with 4 and
// print the command that answers; approved, the tool runs and the run
// completes; rejected, the model is told why and the run completes too.
func TestActions(t *testing.T) {
	t.Parallel()
	var calls, flaky atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/flaky" {
			// The first attempt fails with 503, the second succeeds.
			if flaky.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"error":"busy"}`))
				return
			}
			w.Write([]byte(`{"n":2}`))
			return
		}
		calls.Add(1)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer sink.Close()
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true},
		{"name":"flaky","description":"fails once","parameters":{"type":"object"},"url":%q,"effect":"idempotent","max_attempts":3}]}`,
		sink.URL+"/guarded", sink.URL+"/flaky")), 0o600); err != nil {
		t.Fatal(err)
	}
	base := newServer(t, "AGENTD_TOOLS_FILE="+toolsFile)
	c := client.New(base)
	ctx := context.Background()

	if r := ctl(t, base, "tools"); !strings.Contains(r.stdout, "guarded") || !strings.Contains(r.stdout, "needed") {
		t.Fatalf("tools: %s", r)
	}

	// Approve.
	run := createRun(t, c, client.CreateRun{Input: "/call guarded {}\n/say done"})
	r := ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitWaiting || !strings.Contains(r.stdout, "→ guarded {}  (needs approval)") ||
		!strings.Contains(r.stdout, "waits for approval of guarded {}") || !strings.Contains(r.stdout, "agentctl actions approve "+run.ID+"\n") {
		t.Fatalf("tail of a run waiting for approval: %s", r)
	}
	// With -o json: the events, the last one run.requires_action.
	r = ctl(t, base, "-o", "json", "runs", "tail", run.ID)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var last client.Event
	if r.code != exitWaiting || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || last.Type != agentd.EventRunRequiresAction {
		t.Fatalf("-o json tail of a waiting run: %s", r)
	}
	// tail after its last event says what it waits for at once.
	if r := ctl(t, base, "runs", "tail", "-after", fmt.Sprint(last.Seq), run.ID); r.code != exitWaiting || !strings.Contains(r.stdout, "actions approve "+run.ID) {
		t.Fatalf("tail -after the wait: %s", r)
	}
	if r := ctl(t, base, "runs", "get", run.ID); r.code != exitOK || !strings.Contains(r.stdout, "requires_action") ||
		!strings.Contains(r.stdout, "agentctl actions approve "+run.ID) {
		t.Fatalf("runs get of a waiting run: %s", r)
	}
	if calls.Load() != 0 {
		t.Fatal("the tool ran before its approval")
	}
	if r := ctl(t, base, "actions", "approve", run.ID); r.code != exitOK || !strings.Contains(r.stdout, run.ID) {
		t.Fatalf("actions approve: %s", r)
	}
	// tail from the start goes past the wait it replays, to the end.
	r = ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitOK || !strings.Contains(r.stdout, "the run waited for approval of guarded") ||
		!strings.Contains(r.stdout, `← guarded succeeded {"ok":true}`) || !strings.Contains(r.stdout, "\ndone\n■ run completed\n") {
		t.Fatalf("tail after the approval: %s", r)
	}
	if r := ctl(t, base, "runs", "get", run.ID); r.code != exitOK || !strings.Contains(r.stdout, "completed") || !strings.Contains(r.stdout, "output:") {
		t.Fatalf("runs get after the approval: %s", r)
	}
	if got, err := c.GetRun(ctx, run.ID); err != nil || got.Status != agentd.StatusCompleted || deref(got.OutputText) != "done" || calls.Load() != 1 {
		t.Fatalf("the approved run: %+v %v (%d calls)", got, err, calls.Load())
	}
	// A run that waits for nothing: 2.
	if r := ctl(t, base, "actions", "approve", run.ID); r.code != exitError || !strings.Contains(r.stderr, "waits for no decision") {
		t.Fatalf("actions approve of a completed run: %s", r)
	}

	// Reject, with the flags after the run id; the call is named by -call.
	run = createRun(t, c, client.CreateRun{Input: "/call guarded {}\n/say done"})
	if r := ctl(t, base, "runs", "tail", run.ID); r.code != exitWaiting {
		t.Fatalf("tail of the second run: %s", r)
	}
	waiting, err := c.GetRun(ctx, run.ID)
	if err != nil || waiting.RequiredAction == nil {
		t.Fatalf("the second run: %+v %v", waiting, err)
	}
	if r := ctl(t, base, "actions", "reject", run.ID, "-call", waiting.RequiredAction.ToolCallID, "-error", "no"); r.code != exitOK {
		t.Fatalf("actions reject: %s", r)
	}
	r = ctl(t, base, "runs", "tail", run.ID)
	if r.code != exitOK || !strings.Contains(r.stdout, "← guarded rejected: no") || !strings.Contains(r.stdout, "■ run completed") {
		t.Fatalf("tail after the rejection: %s", r)
	}
	if got, err := c.GetRun(ctx, run.ID); err != nil || got.Status != agentd.StatusCompleted || calls.Load() != 1 {
		t.Fatalf("the rejected run: %+v %v (%d calls)", got, err, calls.Load())
	}
	// The model was told: the tool's result in the conversation is the error.
	msgs, err := c.Messages(ctx, run.ConversationID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	told := false
	for _, m := range msgs.Data {
		for _, p := range m.Content {
			told = told || (p.Type == "tool_result" && p.IsError && strings.Contains(p.Content, "no"))
		}
	}
	if !told {
		t.Fatalf("the model was not told of the rejection: %+v", msgs.Data)
	}

	// A failed attempt that is retried shows as such.
	r = ctl(t, base, "runs", "create", "-tail", "/call flaky {}\n/say fine")
	if r.code != exitOK || !strings.Contains(r.stdout, "→ flaky {}\n  attempt 1 failed: ") || !strings.Contains(r.stdout, "503 Service Unavailable") || !strings.Contains(r.stdout, " (retrying)\n  attempt 2 of flaky\n") ||
		!strings.Contains(r.stdout, `← flaky succeeded {"n":2}`) || !strings.Contains(r.stdout, "\nfine\n■ run completed\n") {
		t.Fatalf("a retried tool call: %s", r)
	}
}

// TestAgents: agents create, get, update (from what get -o json printed,
// changed), versions, list and delete, and runs create -agent with -var,
// pinned with -agent-version; errors of the API exit 2 naming the field.
func TestAgents(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "helper.json")
	if err := os.WriteFile(file, []byte(`{"name": "helper", "description": "says its instructions",
		"instructions": "Help {{who}}.", "tools": ["calculator"], "max_steps": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, base, "agents", "create", file)
	if r.code != exitOK || !strings.Contains(r.stdout, " 1 (latest 1)") || !strings.Contains(r.stdout, "Help {{who}}.") {
		t.Fatalf("create:\n%s", r)
	}
	r = ctl(t, base, "agents", "get", "helper", "-o", "json")
	if r.code != exitOK {
		t.Fatalf("get:\n%s", r)
	}
	changed := strings.Replace(r.stdout, "Help {{who}}.", "Assist {{who}}.", 1)
	if err := os.WriteFile(file, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if r = ctl(t, base, "agents", "update", "helper", file); r.code != exitOK || !strings.Contains(r.stdout, "2 (latest 2)") {
		t.Fatalf("update from get's JSON:\n%s", r)
	}
	r = ctl(t, base, "runs", "create", "-agent", "helper", "-var", "who=Ann", "-wait", "/system")
	if r.code != exitOK || !strings.Contains(r.stdout, "helper version 2") || !strings.Contains(r.stdout, " Assist Ann.") {
		t.Fatalf("a run of the latest version:\n%s", r)
	}
	r = ctl(t, base, "-o", "json", "runs", "create", "-agent", "helper", "-agent-version", "1", "-var", "who=Bo", "-wait", "/system")
	var run client.Run
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || r.code != exitOK || run.Agent == nil || run.Agent.Version != 1 ||
		run.OutputText == nil || *run.OutputText != "Help Bo." || run.MaxSteps != 3 {
		t.Fatalf("a run of version 1 (%v):\n%s", err, r)
	}
	// A fork of that run after its answer, under version 2, with a new
	// message.
	r = ctl(t, base, "-o", "json", "runs", "fork", "-agent-version", "2", "-wait", run.ID, "1", "/system")
	var fork client.Run
	if err := json.Unmarshal([]byte(r.stdout), &fork); err != nil || r.code != exitOK || fork.ForkedFrom == nil ||
		fork.ForkedFrom.RunID != run.ID || fork.Agent.Version != 2 || fork.OutputText == nil || *fork.OutputText != "Assist Bo." {
		t.Fatalf("a fork under version 2 (%v):\n%s", err, r)
	}
	if r = ctl(t, base, "runs", "fork", run.ID, "1"); r.code != exitError || !strings.Contains(r.stderr, "(field input)") {
		t.Fatalf("a fork after an answer without a message:\n%s", r)
	}
	if r = ctl(t, base, "-o", "json", "runs", "list", "-agent", "helper", "-agent-version", "1"); r.code != exitOK ||
		strings.Count(r.stdout, `"object": "run"`) != 1 {
		t.Fatalf("the runs of helper version 1:\n%s", r)
	}
	r = ctl(t, base, "agents", "versions", "helper", "-limit", "1")
	if r.code != exitOK || !strings.Contains(r.stdout, "helper  2") || !strings.Contains(r.stdout, "more: -cursor ") {
		t.Fatalf("versions:\n%s", r)
	}
	if r = ctl(t, base, "agents", "list"); r.code != exitOK || !strings.Contains(r.stdout, "says its instructions") {
		t.Fatalf("list:\n%s", r)
	}
	if r = ctl(t, base, "runs", "create", "-agent", "helper", "x"); r.code != exitError || !strings.Contains(r.stderr, "(field variables.who)") {
		t.Fatalf("a run without its variable:\n%s", r)
	}
	if r = ctl(t, base, "agents", "delete", "helper"); r.code != exitOK {
		t.Fatalf("delete:\n%s", r)
	}
	if r = ctl(t, base, "agents", "get", "helper"); r.code != exitError || !strings.Contains(r.stderr, "agent_not_found") {
		t.Fatalf("get after delete:\n%s", r)
	}
	if r = ctl(t, base, "agents", "create", filepath.Join(dir, "missing.json")); r.code != exitError {
		t.Fatalf("a missing file:\n%s", r)
	}

	// A tool of the tenant's: declared, listed as the tenant's, replaced,
	// refused where its URL may not go, deleted.
	toolFile := filepath.Join(dir, "lookup.json")
	os.WriteFile(toolFile, []byte(`{"name": "lookup", "url": "https://tools.example/lookup", "effect": "read_only"}`), 0o600)
	if r = ctl(t, base, "tools", "create", toolFile); r.code != exitOK || !strings.Contains(r.stdout, "https://tools.example/lookup") {
		t.Fatalf("tools create:\n%s", r)
	}
	if r = ctl(t, base, "tools"); r.code != exitOK || !regexp.MustCompile(`lookup +tenant`).MatchString(r.stdout) {
		t.Fatalf("tools:\n%s", r)
	}
	os.WriteFile(toolFile, []byte(`{"url": "http://169.254.169.254/latest", "effect": "read_only"}`), 0o600)
	if r = ctl(t, base, "tools", "update", "lookup", toolFile); r.code != exitError || !strings.Contains(r.stderr, "(field url)") {
		t.Fatalf("tools update to the metadata address:\n%s", r)
	}
	if r = ctl(t, base, "tools", "delete", "lookup"); r.code != exitOK {
		t.Fatalf("tools delete:\n%s", r)
	}
	if r = ctl(t, base, "tools", "get", "lookup"); r.code != exitError || !strings.Contains(r.stderr, "tool_not_found") {
		t.Fatalf("tools get after delete:\n%s", r)
	}
}
