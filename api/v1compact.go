package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/responses"
	"github.com/agentd/agentd/internal/runspec"
)

// This file serves the Responses API's standalone compaction,
// POST /v1/responses/compact, from agentd's own compaction: the model the
// request names writes the summary in agentd's template, in a run of its
// own (counted, budgeted and routed as every run; not kept once it
// answered), and the answer is OpenAI's compacted response: the
// conversation's user messages, then one compaction item whose
// encrypted_content carries the summary (internal/responses/compaction.go).
// A later request that sends that item back in its input is sent the
// summary in its place.

// responseCompact answers POST /v1/responses/compact.
func (s *server) responseCompact(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	req, err := responses.DecodeCompact(body)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	h, err := req.History(s.itemResolver(ctx, tenant))
	if err != nil {
		return err
	}
	history, kept, err := s.compactPrevious(ctx, tenant, req)
	if err != nil {
		return err
	}
	if req.Instructions != nil && *req.Instructions != "" {
		history = append(history, agentd.Message{Role: agentd.RoleSystem, Status: agentd.MessageCompleted,
			Content: []agentd.Part{{Type: agentd.PartText, Text: *req.Instructions}}})
	}
	history = append(history, responses.TranscriptMessages(h.Messages)...)
	if len(history) == 0 && len(h.Summaries) == 0 {
		return fieldError("input", "holds nothing to compact")
	}
	run, summary, usage, err := s.summarize(w, ctx, req, h.Summaries, history)
	if err != nil {
		return err
	}
	out := responses.Compacted{ID: responses.ResponseID(run.ID), Object: responses.ObjectCompaction,
		CreatedAt: run.CreatedAt.Unix(), Usage: usage}
	for _, k := range append(kept, h.Kept...) {
		out.Output = append(out.Output, k)
	}
	out.Output = append(out.Output, responses.NewCompactionOutput(run.ID, summary, run.Model, time.Now()))
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// summarize runs the compaction of history (after the earlier summaries)
// with the request's model, and returns its run, the summary and the
// usage of its model calls. The run is deleted once it answered.
func (s *server) summarize(w http.ResponseWriter, ctx context.Context, req responses.CompactRequest, summaries []string,
	history []agentd.Message) (agentd.Run, string, responses.Usage, error) {
	model := s.compose.Defaults().Model
	if req.Model != nil {
		model = *req.Model
	}
	window, maxOutput := s.modelWindow(model)
	sr := responses.CompactSpec(model, window, maxOutput, summaries, history, req.PromptCacheKey)
	if req.Model == nil && model == "" {
		sr.Model = nil // runspec says that a model is needed
	}
	spec, err := s.compose.Build(ctx, TenantFromContext(ctx), sr, compose.Agent{})
	if fe := (*runspec.FieldError)(nil); errors.As(err, &fe) {
		return agentd.Run{}, "", responses.Usage{}, fieldError(compactParam(fe.Field), "%s", fe.Message)
	}
	if err != nil {
		return agentd.Run{}, "", responses.Usage{}, err
	}
	run, _, err := s.create(w, ctx, newRun(ctx, spec, "", ""))
	if err != nil {
		return run, "", responses.Usage{}, err
	}
	defer s.forgetUnstored(ctx, run)
	if run, err = s.awaitAnswer(ctx, run); err != nil {
		return run, "", responses.Usage{}, err
	}
	resp, err := s.response(ctx, run)
	if err != nil {
		return run, "", responses.Usage{}, err
	}
	summary, ok := responses.SummaryOf(resp)
	if resp.Status != responses.StatusCompleted || !ok {
		return run, "", responses.Usage{}, compactFailed(resp)
	}
	return run, summary, derefUsage(resp.Usage), nil
}

// compactParam is the field of a compaction request that a field of its
// run names: the model's, or the request's prompt_cache_key; the run's
// input is agentd's transcript, which stands for the request's input.
func compactParam(field string) string {
	switch field {
	case "model", "cache_key":
		return responses.Param(field)
	}
	return "input"
}

// compactFailed is the error of a compaction whose run did not answer
// with a summary (resp its response): the model's error, with OpenAI's
// status for it (400 for a conversation too long for the model, 429 for
// its rate limit), else 502, the model having failed.
func compactFailed(resp responses.Response) error {
	status, code := http.StatusBadGateway, "server_error"
	msg := fmt.Sprintf("the model did not write the compaction's summary: its response ended %s", resp.Status)
	if resp.IncompleteDetails != nil {
		msg += " (" + resp.IncompleteDetails.Reason + ")"
	}
	if e := resp.Error; e != nil {
		code, msg = e.Code, "the model did not write the compaction's summary: "+e.Message
		switch e.Code {
		case "context_length_exceeded":
			status = http.StatusBadRequest
		case "rate_limit_exceeded":
			status = http.StatusTooManyRequests
		}
	}
	return newError(status, code, "Compaction failed", msg)
}

// modelWindow is the context window and the output reserve, in tokens,
// that the models file gives model (0, 0: it gives none).
func (s *server) modelWindow(model string) (window, maxOutput int) {
	for _, m := range s.models {
		if m.ID == model {
			return m.ContextWindow, m.MaxOutputTokens
		}
	}
	return 0, 0
}

// compactPrevious is what a compaction request's previous_response_id
// stands for: the completed messages of that response's conversation, up
// to its last, and its user messages as the compacted output keeps them;
// nothing without one.
func (s *server) compactPrevious(ctx context.Context, tenant string, req responses.CompactRequest) ([]agentd.Message, []responses.Kept, error) {
	prev, err := req.PreviousRunID()
	if err != nil || prev == "" {
		return nil, nil, err
	}
	run, err := s.storedRun(ctx, tenant, prev)
	if errors.Is(err, agentd.ErrRunNotFound) {
		return nil, nil, v1NotFound("previous_response_id", "Previous response", *req.PreviousResponseID)
	}
	if err != nil {
		return nil, nil, err
	}
	if !run.Status.Terminal() && run.Status != agentd.StatusRequiresAction {
		return nil, nil, fieldError("previous_response_id", "the response is %s: compact it once it ended", responses.StatusOf(run))
	}
	var msgs []agentd.Message
	last := -1
	for after := 0; ; {
		page, err := s.store.MessagesList(ctx, run.ConversationID, after, 500)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range page {
			if m.Status == agentd.MessageCompleted {
				msgs = append(msgs, m)
			}
			if m.RunID == run.ID {
				last = len(msgs)
			}
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if last >= 0 {
		msgs = msgs[:last]
	}
	var kept []responses.Kept
	for _, m := range msgs {
		if m.Role == agentd.RoleUser {
			kept = append(kept, responses.KeptOf(m))
		}
	}
	return msgs, kept, nil
}

// derefUsage is u, or zero counts for none.
func derefUsage(u *responses.Usage) responses.Usage {
	if u == nil {
		return responses.Usage{}
	}
	return *u
}
