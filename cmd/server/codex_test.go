package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// codexEvent is one line of `codex exec --json`: a thread, turn or item
// event.
type codexEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Item     struct {
		Type             string `json:"type"`
		Command          string `json:"command"`
		AggregatedOutput string `json:"aggregated_output"`
		ExitCode         *int   `json:"exit_code"`
		Status           string `json:"status"`
		Text             string `json:"text"`
		Message          string `json:"message"`
	} `json:"item"`
	Error json.RawMessage `json:"error"`
}

// codexTurn is what one `codex exec` printed: its completed commands and
// its final answer.
type codexTurn struct {
	thread   string
	commands []codexEvent
	answer   string
	failed   []string
}

// codexReadmeConfig is the README's config.toml for Codex, which the
// tests use with their agentd's URL in place of localhost:8080.
const codexReadmeConfig = `model = "gpt-4.1"
model_provider = "agentd"
[model_providers]
agentd = { name = "agentd", base_url = "http://localhost:8080/v1", wire_api = "responses" }
`

// codexConfig is the config.toml that points Codex at agentd at base: the
// README's four lines, with model the model line (none: Codex's default
// model).
func codexConfig(t *testing.T, base, model string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```toml\n"+codexReadmeConfig+"```") {
		t.Fatalf("README.md has no Codex config.toml of these lines:\n%s", codexReadmeConfig)
	}
	c := strings.Replace(codexReadmeConfig, "http://localhost:8080", base, 1)
	if model == "" {
		return strings.Replace(c, "model = \"gpt-4.1\"\n", "", 1)
	}
	return strings.Replace(c, "gpt-4.1", model, 1)
}

// codexRunner runs `codex exec` in a private CODEX_HOME, in a scratch
// directory, as a user of codex exec runs it: --json for its events, and
// `-s workspace-write`, the sandbox a user asks for to let a command write
// in its workspace (the default, read-only, lets none; the sandbox itself,
// Codex's bundled bubblewrap, stays on). A run that fails fails the test
// with what Codex printed and every request agentd refused.
type codexRunner struct {
	t         *testing.T
	dir, work string
	env       []string
	log       *requestLog
}

// newCodex is a codexRunner whose config.toml is codexConfig's for model,
// with agentd at base behind a recording proxy; with a key, the provider
// also has the README's env_key, AGENTD_API_KEY, which holds key.
func newCodex(t *testing.T, dir, base, model string, key ...string) *codexRunner {
	t.Helper()
	proxy, log := recordingProxy(t, base)
	home, work := t.TempDir(), t.TempDir()
	config := codexConfig(t, proxy, model)
	if len(key) > 0 {
		config = strings.Replace(config, `wire_api = "responses" }`, `wire_api = "responses", env_key = "AGENTD_API_KEY" }`, 1)
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	// The environment of the test, less what would point Codex elsewhere.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "CODEX_") && !strings.HasPrefix(kv, "AGENTD_API_KEY=") {
			env = append(env, kv)
		}
	}
	env = append(env, "CODEX_HOME="+home)
	if len(key) > 0 {
		env = append(env, "AGENTD_API_KEY="+key[0])
	}
	return &codexRunner{t: t, dir: dir, work: work, env: env, log: log}
}

// exec runs `codex exec` with args and returns what it printed.
func (c *codexRunner) exec(args ...string) codexTurn {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{filepath.Join(c.dir, "node_modules/@openai/codex/bin/codex.js"), "exec", "--json",
		"--skip-git-repo-check", "-s", "workspace-write"}, args...)
	cmd := exec.CommandContext(ctx, "node", argv...)
	cmd.Dir, cmd.Env = c.work, c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var turn codexTurn
	for _, line := range bytes.Split(stdout.Bytes(), []byte("\n")) {
		var ev codexEvent
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "thread.started":
			turn.thread = ev.ThreadID
		case ev.Type == "item.completed" && ev.Item.Type == "command_execution":
			turn.commands = append(turn.commands, ev)
		case ev.Type == "item.completed" && ev.Item.Type == "agent_message":
			turn.answer = ev.Item.Text
		case ev.Type == "turn.failed" || ev.Type == "error":
			turn.failed = append(turn.failed, string(line))
		}
	}
	if err != nil || len(turn.failed) > 0 {
		t.Fatalf("codex exec %s: %v %s\nstdout:\n%s\nstderr:\n%s\nagentd refused:%s", strings.Join(args, " "), err, turn.failed,
			stdout.String(), stderr.String(), refusals(c.log.all()))
	}
	return turn
}

// TestCodexCLI: OpenAI's Codex CLI (@openai/codex, its native binary as
// npm installs it, unchanged), with agentd as its model provider in a
// private CODEX_HOME (the README's config.toml), runs `codex exec` in a
// scratch directory: the model (agentd's fake, told by the prompt) calls
// Codex's shell tool, Codex runs the command in its workspace-write
// sandbox and sends its output back, and prints the model's final answer;
// then `codex exec resume --last` continues the session with the whole
// history. Every request Codex sends goes through a recording proxy, so a
// refusal fails the test naming what agentd refused.
func TestCodexCLI(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "codex", "@openai/codex")
	base, _ := startServer(t, nil)
	codex := newCodex(t, dir, base, "gpt-4.1")
	log, work := codex.log, codex.work

	first := codex.exec("/call exec_command {\"cmd\":\"echo agentd-was-here > proof.txt && cat proof.txt\"}\n/say Codex wrote proof.txt.")
	if first.answer != "Codex wrote proof.txt." {
		t.Fatalf("the final answer: %q", first.answer)
	}
	if len(first.commands) != 1 || first.commands[0].Item.ExitCode == nil || *first.commands[0].Item.ExitCode != 0 ||
		!strings.Contains(first.commands[0].Item.Command, "echo agentd-was-here > proof.txt") ||
		!strings.Contains(first.commands[0].Item.AggregatedOutput, "agentd-was-here") {
		t.Fatalf("the commands Codex ran: %+v", first.commands)
	}
	if b, err := os.ReadFile(filepath.Join(work, "proof.txt")); err != nil || string(b) != "agentd-was-here\n" {
		t.Fatalf("proof.txt: %q %v", b, err)
	}
	turn1 := log.all()
	if msg := refusals(turn1); msg != "" {
		t.Fatalf("agentd refused:%s", msg)
	}
	// Two responses: the one that called exec_command, and the one that
	// was sent the command's output and answered.
	posts := responsesPosts(turn1)
	if len(posts) != 2 {
		t.Fatalf("%d POST /v1/responses, want 2: %+v", len(posts), turn1)
	}
	call, output := codexCallAndOutput(t, posts[1])
	if call.Name != "exec_command" || !strings.Contains(call.Arguments, "echo agentd-was-here > proof.txt") ||
		output.CallID != call.CallID || !strings.Contains(output.Output, "agentd-was-here") {
		t.Fatalf("the second request's call %+v and output %+v", call, output)
	}

	// resume --last: the same session (thread), its history sent again
	// with the new prompt, and a second command in the same directory.
	second := codex.exec("resume", "--last", "/call exec_command {\"cmd\":\"echo resumed >> proof.txt\"}\n/say Resumed and appended.")
	if second.answer != "Resumed and appended." || second.thread != first.thread {
		t.Fatalf("resume: answer %q, thread %q (first %q)", second.answer, second.thread, first.thread)
	}
	if b, err := os.ReadFile(filepath.Join(work, "proof.txt")); err != nil || string(b) != "agentd-was-here\nresumed\n" {
		t.Fatalf("proof.txt after resume: %q %v", b, err)
	}
	all := log.all()
	if msg := refusals(all); msg != "" {
		t.Fatalf("agentd refused on resume:%s", msg)
	}
	posts = responsesPosts(all[len(turn1):])
	if len(posts) != 2 {
		t.Fatalf("%d POST /v1/responses on resume, want 2", len(posts))
	}
	var resumed struct {
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(posts[0].Body, &resumed); err != nil {
		t.Fatal(err)
	}
	history := string(resumed.Input)
	for _, want := range []string{"Codex wrote proof.txt.", "agentd-was-here", "/say Resumed and appended."} {
		if !strings.Contains(history, want) {
			t.Errorf("the resumed session's first request has no %q in its input:\n%s", want, history)
		}
	}
}

// responsesPosts are the POST /v1/responses of reqs.
func responsesPosts(reqs []seenRequest) []seenRequest {
	var out []seenRequest
	for _, r := range reqs {
		if r.Method == "POST" && r.Path == "/v1/responses" {
			out = append(out, r)
		}
	}
	return out
}

// responsesItem is a function_call or function_call_output input item.
type responsesItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Output    string `json:"output"`
}

// codexCallAndOutput finds the last function_call of a request's input
// and the function_call_output that answers it.
func codexCallAndOutput(t *testing.T, r seenRequest) (call, output responsesItem) {
	t.Helper()
	var body struct {
		Input []responsesItem `json:"input"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("%s: %v", r.Body, err)
	}
	for _, it := range body.Input {
		switch it.Type {
		case "function_call":
			call = it
		case "function_call_output":
			output = it
		}
	}
	return call, output
}

// TestCodexCLIDefaultModel: Codex with the README's config.toml less its
// model line, so with Codex's own default model, for which Codex sends
// its tools in an additional_tools input item (namespaces of function and
// custom tools) with reasoning and text.verbosity: the turn is answered.
func TestCodexCLIDefaultModel(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "codex", "@openai/codex")
	base, _ := startServer(t, nil)
	codex := newCodex(t, dir, base, "")
	turn := codex.exec("/say Answered with Codex's default model.")
	if turn.answer != "Answered with Codex's default model." {
		t.Fatalf("the final answer: %q", turn.answer)
	}
	if msg := refusals(codex.log.all()); msg != "" {
		t.Fatalf("agentd refused:%s", msg)
	}
}

// TestCodexCLIWithKey: with authentication on (AGENTD_AUTH=keys), the
// README's env_key sends an agentd key (from `agentd keys create`) as
// Codex's bearer token, and the turn is answered; without it agentd
// answers 401.
func TestCodexCLIWithKey(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "codex", "@openai/codex")
	dbURL := persisttest.NewDatabase(t)
	out, err := keysCmd(t, dbURL, "create", "--tenant", "acme", "--name", "codex", "--scopes", "runs:read,runs:write")
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out)
	base, stopped := serveInProcess(t, map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys", "AGENTD_LOG_LEVEL": "warn"}, io.Discard)
	t.Cleanup(func() {
		if err := stopped(); err != nil {
			t.Error(err)
		}
	})
	if status, _ := bearerDo(t, base, "POST", "/v1/responses", `{"model": "gpt-4.1", "input": "/say hi"}`, ""); status != http.StatusUnauthorized {
		t.Fatalf("POST /v1/responses without a key: %d", status)
	}
	codex := newCodex(t, dir, base, "gpt-4.1", key)
	if turn := codex.exec("/say Answered for a key."); turn.answer != "Answered for a key." {
		t.Fatalf("the final answer: %q", turn.answer)
	}
	if msg := refusals(codex.log.all()); msg != "" {
		t.Fatalf("agentd refused:%s", msg)
	}
}
