package run_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// TestCompactThresholdPerRun: a run's own compact_threshold (in tokens)
// moves its threshold: a short conversation on fake-16k is compacted past
// 1,500 tokens and not at the profile's threshold; on plain fake, whose
// window is not known (never compacted by its profile), the run's own
// threshold still holds.
func TestCompactThresholdPerRun(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	compactions := func(model string, threshold int) int {
		var conv string
		n := 0
		for i := range 6 {
			r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: model,
				ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue, CompactThreshold: threshold},
				Input: []agentd.InputMessage{{Role: "user", Content: fmt.Sprintf("q%d %s\n/say a%d %s", i,
					strings.Repeat("y", 1000), i, strings.Repeat("z", 1000))}}})
			if err != nil {
				t.Fatal(err)
			}
			conv = r.ConversationID
			b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
			for _, e := range b.events(t, r.ID) {
				if e.Type == agentd.EventContextCompacted {
					n++
				}
			}
		}
		return n
	}
	if n := compactions("fake-16k", 0); n != 0 {
		t.Fatalf("%d compactions at the profile's threshold, want none", n)
	}
	if n := compactions("fake-16k", 1500); n == 0 {
		t.Fatal("no compaction with compact_threshold 1500 on fake-16k")
	}
	if n := compactions("fake", 1500); n == 0 {
		t.Fatal("no compaction with compact_threshold 1500 on fake (no known window)")
	}
}
