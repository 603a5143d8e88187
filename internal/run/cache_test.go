package run_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/run"
)

// TestRequestPrefixIsStable: over a 10-step run, each model request's
// messages begin with exactly the bytes of the previous request's (the
// provider's prompt cache can reuse them), and the requests carry the
// conversation's id as prompt_cache_key. A compaction is the only thing
// that changes what came before.
func TestRequestPrefixIsStable(t *testing.T) {
	b := setup(t)
	fake := cachingEngine(t, b)
	input := strings.TrimSuffix(strings.Repeat(`/call calculator {"expression": "1+2"}`+"\n/next\n", 9), "\n/next\n") + "\n/say done"
	r := b.create(t, input, agentd.RunParams{MaxSteps: 12, LoopLimits: agentd.LoopLimits{IdenticalCalls: 100}})
	if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s %s", r.Status, r.TerminalReason, r.Error)
	}
	reqs := fake.Requests()
	if len(reqs) != 10 {
		t.Fatalf("%d model requests, want 10", len(reqs))
	}
	for i := 1; i < len(reqs); i++ {
		prev, cur := reqs[i-1].Sent, reqs[i].Sent
		if len(cur) <= len(prev) {
			t.Fatalf("request %d sent %d messages after %d", i+1, len(cur), len(prev))
		}
		for j := range prev {
			if !bytes.Equal(prev[j], cur[j]) {
				t.Fatalf("request %d changed message %d:\n was %s\n now %s", i+1, j, prev[j], cur[j])
			}
		}
	}
	if got := reqs[0].CacheKey; got != r.ConversationID {
		t.Fatalf("prompt_cache_key %q, want the conversation id %s", got, r.ConversationID)
	}
	// A run's own key (the Responses API's prompt_cache_key) is sent instead.
	r = b.create(t, `/call calculator {"expression": "1+2"}`+"\n/say done", agentd.RunParams{CacheKey: "docs-agent:v2"})
	if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s %s", r.Status, r.TerminalReason, r.Error)
	}
	reqs = fake.Requests()[10:]
	if len(reqs) != 2 || reqs[0].CacheKey != "docs-agent:v2" || reqs[1].CacheKey != "docs-agent:v2" {
		t.Fatalf("the run's cache key: %d requests, %+v", len(reqs), reqs)
	}
}

// TestOnlyACompactionChangesThePrefix: over a conversation on fake-4k
// that is compacted several times, each model request's messages begin
// with the previous request's bytes, except right after a compaction,
// which is the only thing that changes what came before.
func TestOnlyACompactionChangesThePrefix(t *testing.T) {
	b := setup(t)
	fake := cachingEngine(t, b)
	converse(t, b, "fake-4k", 20, 800)
	compactions, changes := 0, 0
	var prev []json.RawMessage
	compacted := false
	for _, r := range fake.Requests() {
		if len(r.Sent) > 0 && bytes.Contains(r.Sent[0], []byte("You compact a conversation")) {
			compactions++
			compacted = true
			continue
		}
		cur := r.Sent
		same := len(cur) > len(prev)
		for i := 0; same && i < len(prev); i++ {
			same = bytes.Equal(prev[i], cur[i])
		}
		if !same {
			if !compacted {
				t.Fatalf("request %d changed the messages before it without a compaction", r.Seq)
			}
			changes++
		}
		prev, compacted = cur, false
	}
	if compactions == 0 || changes != compactions {
		t.Fatalf("%d compactions, %d changes of the prefix: want as many, and some", compactions, changes)
	}
}

// cachingEngine starts an engine on b whose model sends prompt_cache_key,
// against a fake of its own, whose requests the test reads.
func cachingEngine(t *testing.T, b *bundle) *fakellm.Server {
	t.Helper()
	fake := fakellm.New()
	fsrv := httptest.NewServer(fake)
	t.Cleanup(fsrv.Close)
	b.start(t, run.Config{Workers: 1, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Model:    llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fsrv.URL + "/v1", APIKey: "test", PromptCacheKey: true}),
		Profiles: compact.DefaultProfiles()})
	return fake
}
