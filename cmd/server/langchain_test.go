package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// langchainMessage is an AIMessage as test/langchain/langchain.mjs prints it.
type langchainMessage struct {
	Text      string
	ToolCalls []struct {
		ID, Name string
		Args     map[string]any
	}
	ResponseID string
	Usage      struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
}

// TestLangChainOpenAI: LangChain's ChatOpenAI (@langchain/openai,
// unchanged, with useResponsesApi: true), its baseURL pointed at agentd's
// /v1: invoke, stream, two bindTools round trips in one conversation (the
// history sent back whole, as LangChain keeps it), and reasoning. Each
// scenario fails naming what agentd refused of what LangChain sent.
func TestLangChainOpenAI(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "langchain", "@langchain/openai", "@langchain/core")
	base, _ := startServer(t, nil)
	all := nodeScenarios(t, dir, "langchain.mjs", base)

	t.Run("invoke", func(t *testing.T) {
		var m langchainMessage
		reqs := scenarioResult(t, all, "invoke", &m)
		if m.Text != "Hello from agentd." || len(m.ToolCalls) != 0 || len(reqs) != 1 {
			t.Fatalf("%+v in %d calls", m, len(reqs))
		}
		if m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 || m.Usage.TotalTokens != m.Usage.InputTokens+m.Usage.OutputTokens {
			t.Fatalf("usage %+v", m.Usage)
		}
		// agentd's conversation holds the system message, the user's and
		// the answer.
		run := storedRunOf(t, base, m.ResponseID)
		var got []string
		for _, msg := range run.Messages {
			for _, c := range msg.Content {
				got = append(got, msg.Role+": "+c.Text)
			}
		}
		if want := []string{"system: Be brief.", "user: /say Hello from agentd.", "assistant: Hello from agentd."}; run.Status != "completed" ||
			!reflect.DeepEqual(got, want) {
			t.Fatalf("the run %s: %q, want %q", run.Status, got, want)
		}
	})

	t.Run("stream", func(t *testing.T) {
		var r struct {
			Text   string
			Chunks int
		}
		reqs := scenarioResult(t, all, "stream", &r)
		var body struct {
			Stream bool `json:"stream"`
		}
		if r.Text != "Streamed through LangChain." || r.Chunks < 2 || len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &body) != nil || !body.Stream {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("bindTools", func(t *testing.T) {
		var r struct {
			Rounds []struct {
				Call, Answer langchainMessage
			}
			Executed     []string
			ToolMessages int
		}
		reqs := scenarioResult(t, all, "tools", &r)
		if !reflect.DeepEqual(r.Executed, []string{"Paris", "Oslo"}) || r.ToolMessages != 2 || len(r.Rounds) != 2 || len(reqs) != 4 {
			t.Fatalf("%+v in %d calls", r, len(reqs))
		}
		for i, want := range []struct{ city, answer string }{{"Paris", "It is sunny in Paris."}, {"Oslo", "And sunny in Oslo."}} {
			round := r.Rounds[i]
			if len(round.Call.ToolCalls) != 1 || round.Call.ToolCalls[0].Name != "get_weather" ||
				!reflect.DeepEqual(round.Call.ToolCalls[0].Args, map[string]any{"city": want.city}) || round.Answer.Text != want.answer {
				t.Fatalf("round %d: %+v", i, round)
			}
			// agentd's run of the answer was given the tool's output.
			run := storedRunOf(t, base, round.Answer.ResponseID)
			results := run.toolResults()
			if run.Status != "completed" || len(results) == 0 || results[len(results)-1] != "It is sunny in "+want.city+", 21 C." {
				t.Fatalf("round %d's run: %+v", i, run)
			}
		}
	})

	// LangChain sends reasoning only for a model it knows reasons (o*,
	// gpt-5*): the script asks for gpt-5-mini, which agentd's fake answers.
	t.Run("reasoning", func(t *testing.T) {
		var m langchainMessage
		reqs := scenarioResult(t, all, "reasoning", &m)
		var body struct {
			Reasoning struct{ Effort string } `json:"reasoning"`
		}
		if m.Text != "Thought it through." || len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &body) != nil || body.Reasoning.Effort != "low" {
			t.Fatalf("%+v; sent %s", m, reqs[0].Body)
		}
		if e := storedReasoning(t, base, m.ResponseID); e != "low" {
			t.Fatalf("the response's reasoning effort %q, want low", e)
		}
	})
}
