package run_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// TestLongConversationNeverOverflows: 200 runs of one conversation on
// fake-4k (a window of 4,096 tokens; each turn adds about 450) all
// complete: every request the fake received fit its window, because the
// older turns were compacted into summaries that follow the template. Every
// message is still stored; the model is sent the first question, the
// latest summary and the latest turns.
func TestLongConversationNeverOverflows(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	turns := 200
	if testing.Short() {
		turns = 40
	}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30) // about 800 bytes
	var conv string
	for i := range turns {
		input := fmt.Sprintf("question %d: %s\n/say answer %d: %s", i, filler, i, filler)
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake-4k",
			ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue},
			Input: []agentd.InputMessage{{Role: "user", Content: input}}})
		if err != nil {
			t.Fatal(err)
		}
		conv = r.ConversationID
		if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
			t.Fatalf("turn %d ended %s/%s: %s", i, r.Status, r.TerminalReason, r.Error)
		}
	}
	if max := b.fake.MaxPromptTokens("fake-4k"); max == 0 || max > 4096 {
		t.Fatalf("the largest request the fake received had %d prompt tokens; the window is 4096", max)
	}
	msgs, err := b.store.MessagesList(context.Background(), conv, 0, 10_000)
	if err != nil || len(msgs) != 2*turns {
		t.Fatalf("%d messages stored after %d turns, want %d: %v", len(msgs), turns, 2*turns, err)
	}
	c, err := b.store.CompactionLatest(context.Background(), conv)
	if err != nil {
		t.Fatalf("no compaction after %d turns: %v", turns, err)
	}
	for _, h := range compact.Sections {
		if !strings.Contains(c.Summary, h) {
			t.Fatalf("the summary lacks %q:\n%s", h, c.Summary)
		}
	}
	visible := compact.Visible(msgs, &c)
	if visible[0].Seq != 1 || visible[1].Role != agentd.RoleSystem || len(visible) >= 20 {
		t.Fatalf("the model is sent %d messages, starting %s %d, %s", len(visible), visible[0].Role, visible[0].Seq, visible[1].Role)
	}
	for _, m := range visible[2:] {
		if m.Seq <= c.CoversToSeq {
			t.Fatalf("the model is sent message %d, which the summary (up to %d) stands for", m.Seq, c.CoversToSeq)
		}
	}
	var compactions int
	r, err := b.store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", ConversationID: conv, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range r {
		for _, e := range b.events(t, run.ID) {
			if e.Type == agentd.EventContextCompacted {
				compactions++
			}
		}
	}
	if compactions == 0 || compactions > turns/2 {
		t.Fatalf("%d compactions over %d turns", compactions, turns)
	}
	t.Logf("%d turns, %d compactions, largest request %d tokens, latest summary covers up to seq %d (%d tokens before, %d after)",
		turns, compactions, b.fake.MaxPromptTokens("fake-4k"), c.CoversToSeq, c.TokensBefore, c.TokensAfter)
}

// profilesFile writes a models file and loads it.
func profilesFile(t *testing.T, body string) *compact.Profiles {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := compact.LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// converse runs turns of one conversation on model and returns the runs.
func converse(t *testing.T, b *bundle, model string, turns, bytes int) []agentd.Run {
	t.Helper()
	filler := strings.Repeat("x", bytes)
	var conv string
	var out []agentd.Run
	for i := range turns {
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: model,
			ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue},
			Input: []agentd.InputMessage{{Role: "user", Content: fmt.Sprintf("q%d %s\n/say a%d %s", i, filler, i, filler)}}})
		if err != nil {
			t.Fatal(err)
		}
		conv = r.ConversationID
		out = append(out, b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }))
	}
	return out
}

// TestContextOverflowCompactsAndRetries: a profile that promises more than
// the model has (fake-2k said to hold 100,000 tokens) is never past its
// threshold, so the model refuses a request as too long: agentd compacts
// then and asks again, and the run completes. A single turn larger than
// the window fails context_overflow, saying by how much.
func TestContextOverflowCompactsAndRetries(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: profilesFile(t, `{"models": {"fake-2k": {"context_window": 100000, "max_output_tokens": 256}}}`)})
	runs := converse(t, b, "fake-2k", 12, 1000)
	compacted := 0
	for i, r := range runs {
		if r.Status != agentd.StatusCompleted {
			t.Fatalf("turn %d ended %s/%s: %s", i, r.Status, r.TerminalReason, r.Error)
		}
		for _, e := range b.events(t, r.ID) {
			if e.Type == agentd.EventContextCompacted {
				compacted++
			}
		}
	}
	if compacted == 0 {
		t.Fatal("no compaction: the model never refused, so the test proves nothing")
	}
	big := converse(t, b, "fake-2k", 1, 10_000)[0]
	if big.Status != agentd.StatusFailed || big.TerminalReason != agentd.ReasonContextOverflow ||
		!strings.Contains(string(big.Error), "over)") || !strings.Contains(string(big.Error), "window of fake-2k is 100000") {
		t.Fatalf("a turn larger than the window: %s/%s %s", big.Status, big.TerminalReason, big.Error)
	}
}

// TestCompactionCircuitBreaker: when every compaction fails (the model's
// endpoint refuses them), the conversation goes on uncompacted until the
// third failure in a row; the next request that needs a compaction ends
// its run, saying so, instead of asking again forever.
func TestCompactionCircuitBreaker(t *testing.T) {
	b := setup(t)
	fsrv := httptest.NewServer(b.fake)
	t.Cleanup(fsrv.Close)
	var refused atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("You compact a conversation")) {
			refused.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"summaries are refused here","type":"invalid_request_error"}}`))
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, fsrv.URL+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: proxy.URL + "/v1", APIKey: "test"}), Profiles: compact.DefaultProfiles()})
	runs := converse(t, b, "fake-16k", 40, 1500)
	last := runs[len(runs)-1]
	if refused.Load() != 3 {
		t.Fatalf("%d compactions asked for, want 3 before agentd stops trying", refused.Load())
	}
	var failed *agentd.Run
	for i := range runs {
		if runs[i].Status == agentd.StatusFailed {
			failed = &runs[i]
			break
		}
	}
	if failed == nil || failed.TerminalReason != agentd.ReasonContextOverflow ||
		!strings.Contains(string(failed.Error), "last 3 compactions failed") {
		t.Fatalf("no run ended by the breaker (last: %s/%s %s)", last.Status, last.TerminalReason, last.Error)
	}
}

// TestCompactAtPerRun: a run's own compact_at moves its threshold: the
// same short conversation on fake-16k is compacted with compact_at 0.1,
// and not with the profile's 0.8.
func TestCompactAtPerRun(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	compactions := func(at float64) int {
		var conv string
		n := 0
		for i := range 6 {
			r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake-16k",
				ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue, CompactAt: at},
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
	if n := compactions(0); n != 0 {
		t.Fatalf("%d compactions at the profile's threshold, want none", n)
	}
	if n := compactions(0.1); n == 0 {
		t.Fatal("no compaction with compact_at 0.1")
	}
}

// TestCompactionOfALongBacklog: a conversation held on a model without a
// window, then continued on fake-4k, has far more history than the small
// window: the compaction's own request is cut to fit it, and the run goes
// on rather than failing context_overflow.
func TestCompactionOfALongBacklog(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		Profiles: compact.DefaultProfiles()})
	runs := converse(t, b, "fake", 12, 1500) // about 9,000 tokens, all of them sent
	conv := runs[0].ConversationID
	r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake-4k",
		ConversationID: conv, Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue},
		Input: []agentd.InputMessage{{Role: "user", Content: "and now?\n/say fine"}}})
	if err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("the turn on the small window ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
	}
	if max := b.fake.MaxPromptTokens("fake-4k"); max > 4096 {
		t.Fatalf("fake-4k was sent %d tokens", max)
	}
	if _, err := b.store.CompactionLatest(context.Background(), conv); err != nil {
		t.Fatalf("no compaction: %v", err)
	}
}
