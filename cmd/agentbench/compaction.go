package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// compactionTurns is the length of the compaction benchmark's conversation.
const compactionTurns = 200

// benchCompaction holds one conversation of turns runs (each adds about 300
// tokens: a question and its answer) twice: on fake-8k, where agentd
// compacts, and on fake, which has no window, so that everything is sent.
// It reports the prompt tokens sent per step each way, the compactions per
// 100 turns, and what a compaction adds to the latency of the turn that
// triggers it.
func benchCompaction(ctx context.Context, o options, turns int) ([]metric, error) {
	with, err := converse(ctx, o, "fake-8k", turns)
	if err != nil {
		return nil, err
	}
	without, err := converse(ctx, o, "fake", turns)
	if err != nil {
		return nil, err
	}
	if with.failed+without.failed > 0 {
		return nil, fmt.Errorf("%d turns with compaction and %d without did not complete", with.failed, without.failed)
	}
	var plain, compacting []time.Duration
	for i, d := range with.latency {
		if with.compacted[i] {
			compacting = append(compacting, d)
		} else {
			plain = append(plain, d)
		}
	}
	p50plain, _ := percentiles(plain)
	p50compacting, _ := percentiles(compacting)
	perHundred := float64(len(compacting)) * 100 / float64(turns)
	fmt.Fprintf(o.out, "  compaction: %d turns on fake-8k: %.0f prompt tokens per step (largest %d), %.0f with the summaries' own; "+
		"on fake (everything sent): %.0f (largest %d); %.1f compactions per 100 turns; turn p50 %v, %v when it compacts\n",
		turns, with.perStep(), with.largest, with.perStepAll(), without.perStep(), without.largest, perHundred,
		p50plain.Round(100*time.Microsecond), p50compacting.Round(100*time.Microsecond))
	return []metric{
		{"compaction", "prompt tokens per step, compacted (fake-8k)", "tokens", with.perStep(), nil},
		{"compaction", "prompt tokens per step, with the summaries' own", "tokens", with.perStepAll(), nil},
		{"compaction", "prompt tokens per step, without compaction", "tokens", without.perStep(), nil},
		{"compaction", "largest prompt, compacted", "tokens", float64(with.largest), atMost(8192)},
		{"compaction", "compactions per 100 turns", "compactions", perHundred, nil},
		{"compaction", "turn latency p50 without a compaction", "ms", msOf(p50plain), nil},
		{"compaction", "latency a compaction adds to its turn (p50)", "ms", msOf(p50compacting - p50plain), nil},
	}, nil
}

// conversation is what converse measured.
type conversation struct {
	latency   []time.Duration // per turn, from its creation to its end
	compacted []bool          // per turn
	failed    int
	// prompt tokens of the turns' own model calls, and of the summaries'
	steps, summaries          int
	stepTokens, summaryTokens int64
	largest                   int64
}

func (c conversation) perStep() float64 { return float64(c.stepTokens) / float64(max(c.steps, 1)) }
func (c conversation) perStepAll() float64 {
	return float64(c.stepTokens+c.summaryTokens) / float64(max(c.steps, 1))
}

// converse holds a conversation of turns runs on model, one after another,
// with an engine of its own in a database of its own.
func converse(ctx context.Context, o options, model string, turns int) (conversation, error) {
	var c conversation
	url, drop, err := newDatabase(ctx, o.admin, "compaction")
	if err != nil {
		return c, err
	}
	defer drop()
	fake := fakellm.New()
	fsrv := httptest.NewServer(fake)
	defer fsrv.Close()
	store, err := persist.Open(ctx, persist.Config{URL: url, MaxConns: 8})
	if err != nil {
		return c, err
	}
	defer store.Close()
	store.StartGroupCommit(1, 64)
	defer store.StopGroupCommit()
	reg, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		return c, err
	}
	ended := make(chan agentd.RunStatus, 1)
	eng := run.New(run.Config{Store: store, Tools: reg, Workers: 2, Profiles: compact.DefaultProfiles(),
		Model:      llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fsrv.URL + "/v1", APIKey: "bench"}),
		OnLeftFunc: func(_ string, status agentd.RunStatus) { ended <- status }})
	if err := eng.Start(ctx); err != nil {
		return c, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Stop(sctx)
	}()
	question := strings.Repeat("lorem ipsum dolor sit amet ", 30) // about 200 tokens
	answer := strings.Repeat("consectetur adipiscing ", 20)       // about 115 tokens
	var conv string
	ids := make([]string, 0, turns)
	for i := range turns {
		start := time.Now()
		r, _, err := eng.Service().Create(ctx, agentd.RunCreate{TenantID: "bench", Spec: agentd.RunSpec{Model: model, ConversationID: conv,
			Params: agentd.RunParams{MaxSteps: 3, IfBusy: agentd.IfBusyEnqueue},
			Input:  []agentd.InputMessage{{Role: "user", Content: fmt.Sprintf("question %d: %s\n/say answer %d: %s", i, question, i, answer)}}}})
		if err != nil {
			return c, err
		}
		conv = r.ConversationID
		select {
		case status := <-ended:
			if status != agentd.StatusCompleted {
				c.failed++
			}
		case <-time.After(time.Minute):
			return c, fmt.Errorf("turn %d of %s did not end within a minute", i, model)
		case <-ctx.Done():
			return c, ctx.Err()
		}
		c.latency = append(c.latency, time.Since(start))
		ids = append(ids, r.ID)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return c, err
	}
	defer conn.Close(ctx)
	compacted := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT run_id::text FROM compactions`)
	if err != nil {
		return c, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return c, err
		}
		compacted[id] = true
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	for _, id := range ids {
		c.compacted = append(c.compacted, compacted[id])
	}
	for _, r := range fake.Requests() {
		tokens := r.Usage.PromptTokens
		if len(r.Sent) > 0 && strings.Contains(string(r.Sent[0]), "You compact a conversation") {
			c.summaries++
			c.summaryTokens += tokens
			continue
		}
		c.steps++
		c.stepTokens += tokens
		c.largest = max(c.largest, tokens)
	}
	return c, nil
}
