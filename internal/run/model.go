package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"
)

// modelPhase asks the model for a step's output and commits it: the
// assistant message with its planned tool calls (the step goes on to its
// tools), or the final answer with the run's end. reask says that the step
// was asked before and its output never committed: what was streamed for
// it is retracted first.
func (x *execution) modelPhase(st agentd.RunState, step *agentd.Step, reask bool) (done bool, err error) {
	started := time.Now()
	ctx, cancel := x.stepContext(st)
	defer cancel()
	if err := x.beginModel(&st, step, reask); err != nil {
		return true, x.stopFor(st, err)
	}
	st, msgs, err := x.compactIfNeeded(ctx, st, step)
	if errors.Is(err, errCompactionsFailing) {
		return true, x.end(st, step, x.overflowEnd(st, nil, compact.EstimateRequest(msgs)))
	}
	if err != nil {
		return true, x.stopFor(st, err)
	}
	reactive := false // a compaction after the model said the request was too long
	req := x.stepRequest(st, step, msgs)
	// An answer cut at the model's output limit (finish_reason length) is
	// continued: the model is sent what it wrote so far and asked to go on,
	// at most maxContinuations times; the parts make one message. One cut
	// at the run's own max_output_tokens is not: the client asked for that
	// cap, and the run ends completed with reason max_output_tokens.
	continues := st.Run.Params.Sampling.MaxOutputTokens <= 0
	var cont continuation
	for attempt := 1; ; attempt++ {
		co := newCoalescer(x, step.Seq, x.d.limits.deltaWindow, x.d.limits.deltaMaxBytes, x.d.store.DeferTicks() > 0)
		resp, err := x.callModel(ctx, st, step.Seq, req, co, x.callCost(cont.calls))
		co.stop()
		if err == nil {
			x.d.m.ModelRequests.WithLabelValues("ok").Inc()
			x.countTokens(resp.Usage)
			x.sent.record(st, req.Messages, resp.Usage.InputTokens)
			cont.calls = append(cont.calls, x.answered(step, req.Model, resp.Usage))
			x.answerTokens = max(x.answerTokens, resp.Usage.OutputTokens)
			if resp.FinishReason == llm.FinishLength && len(resp.ToolCalls) == 0 && continues && cont.n < maxContinuations {
				if err := x.continueAnswer(step, co, &cont, resp); err != nil {
					return true, x.stopFor(st, err)
				}
				req.Messages = append(msgs[:len(msgs):len(msgs)],
					llm.TextMessage(llm.RoleAssistant, cont.text), llm.TextMessage(llm.RoleSystem, continuePrompt))
				attempt = 0
				continue
			}
			resp = cont.merge(resp)
			return x.commitModelOutput(st, step, modelOutput{resp: resp, tail: co.pending(), started: started, calls: cont.calls})
		}
		if errors.Is(err, errInputNow) && ctx.Err() == nil {
			// Input sent with when: now cut the call: what it streamed is
			// retracted, and the step is asked again with the input.
			if st, msgs, req, err = x.steeredNow(ctx, st, step, co); err != nil {
				return true, x.stopFor(st, err)
			}
			cont, attempt = continuation{}, 0
			continue
		}
		if retry, err := x.tooLong(ctx, &st, step, &req, co, &reactive, err); retry || err != nil {
			if err != nil {
				return true, ended(err)
			}
			continue
		}
		model := req.Model
		retry, done, err := x.modelFailed(ctx, st, step, modelFailure{err: err, attempt: attempt, co: co, req: &req})
		if retry && req.Model != model {
			attempt = 0 // the next model of the chain has its own attempts
		}
		if retry && co.sent > 0 && cont.n > 0 {
			// The step's text was retracted: the whole answer is asked again.
			cont, req.Messages = continuation{}, msgs
		}
		if !retry {
			return done, err
		}
	}
}

// tooLong handles a call of step that failed with err, when the model
// refused it as too long (else it does nothing): the first time
// (*reactive false), with compaction on, the step's context is compacted
// and retry says to ask once more; otherwise the run ends, and err is
// what its end returned.
func (x *execution) tooLong(ctx context.Context, st *agentd.RunState, step *agentd.Step, req *llm.Request, co *coalescer,
	reactive *bool, err error) (retry bool, _ error) {
	var me *llm.Error
	if !errors.As(err, &me) || me.Kind != llm.KindContextOverflow || ctx.Err() != nil || co.sent != 0 {
		return false, nil
	}
	x.d.m.ModelRequests.WithLabelValues(string(me.Kind)).Inc()
	if !*reactive {
		*reactive = true
		again, err := x.overflowed(ctx, st, step, req)
		if again || err != nil {
			return again, err
		}
	}
	if err := x.end(*st, step, x.overflowEnd(*st, me, compact.EstimateRequest(req.Messages))); err != nil {
		return false, err
	}
	return false, errEnded
}

// errEnded says that a helper of the model phase ended the run (its end
// returned nil): the phase is done.
var errEnded = errors.New("the run ended")

// ended is the model phase's error err, where errEnded is none.
func ended(err error) error {
	if errors.Is(err, errEnded) {
		return nil
	}
	return err
}

// overflowed handles a call of step that the model refused as too long:
// with compaction on, the step's context is compacted and
// again says to ask once more, with req's messages compacted; an error
// is the run's stop.
func (x *execution) overflowed(ctx context.Context, st *agentd.RunState, step *agentd.Step, req *llm.Request) (again bool, err error) {
	if x.d.profiles == nil || st.Run.Params.NoCompaction {
		return false, nil
	}
	// The model's window is smaller than its profile said, or the
	// estimate was short: compact now, and ask once more.
	next, nextMsgs, compacted, cerr := x.compactNow(ctx, *st, step, req.Messages)
	if cerr != nil && !errors.Is(cerr, errCompactionsFailing) {
		return false, x.stopFor(*st, cerr)
	}
	if compacted {
		*st, req.Messages, req.CacheBreakpoints = next, nextMsgs, stableBreakpoints(nextMsgs)
	}
	return compacted, nil
}

// beginModel begins the model phase of step: what was streamed of it is
// retracted when it is asked again (reask), and the run's pending inputs
// are applied.
func (x *execution) beginModel(st *agentd.RunState, step *agentd.Step, reask bool) error {
	if reask {
		if err := x.write(x.ctx, []agentd.EventIn{agentd.EventOf(step.Seq, agentd.StepRetractedData{Reason: agentd.RetractedRecovered})},
			persist.StepReask{ID: step.ID, Transition: agentd.TransitionResumed}); err != nil {
			return err
		}
	}
	return x.applyInputs(st, step)
}

// continueAnswer keeps the part of an answer cut at the model's output
// limit, to ask the model to go on: what was streamed of it and not yet
// committed is committed first, so that the continuation's text follows
// it.
func (x *execution) continueAnswer(step *agentd.Step, co *coalescer, cont *continuation, resp llm.Response) error {
	if tail := co.pending(); tail != "" {
		if err := x.write(x.ctx, []agentd.EventIn{agentd.EventOf(step.Seq, agentd.MessageDeltaData{Text: tail})}); err != nil {
			return err
		}
	}
	cont.add(resp)
	return nil
}

// stepModel is the model a step's calls go to: the fallback it moved to,
// or the run's model.
func stepModel(st agentd.RunState, step *agentd.Step) string {
	return cmp.Or(step.Model, st.Run.Model)
}

// nextModel is the model of run st's chain after model; "" when model is
// the last (or not in the chain).
func nextModel(st agentd.RunState, model string) string {
	chain := st.Run.Models()
	if i := slices.Index(chain, model); i >= 0 && i+1 < len(chain) {
		return chain[i+1]
	}
	return ""
}

// stepRequest is the model request of step of run st, over msgs.
func (x *execution) stepRequest(st agentd.RunState, step *agentd.Step, msgs []llm.Message) llm.Request {
	return llm.Request{Model: stepModel(st, step), Messages: msgs, CacheBreakpoints: stableBreakpoints(msgs), Thinking: st.Run.Params.Thinking,
		Tools: x.offered(st.Run.Params), CacheKey: cmp.Or(st.Run.Params.CacheKey, st.Run.ConversationID),
		IdleTimeout: time.Duration(st.Run.Params.Timeouts.IdleMS) * time.Millisecond, Sampling: stepSampling(st)}
}

// modelFailure is a failed model call of a step: its error, which attempt
// it was, and the coalescer of its text.
type modelFailure struct {
	err     error
	attempt int
	co      *coalescer
	req     *llm.Request // a fallback moves it to the next model
}

// modelFailed decides what a failed model call leads to: another attempt
// after a backoff (retry), or the run's end, or its stop for the run's
// context (done, with what the end returned).
func (x *execution) modelFailed(ctx context.Context, st agentd.RunState, step *agentd.Step, f modelFailure) (retry, done bool, err error) {
	var be *agentd.BudgetError
	var re budgetReadError
	switch {
	case errors.As(f.err, &be):
		// No call was made: the budget was spent before it.
		x.log.WarnContext(x.ctx, "a budget is spent; the run fails", "budget", be.Budget, "limit", be.Limit, "spent", be.Spent)
		detail := be.Detail()
		return false, true, x.end(st, step, endOf(agentd.StatusFailed, agentd.ReasonBudgetExceeded, &detail))
	case errors.As(f.err, &re):
		return false, true, x.stopFor(st, re.err)
	}
	kind := "error"
	var me *llm.Error
	if errors.As(f.err, &me) {
		kind = string(me.Kind)
	}
	x.d.m.ModelRequests.WithLabelValues(kind).Inc()
	switch {
	case f.co.failed != nil:
		return false, true, x.stopFor(st, f.co.failed)
	case x.interrupted.Load() && x.ctx.Err() == nil:
		return false, true, x.end(st, step, endOf(agentd.StatusInterrupted, agentd.ReasonInterrupted, nil))
	case ctx.Err() != nil:
		return false, true, x.stepEnded(ctx, st, step, f.err)
	case llm.IsRetryable(f.err) && f.attempt >= x.d.limits.modelAttempts && nextModel(st, f.req.Model) != "":
		return x.fallBack(st, step, f)
	case !llm.IsRetryable(f.err) || f.attempt >= x.d.limits.modelAttempts:
		reason := agentd.ReasonModelError
		if me != nil && me.Kind == llm.KindContextOverflow {
			reason = agentd.ReasonContextOverflow
		}
		runErr := modelError(f.err)
		// Logged once, as the run fails, with what the provider said (each
		// retry before it logged its own error).
		x.log.WarnContext(x.ctx, "model call failed; the run fails", "attempts", f.attempt, "kind", runErr.Kind,
			"status", runErr.Status, "code", runErr.ProviderCode, "type", runErr.ProviderType, "message", runErr.Message)
		return false, true, x.end(st, step, endOf(agentd.StatusFailed, reason, runErr))
	}
	var asked time.Duration // the server's Retry-After
	if me != nil {
		asked = me.RetryAfter
	}
	wait := retryWait(x.d.limits.modelBackoff, f.attempt, asked, rand.Int64N)
	x.log.Warn("model call failed; retrying", "attempt", f.attempt, "error", f.err, "wait", wait)
	var evs []agentd.EventIn
	if f.co.sent > 0 {
		evs = append(evs, agentd.EventOf(step.Seq, agentd.StepRetractedData{Reason: agentd.RetractedModelRetry}))
	}
	if err := x.write(x.ctx, evs, persist.StepReask{ID: step.ID, Transition: agentd.TransitionModelRetry}); err != nil {
		return false, true, x.stopFor(st, err)
	}
	select {
	case <-time.After(wait):
		return true, false, nil
	case <-ctx.Done():
		return false, true, x.stepEnded(ctx, st, step, nil)
	}
}

// fallBack moves a step whose model kept failing with a retryable error
// to the next model of its run's chain: the step's row keeps the choice
// (a takeover asks the same model), a step.model_fallback event says why,
// and what was streamed of the failed calls is retracted. The next model
// is asked at once: its server is not the one that failed.
func (x *execution) fallBack(st agentd.RunState, step *agentd.Step, f modelFailure) (retry, done bool, err error) {
	from, to := f.req.Model, nextModel(st, f.req.Model)
	runErr := modelError(f.err)
	x.log.WarnContext(x.ctx, "model call failed; falling back", "from", from, "to", to, "attempts", f.attempt,
		"kind", runErr.Kind, "status", runErr.Status, "message", runErr.Message)
	var evs []agentd.EventIn
	if f.co.sent > 0 {
		evs = append(evs, agentd.EventOf(step.Seq, agentd.StepRetractedData{Reason: agentd.RetractedModelRetry}))
	}
	evs = append(evs, agentd.EventOf(step.Seq, agentd.ModelFallbackData{From: from, To: to, Attempts: f.attempt, Error: runErr}))
	if err := x.write(x.ctx, evs, persist.StepFallback{ID: step.ID, Model: to}); err != nil {
		return false, true, x.stopFor(st, err)
	}
	x.d.m.ModelFallbacks.WithLabelValues(x.metricModel(from), x.metricModel(to)).Inc()
	step.Model, f.req.Model = to, to
	x.fellBack = fallback{step: step.ID, seq: step.Seq, from: from, to: to, reason: string(runErr.Kind)}
	return true, false, nil
}

// Bounds of the wait between model attempts.
const (
	// maxModelBackoff caps the backoff: past it, doubling only holds a
	// run back.
	maxModelBackoff = 30 * time.Second
	// maxRetryAfterWait is the longest Retry-After honoured: a server that
	// asks for more is tried again after this long (the attempts are
	// bounded, so a refusal again ends the run), rather than holding the
	// run for as long as it says.
	maxRetryAfterWait = 2 * time.Minute
)

// retryWait is how long to wait after the attempt-th model call (from 1)
// failed, before the next: the backoff, base doubling with each attempt up
// to maxModelBackoff, with equal jitter (its first half fixed, the second
// random), and never less than retryAfter, the server's Retry-After, up to
// maxRetryAfterWait. intn(n) returns a random integer in [0, n), as
// rand.Int64N does.
//
// The jitter spreads the retries of runs that failed together (a
// provider's outage fails every run in flight at once), so that they do
// not come back together; it is equal jitter rather than full jitter
// (anywhere from 0 to the backoff) because a run has few attempts, and a
// retry sent at once, to a server that failed a moment ago, is most often
// an attempt lost.
func retryWait(base time.Duration, attempt int, retryAfter time.Duration, intn func(n int64) int64) time.Duration {
	backoff := max(base, 0)
	for i := 1; i < attempt && backoff < maxModelBackoff; i++ {
		backoff *= 2
	}
	backoff = min(backoff, maxModelBackoff)
	half := backoff / 2
	wait := backoff - half + time.Duration(intn(int64(half)+1))
	return max(wait, min(retryAfter, maxRetryAfterWait))
}

// stepEnded ends the run whose step context ctx ended: a step timeout ends
// it timed out; the run's own context ending stops it for its cause.
func (x *execution) stepEnded(ctx context.Context, st agentd.RunState, step *agentd.Step, err error) error {
	if errors.Is(context.Cause(ctx), ErrStepDeadline) && x.ctx.Err() == nil {
		return x.end(st, step, stepTimedOut())
	}
	return x.stopFor(st, err)
}

// maxModelDetail caps the text of a model error that is not the provider's
// (a transport error's); maxProviderCode caps the provider's code and type.
const (
	maxModelDetail  = 300
	maxProviderCode = 100
)

// modelError is the run's error for a final model failure: its kind, what
// the provider said (status, code, type, message), and a message that says
// what happened in a user's words, with the provider's message (or, for a
// failure without one, what went wrong) after a colon.
func modelError(err error) *agentd.ErrorDetail {
	var me *llm.Error
	if !errors.As(err, &me) {
		return &agentd.ErrorDetail{Kind: agentd.ModelErrUnclassified, Message: "the model call failed"}
	}
	e := &agentd.ErrorDetail{Kind: modelErrorKind(me.Kind)}
	if me.Status >= 400 { // an error inside a 200 stream has no status of its own
		e.Status = me.Status
	}
	// llm's adapter caps and scrubs these; another Model may not.
	e.ProviderCode = cutText(me.Code, maxProviderCode)
	e.ProviderType = cutText(me.Type, maxProviderCode)
	e.ProviderMessage = cutText(me.Message, llm.MaxMessageBytes)
	var status string // " (503 Service Unavailable)"
	if e.Status != 0 {
		status = fmt.Sprintf(" (%d %s)", e.Status, http.StatusText(e.Status))
	}
	detail := e.ProviderMessage
	var lead string
	switch me.Kind {
	case llm.KindRateLimited:
		lead = "the model kept rate-limiting the request" + status
	case llm.KindServer:
		lead = "the model's server kept failing" + status
	case llm.KindConnection, llm.KindIdle:
		lead = "the connection to the model kept failing"
		if detail == "" && me.Err != nil {
			detail = cutText(me.Err.Error(), maxModelDetail)
		}
	case llm.KindAuth:
		lead = "the model's endpoint refused the API key"
		if e.Status != 0 {
			lead += fmt.Sprintf(" (%d)", e.Status)
		}
	case llm.KindContextOverflow:
		lead = "the conversation is too long for the model"
	case llm.KindBadRequest:
		if e.Status != 0 {
			// A 404 here is most often a base URL without its /v1; the
			// provider's message names the path it was asked for.
			lead = fmt.Sprintf("the model's endpoint answered %d %s", e.Status, http.StatusText(e.Status))
		} else {
			lead = "the request to the model could not be made"
			if detail == "" && me.Err != nil {
				detail = cutText(me.Err.Error(), maxModelDetail)
			}
		}
	default:
		lead = "the model call failed"
	}
	if detail == "" {
		e.Message = lead
	} else {
		e.Message = lead + ": " + detail
	}
	return e
}

// cutText returns s storable and cut to at most n bytes, on a rune
// boundary, ending with "…" when it was cut.
func cutText(s string, n int) string {
	s, _ = clean.Text(s)
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// callModel makes a step's model call, once the run's budgets allow it
// (an *agentd.BudgetError, or a budgetReadError, when they do not); pending
// is what the step's calls that answered before it cost, which the
// run's hold on its tenant's budget keeps until their ledger rows commit.
func (x *execution) callModel(ctx context.Context, st agentd.RunState, step int, req llm.Request, co *coalescer, pending float64) (_ llm.Response, err error) {
	if err := x.holdBudget(ctx, st, req, x.sent.estimate(st, req.Messages), pending); err != nil {
		var be *agentd.BudgetError
		if !errors.As(err, &be) {
			err = budgetReadError{err}
		}
		return llm.Response{}, err
	}
	ctx, span := x.chatSpan(ctx, step, req)
	var resp llm.Response
	defer func() { endChatSpan(span, req, resp, err, x.d.traceContent) }()
	sent := time.Now()
	first := true
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	x.modelMu.Lock()
	x.modelCancel = cancel
	x.modelMu.Unlock()
	defer func() {
		x.modelMu.Lock()
		x.modelCancel = nil
		x.modelMu.Unlock()
	}()
	if x.interrupted.Load() {
		cancel(ErrInterruptRequested)
	}
	resp, err = x.d.model.Stream(ctx, req, func(text string) {
		if first {
			first = false
			x.d.m.TimeToFirstTok.Observe(time.Since(sent).Seconds())
		}
		co.add(text)
	})
	if errors.Is(context.Cause(ctx), errInputNow) {
		// Cut for input sent with when: now; a stream cut between two
		// chunks may read as ended, which is no answer either.
		return llm.Response{}, errInputNow
	}
	return resp, err
}

func (x *execution) countTokens(u llm.Usage) {
	x.d.m.Tokens.WithLabelValues("input").Add(float64(u.InputTokens))
	x.d.m.Tokens.WithLabelValues("output").Add(float64(u.OutputTokens))
	x.d.m.Tokens.WithLabelValues("cached_input").Add(float64(u.CachedInputTokens))
	x.d.m.Tokens.WithLabelValues("reasoning").Add(float64(u.ReasoningTokens))
}

// offered returns the tool specs offered to the model: the run's list, or
// all (a list of any tool brings read_artifact with it), then the run's
// client tools.
func (x *execution) offered(p agentd.RunParams) []llm.ToolSpec {
	names := p.Tools
	var specs []tools.Spec
	if names == nil {
		for _, s := range x.tools().List() {
			if !agentd.IsMemoryTool(s.Name) {
				specs = append(specs, s)
			}
		}
	} else {
		reader := false
		for _, n := range names {
			if t, ok := x.tools().Get(n); ok && !agentd.IsMemoryTool(n) {
				specs = append(specs, t.Spec())
				reader = reader || n == tools.ReadArtifactName
			}
		}
		// A run that may call tools may read what they returned.
		if t, ok := x.tools().Get(tools.ReadArtifactName); ok && !reader && len(specs) > 0 {
			specs = append(specs, t.Spec())
		}
	}
	out := make([]llm.ToolSpec, len(specs), len(specs)+len(p.ClientTools))
	for i, s := range specs {
		out[i] = llm.ToolSpec{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	for _, t := range p.ClientTools {
		out = append(out, llm.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	out = append(out, x.memoryTools(p)...)
	return append(out, subAgentTools(p)...)
}

// memoryTools are the memory tools the run's memory offers it, each told
// the namespaces it reaches.
func (x *execution) memoryTools(p agentd.RunParams) []llm.ToolSpec {
	var out []llm.ToolSpec
	for _, name := range []string{agentd.MemorySearchTool, agentd.MemoryWriteTool, agentd.MemoryDeleteTool} {
		t, ok := x.tools().Get(name)
		if !ok || !p.Memory.Offers(name) {
			continue
		}
		s := t.Spec()
		out = append(out, llm.ToolSpec{Name: s.Name, Description: s.Description + " " + p.Memory.Reach(name),
			Parameters: s.Parameters})
	}
	return out
}

// samplingOf is a run's sampling as the model port takes it.
func samplingOf(s agentd.Sampling) llm.Sampling {
	out := llm.Sampling{MaxOutputTokens: s.MaxOutputTokens, Temperature: s.Temperature, TopP: s.TopP,
		ParallelToolCalls: s.ParallelToolCalls, ReasoningEffort: s.ReasoningEffort}
	if f := s.Format; f != nil {
		out.Format = &llm.OutputFormat{Type: f.Type, Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}
	}
	if c := s.ToolChoice; c != nil {
		out.ToolChoice = &llm.ToolChoice{Mode: c.Mode, Name: c.Name}
	}
	return out
}

// stepSampling is the sampling of a model call of st's run: a tool choice
// that forces a call only until the model has answered once in the run.
func stepSampling(st agentd.RunState) llm.Sampling {
	s := st.Run.Params.Sampling
	if s.ToolChoice.Forces() && answered(st) {
		s.ToolChoice = nil
	}
	return samplingOf(s)
}

// answered reports whether the run's model has answered in it: an
// assistant message of the run is committed.
func answered(st agentd.RunState) bool {
	// The run's messages are the conversation's last ones.
	for i := len(st.Messages) - 1; i >= 0 && st.Messages[i].RunID == st.Run.ID; i-- {
		if st.Messages[i].Role == agentd.RoleAssistant {
			return true
		}
	}
	return false
}

func usageOf(u llm.Usage) agentd.Usage {
	return agentd.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningTokens}
}

// modelOutput is what a step's model call gave: its response, the text not
// yet committed as deltas, when the step's model phase started, and the
// calls that answered (the ledger's rows).
type modelOutput struct {
	resp    llm.Response
	tail    string
	started time.Time
	calls   []modelCall
}

// budgetReadError is a failed read of a run's budgets: the run stops for
// it, as for a failed write.
type budgetReadError struct{ err error }

func (e budgetReadError) Error() string { return "read the run's budgets: " + e.err.Error() }

// answered is the call of step to model that answered with usage; the
// first model it fell back to in the step, if it did, and why.
func (x *execution) answered(step *agentd.Step, model string, usage llm.Usage) modelCall {
	c := modelCall{model: model, usage: usage}
	if f := x.fellBack; f.step == step.ID && f.to == model {
		c.fallbackFrom, c.fallbackReason = f.from, f.reason
	}
	return c
}

// commitModelOutput commits a step's model output in one transaction: with
// the run's end when the model called no tool (or the calls may not be
// made), else with the step's planned tool calls.
func (x *execution) commitModelOutput(st agentd.RunState, step *agentd.Step, out modelOutput) (done bool, err error) {
	resp := cleanResponse(out.resp)
	finish, usage := finishOf(resp.FinishReason), usageOf(resp.Usage)
	msg, evs := outputMessage(st, step.Seq, resp, out.tail, finish, usage)
	ledger := x.ledgerRows(st, step, out.calls)
	ops := append([]persist.Op{msg}, ledger...)
	if len(resp.ToolCalls) == 0 {
		evs = append(evs, agentd.EventOf(step.Seq, agentd.StepCompletedData{FinishReason: finish}))
		x.d.m.StepDuration.Observe(time.Since(out.started).Seconds())
		output, e := stepOutput{finish, usage, ops, evs}, answerEnd(resp.FinishReason)
		if e.answer {
			if limit := x.onAnswer(st, step, resp.Text); limit != nil {
				e = *limit
			}
		}
		err := x.endWithOutput(st, step, e, output)
		if errors.Is(err, agentd.ErrInputsChanged) && e.answer {
			// Input is pending: the run goes on with it.
			done, err := x.answerThenInputs(st, step, output)
			return done, x.counting(ledger, err)
		}
		return true, x.counting(ledger, err)
	}
	refused, err := x.callsRefused(st, resp.ToolCalls)
	if err != nil {
		return true, x.stopFor(st, err)
	}
	if refused != nil {
		// The model's answer is kept, the calls are not made, and the run
		// ends.
		return true, x.counting(ledger, x.endWithOutput(st, step, *refused, stepOutput{finish, usage, ops, evs}))
	}
	ops = append(ops, persist.StepUpdate{ID: step.ID, Status: agentd.StepActing, FinishReason: finish, Usage: usage})
	plan := x.planCalls(st, step, resp.ToolCalls)
	if err := x.write(x.durable(), append(evs, plan.evs...), append(ops, plan.ops...)...); err != nil {
		return true, x.stopFor(st, err)
	}
	x.counted(ledger)
	x.started.set(plan.begun)
	acting := *step
	acting.Status, acting.FinishReason, acting.Usage = agentd.StepActing, finish, acting.Usage.Add(usage)
	setStep(&st, acting)
	appendMessage(&st, msg)
	st.Run.Usage = st.Run.Usage.Add(usage)
	st.Calls, st.Attempts = plan.calls, nil
	st.CallCount += len(plan.calls)
	x.carry(st)
	return false, nil
}

// reasoningParts are blocks of a model's thinking as message parts.
func reasoningParts(blocks []llm.ReasoningBlock) []agentd.Part {
	parts := make([]agentd.Part, 0, len(blocks))
	for _, b := range blocks {
		p := agentd.Part{Type: agentd.PartReasoning, Text: b.Text, Signature: b.Signature, Data: b.Data}
		parts = append(parts, p)
	}
	return parts
}

// outputMessage is the assistant message of a step's model output, and
// its events: the text not yet sent as deltas (tail), and
// message.completed.
func outputMessage(st agentd.RunState, step int, resp llm.Response, tail string, finish agentd.FinishReason,
	usage agentd.Usage) (persist.MessageInsert, []agentd.EventIn) {
	var evs []agentd.EventIn
	if tail != "" {
		evs = append(evs, agentd.EventOf(step, agentd.MessageDeltaData{Text: tail}))
	}
	// The model's thinking goes first, as it came: it is sent back with
	// the message (buildMessages), and no one shows it as the answer.
	parts := reasoningParts(resp.Reasoning)
	if resp.Text != "" {
		parts = append(parts, agentd.Part{Type: agentd.PartText, Text: resp.Text})
	}
	for _, c := range resp.ToolCalls {
		parts = append(parts, agentd.Part{Type: agentd.PartToolCall, ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	if len(parts) == len(resp.Reasoning) && resp.Text == "" {
		parts = append(parts, agentd.Part{Type: agentd.PartText, Text: ""})
	}
	msg := persist.MessageInsert{ID: agentd.NewID(), ConversationID: st.Run.ConversationID, RunID: st.Run.ID,
		Role: agentd.RoleAssistant, Content: parts, Status: agentd.MessageCompleted}
	evs = append(evs, agentd.EventOf(step, agentd.MessageCompletedData{Content: parts, FinishReason: finish,
		MessageID: msg.ID, Role: agentd.RoleAssistant, Usage: usage}))
	return msg, evs
}

// stepOutput is what the write of a step's model output commits: the
// step's finish reason and usage, and the rows and events of its output.
type stepOutput struct {
	finish agentd.FinishReason
	usage  agentd.Usage
	ops    []persist.Op
	evs    []agentd.EventIn
}

// endWithOutput ends the run with e in the write that commits its step's
// output, completing the step.
func (x *execution) endWithOutput(st agentd.RunState, step *agentd.Step, e runEnd, out stepOutput) error {
	e.ops = append(out.ops, persist.StepUpdate{ID: step.ID, Status: agentd.StepCompleted,
		FinishReason: out.finish, Usage: out.usage, Finished: true})
	e.evs = out.evs
	final := *step
	final.Status = agentd.StepCompleted
	return x.end(st, &final, e)
}

// answerEnd is the end of a run whose model gave its final answer, by why
// the model ended it.
func answerEnd(f llm.FinishReason) runEnd {
	switch f {
	case llm.FinishLength:
		// Still cut after its continuations, or cut at the run's own
		// max_output_tokens.
		e := endOf(agentd.StatusCompleted, agentd.ReasonMaxOutputTokens, nil)
		e.answer = true
		return e
	case llm.FinishContentFilter:
		return endOf(agentd.StatusFailed, agentd.ReasonContentFilter, &agentd.ErrorDetail{Kind: agentd.RunErrContentFilter,
			Message: "the model's content filter stopped its answer"})
	}
	e := endOf(agentd.StatusCompleted, agentd.ReasonCompleted, nil)
	e.answer = true
	return e
}

// callsRefused is the end of a run whose model asked for calls it may not
// make: past the run's calls (tool_limit), or stuck on a call (loopGuard);
// nil when the calls may be made.
func (x *execution) callsRefused(st agentd.RunState, asked []llm.ToolCall) (*runEnd, error) {
	if st.CallCount >= x.d.limits.callsPerRun {
		e := endOf(agentd.StatusFailed, agentd.ReasonToolLimit, &agentd.ErrorDetail{Kind: agentd.RunErrToolLimit, Message: fmt.Sprintf(
			"the model asked for tool calls after the run made %d, as many as it may", st.CallCount)})
		return &e, nil
	}
	return x.loopGuard(st, asked)
}

// finishOf is the domain's finish reason of a model's: the same words,
// and none (the step records no reason) for one the adapter did not know.
func finishOf(f llm.FinishReason) agentd.FinishReason {
	switch f {
	case llm.FinishStop:
		return agentd.FinishStop
	case llm.FinishToolCalls:
		return agentd.FinishToolCalls
	case llm.FinishLength:
		return agentd.FinishLength
	case llm.FinishContentFilter:
		return agentd.FinishContentFilter
	}
	return ""
}

// cleanResponse makes what the model said storable (internal/clean): its
// text, and each tool call's id, name and arguments text. The arguments
// are also checked as JSON where they are planned.
func cleanResponse(resp llm.Response) llm.Response {
	resp.Text, _ = clean.Text(resp.Text)
	for i := range resp.ToolCalls { // the response is this step's own
		c := &resp.ToolCalls[i]
		c.ID, _ = clean.Text(c.ID)
		c.Name, _ = clean.Text(c.Name)
		c.Arguments, _ = clean.Text(c.Arguments)
	}
	return resp
}

// callPlan is the tool calls of a step's model output, as they are
// committed with it: their rows and events, and the first attempts
// committed with them (begun).
type callPlan struct {
	ops   []persist.Op
	evs   []agentd.EventIn
	calls []agentd.ToolCall
	begun map[string]prestart
}

// planCalls plans the tool calls the model asked for at step.
func (x *execution) planCalls(st agentd.RunState, step *agentd.Step, asked []llm.ToolCall) callPlan {
	// Calls past the step's cap, or the run's, are not planned:
	// completeStep tells the model they were not run.
	asked = asked[:max(0, min(len(asked), x.d.limits.callsPerStep, x.d.limits.callsPerRun-st.CallCount))]
	p := callPlan{calls: make([]agentd.ToolCall, 0, len(asked)), begun: map[string]prestart{}}
	var startEvs []agentd.EventIn
	for i, c := range asked {
		effect, status := agentd.EffectReadOnly, agentd.CallPlanned
		if _, ok := st.Run.Params.ClientTool(c.Name); ok {
			// The client runs it: what it does is its own.
			effect, status = agentd.EffectSideEffect, agentd.CallAwaitingClient
		} else if _, ok := st.Run.Params.SubAgent(c.Name); ok {
			// Its child run does the work, once (the call's key is the child's).
			effect, status = agentd.EffectSideEffect, agentd.CallAwaitingAgent
		} else if t, ok := x.tools().Get(c.Name); ok {
			effect = t.Spec().Effect
			if (t.Spec().NeedsApproval || slices.Contains(st.Run.Params.ApprovalTools, c.Name)) && offered(st.Run.Params, c.Name) {
				status = agentd.CallAwaitingApproval
			}
		}
		args, _, err := clean.JSON(json.RawMessage(c.Arguments))
		if err != nil {
			args, _ = json.Marshal(c.Arguments) // keep the model's text as a JSON string
		}
		key := fmt.Sprintf("%s:%d:%s", st.Run.ID, step.Seq, c.ID)
		call := persist.ToolCallInsert{ID: agentd.NewID(), RunID: st.Run.ID, StepID: step.ID, Position: i,
			CallID: c.ID, Name: c.Name, Arguments: args, IdempotencyKey: key, Effect: effect, Status: status}
		x.checkCall(st, &call)
		p.ops = append(p.ops, call)
		p.calls = append(p.calls, call.Call())
		p.evs = append(p.evs, agentd.EventOf(step.Seq, agentd.ToolCallCreatedData{Arguments: call.Arguments, CallID: c.ID, Effect: effect,
			IdempotencyKey: key, Name: c.Name, Policy: call.Policy, Status: call.Status, ToolCallID: call.ID}))
		if call.Status == agentd.CallFailed {
			p.evs = append(p.evs, agentd.EventOf(step.Seq, agentd.ToolCallCompletedData{CallID: c.ID, Error: call.Error, Name: c.Name,
				Status: agentd.CallFailed, ToolCallID: call.ID}))
		}
		if x.startsWithOutput(st, call) {
			// Its first attempt is committed with the model's output, so
			// the tool runs without a write of its own. Only for tools that
			// may run again: were the execution to die before invoking it,
			// the attempt found running would be made again.
			a := persist.AttemptStart{ID: agentd.NewID(), ToolCallID: call.ID, N: 1, Worker: x.fence.Worker, Epoch: x.fence.Epoch,
				ArgumentsSHA256: argumentsSum(call.Effect, call.Arguments)}
			p.ops = append(p.ops, a)
			startEvs = append(startEvs, agentd.EventOf(step.Seq, agentd.ToolAttemptStartedData{Attempt: 1, CallID: c.ID,
				Name: c.Name, ToolCallID: call.ID}))
			p.begun[call.ID] = prestart{attemptID: a.ID, callID: c.ID, name: c.Name, step: step.Seq, position: i}
			p.calls[i].Status, p.calls[i].Attempts = agentd.CallRunning, 1
		}
	}
	p.evs = append(p.evs, startEvs...)
	return p
}

// checkCall puts on a call it plans what is known of it before it runs:
// arguments that a client tool's schema refuses, or a sub-agent's call
// without a task or past the depth, fail it at once and go back to the
// model (not to the client, nor to a child); the operator's policy
// decides a call of a server tool.
func (x *execution) checkCall(st agentd.RunState, call *persist.ToolCallInsert) {
	var err error
	switch call.Status {
	case agentd.CallAwaitingClient:
		ct, _ := st.Run.Params.ClientTool(call.Name)
		err = tools.ValidateArgs(call.Name, ct.Parameters, call.Arguments)
	case agentd.CallAwaitingAgent:
		err = x.agentCallable(st, call.Name, call.Arguments)
	default:
		x.applyPolicy(st, call)
	}
	if err != nil {
		call.Status, call.Error = agentd.CallFailed, toolErrorData(err)
	}
}

// applyPolicy puts the operator's policy decision on a call it plans:
// denied, it fails at once with the reason (the model is told); requiring
// approval, it waits for one; allowed, maybe with other arguments. A
// decision of a policy is recorded on the call and its event.
func (x *execution) applyPolicy(st agentd.RunState, call *persist.ToolCallInsert) {
	if !x.tools().Hooked() {
		return
	}
	v := x.tools().Before(x.durable(), tools.HookCall{RunID: st.Run.ID, Tool: call.Name, Arguments: call.Arguments})
	if v.Arguments != nil {
		if args, _, err := clean.JSON(v.Arguments); err == nil {
			call.Arguments, v.Rewritten = args, true
		}
	}
	if v.Policy == "" && !v.Rewritten {
		return // no policy decided
	}
	call.Policy, _ = json.Marshal(v)
	switch v.Action {
	case tools.PolicyDeny:
		call.Status = agentd.CallFailed
		call.Error = &agentd.ErrorDetail{Kind: agentd.ToolErrPolicy, Message: v.Reason}
	case tools.PolicyRequireApproval:
		call.Status = agentd.CallAwaitingApproval
	}
}

// startsWithOutput reports whether a call's first attempt may be committed
// with the model's output: a valid call of a read_only or idempotent tool
// offered to the run, that needs no approval, in a run not interrupted.
func (x *execution) startsWithOutput(st agentd.RunState, c persist.ToolCallInsert) bool {
	if c.Status != agentd.CallPlanned || c.Effect == agentd.EffectSideEffect || x.interrupted.Load() {
		return false
	}
	if _, ok := x.tools().Get(c.Name); !ok || !offered(st.Run.Params, c.Name) {
		return false
	}
	return x.tools().Validate(c.Name, c.Arguments) == nil
}

// loopGuard ends a run whose model is stuck on a tool call (the same name
// and arguments), by the run's loop limits: when the last
// FailuresInARow such calls all failed, asking again ends it tool_error;
// asking for the IdenticalCalls-th time in the run ends it loop_detected.
// It returns nil when the calls may be made.
func (x *execution) loopGuard(st agentd.RunState, asked []llm.ToolCall) (*runEnd, error) {
	lim := st.Run.Params.LoopLimits.OrDefaults()
	if st.CallCount == 0 && lim.IdenticalCalls > 1 {
		return nil, nil // no earlier call to repeat: nothing to read
	}
	keys := make([]persist.CallKey, len(asked))
	for i, c := range asked {
		keys[i] = persist.CallKey{Name: c.Name, Arguments: c.Arguments}
	}
	reps, err := x.d.store.ToolCallRepeats(x.durable(), st.Run.ID, keys)
	if err != nil {
		// The guard is not worth stopping the run for: the step's write
		// that follows meets the database's trouble anyway.
		x.log.Warn("loop guard: read the run's earlier calls", "error", err)
		return nil, nil
	}
	for i, c := range asked {
		r := reps[i]
		if len(r.Latest) >= lim.FailuresInARow && !slices.ContainsFunc(r.Latest[:lim.FailuresInARow],
			func(s agentd.CallStatus) bool { return s != agentd.CallFailed }) {
			e := endOf(agentd.StatusFailed, agentd.ReasonToolError, &agentd.ErrorDetail{Kind: agentd.RunErrToolError, Message: fmt.Sprintf(
				"the model asked again for %s with the same arguments after the last %d such calls all failed", c.Name, lim.FailuresInARow)})
			return &e, nil
		}
		// Parallel calls of one response are not a loop: only the run's
		// earlier steps count.
		n := r.Count + 1
		if n >= lim.IdenticalCalls {
			e := endOf(agentd.StatusFailed, agentd.ReasonLoopDetected, &agentd.ErrorDetail{Kind: agentd.RunErrLoopDetected, Message: fmt.Sprintf(
				"the model asked for %s with the same arguments for the %d%s time in this run", c.Name, n, ordinal(n))})
			return &e, nil
		}
	}
	return nil, nil
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}

// maxContinuations is how many times an answer cut at the model's output
// limit is continued; one still cut after them ends the run completed
// with reason max_output_tokens (as does one cut at the run's own
// max_output_tokens, never continued).
const maxContinuations = 3

// continuePrompt asks the model to go on with an answer it was cut in.
const continuePrompt = "Your previous answer was cut at your output limit. Continue exactly where you stopped, without repeating anything."

// continuation is what the cut answers of a step gave so far, and the
// model calls that answered in the step (each a ledger row).
type continuation struct {
	n     int
	text  string
	usage llm.Usage
	calls []modelCall
}

// modelCall is one model call that answered: the model asked, the usage
// it reported, and the model the step fell back from to it, with why.
type modelCall struct {
	model                        string
	usage                        llm.Usage
	fallbackFrom, fallbackReason string
}

// fallback is a step's last fallback: from a model to the next, for a
// reason (the error kind of the model that kept failing).
type fallback struct {
	step, from, to, reason string
	seq                    int
}

func (c *continuation) add(r llm.Response) {
	c.n++
	c.text += r.Text
	c.usage = c.usage.Add(r.Usage)
}

// merge returns the last answer r with the text and usage of the earlier
// parts before its own.
func (c continuation) merge(r llm.Response) llm.Response {
	if c.n == 0 {
		return r
	}
	r.Text = c.text + r.Text
	r.Usage = c.usage.Add(r.Usage)
	return r
}

// modelErrorKind is the run error kind of a model failure of kind k.
func modelErrorKind(k llm.ErrorKind) agentd.ErrorKind {
	switch k {
	case llm.KindRateLimited:
		return agentd.ModelErrRateLimited
	case llm.KindServer:
		return agentd.ModelErrServer
	case llm.KindConnection:
		return agentd.ModelErrConnection
	case llm.KindIdle:
		return agentd.ModelErrIdle
	case llm.KindBadRequest:
		return agentd.ModelErrBadRequest
	case llm.KindAuth:
		return agentd.ModelErrAuth
	case llm.KindContextOverflow:
		return agentd.ModelErrContextOverflow
	case llm.KindCancelled:
		return agentd.ModelErrCancelled
	}
	return agentd.ModelErrUnclassified
}
