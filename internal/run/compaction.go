package run

import (
	"context"
	"errors"
	"time"

	"agentd/internal/clean"
	"agentd/internal/compact"
	"agentd/internal/event"
	"agentd/internal/llm"
	"agentd/internal/persist"
	"agentd/internal/vocab"
)

// compactIfNeeded compacts the conversation when what the model would be
// sent for step is past its model's threshold: the model summarizes the
// older turns (compact.Cut) with compact.Instructions, and the summary is
// committed, with the compaction's usage on the step and a
// context.compacted event, in one write. The messages stay; from then on
// the model is sent the summary instead (compact.Visible). It returns the
// state the step goes on with. A compaction that fails is logged and the
// step goes on uncompacted (the model may then refuse the request as too
// long, which ends the run context_overflow); an error is a failed write,
// which stops the run.
func (x *execution) compactIfNeeded(ctx context.Context, st persist.RunState, step *persist.Step) (persist.RunState, []llm.Message, error) {
	msgs := buildMessages(st)
	if x.d.profiles == nil {
		return st, msgs, nil
	}
	threshold := x.d.profiles.For(st.Run.Model).Threshold()
	if threshold <= 0 {
		return st, msgs, nil
	}
	before := compact.EstimateRequest(msgs)
	if before <= threshold {
		return st, msgs, nil
	}
	covered, coversTo, ok := compact.Cut(st.Messages, st.Compaction)
	if !ok {
		return st, msgs, nil
	}
	started := time.Now()
	req := llm.Request{Model: st.Run.Model, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: compact.Instructions},
		{Role: llm.RoleUser, Content: compact.Transcript(st.Compaction, covered)},
	}, IdleTimeout: time.Duration(st.Run.Params.Timeouts.IdleMS) * time.Millisecond}
	resp, err := x.d.model.Stream(ctx, req, func(string) {})
	if err == nil && resp.Text == "" {
		err = errEmptySummary
	}
	if err != nil {
		x.log.Warn("compaction failed; the step goes on uncompacted", "error", err, "tokens", before, "threshold", threshold)
		return st, msgs, nil
	}
	x.countTokens(resp.Usage)
	summary, _ := clean.Text(resp.Text)
	c := persist.Compaction{ID: persist.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID, StepID: step.ID,
		CoversToSeq: coversTo, MessagesCovered: len(covered), Summary: summary, TokensBefore: before,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}
	next := st
	next.Compaction = &c
	nextMsgs := buildMessages(next)
	c.TokensAfter = compact.EstimateRequest(nextMsgs)
	usage := usageOf(resp.Usage)
	err = x.write(x.durable(), []event.In{event.Of(step.Seq, event.ContextCompactedData{CompactionID: c.ID,
		CoversToSeq: c.CoversToSeq, MessagesCovered: c.MessagesCovered, TokensAfter: c.TokensAfter, TokensBefore: c.TokensBefore})},
		persist.CompactionInsert{Compaction: c},
		persist.StepUpdate{ID: step.ID, Status: vocab.StepRunning, Usage: usage})
	if err != nil {
		return st, msgs, err
	}
	x.log.Info("conversation compacted", "tokens_before", c.TokensBefore, "tokens_after", c.TokensAfter,
		"messages_covered", c.MessagesCovered, "duration", time.Since(started).String())
	return next, nextMsgs, nil
}

// errEmptySummary: the model answered a compaction with no text.
var errEmptySummary = errors.New("the model wrote an empty summary")
