package run_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

// TestCompletedRunCarriesItsAnswer: a completed run keeps the parts of its
// final assistant message as its output, and run.completed carries their
// text; a run that ends at max_steps after a tool step answers with its
// last assistant message.
func TestCompletedRunCarriesItsAnswer(t *testing.T) {
	b := setup(t)
	b.engine(t, 10*time.Second)
	for _, c := range []struct {
		name, input string
		maxSteps    int
		reason      agentd.Reason
		want        string
	}{
		{"answer", "/call calculator {\"expression\": \"6*7\"}\n/say The answer\n/say is 42.", 5, agentd.ReasonCompleted, "The answer\nis 42."},
		{"max steps", "/call calculator {\"expression\": \"1+1\"}\n/say never", 1, agentd.ReasonMaxSteps, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.create(t, c.input, agentd.RunParams{MaxSteps: c.maxSteps})
			r = b.wait(t, r.ID, nil)
			if r.Status != agentd.StatusCompleted || r.TerminalReason != c.reason {
				t.Fatalf("run %s %s", r.Status, r.TerminalReason)
			}
			var parts []agentd.Part
			if err := json.Unmarshal(r.Output, &parts); err != nil {
				t.Fatalf("output %s: %v", r.Output, err)
			}
			if got := agentd.TextOf(parts); got != c.want {
				t.Fatalf("output text %q, want %q (parts %+v)", got, c.want, parts)
			}
			evs := b.events(t, r.ID)
			last := evs[len(evs)-1]
			var env struct {
				Data struct {
					OutputText *string `json:"output_text"`
				} `json:"data"`
			}
			if err := json.Unmarshal(last.Data, &env); err != nil || last.Type != agentd.EventRunCompleted ||
				env.Data.OutputText == nil || *env.Data.OutputText != c.want {
				t.Fatalf("last event %s %s, want run.completed with output_text %q", last.Type, last.Data, c.want)
			}
		})
	}
}
