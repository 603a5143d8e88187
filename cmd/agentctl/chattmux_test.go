package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// TestChatInTmux: chat in a real terminal (a tmux pane, its stdin and
// stdout a tty in canonical mode, echoing what is typed): the first line
// typed starts a run whose answer streams; a line typed while it streams
// steers that run, which chat shows accepted, then applied, then the run's
// answer to it; Ctrl-D at the start of a line is EOF, and chat exits 0
// once the run has ended. The server holds one run with one input,
// applied, and the conversation's messages in turn order.
func TestChatInTmux(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs agentctl chat in tmux against agentd as a process: in the full tier (make test), not under -short")
	}
	tmuxPath, err := exec.LookPath("tmux")
	if err != nil {
		t.Skipf("tmux is not installed (%v): the test of chat in a terminal needs it", err)
	}
	bin := buildAgentctl(t)
	base := newServer(t)
	c := client.New(base)
	ctx := context.Background()

	tm := newTmux(t, tmuxPath)
	// The pane's shell prints chat's exit status: tmux's own
	// (pane_dead_status) can stay empty for long on a busy machine.
	tm.must("new-session", "-d", "-s", "chat", "-x", "200", "-y", "50",
		shellQuote(bin)+" -url "+shellQuote(base)+` chat; echo "chat-exit=$?"`)

	// The text and Enter go in one send-keys, so that the terminal's echo
	// of the line is not cut by the answer streaming.
	tm.must("send-keys", "-t", "chat", "/stream 40 100", "Enter")
	tm.waitPane("streamed text", func(p string) bool { return strings.Contains(p, "tok3 ") })
	if p, _ := tm.pane(); strings.Contains(p, "■ run completed") {
		t.Fatalf("the answer ended before the second line could be typed:\n%s", p)
	}
	tm.must("send-keys", "-t", "chat", "/say steered in tmux", "Enter")
	answer := regexp.MustCompile(`(?m)^steered in tmux\n■ run completed$`)
	tm.waitPane("the steered answer", answer.MatchString)

	// Ctrl-D at the start of a line: EOF; no run is in flight, so chat ends.
	tm.must("send-keys", "-t", "chat", "C-d")
	exited := regexp.MustCompile(`(?m)^chat-exit=(\d+)$`)
	tm.waitPane("chat's exit at Ctrl-D", exited.MatchString)
	pane, err := tm.pane()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pane:\n%s", pane)
	if status := exited.FindStringSubmatch(pane)[1]; status != "0" {
		t.Fatalf("chat exited with status %q, want 0:\n%s", status, pane)
	}

	// What the terminal shows: the run's line, the lines typed (echoed),
	// the streamed answer whole and in order (the echo of the second line
	// may cut its line), the input's marks after it, then the answer to
	// the input and the run's end; no error.
	runs := runLine.FindAllStringSubmatch(pane, -1)
	if len(runs) != 1 {
		t.Fatalf("the runs chat followed: %q\n%s", runs, pane)
	}
	runID, conv := runs[0][1], runs[0][2]
	if strings.Contains(pane, "agentctl:") {
		t.Fatalf("chat wrote an error:\n%s", pane)
	}
	toks := regexp.MustCompile(`tok\d+`).FindAllString(pane, -1)
	if got := strings.Join(toks, " "); got != tokens(40) {
		t.Fatalf("the streamed answer shows as %q:\n%s", got, pane)
	}
	order := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^/stream 40 100$`),
		regexp.MustCompile(`(?m)^· run \S+ \(conversation \S+\)$`),
		regexp.MustCompile(`(?m)/say steered in tmux$`),
		regexp.MustCompile(`(?m)tok40$`),
		regexp.MustCompile(`(?m)^· input 1 accepted by \S+$`),
		regexp.MustCompile(`(?m)^· input 1 applied$`),
		answer,
	}
	at := 0
	for _, re := range order {
		loc := re.FindStringIndex(pane[at:])
		if loc == nil {
			t.Fatalf("no %s after offset %d of the pane:\n%s", re, at, pane)
		}
		at += loc[1]
	}
	for _, s := range []string{`· input 1 accepted`, `· input 1 applied`, `■ run completed`, `(?m)^steered in tmux$`, `/say steered in tmux`} {
		if n := len(regexp.MustCompile(s).FindAllStringIndex(pane, -1)); n != 1 {
			t.Fatalf("%s shows %d times:\n%s", s, n, pane)
		}
	}

	// What the server holds.
	page, err := c.ListRuns(ctx, client.ListRuns{ConversationID: conv})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != runID {
		t.Fatalf("the conversation's runs (one, %s, unless the second line came after the answer ended): %+v", runID, page.Data)
	}
	if r, err := c.GetRun(ctx, runID); err != nil || r.Status != agentd.StatusCompleted || deref(r.OutputText) != "steered in tmux" {
		t.Fatalf("the run: %+v %v", r, err)
	}
	inputs, err := c.ListInputs(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != 1 || inputs[0].N != 1 || inputs[0].Status != agentd.InputApplied || inputText(&inputs[0]) != "/say steered in tmux" {
		t.Fatalf("the run's inputs: %+v", inputs)
	}
	msgs, err := c.Messages(ctx, conv, 20, "")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range msgs.Data {
		texts = append(texts, string(m.Role)+": "+m.Text())
	}
	if got, want := strings.Join(texts, "\n"), "user: /stream 40 100\nassistant: "+tokens(40)+
		"\nuser: /say steered in tmux\nassistant: steered in tmux"; got != want {
		t.Fatalf("the conversation:\n%s\nwant\n%s", got, want)
	}
}

// buildAgentctl builds agentctl into a temporary directory of t's, with
// the race detector when the test binary has it, and returns its path.
func buildAgentctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentctl")
	args := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", append(args, "github.com/agentd/agentd/cmd/agentctl")...).CombinedOutput()
	if err != nil {
		t.Fatalf("build agentctl: %v\n%s", err, out)
	}
	return bin
}

// tmuxServer is a tmux server of a test's, on a private socket, with
// no configuration but its own: panes stay once their process has exited
// (so that its status can be read), and there is no status line.
type tmuxServer struct {
	t      *testing.T
	path   string
	socket string
	conf   string
	env    []string
}

// newTmux returns a tmux server for t, started by its first session and
// killed when t ends.
func newTmux(t *testing.T, path string) *tmuxServer {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit on\nset -g status off\nset -g default-shell /bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The panes' environment is the server's, the test's but for tmux's
	// own variables (when the tests run in tmux) and agentctl's.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TMUX=") && !strings.HasPrefix(kv, "TMUX_PANE=") && !strings.HasPrefix(kv, "AGENTD_") {
			env = append(env, kv)
		}
	}
	// The socket is in a directory of t's, removed with it (a socket's
	// path is short: at most 107 bytes).
	dir := t.TempDir()
	if len(dir) > 90 {
		d, err := os.MkdirTemp("/tmp", "agentctl-tmux-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	tm := &tmuxServer{t: t, path: path, socket: filepath.Join(dir, "tmux.sock"), conf: conf, env: env}
	t.Cleanup(func() { tm.run("kill-server") })
	return tm
}

// run runs a tmux command on the server, and returns its output.
func (tm *tmuxServer) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tm.path, append([]string{"-S", tm.socket, "-f", tm.conf}, args...)...)
	cmd.Env = tm.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs a tmux command, failing the test when it fails.
func (tm *tmuxServer) must(args ...string) {
	tm.t.Helper()
	if out, err := tm.run(args...); err != nil {
		tm.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// pane is what the pane of the session "chat" shows, its history
// included, lines that wrapped joined, without the blank rows after.
func (tm *tmuxServer) pane() (string, error) {
	out, err := tm.run("capture-pane", "-p", "-J", "-S", "-", "-t", "chat")
	if err != nil {
		return "", fmt.Errorf("tmux capture-pane: %v\n%s", err, out)
	}
	return strings.TrimRight(out, " \n") + "\n", nil
}

// waitPane waits until the pane shows what ok looks for, failing the test
// after a while, or at once when the pane's process has exited.
func (tm *tmuxServer) waitPane(what string, ok func(string) bool) {
	tm.t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := tm.pane()
		if err != nil {
			tm.t.Fatal(err)
		}
		if ok(p) {
			return
		}
		if dead, _ := tm.run("display-message", "-p", "-t", "chat", "#{pane_dead} #{pane_dead_status}"); strings.HasPrefix(dead, "1 ") {
			if p, err := tm.pane(); err == nil && ok(p) {
				return // it came as the pane ended
			}
			tm.t.Fatalf("waiting for %s, chat exited (%s):\n%s", what, strings.TrimSpace(dead), p)
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %s in the pane:\n%s", what, p)
		}
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
