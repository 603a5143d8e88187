package run_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

func ptr[T any](v T) *T { return &v }

// outputText is the text of a completed run's answer.
func outputText(t *testing.T, r agentd.Run) string {
	t.Helper()
	var parts []agentd.Part
	if err := json.Unmarshal(r.Output, &parts); err != nil {
		t.Fatalf("output %s: %v", r.Output, err)
	}
	return agentd.TextOf(parts)
}

// TestSamplingReachesTheModel: a run's sampling is sent with each of its
// model calls (max_completion_tokens, temperature, top_p, response_format);
// a run without one sends none of them.
func TestSamplingReachesTheModel(t *testing.T) {
	b := setup(t)
	b.engine(t, 10*time.Second)
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	for _, c := range []struct {
		name     string
		sampling agentd.Sampling
		want     string // the fake's /sampling answer
	}{
		{"none", agentd.Sampling{}, `{}`},
		{"all", agentd.Sampling{MaxOutputTokens: 5000, Temperature: ptr(0.0), TopP: ptr(0.25),
			Format: &agentd.OutputFormat{Type: agentd.OutputJSONSchema, Name: "count", Description: "A count.", Schema: schema, Strict: ptr(true)}},
			`{"max_completion_tokens":5000,"temperature":0,"top_p":0.25,"response_format":{"type":"json_schema",` +
				`"json_schema":{"name":"count","description":"A count.","schema":` + string(schema) + `,"strict":true}}}`},
		{"json_object", agentd.Sampling{Temperature: ptr(1.5), Format: &agentd.OutputFormat{Type: agentd.OutputJSONObject}},
			`{"temperature":1.5,"response_format":{"type":"json_object"}}`},
		{"text", agentd.Sampling{Format: &agentd.OutputFormat{Type: agentd.OutputText}}, `{}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(b.fake.Requests())
			// Two steps: the sampling goes with every model call of the run.
			r := b.create(t, "/call calculator {\"expression\":\"6*7\"}\n/sampling", agentd.RunParams{MaxSteps: 3, Sampling: c.sampling})
			r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
			if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonCompleted {
				t.Fatalf("run ended %s/%s %s", r.Status, r.TerminalReason, r.Error)
			}
			// Compared as JSON values: the stored schema's keys are in
			// PostgreSQL's jsonb order.
			var got, want any
			if err := json.Unmarshal([]byte(outputText(t, r)), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(c.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the model was sent %s, want %s", outputText(t, r), c.want)
			}
			reqs := b.fake.Requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("%d model requests, want 2", len(reqs))
			}
			for _, q := range reqs {
				if q.MaxCompletionTokens != int64(c.sampling.MaxOutputTokens) || !sameFloat(q.Temperature, c.sampling.Temperature) ||
					!sameFloat(q.TopP, c.sampling.TopP) {
					t.Fatalf("request %d: max_completion_tokens %d, temperature %v, top_p %v", q.Seq, q.MaxCompletionTokens, q.Temperature, q.TopP)
				}
			}
		})
	}
}

func sameFloat(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestMaxOutputTokensEndsTheRun: an answer cut at the run's own
// max_output_tokens is not continued, as one cut at the model's limit is:
// the run ends completed with reason max_output_tokens after one model
// call, its output what the model wrote, and its step finished "length".
func TestMaxOutputTokensEndsTheRun(t *testing.T) {
	b := setup(t)
	b.engine(t, 10*time.Second)
	before := b.fake.Calls()
	r := b.create(t, "/say abcdefghijklmnopqrstuvwxyz\n/stream 4 0", agentd.RunParams{MaxSteps: 3,
		Sampling: agentd.Sampling{MaxOutputTokens: 3}})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonMaxOutputTokens {
		t.Fatalf("run ended %s/%s %s, want completed/max_output_tokens", r.Status, r.TerminalReason, r.Error)
	}
	if n := b.fake.Calls() - before; n != 1 {
		t.Fatalf("%d model requests, want 1: a cut at the client's cap is not continued", n)
	}
	// 3 tokens of the fake's: C/4+1 <= 3, C at most 11 bytes.
	if got := outputText(t, r); got != "abcdefghijk" {
		t.Fatalf("output %q, want the 11 bytes the fake wrote", got)
	}
	if r.Usage.OutputTokens != 3 {
		t.Fatalf("usage %+v, want 3 output tokens", r.Usage)
	}
	steps, err := b.store.StepsList(context.Background(), r.ID)
	if err != nil || len(steps) != 1 || steps[0].FinishReason != agentd.FinishLength {
		t.Fatalf("steps %+v (%v), want one finished length", steps, err)
	}
	var streamed strings.Builder
	var completed int
	for _, e := range b.events(t, r.ID) {
		var env struct {
			Data struct {
				Text   string        `json:"text"`
				Reason agentd.Reason `json:"reason"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Data, &env); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case agentd.EventMessageDelta:
			streamed.WriteString(env.Data.Text)
		case agentd.EventRunCompleted:
			completed++
			if env.Data.Reason != agentd.ReasonMaxOutputTokens {
				t.Fatalf("run.completed reason %q", env.Data.Reason)
			}
		}
	}
	if streamed.String() != "abcdefghijk" || completed != 1 {
		t.Fatalf("streamed %q, %d run.completed", streamed.String(), completed)
	}

	// An answer within the cap completes as usual.
	r = b.create(t, "/say short", agentd.RunParams{MaxSteps: 3, Sampling: agentd.Sampling{MaxOutputTokens: 3}})
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted || r.TerminalReason != agentd.ReasonCompleted || outputText(t, r) != "short" {
		t.Fatalf("run ended %s/%s with %s", r.Status, r.TerminalReason, r.Output)
	}
}

// TestCompactionTakesNoSampling: the summary request of a compaction is
// sent without the run's sampling; the run's own requests carry it.
func TestCompactionTakesNoSampling(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	sampling := agentd.Sampling{MaxOutputTokens: 100_000, Temperature: ptr(0.5), Format: &agentd.OutputFormat{Type: agentd.OutputJSONObject}}
	filler := strings.Repeat("x", 1000)
	var conv string
	for i := range 8 {
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake-2k",
			ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue, Sampling: sampling},
			Input: []agentd.InputMessage{{Role: "user", Content: fmt.Sprintf("q%d %s\n/say a%d %s", i, filler, i, filler)}}})
		if err != nil {
			t.Fatal(err)
		}
		conv = r.ConversationID
		if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
			t.Fatalf("turn %d ended %s/%s: %s", i, r.Status, r.TerminalReason, r.Error)
		}
	}
	var summaries, answers int
	for _, q := range b.fake.Requests() {
		if isCompaction(t, q) {
			summaries++
			if q.MaxCompletionTokens != 0 || q.Temperature != nil || q.TopP != nil || q.ResponseFormat != nil {
				t.Fatalf("a compaction was sent the run's sampling: %+v", q)
			}
			continue
		}
		answers++
		if q.MaxCompletionTokens != 100_000 || !sameFloat(q.Temperature, sampling.Temperature) ||
			string(q.ResponseFormat) != `{"type":"json_object"}` {
			t.Fatalf("a run's request lacks its sampling: %+v", q)
		}
	}
	if summaries == 0 || answers != 8 {
		t.Fatalf("%d compactions and %d answers, want some and 8", summaries, answers)
	}
}

// isCompaction reports whether q is a compaction's summary request: its
// first message is the compaction's system prompt.
func isCompaction(t *testing.T, q fakellm.Request) bool {
	t.Helper()
	if len(q.Sent) == 0 {
		return false
	}
	var m struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(q.Sent[0], &m); err != nil {
		t.Fatal(err)
	}
	return m.Role == "system" && m.Content == compact.Instructions
}
