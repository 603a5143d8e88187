package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// aisdkStepsRun is what test/aisdk-openai/provider.mjs prints for its
// steps and storeFalse scenarios.
type aisdkStepsRun struct {
	Text, FinishReason string
	Executed           []string
	Previous           []*string
	Steps              []struct {
		FinishReason, Text, ResponseID string
		ToolCalls                      []struct {
			ToolCallID, ToolName string
			Input                map[string]any
		}
	}
}

// check fails the test unless the run took the three steps its prompt
// asks for: a call for Paris, a call for Oslo, the answer.
func (r aisdkStepsRun) check(t *testing.T) {
	t.Helper()
	if r.Text != "Sunny in both." || r.FinishReason != "stop" || !reflect.DeepEqual(r.Executed, []string{"Paris", "Oslo"}) || len(r.Steps) != 3 {
		t.Fatalf("%+v", r)
	}
	for i, city := range []string{"Paris", "Oslo"} {
		s := r.Steps[i]
		if s.FinishReason != "tool-calls" || len(s.ToolCalls) != 1 || s.ToolCalls[0].ToolName != "weather" ||
			!reflect.DeepEqual(s.ToolCalls[0].Input, map[string]any{"city": city}) {
			t.Fatalf("step %d: %+v", i, s)
		}
	}
	if r.Steps[2].FinishReason != "stop" || r.Steps[2].Text != "Sunny in both." {
		t.Fatalf("the last step: %+v", r.Steps[2])
	}
}

const aisdkStepsPrompt = "/call weather {\"city\":\"Paris\"}\n/next\n/call weather {\"city\":\"Oslo\"}\n/say Sunny in both."

// TestAISDKOpenAIProviderSteps: the AI SDK's OpenAI provider
// (@ai-sdk/openai's openai.responses, unchanged) over several steps of a
// tool the SDK runs: each step continuing the previous step's response
// with previousResponseId and sending only the tool's result; a second
// turn given previousResponseId of a first, which the provider sends with
// every step; the same
// with store: false, the whole history sent inline and nothing kept by
// agentd; and reasoningEffort.
func TestAISDKOpenAIProviderSteps(t *testing.T) {
	t.Parallel()
	needAISDKOpenAINode(t)
	base, _ := startServer(t, nil)

	t.Run("previousResponseId", func(t *testing.T) {
		var r aisdkStepsRun
		reqs := aisdkOpenAI(t, base, "steps", aisdkStepsPrompt, &r)
		allAnswered(t, reqs)
		r.check(t)
		if len(reqs) != 3 || len(r.Previous) != 3 || r.Previous[0] != nil || r.Previous[1] == nil || *r.Previous[1] != r.Steps[0].ResponseID ||
			r.Previous[2] == nil || *r.Previous[2] != r.Steps[1].ResponseID {
			t.Fatalf("previous_response_id of each call %v, steps %+v", r.Previous, r.Steps)
		}
		for i, q := range reqs[1:] {
			var body struct {
				Input []struct {
					Type   string `json:"type"`
					CallID string `json:"call_id"`
				} `json:"input"`
			}
			if json.Unmarshal(q.Body, &body) != nil || len(body.Input) != 1 || body.Input[0].Type != "function_call_output" ||
				body.Input[0].CallID != r.Steps[i].ToolCalls[0].ToolCallID {
				t.Fatalf("call %d sent %s", i+2, q.Body)
			}
		}
		// One conversation in agentd, with both results in it.
		first, last := storedRunOf(t, base, r.Steps[0].ResponseID), storedRunOf(t, base, r.Steps[2].ResponseID)
		if first.ConversationID != last.ConversationID || last.Status != "completed" {
			t.Fatalf("the runs: %+v, %+v", first, last)
		}
		results := last.toolResults()
		if len(results) != 2 || !strings.Contains(results[0], "Paris") || !strings.Contains(results[1], "Oslo") {
			t.Fatalf("the conversation's tool results %q", results)
		}
	})

	// A second turn given previousResponseId of a first, as a chat passes
	// it: the provider sends that same id with each step, and the steps'
	// calls and results as input; each step continues the first turn with
	// what the step sent (a fork of it), so the last run's conversation is
	// the first turn, then the second with each result once.
	t.Run("previousResponseId of an earlier turn", func(t *testing.T) {
		var r struct {
			aisdkStepsRun
			First, FirstResponseID string
		}
		reqs := aisdkOpenAI(t, base, "continued", aisdkStepsPrompt, &r)
		allAnswered(t, reqs)
		r.check(t)
		if r.First != "First turn." || len(r.Previous) != 4 || r.Previous[0] != nil {
			t.Fatalf("%+v", r)
		}
		for i, p := range r.Previous[1:] {
			if p == nil || *p != r.FirstResponseID {
				t.Fatalf("call %d's previous_response_id %v, want %s", i+2, p, r.FirstResponseID)
			}
		}
		last := storedRunOf(t, base, r.Steps[2].ResponseID)
		var texts []string
		for _, m := range last.Messages {
			for _, c := range m.Content {
				if c.Type == "text" {
					texts = append(texts, m.Role+": "+c.Text)
				}
			}
		}
		if want := []string{"user: /say First turn.", "assistant: First turn.", "user: " + aisdkStepsPrompt, "assistant: Sunny in both."}; !reflect.DeepEqual(texts, want) {
			t.Fatalf("the last run's conversation: %q, want %q", texts, want)
		}
		if results := last.toolResults(); len(results) != 2 || !strings.Contains(results[0], "Paris") || !strings.Contains(results[1], "Oslo") {
			t.Fatalf("the last run's tool results %q", results)
		}
	})

	t.Run("store false", func(t *testing.T) {
		var r aisdkStepsRun
		reqs := aisdkOpenAI(t, base, "storeFalse", aisdkStepsPrompt, &r)
		allAnswered(t, reqs)
		r.check(t)
		if len(reqs) != 3 {
			t.Fatalf("%d calls", len(reqs))
		}
		for i, q := range reqs {
			var body struct {
				Store              *bool             `json:"store"`
				PreviousResponseID *string           `json:"previous_response_id"`
				Input              []json.RawMessage `json:"input"`
			}
			if json.Unmarshal(q.Body, &body) != nil || body.Store == nil || *body.Store || body.PreviousResponseID != nil || len(body.Input) != 1+2*i {
				t.Fatalf("call %d sent %s", i+1, q.Body)
			}
		}
		// agentd keeps no response that is not to be stored.
		for _, s := range r.Steps {
			res, err := http.Get(base + "/runs/" + runOfResponse(t, s.ResponseID))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound {
				t.Fatalf("GET the run of %s: %d, want 404", s.ResponseID, res.StatusCode)
			}
		}
	})

	t.Run("reasoningEffort", func(t *testing.T) {
		var r struct{ Text, FinishReason, ResponseID string }
		reqs := aisdkOpenAI(t, base, "reasoning", "/say Thought it through.", &r)
		allAnswered(t, reqs)
		var body struct {
			Reasoning struct{ Effort string } `json:"reasoning"`
		}
		if r.Text != "Thought it through." || r.FinishReason != "stop" || len(reqs) != 1 ||
			json.Unmarshal(reqs[0].Body, &body) != nil || body.Reasoning.Effort != "low" {
			t.Fatalf("%+v; sent %s", r, reqs[0].Body)
		}
		if e := storedReasoning(t, base, r.ResponseID); e != "low" {
			t.Fatalf("the response's reasoning effort %q, want low", e)
		}
	})
}
