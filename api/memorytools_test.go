package api_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// memoryToolsSetup starts the API over an engine whose runs may use memory:
// the calculator and the memory tools, the fake model.
func memoryToolsSetup(t *testing.T, model llm.Model) *bundle {
	t.Helper()
	store, _ := persisttest.New(t)
	if model == nil {
		fake := httptest.NewServer(fakellm.New())
		t.Cleanup(fake.Close)
		model = llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "test"})
	}
	svc := memory.New(memory.Config{Store: store})
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.SetSource("memory", svc.Tools()); err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, store, run.Config{Tools: reg, Model: model})
	return setupWith(t, store, store, func(c *api.Config) { c.Runs, c.Tools, c.Memory = e.Service(), reg, svc })
}

// memoryRun is what the memory tools' tests read of a run.
type memoryRun struct {
	ID             string  `json:"id"`
	ConversationID string  `json:"conversation_id"`
	Status         string  `json:"status"`
	OutputText     *string `json:"output_text"`
	PinnedMemory   []struct {
		Namespace []string `json:"namespace"`
		Key       string   `json:"key"`
		Version   int      `json:"version"`
	} `json:"pinned_memory"`
	Memory *agentd.RunMemory `json:"memory"`
}

// runDone posts body to POST /runs and waits for the run's end; it must
// complete.
func (b *bundle) runDone(body string) memoryRun {
	b.t.Helper()
	r := want[memoryRun](b.t, b.do("POST", "/runs", body), http.StatusAccepted)
	b.waitFor(r.ID, func(r runBody) bool { return r.Status == "completed" || r.Status == "failed" })
	r = want[memoryRun](b.t, b.do("GET", "/runs/"+r.ID, ""), http.StatusOK)
	if r.Status != "completed" {
		b.t.Fatalf("run %s is %s, want completed", r.ID, r.Status)
	}
	return r
}

// calls returns the tool calls of a run's steps, in order.
func (b *bundle) calls(runID string) []agentd.ToolCallView {
	b.t.Helper()
	page := want[struct {
		Data []struct {
			Calls []agentd.ToolCallView `json:"tool_calls"`
		} `json:"data"`
	}](b.t, b.do("GET", "/runs/"+runID+"/steps", ""), http.StatusOK)
	var out []agentd.ToolCallView
	for _, s := range page.Data {
		out = append(out, s.Calls...)
	}
	return out
}

// runInput is a POST /runs body for agent with user and input.
func runInput(agent, user, input string, extra ...string) string {
	body := map[string]any{"agent": agent, "user": user, "input": input}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i]] = json.RawMessage(extra[i+1])
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// TestAgentLearnsAndRecalls: an agent writes a fact with memory_write in
// one conversation (its version records the run, step and call), and a
// run of a new conversation for the same user is given it pinned in its
// system prompt, after the agent's instructions (its view names the
// version); a run for another user is given nothing of it, and its
// searches and writes of the first user's namespace are refused, while
// a search of its own finds nothing.
func TestAgentLearnsAndRecalls(t *testing.T) {
	t.Parallel()
	b := memoryToolsSetup(t, nil)
	want[json.RawMessage](t, b.do("POST", "/agents", `{"name": "rememberer", "instructions": "Be brief.",
		"memory": {"pinned": [["users", "{{user}}"]], "write": [["users", "{{user}}"]]}}`), http.StatusCreated)

	learn := b.runDone(runInput("rememberer", "ann", `/call memory_write {"key": "favorite_color", "value": "blue"}`+"\n/say noted"))
	calls := b.calls(learn.ID)
	if len(calls) != 1 || calls[0].Status != agentd.CallSucceeded {
		t.Fatalf("the write's call: %+v", calls)
	}
	it := want[agentd.MemoryItem](t, b.do("GET", "/memory/item?namespace=users/ann&key=favorite_color", ""), http.StatusOK)
	if it.Value != "blue" || it.Version != 1 || it.Source != agentd.MemoryFromAgent || it.RunID != learn.ID ||
		it.Step != 1 || it.ToolCallID != calls[0].ID || it.Actor != "agent:rememberer" {
		t.Fatalf("the item the agent wrote: %+v", it)
	}

	recall := b.runDone(runInput("rememberer", "ann", "/system"))
	if recall.ConversationID == learn.ConversationID {
		t.Fatal("the second run is in the first one's conversation")
	}
	system := *recall.OutputText
	if !strings.HasPrefix(system, "Be brief.\n\nMemory") || !strings.Contains(system, "[users/ann] favorite_color: blue") {
		t.Fatalf("the system prompt of the next conversation:\n%s", system)
	}
	if len(recall.PinnedMemory) != 1 || recall.PinnedMemory[0].Key != "favorite_color" || recall.PinnedMemory[0].Version != 1 ||
		!slices.Equal(recall.PinnedMemory[0].Namespace, []string{"users", "ann"}) {
		t.Fatalf("pinned_memory: %+v", recall.PinnedMemory)
	}

	other := b.runDone(runInput("rememberer", "bob", "/system"))
	if strings.Contains(*other.OutputText, "blue") || other.PinnedMemory != nil {
		t.Fatalf("bob's run was given ann's memory: %q %+v", *other.OutputText, other.PinnedMemory)
	}
	hostile := b.runDone(runInput("rememberer", "bob", `/call memory_write {"namespace": "users/ann", "key": "favorite_color", "value": "red"}`+
		"\n"+`/call memory_search {"query": "blue", "namespace": "users/ann"}`+"\n"+`/call memory_search {"query": "blue favorite_color"}`+
		"\n"+`/call memory_delete {"namespace": "users/ann", "key": "favorite_color"}`+"\n/say tried"))
	calls = b.calls(hostile.ID)
	if len(calls) != 4 {
		t.Fatalf("bob's calls: %+v", calls)
	}
	for _, i := range []int{0, 1, 3} {
		if c := calls[i]; c.Status != agentd.CallFailed || c.Error == nil || !strings.Contains(c.Error.Message, "users/ann") {
			t.Errorf("bob's call %s %s: %s %+v, want refused naming the namespace", c.Name, c.Arguments, c.Status, c.Error)
		}
	}
	if c := calls[2]; c.Status != agentd.CallSucceeded || string(c.Result) != `{"items":[]}` {
		t.Errorf("bob's own search: %s %s", c.Status, c.Result)
	}
	versions := want[struct {
		Data []agentd.MemoryItem `json:"data"`
	}](t, b.do("GET", "/memory/item/versions?namespace=users/ann&key=favorite_color", ""), http.StatusOK)
	if len(versions.Data) != 1 || versions.Data[0].Value != "blue" {
		t.Fatalf("ann's item after bob's run: %+v", versions.Data)
	}
}

// TestMemoryToolsOffered: a run is offered memory_search when it reads a
// namespace and memory_write and memory_delete when it writes one, each
// told the namespaces it reaches; a run without memory, or with memory
// off, is offered none, and its call of one is refused.
func TestMemoryToolsOffered(t *testing.T) {
	t.Parallel()
	fake := fakellm.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	b := memoryToolsSetup(t, llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "test"}))
	offered := func(body string) map[string]string {
		t.Helper()
		n := len(fake.Requests())
		b.runDone(body)
		out := map[string]string{}
		for _, tool := range fake.Requests()[n].Tools {
			out[tool.Name] = tool.Description
		}
		return out
	}
	got := offered(`{"input": "hi", "user": "ann", "tools": ["calculator"], "memory": {"search": ["users/{{user}}", "org"]}}`)
	if _, ok := got["memory_search"]; !ok || !strings.Contains(got["memory_search"], "users/ann, org") {
		t.Fatalf("a run that searches: %v", got)
	}
	if _, ok := got["memory_write"]; ok {
		t.Fatalf("a run that writes nothing is offered memory_write: %v", got)
	}
	got = offered(`{"input": "hi", "user": "ann", "tools": [], "memory": {"search": ["users/{{user}}"], "write": ["users/{{user}}/notes"]}}`)
	if len(got) != 3 || !strings.Contains(got["memory_write"], "users/ann/notes") || !strings.Contains(got["memory_delete"], "users/ann/notes") {
		t.Fatalf("a run that writes, without other tools: %v", got)
	}
	for _, body := range []string{`{"input": "hi"}`, `{"input": "hi", "memory": false}`} {
		if got = offered(body); slices.ContainsFunc(slices.Collect(maps.Keys(got)), agentd.IsMemoryTool) {
			t.Fatalf("%s is offered memory tools: %v", body, got)
		}
	}
	r := b.runDone(`{"input": "/call memory_search {\"query\": \"x\"}\n/say done", "memory": false}`)
	if c := b.calls(r.ID); len(c) != 1 || c[0].Status != agentd.CallFailed || !strings.Contains(c[0].Error.Message, "not offered") {
		t.Fatalf("a call of memory_search by a run without memory: %+v", c)
	}
}

// TestForkMemoryIsAnOverlay: a fork reads memory as it was when the
// forked step committed and writes into an overlay of its own: its write
// is invisible to real memory and to the original's conversation, the
// original's later write is invisible to the fork, and a later run of the
// fork's conversation (through POST /runs) keeps the fork's overlay.
func TestForkMemoryIsAnOverlay(t *testing.T) {
	t.Parallel()
	b := memoryToolsSetup(t, nil)
	want[json.RawMessage](t, b.do("POST", "/agents", `{"name": "rememberer",
		"memory": {"pinned": [["users", "{{user}}"]], "write": [["users", "{{user}}"]]}}`), http.StatusCreated)
	orig := b.runDone(runInput("rememberer", "ann", `/call memory_write {"key": "color", "value": "blue"}`+"\n/say noted"))

	fork := want[memoryRun](t, b.do("POST", "/runs/"+orig.ID+"/fork", `{"at_step": 1,
		"input": "/call memory_write {\"key\": \"color\", \"value\": \"green\"}\n/say forked"}`), http.StatusAccepted)
	b.waitFor(fork.ID, func(r runBody) bool { return r.Status == "completed" })
	fork = want[memoryRun](t, b.do("GET", "/runs/"+fork.ID, ""), http.StatusOK)
	if fork.Memory == nil || fork.Memory.Overlay == "" || fork.Memory.Base == nil {
		t.Fatalf("the fork's memory: %+v", fork.Memory)
	}
	if len(fork.PinnedMemory) != 1 || fork.PinnedMemory[0].Version != 1 {
		t.Fatalf("the fork was given %+v, want blue's version 1", fork.PinnedMemory)
	}
	it := want[agentd.MemoryItem](t, b.do("GET", "/memory/item?namespace=users/ann&key=color", ""), http.StatusOK)
	if it.Value != "blue" || it.Version != 1 {
		t.Fatalf("real memory after the fork's write: %+v", it)
	}

	// The original's conversation goes on, in real memory.
	later := b.runDone(runInput("rememberer", "ann", `/call memory_write {"key": "color", "value": "red"}`+"\n/system",
		"conversation_id", `"`+orig.ConversationID+`"`))
	if later.Memory.Overlay != "" {
		t.Fatalf("the original's next run is under an overlay: %+v", later.Memory)
	}
	if it = want[agentd.MemoryItem](t, b.do("GET", "/memory/item?namespace=users/ann&key=color", ""), http.StatusOK); it.Value != "red" {
		t.Fatalf("real memory after the original's write: %+v", it)
	}

	// The fork's conversation goes on, in its overlay: it sees its own
	// green, not the original's red.
	next := b.runDone(runInput("rememberer", "ann", "/system", "conversation_id", `"`+fork.ConversationID+`"`))
	if next.Memory.Overlay != fork.Memory.Overlay || !strings.Contains(*next.OutputText, "color: green") {
		t.Fatalf("the fork's next run: memory %+v, system prompt %q", next.Memory, *next.OutputText)
	}
	// And a new conversation of ann's reads real memory.
	fresh := b.runDone(runInput("rememberer", "ann", "/system"))
	if !strings.Contains(*fresh.OutputText, "color: red") || strings.Contains(*fresh.OutputText, "green") {
		t.Fatalf("a new conversation's system prompt: %q", *fresh.OutputText)
	}
}

// TestPinnedMemoryKeepsThePrefix: pinned memory sits in the system prompt
// after the instructions, the same bytes on every turn while memory does
// not change, so the provider's prompt cache serves each turn's request
// up to the previous one's end (the fake Anthropic API's cache counters);
// a change of the pinned items is a new system prompt, which the cache
// serves only up to it (a known break: the runs' pinned_memory versions
// differ).
func TestPinnedMemoryKeepsThePrefix(t *testing.T) {
	t.Parallel()
	fake, srv := fakeanthropic.Start()
	t.Cleanup(srv.Close)
	b := memoryToolsSetup(t, llm.NewAnthropic(llm.AnthropicConfig{BaseURL: srv.URL, APIKey: "test"}))
	want[json.RawMessage](t, b.do("PUT", "/memory/items", `{"namespace": ["users", "ann"], "key": "color", "value": "blue"}`),
		http.StatusOK)
	want[json.RawMessage](t, b.do("POST", "/agents", `{"name": "rememberer", "instructions": "`+strings.Repeat("Be brief. ", 200)+`",
		"memory": {"pinned": [["users", "{{user}}"]]}}`), http.StatusCreated)
	first := b.runDone(runInput("rememberer", "ann", "/say one"))
	second := b.runDone(runInput("rememberer", "ann", "/say two", "conversation_id", `"`+first.ConversationID+`"`))
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[1].Usage.CacheReadInputTokens < reqs[0].Usage.TotalInput() {
		t.Fatalf("the second turn read %d tokens from the cache; the first turn's request was %d (requests: %+v)",
			reqs[1].Usage.CacheReadInputTokens, reqs[0].Usage.TotalInput(), reqs)
	}
	if first.PinnedMemory[0].Version != 1 || second.PinnedMemory[0].Version != 1 {
		t.Fatalf("pinned versions %+v and %+v", first.PinnedMemory, second.PinnedMemory)
	}

	want[json.RawMessage](t, b.do("PUT", "/memory/items", `{"namespace": ["users", "ann"], "key": "color", "value": "green"}`),
		http.StatusOK)
	third := b.runDone(runInput("rememberer", "ann", "/say three", "conversation_id", `"`+first.ConversationID+`"`))
	if third.PinnedMemory[0].Version != 2 {
		t.Fatalf("the third turn was given %+v", third.PinnedMemory)
	}
	// Its tools come before the system prompt and are still cached; the
	// cache stops where the system prompt changed, short of the first
	// turn's request.
	if got := fake.Requests()[2].Usage.CacheReadInputTokens; got >= reqs[0].Usage.TotalInput() {
		t.Fatalf("the third turn, after memory changed, read %d tokens from the cache, past the system prompt", got)
	}
}
