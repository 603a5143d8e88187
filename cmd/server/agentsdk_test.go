package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// nodeScenarios runs script in test/dir (a client that prints one JSON
// object, a key per scenario, each with the scenario's result or error and
// the requests it sent) against base, once for every scenario, and
// returns what each scenario printed.
func nodeScenarios(t *testing.T, dir, script, base string) map[string]json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, base)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%s printed %q: %v", script, stdout.String(), err)
	}
	return out
}

// scenarioResult decodes one scenario's result into out, failing the
// test with the scenario's error and every request agentd refused when
// the scenario failed, and returns its requests.
func scenarioResult(t *testing.T, all map[string]json.RawMessage, name string, out any) []providerRequest {
	t.Helper()
	raw, ok := all[name]
	if !ok {
		t.Fatalf("no result for scenario %s", name)
	}
	var common struct {
		Error    json.RawMessage   `json:"error"`
		Requests []providerRequest `json:"requests"`
	}
	if err := json.Unmarshal(raw, &common); err != nil {
		t.Fatalf("scenario %s: %s: %v", name, raw, err)
	}
	var calls strings.Builder
	for _, r := range common.Requests {
		fmt.Fprintf(&calls, "\n  %s %s -> %d", r.Method, r.Path, r.Status)
		if r.Status >= 400 {
			fmt.Fprintf(&calls, " %s\n    sent %s", r.Error, r.Body)
		}
	}
	if len(common.Error) > 0 && string(common.Error) != "null" {
		t.Fatalf("scenario %s failed: %s\ncalls:%s", name, common.Error, calls.String())
	}
	for _, r := range common.Requests {
		if r.Status != 200 {
			t.Fatalf("scenario %s: agentd answered %d\ncalls:%s", name, r.Status, calls.String())
		}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("scenario %s: %s: %v", name, raw, err)
	}
	return common.Requests
}

// storedRun is what agentd keeps of a response's run: its row, its steps'
// tool calls and its conversation's messages.
type storedRun struct {
	Status         string `json:"status"`
	TerminalReason string `json:"terminal_reason"`
	ConversationID string `json:"conversation_id"`
	Steps          []struct {
		FinishReason string `json:"finish_reason"`
		ToolCalls    []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Status    string          `json:"status"`
			Result    json.RawMessage `json:"result"`
		} `json:"tool_calls"`
	}
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Name    string `json:"name"`
			Content string `json:"content"`
		} `json:"content"`
	}
}

// storedRunOf reads the run of response id from agentd's own API.
func storedRunOf(t *testing.T, base, id string) storedRun {
	t.Helper()
	runID := runOfResponse(t, id)
	var r storedRun
	getJSON(t, base+"/runs/"+runID, &r)
	var steps struct {
		Data json.RawMessage `json:"data"`
	}
	getJSON(t, base+"/runs/"+runID+"/steps", &steps)
	if err := json.Unmarshal(steps.Data, &r.Steps); err != nil {
		t.Fatal(err)
	}
	var msgs struct {
		Data json.RawMessage `json:"data"`
	}
	getJSON(t, base+"/conversations/"+r.ConversationID+"/messages?limit=100", &msgs)
	if err := json.Unmarshal(msgs.Data, &r.Messages); err != nil {
		t.Fatal(err)
	}
	return r
}

// storedReasoning is the reasoning effort agentd keeps for response id
// (its Responses object's reasoning.effort).
func storedReasoning(t *testing.T, base, id string) string {
	t.Helper()
	var r struct {
		Reasoning struct {
			Effort string `json:"effort"`
		} `json:"reasoning"`
	}
	getJSON(t, base+"/v1/responses/"+id, &r)
	return r.Reasoning.Effort
}

// toolResults are the texts of a run's conversation's tool results.
func (r storedRun) toolResults() []string {
	var out []string
	for _, m := range r.Messages {
		for _, c := range m.Content {
			if c.Type == "tool_result" {
				out = append(out, c.Content)
			}
		}
	}
	return out
}

// agentsItem is a run item as test/agents/agents.mjs prints it.
type agentsItem struct {
	Type, Agent, Name, Arguments, Output, Status string
}

// agentsRun is a run's result as test/agents/agents.mjs prints it.
type agentsRun struct {
	FinalOutput    json.RawMessage
	LastAgent      string
	LastResponseID string
	ResponseIDs    []string
	Items          []agentsItem
	Executed       []string
}

// text is a run's final output as a string ("" when it is not one).
func (r agentsRun) text() string {
	var s string
	_ = json.Unmarshal(r.FinalOutput, &s)
	return s
}

func (r agentsRun) itemTypes() []string {
	var out []string
	for _, it := range r.Items {
		out = append(out, it.Type)
	}
	return out
}

// TestOpenAIAgentsSDK: the OpenAI Agents SDK (@openai/agents, unchanged,
// on the Responses API), its OpenAI client's baseURL pointed at agentd's
// /v1, runs agents against agentd: an agent as the quickstart writes it,
// a function tool the SDK runs (plain and streamed), a handoff,
// previousResponseId, an OpenAIConversationsSession, a hosted MCP tool
// (agentd's own calculator) whose call waits for approval given through
// onApproval, modelSettings.reasoning and an outputType. Each scenario
// fails naming what agentd refused of what the SDK sent.
func TestOpenAIAgentsSDK(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "agents", "@openai/agents", "openai")
	base, _ := startServer(t, nil)
	all := nodeScenarios(t, dir, "agents.mjs", base)

	// The quickstart's agent has no model: the SDK's default one (a gpt-5
	// model, which agentd's fake answers for) with its default settings.
	t.Run("defaults", func(t *testing.T) {
		var r agentsRun
		reqs := scenarioResult(t, all, "defaults", &r)
		if r.text() != "Hello from the default model." || len(reqs) != 1 {
			t.Fatalf("%+v in %d calls", r, len(reqs))
		}
	})

	t.Run("tool", func(t *testing.T) {
		var r agentsRun
		reqs := scenarioResult(t, all, "tool", &r)
		if r.text() != "It is sunny in Paris." || !reflect.DeepEqual(r.Executed, []string{"Paris"}) || len(r.ResponseIDs) != 2 || len(reqs) != 2 {
			t.Fatalf("%+v in %d calls", r, len(reqs))
		}
		if len(r.Items) != 3 || r.Items[0].Type != "tool_call_item" || r.Items[0].Name != "get_weather" ||
			r.Items[0].Arguments != `{"city":"Paris"}` || r.Items[1].Type != "tool_call_output_item" ||
			r.Items[1].Output != "It is sunny in Paris, 21 C." || r.Items[2].Type != "message_output_item" {
			t.Fatalf("items %+v", r.Items)
		}
		// agentd's runs: the first ended at the client's tool call, the
		// second was given its output and answered.
		first, second := storedRunOf(t, base, r.ResponseIDs[0]), storedRunOf(t, base, r.ResponseIDs[1])
		if first.TerminalReason != "client_tool_calls" || len(first.Steps) != 1 || len(first.Steps[0].ToolCalls) != 1 ||
			first.Steps[0].ToolCalls[0].Name != "get_weather" || string(first.Steps[0].ToolCalls[0].Arguments) != `{"city":"Paris"}` {
			t.Fatalf("the first run: %+v", first)
		}
		if second.Status != "completed" || !reflect.DeepEqual(second.toolResults(), []string{"It is sunny in Paris, 21 C."}) {
			t.Fatalf("the second run: %+v", second)
		}
	})

	t.Run("stream", func(t *testing.T) {
		var r struct {
			agentsRun
			Deltas string
			Events map[string]int
		}
		reqs := scenarioResult(t, all, "stream", &r)
		if r.text() != "Sunny in Oslo, streamed." || r.Deltas != r.text() || !reflect.DeepEqual(r.Executed, []string{"Oslo"}) {
			t.Fatalf("%+v", r)
		}
		if r.Events["run_item_stream_event"] < 3 || r.Events["raw_model_stream_event"] == 0 {
			t.Fatalf("stream events %v", r.Events)
		}
		for _, q := range reqs {
			var body struct {
				Stream bool `json:"stream"`
			}
			if json.Unmarshal(q.Body, &body) != nil || !body.Stream {
				t.Fatalf("a request that did not stream: %s", q.Body)
			}
		}
	})

	t.Run("handoff", func(t *testing.T) {
		var r agentsRun
		reqs := scenarioResult(t, all, "handoff", &r)
		if r.text() != "Billing here: your invoice is paid." || r.LastAgent != "Billing" ||
			!reflect.DeepEqual(r.itemTypes(), []string{"handoff_call_item", "handoff_output_item", "message_output_item"}) ||
			r.Items[0].Name != "transfer_to_Billing" || r.Items[2].Agent != "Billing" {
			t.Fatalf("%+v", r)
		}
		// The second request is the Billing agent's.
		var second struct {
			Instructions string `json:"instructions"`
		}
		if len(reqs) != 2 || json.Unmarshal(reqs[1].Body, &second) != nil || second.Instructions != "You answer billing questions." {
			t.Fatalf("%d calls; the second's instructions %q", len(reqs), second.Instructions)
		}
		if run := storedRunOf(t, base, r.ResponseIDs[0]); len(run.Steps) != 1 || len(run.Steps[0].ToolCalls) != 1 ||
			run.Steps[0].ToolCalls[0].Name != "transfer_to_Billing" {
			t.Fatalf("the triage agent's run: %+v", run)
		}
	})

	// Two runs, the second with previousResponseId of the first: one
	// conversation in agentd, the second run's first request sending only
	// its new message.
	t.Run("previousResponseId", func(t *testing.T) {
		var r struct {
			First, Second agentsRun
			Executed      []string
		}
		reqs := scenarioResult(t, all, "previous", &r)
		if r.First.text() != "First turn done." || r.Second.text() != "Second turn done." ||
			!reflect.DeepEqual(r.Executed, []string{"Rome", "Lima"}) || len(reqs) != 4 {
			t.Fatalf("%+v in %d calls", r, len(reqs))
		}
		var third struct {
			PreviousResponseID string            `json:"previous_response_id"`
			Input              []json.RawMessage `json:"input"`
		}
		if json.Unmarshal(reqs[2].Body, &third) != nil || third.PreviousResponseID != r.First.LastResponseID || len(third.Input) != 1 {
			t.Fatalf("the second run's first request: %s", reqs[2].Body)
		}
		a, b := storedRunOf(t, base, r.First.LastResponseID), storedRunOf(t, base, r.Second.LastResponseID)
		if a.ConversationID != b.ConversationID {
			t.Fatalf("the runs are in conversations %s and %s", a.ConversationID, b.ConversationID)
		}
		if !reflect.DeepEqual(b.toolResults(), []string{"It is sunny in Rome, 21 C.", "It is sunny in Lima, 21 C."}) {
			t.Fatalf("the conversation's tool results: %q", b.toolResults())
		}
	})

	// An OpenAIConversationsSession keeps the history in an agentd
	// conversation (the Conversations API), which the second run is sent.
	t.Run("OpenAIConversationsSession", func(t *testing.T) {
		var r struct {
			ConversationID string
			First, Second  agentsRun
			Executed       []string
			History        []struct{ Type, Role string }
		}
		reqs := scenarioResult(t, all, "session", &r)
		if !strings.HasPrefix(r.ConversationID, "conv_") || r.First.text() != "Kyoto is sunny." ||
			r.Second.text() != "Second turn in the session." || !reflect.DeepEqual(r.Executed, []string{"Kyoto"}) {
			t.Fatalf("%+v", r)
		}
		var types []string
		for _, h := range r.History {
			types = append(types, h.Type+":"+h.Role)
		}
		want := []string{"message:user", "function_call:", "function_call_result:", "message:assistant", "message:user", "message:assistant"}
		if !reflect.DeepEqual(types, want) {
			t.Fatalf("the session's history %v, want %v", types, want)
		}
		var paths []string
		for _, q := range reqs {
			paths = append(paths, q.Method+" "+strings.Replace(q.Path, r.ConversationID, "{id}", 1))
		}
		if paths[0] != "POST /v1/conversations" || !slices.Contains(paths, "POST /v1/conversations/{id}/items") {
			t.Fatalf("calls %v", paths)
		}
	})

	// A hosted MCP tool with server_label agentd is agentd's own tools;
	// the calculator's call waits for an approval, which the SDK asks
	// onApproval for and sends back; agentd then runs the call. In a run
	// of its own (mcp), the SDK sends the turn again with the approval; in
	// a run that continues a response (mcpChained), only the approval.
	for _, name := range []string{"mcp", "mcpChained"} {
		t.Run(name, func(t *testing.T) {
			var r struct {
				agentsRun
				Approvals []struct{ Name string }
			}
			scenarioResult(t, all, name, &r)
			if r.text() != "The answer is 42." || len(r.Approvals) != 1 || r.Approvals[0].Name != "calculator" {
				t.Fatalf("%+v", r)
			}
			var call *agentsItem
			for i, it := range r.Items {
				if it.Name == "mcp_call" {
					call = &r.Items[i]
				}
			}
			if call == nil || call.Output != `{"result":42}` {
				t.Fatalf("items %+v", r.Items)
			}
			run := storedRunOf(t, base, r.LastResponseID)
			var ran bool
			for _, s := range run.Steps {
				for _, c := range s.ToolCalls {
					ran = ran || (c.Name == "calculator" && c.Status == "succeeded" && string(c.Result) == `{"result":42}`)
				}
			}
			if !ran {
				t.Fatalf("agentd's run has no calculator call that succeeded: %+v", run.Steps)
			}
		})
	}

	t.Run("reasoning", func(t *testing.T) {
		var r agentsRun
		reqs := scenarioResult(t, all, "reasoning", &r)
		var body struct {
			Reasoning struct{ Effort string } `json:"reasoning"`
		}
		if r.text() != "Thought it through." || json.Unmarshal(reqs[0].Body, &body) != nil || body.Reasoning.Effort != "low" {
			t.Fatalf("%+v; sent %s", r, reqs[0].Body)
		}
		if e := storedReasoning(t, base, r.LastResponseID); e != "low" {
			t.Fatalf("the response's reasoning effort %q, want low", e)
		}
	})

	t.Run("outputType", func(t *testing.T) {
		var r agentsRun
		reqs := scenarioResult(t, all, "output", &r)
		var out struct {
			City    string
			Celsius float64
		}
		if json.Unmarshal(r.FinalOutput, &out) != nil || out.City != "Paris" || out.Celsius != 21 {
			t.Fatalf("final output %s", r.FinalOutput)
		}
		var body struct {
			Text struct {
				Format struct{ Type string } `json:"format"`
			} `json:"text"`
		}
		if json.Unmarshal(reqs[0].Body, &body) != nil || body.Text.Format.Type != "json_schema" {
			t.Fatalf("sent %s", reqs[0].Body)
		}
	})
}
