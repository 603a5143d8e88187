package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"

	"github.com/jackc/pgx/v5"
)

// TestNoStopLeavesACallUnanswered: runs of the OpenAI-compatible fake and
// of the fake Anthropic endpoint answer the model's first step, three
// parallel calls (a webhook tool, a client tool and a sub-agent), and are
// stopped in the middle of it: while the model streams the calls; in
// the webhook tool, which never answers (the client tool and the
// sub-agent not yet begun); or past it, waiting for the client tool's
// output, which never comes, and for the sub-agent, whose own run is in a
// webhook tool that never answers. Each is stopped every way a run stops mid-call:
// cancelled; timed out (the webhook call by timeouts.tool_ms, the
// sub-agent's run by its agent's total_ms, the wait for the client tool by
// action_ms, the run by total_ms); its instance SIGKILLed, and the run
// taken over by another instance and then cancelled or timed out, or
// cancelled before another instance takes it over. Each conversation, the
// run's and its sub-agent's, is then continued by a new run. Both fakes
// refuse, as their providers do, a call left without its result, so each
// new run must complete, and no request any model got may be refused.
func TestNoStopLeavesACallUnanswered(t *testing.T) {
	skipShort(t, "starts server processes")
	t.Parallel()
	openai := fakellm.New()
	osrv := httptest.NewServer(openai)
	t.Cleanup(osrv.Close)
	anthropic, asrv := fakeanthropic.Start()
	t.Cleanup(asrv.Close)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/slow": webhooktest.Hang(), "/quick": webhooktest.OK(), "/deep": webhooktest.Hang()})
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	models := file("models.json", fmt.Sprintf(`{"models": {"claude": {"provider": "anthropic", "base_url": %q,
		"api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-test", "context_window": 200000}}}`, asrv.URL))
	var specs []string
	for _, name := range []string{"slow", "quick", "deep"} {
		specs = append(specs, fmt.Sprintf(`{"name": %q, "description": "looks it up", "parameters": {"type": "object"},
			"url": %q, "effect": "read_only"}`, name, sink.URL+"/"+name))
	}
	tools := file("tools.json", `{"tools": [`+strings.Join(specs, ",")+`]}`)
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_MODELS_FILE=" + models, "AGENTD_TOOLS_FILE=" + tools,
		"TEST_ANTHROPIC_KEY=sk-ant-test", "OPENAI_API_KEY=test", "OPENAI_BASE_URL=" + osrv.URL + "/v1", "AGENTD_MODEL=fake",
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms", "AGENTD_WORKERS=64"}
	a := startChild(t, env)
	base := "http://" + a.addr
	ctx := context.Background()
	store, err := persist.Open(ctx, persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	type stopped struct {
		name, model, how string
		streaming        bool // still streaming the model's calls
		id, conv         string
	}
	var runs []*stopped
	for _, model := range []string{"fake", "claude"} {
		task, _ := json.Marshal(map[string]string{"task": "/call deep {}\n/say helped"})
		for _, phase := range []struct{ name, server, stream string }{
			{"in the webhook tool", "slow", ""},
			{"waiting for the client tool and the sub-agent", "quick", ""},
			// Ten chunks, four seconds apart (more for Anthropic's events).
			{"streaming the calls", "slow", "/stream 1 4000\n"},
		} {
			server := phase.server
			// A run waiting for a sub-agent has no action timeout: the
			// sub-agent's run times out by its own (its agent's).
			for _, stop := range [][3]string{
				{"cancelled", `{}`, `{}`},
				{"timed out", `{"total_ms": 5000, "tool_ms": 1000, "action_ms": 3000}`, `{"total_ms": 3000}`},
				{"killed, then cancelled", `{}`, `{}`},
				{"killed, cancelled before the takeover", `{}`, `{}`},
				{"killed, then timed out", `{"total_ms": 30000, "action_ms": 3000}`, `{"total_ms": 30000}`},
			} {
				helper := fmt.Sprintf("helper-%s-%d", model, len(runs))
				post(t, base+"/agents", fmt.Sprintf(`{"name": %q, "instructions": "help", "model": %q, "tools": ["deep"], "timeouts": %s}`,
					helper, model, stop[2]))
				script := phase.stream + "/call " + server + " {}\n/call pick {}\n/call " + helper + " " + string(task) + "\n/say done"
				body, _ := json.Marshal(map[string]any{"model": model, "input": script,
					"tools":        []any{server, map[string]string{"type": "agent", "agent": helper}},
					"client_tools": []any{map[string]any{"name": "pick", "description": "asks the user", "parameters": map[string]string{"type": "object"}}},
					"timeouts":     json.RawMessage(stop[1])})
				var r createdRun
				_ = json.Unmarshal(post(t, base+"/runs", string(body)), &r)
				runs = append(runs, &stopped{name: model + ", " + phase.name + ", " + stop[0], model: model, how: stop[0],
					streaming: phase.stream != "", id: r.ID, conv: r.ConversationID})
			}
		}
	}
	calls := func() int { return sink.Count("/slow") + sink.Count("/deep") }
	// Every run is in the middle of its step: in the webhook tool, or
	// waiting with its sub-agent's run in its own, or streaming (the
	// stream lasts longer than the rest of the runs take to get there).
	var inTools int
	for _, r := range runs {
		if !r.streaming {
			inTools++
		}
	}
	for deadline := time.Now().Add(30 * time.Second); calls() < inTools; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook tools got %d calls, want %d; the runs: %s", calls(), inTools, runsText(t, conn))
		}
	}
	ended := func(id string) agentd.Run {
		t.Helper()
		return persisttest.WaitRun(t, store, id, func(r agentd.Run) bool { return r.Status.Terminal() }, 60*time.Second)
	}
	for _, r := range runs {
		if r.how == "cancelled" {
			post(t, base+"/runs/"+r.id+"/cancel", `{}`)
		}
	}
	for _, r := range runs {
		if r.how == "cancelled" || r.how == "timed out" {
			t.Logf("%s: %s", r.name, ended(r.id).Status)
		}
	}

	before := calls()
	a.kill(t)
	b := startChild(t, env)
	base = "http://" + b.addr
	for _, r := range runs {
		if r.how == "killed, cancelled before the takeover" {
			post(t, base+"/runs/"+r.id+"/cancel", `{}`)
		}
	}
	// Taken over, each killed run (or, waiting, its sub-agent's run) is in
	// the webhook tool again, or streaming again.
	var killed int
	for _, r := range runs {
		switch {
		case !strings.HasPrefix(r.how, "killed, then"):
		case r.streaming:
			persisttest.WaitRun(t, store, r.id, func(r agentd.Run) bool { return r.Epoch >= 2 }, 30*time.Second)
		default:
			killed++
		}
	}
	for deadline := time.Now().Add(30 * time.Second); calls() < before+killed; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the takeover, the webhook tools got %d calls, want %d; the runs: %s", calls()-before, killed, runsText(t, conn))
		}
	}
	for _, r := range runs {
		if r.how == "killed, then cancelled" {
			post(t, base+"/runs/"+r.id+"/cancel", `{}`)
		}
	}

	// Continue every conversation: the stopped runs' and their sub-agents'.
	type next struct {
		name, model, conv, id string
		calls                 bool // the conversation has calls: not cut while the model streamed them
	}
	var nexts []*next
	for _, r := range runs {
		run := ended(r.id)
		t.Logf("%s: %s at epoch %d", r.name, run.Status, run.Epoch)
		if r.streaming && r.model == "claude" && run.Status == agentd.StatusTimedOut {
			// Its input is kept, with no answer after it, and the next
			// input joins it in one user message (Anthropic's roles
			// alternate), whose directives the fake reads all: it would
			// stream the stopped run's calls again. Nothing of the cut
			// stream is kept, as the OpenAI side of this case shows.
			continue
		}
		nexts = append(nexts, &next{name: r.name, model: r.model, conv: r.conv, calls: !r.streaming})
		rows, err := conn.Query(ctx, `SELECT id::text, conversation_id::text FROM runs WHERE parent_run_id = $1`, r.id)
		if err != nil {
			t.Fatal(err)
		}
		children, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Conv string }])
		if err != nil || len(children) > 1 {
			t.Fatalf("%s: sub-agent runs %+v %v, want one at most", r.name, children, err)
		}
		for _, c := range children {
			run := ended(c.ID)
			t.Logf("%s, its sub-agent: %s at epoch %d", r.name, run.Status, run.Epoch)
			nexts = append(nexts, &next{name: r.name + ", its sub-agent", model: r.model, conv: c.Conv, calls: true})
		}
	}
	for _, n := range nexts {
		body, _ := json.Marshal(map[string]any{"model": n.model, "conversation_id": n.conv, "input": "/say after", "tools": []string{"slow"}})
		var r createdRun
		_ = json.Unmarshal(post(t, base+"/runs", string(body)), &r)
		n.id = r.ID
	}
	for _, n := range nexts {
		var r agentd.Run
		for deadline := time.Now().Add(60 * time.Second); !r.Status.Terminal() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if r, err = store.RunByID(ctx, n.id); err != nil {
				t.Fatal(err)
			}
		}
		var output []agentd.Part
		_ = json.Unmarshal(r.Output, &output)
		if r.Status != agentd.StatusCompleted || agentd.TextOf(output) != "after" {
			t.Errorf("%s: the next run ended %s (%s) with %q; the conversation reads %s",
				n.name, r.Status, r.Error, agentd.TextOf(output), conversationText(t, base, n.conv))
		}
	}
	// Every request answered: the fakes refuse a call without its result.
	// Each that continued a conversation with calls carried them, each
	// with its result; a stream cut before its calls were whole left none.
	var continued, withCalls, want int
	for _, n := range nexts {
		if n.calls {
			want++
		}
	}
	for _, q := range openai.Requests() {
		if q.Status != http.StatusOK || q.Error != "" {
			t.Errorf("the OpenAI fake refused request %d (%d): %s", q.Seq, q.Status, q.Error)
		}
		if q.Text == "after" {
			continued++
			var calls, results int
			for _, m := range q.Sent {
				var msg struct {
					Role      string
					ToolCalls []json.RawMessage `json:"tool_calls"`
				}
				if json.Unmarshal(m, &msg) == nil {
					calls += len(msg.ToolCalls)
					if msg.Role == "tool" {
						results++
					}
				}
			}
			if calls > 0 {
				withCalls++
			}
			if calls != results {
				t.Errorf("OpenAI request %d has %d calls and %d results: %s", q.Seq, calls, results, q.Sent)
			}
		}
	}
	for _, q := range anthropic.Requests() {
		if q.Status != http.StatusOK || q.Error != "" {
			t.Errorf("the Anthropic fake refused request %d (%d): %s", q.Seq, q.Status, q.Error)
		}
		if q.Text == "after" {
			continued++
			// user, assistant (tool_use), ..., user (tool_result, and the
			// new input with it: Anthropic's roles alternate)
			if q.Messages >= 3 {
				withCalls++
			}
		}
	}
	if continued != len(nexts) || withCalls != want {
		t.Errorf("the fakes answered %d requests that continued a conversation, %d of them with calls; want %d, %d",
			continued, withCalls, len(nexts), want)
	}
}

// post sends body to url and returns the answer's body; it fails t unless
// the status is 2xx.
func post(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	return data
}

// conversationText is the messages of conversation conv as the API lists
// them, for a failure's message.
func conversationText(t *testing.T, base, conv string) string {
	t.Helper()
	resp, err := http.Get(base + "/conversations/" + conv + "/messages")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// runsText lists the database's runs, for a failure's message.
func runsText(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT id, coalesce(parent_run_id::text, ''), status, coalesce(error::text, '') FROM runs ORDER BY created_at`)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var id, parent, status, e string
		err := row.Scan(&id, &parent, &status, &e)
		return fmt.Sprintf("\n%s parent %q %s %s", id, parent, status, e), err
	})
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "")
}
