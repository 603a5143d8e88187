package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"

	"go.opentelemetry.io/otel/attribute"
)

// maxCompactionFailures is how many compactions of a conversation may fail
// in a row before agentd stops trying: a request that needs one then ends
// its run.
const maxCompactionFailures = 3

// errCompactionsFailing: the conversation's last compactions all failed.
var errCompactionsFailing = errors.New("compaction failed")

// compactIfNeeded compacts the conversation when what the model would be
// sent for step is past its model's threshold (see compactNow). It returns
// the state the step goes on with, and the messages the model is then sent.
func (x *execution) compactIfNeeded(ctx context.Context, st agentd.RunState, step *agentd.Step) (agentd.RunState, []llm.Message, error) {
	msgs := buildMessages(st)
	if x.d.profiles == nil || st.Run.Params.NoCompaction {
		return st, msgs, nil
	}
	prof := x.d.profiles.For(stepModel(st, step))
	if at := st.Run.Params.CompactAt; at > 0 {
		prof.CompactAt = at
	}
	threshold := threshold(prof, st.Run.Params.CompactThreshold)
	if threshold <= 0 || x.sent.estimate(st, msgs) <= threshold {
		return st, msgs, nil
	}
	next, nextMsgs, _, err := x.compactNow(ctx, st, step, msgs)
	return next, nextMsgs, err
}

// threshold is the prompt size, in tokens, past which a run with model
// profile prof compacts: the run's own compactThreshold (0: none), capped
// at the room the model's window leaves for the prompt when it is known,
// else the profile's; 0: never.
func threshold(prof compact.Profile, compactThreshold int) int {
	if compactThreshold <= 0 {
		return prof.Threshold()
	}
	if prof.ContextWindow > 0 {
		return min(compactThreshold, max(prof.ContextWindow-prof.MaxOutputTokens, 1))
	}
	return compactThreshold
}

// sentPrompt is what the model was sent last: the estimate of its messages
// (compact.EstimateRequest), the prompt tokens the model reported for it,
// and the compaction it was sent after (its covers_to_seq, 0 for none).
type sentPrompt struct {
	estimated, reported int
	coversTo            int
}

// record keeps the prompt of a model call that answered with its usage.
func (p *sentPrompt) record(st agentd.RunState, msgs []llm.Message, reported int64) {
	if reported <= 0 {
		return
	}
	*p = sentPrompt{estimated: compact.EstimateRequest(msgs), reported: int(reported), coversTo: coversTo(st)}
}

// estimate is the prompt tokens msgs will take: the last reported count
// plus the estimate of what was added since, when the last call was sent
// the same history (no compaction since) and msgs only grew; else the
// estimate alone. The reported count holds what the estimate does not see
// (tool definitions, the model's own framing, its tokenizer).
func (p sentPrompt) estimate(st agentd.RunState, msgs []llm.Message) int {
	est := compact.EstimateRequest(msgs)
	if p.reported == 0 || p.coversTo != coversTo(st) || est < p.estimated {
		return est
	}
	return p.reported + est - p.estimated
}

func coversTo(st agentd.RunState) int {
	if st.Compaction == nil {
		return 0
	}
	return st.Compaction.CoversToSeq
}

// summarize asks the model of req for a compaction's summary, once, and
// when it fails with a retryable error, each next model of the run's
// chain in turn, once (a compaction that fails is counted, and the step
// goes on uncompacted: it is not worth the step's retries). req.Model is
// left at the model that answered, or the last one asked.
func (x *execution) summarize(ctx context.Context, st agentd.RunState, step *agentd.Step, req *llm.Request) (llm.Response, error) {
	for {
		if err := x.holdBudget(ctx, st, *req, compact.EstimateRequest(req.Messages), 0); err != nil {
			return llm.Response{}, err // the step's own call ends the run for it
		}
		sctx, span := x.chatSpan(ctx, step.Seq, *req)
		span.SetAttributes(attribute.Bool("agentd.compaction", true))
		resp, err := x.d.model.Stream(sctx, *req, func(string) {})
		endChatSpan(span, *req, resp, err, x.d.traceContent)
		next := nextModel(st, req.Model)
		if err == nil || !llm.IsRetryable(err) || next == "" || ctx.Err() != nil {
			return resp, err
		}
		x.log.Warn("compaction's model call failed; asking the next model of the chain", "from", req.Model, "to", next, "error", err)
		req.Model = next
	}
}

// compactNow compacts the conversation: the model summarizes the older
// turns (compact.Cut) with compact.Instructions, and the summary is
// committed, with the compaction's usage on the step and a
// context.compacted event, in one write. The messages stay; from then on
// the model is sent the summary instead (compact.Visible). compacted is
// false when there was nothing to summarize, or the compaction failed: the
// failure is counted for the conversation and the step goes on
// uncompacted. After maxCompactionFailures in a row it is not tried again:
// errCompactionsFailing (the caller ends the run). Any other error is a
// failed write, which stops the run.
func (x *execution) compactNow(ctx context.Context, st agentd.RunState, step *agentd.Step, msgs []llm.Message) (_ agentd.RunState, _ []llm.Message, compacted bool, _ error) {
	covered, coversTo, ok := compact.Cut(st.Messages, st.Compaction)
	if !ok {
		return st, msgs, false, nil
	}
	if st.CompactionFailures >= maxCompactionFailures {
		return st, msgs, false, errCompactionsFailing
	}
	before := compact.EstimateRequest(msgs)
	started := time.Now()
	req := llm.Request{Model: stepModel(st, step), Messages: []llm.Message{
		llm.TextMessage(llm.RoleSystem, compact.Instructions),
		llm.TextMessage(llm.RoleUser, compact.TranscriptWithin(st.Compaction, covered, x.summaryRoom(st))),
	}, IdleTimeout: time.Duration(st.Run.Params.Timeouts.IdleMS) * time.Millisecond}
	resp, err := x.summarize(ctx, st, step, &req)
	if err == nil && resp.Text == "" {
		err = errors.New("the model wrote an empty summary")
	}
	if err != nil {
		if ctx.Err() != nil {
			return st, msgs, false, nil // the step's context ended: the model phase sees it
		}
		x.log.Warn("compaction failed; the step goes on uncompacted", "error", err, "tokens", before,
			"failures_in_a_row", st.CompactionFailures+1)
		if werr := x.write(x.durable(), nil, persist.CompactionFailed{ConversationID: st.Run.ConversationID}); werr != nil {
			return st, msgs, false, werr
		}
		st.CompactionFailures++
		return st, msgs, false, nil
	}
	x.countTokens(resp.Usage)
	summary, _ := clean.Text(resp.Text)
	c := agentd.Compaction{ID: agentd.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID, StepID: step.ID,
		CoversToSeq: coversTo, MessagesCovered: len(covered), Summary: summary, TokensBefore: before,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}
	next := st
	next.Compaction = &c
	next.CompactionFailures = 0
	nextMsgs := buildMessages(next)
	c.TokensAfter = compact.EstimateRequest(nextMsgs)
	// A conversation's compactions each cover further: the n of the
	// call's ledger row is what its compaction covers to.
	ledger := x.ledgerRow(st, step, agentd.ModelCallCompaction, coversTo, modelCall{model: req.Model, usage: resp.Usage})
	err = x.write(x.durable(), []agentd.EventIn{agentd.EventOf(step.Seq, agentd.ContextCompactedData{CompactionID: c.ID,
		CoversToSeq: c.CoversToSeq, MessagesCovered: c.MessagesCovered, TokensAfter: c.TokensAfter, TokensBefore: c.TokensBefore})},
		x.released([]persist.Op{persist.CompactionInsert{Compaction: c},
			persist.StepUpdate{ID: step.ID, Status: agentd.StepRunning, Usage: usageOf(resp.Usage)}, ledger})...)
	if err != nil {
		return st, msgs, false, err
	}
	x.counted([]persist.Op{ledger})
	x.log.Info("conversation compacted", "tokens_before", c.TokensBefore, "tokens_after", c.TokensAfter,
		"messages_covered", c.MessagesCovered, "duration", time.Since(started).String())
	return next, nextMsgs, true, nil
}

// overflowEnd is the end of a run whose conversation does not fit its
// model: err is the model's refusal (nil when compactions kept failing),
// tokens the request's estimate.
func (x *execution) overflowEnd(st agentd.RunState, err error, tokens int) runEnd {
	var runErr *agentd.ErrorDetail
	if err != nil {
		runErr = modelError(err)
	} else {
		runErr = &agentd.ErrorDetail{Kind: agentd.ModelErrContextOverflow, Message: fmt.Sprintf(
			"the conversation is too long for the model, and its last %d compactions failed: no further one is tried until a later run's succeeds",
			maxCompactionFailures)}
	}
	if x.d.profiles != nil {
		if w := x.d.profiles.For(st.Run.Model).ContextWindow; w > 0 {
			runErr.Message += fmt.Sprintf(" (the request was about %d tokens; the window of %s is %d, so about %d over)",
				tokens, st.Run.Model, w, max(0, tokens-w))
		}
	}
	return endOf(agentd.StatusFailed, agentd.ReasonContextOverflow, runErr)
}

// summaryRoom is how many tokens a compaction's transcript may take: the
// model's window less its answer's reserve, the instructions and a margin
// for the estimate; 0 when the window is not known.
func (x *execution) summaryRoom(st agentd.RunState) int {
	if x.d.profiles == nil {
		return 0
	}
	prof := x.d.profiles.For(st.Run.Model)
	if prof.ContextWindow <= 0 {
		return 0
	}
	room := prof.ContextWindow - prof.MaxOutputTokens - compact.EstimateTokens(len(compact.Instructions))
	return max(room*9/10, 1)
}
