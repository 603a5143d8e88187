package run_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

// TestFinishReasons: an answer cut at the model's output limit is
// continued (the model is sent what it wrote and asked to go on) and its
// parts make one message; one still cut after 3 continuations ends the run
// completed with reason max_output_tokens; the content filter ends it
// failed content_filter. Neither is a plain success any more.
func TestFinishReasons(t *testing.T) {
	b := setup(t)
	b.engine(t, 10*time.Second)
	for _, c := range []struct {
		name     string
		input    string
		status   agentd.RunStatus
		reason   agentd.Reason
		output   string
		requests int
	}{
		{"continued", "/say part.\n/finish length 2", agentd.StatusCompleted, agentd.ReasonCompleted, "part.part.part.", 3},
		{"still cut", "/say cut.\n/finish length", agentd.StatusCompleted, agentd.ReasonMaxOutputTokens, "cut.cut.cut.cut.", 4},
		{"filtered", "/say no.\n/finish content_filter", agentd.StatusFailed, agentd.ReasonContentFilter, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := b.fake.Calls()
			r := b.create(t, c.input, agentd.RunParams{MaxSteps: 3})
			r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
			if r.Status != c.status || r.TerminalReason != c.reason {
				t.Fatalf("run ended %s/%s %s, want %s/%s", r.Status, r.TerminalReason, r.Error, c.status, c.reason)
			}
			if n := b.fake.Calls() - before; n != c.requests {
				t.Fatalf("%d model requests, want %d", n, c.requests)
			}
			if c.output == "" {
				return
			}
			var parts []agentd.Part
			if err := json.Unmarshal(r.Output, &parts); err != nil || agentd.TextOf(parts) != c.output {
				t.Fatalf("output %s, want %q", r.Output, c.output)
			}
			var streamed strings.Builder
			for _, e := range b.events(t, r.ID) {
				var env struct {
					Data struct {
						Text string `json:"text"`
					} `json:"data"`
				}
				if e.Type == "message.delta" && json.Unmarshal(e.Data, &env) == nil {
					streamed.WriteString(env.Data.Text)
				}
			}
			if streamed.String() != c.output {
				t.Fatalf("streamed %q, want the message's text %q", streamed.String(), c.output)
			}
		})
	}
}
