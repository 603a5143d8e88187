package run_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

// TestLoopGuards: a model that asks for the same tool call again and again
// is stopped. The 5th identical call ends the run loop_detected (4 made);
// asking again after 3 identical calls all failed ends it tool_error (3
// made); a run's own loop_limits move both.
func TestLoopGuards(t *testing.T) {
	b := setup(t)
	b.engine(t, 10*time.Second)
	repeat := func(call string, n int) string {
		return strings.TrimSuffix(strings.Repeat(call+"\n/next\n", n), "\n/next\n") + "\n/say done"
	}
	good := `/call calculator {"expression": "1+1"}`
	bad := `/call calculator {"expression": "1/"}`
	for _, c := range []struct {
		name   string
		input  string
		limits agentd.LoopLimits
		reason agentd.Reason
		calls  int
		detail string
	}{
		{"identical calls", repeat(good, 8), agentd.LoopLimits{}, agentd.ReasonLoopDetected, 4, "for the 5th time"},
		{"failures in a row", repeat(bad, 8), agentd.LoopLimits{}, agentd.ReasonToolError, 3, "last 3 such calls all failed"},
		{"own limits", repeat(good, 8), agentd.LoopLimits{IdenticalCalls: 2}, agentd.ReasonLoopDetected, 1, "for the 2nd time"},
		{"under the limits", repeat(good, 3), agentd.LoopLimits{}, agentd.ReasonCompleted, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.create(t, c.input, agentd.RunParams{MaxSteps: 20, LoopLimits: c.limits.OrDefaults()})
			r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
			if r.TerminalReason != c.reason || (c.detail != "" && !strings.Contains(string(r.Error), c.detail)) {
				t.Fatalf("run ended %s/%s %s; want %s with %q", r.Status, r.TerminalReason, r.Error, c.reason, c.detail)
			}
			steps, err := b.store.StepsList(context.Background(), r.ID)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			for _, s := range steps {
				calls += len(s.Calls)
			}
			if calls != c.calls {
				t.Fatalf("%d calls made, want %d", calls, c.calls)
			}
		})
	}
}
