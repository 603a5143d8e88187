package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/responses"
	"github.com/agentd/agentd/internal/runspec"
)

// This file serves OpenAI's Responses API under /v1 (internal/responses
// speaks its objects and events): a response is a run, its stream is
// derived from the run's stored events, and errors take OpenAI's shape
// (writeProblem, for every path under /v1/).

// v1Prefix is the path prefix of the OpenAI-compatible routes.
const v1Prefix = "/v1/"

// responseCreate answers POST /v1/responses: the new response as it
// ended (a response the model answered, failed or was cancelled), queued
// (background), or its stream (stream: true).
func (s *server) responseCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	key := r.Header.Get(HeaderIdempotencyKey)
	if key != "" && !validKey(key) {
		return fieldError(HeaderIdempotencyKey, "must be 1 to %d printable ASCII characters", maxKeyLen)
	}
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	st, err := s.responseStart(ctx, w, body, key, false)
	if err != nil {
		return err
	}
	defer st.done()
	run := st.run
	if !st.created {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	defer s.forgetUnstored(ctx, run)
	if st.stream {
		r, stop := s.whileAuthorized(r)
		defer stop()
		_, err := s.events.StreamRunAs(w, r, run.ID, 0, responses.NewEncoder(run, -1))
		return streamErr(w, err)
	}
	if !st.req.InBackground() {
		if run, err = s.awaitAnswer(ctx, run); err != nil {
			return err
		}
	}
	return s.writeResponse(w, r, run)
}

// startedResponse is a response that responseStart committed.
type startedResponse struct {
	run     agentd.Run
	req     responses.Request
	created bool   // false: the first response of a repeated idempotency key
	stream  bool   // its events are to be streamed
	done    func() // gives back the tenant's stream slot it holds (if it streams)
}

// responseStart commits the response that body (a create request) asks
// for, with its idempotency key ("": none): what POST /v1/responses and a
// WebSocket's response.create share. A socket's response always streams
// and is never in the background. w receives the headers of an error
// (Retry-After); on success the caller calls done once it streamed.
func (s *server) responseStart(ctx context.Context, w http.ResponseWriter, body []byte, key string, socket bool) (startedResponse, error) {
	tenant := TenantFromContext(ctx)
	req, err := responses.Decode(body)
	if err != nil {
		return startedResponse{}, err
	}
	if socket && req.InBackground() {
		return startedResponse{}, fieldError("background", "is not supported over a WebSocket, as OpenAI's is not: "+
			"a response goes on when its socket drops, and a client resumes it with response.retrieve or GET /v1/responses/{id}")
	}
	if err := checkText(body); err != nil {
		return startedResponse{}, err
	}
	conv, err := s.responseConversation(ctx, tenant, req)
	if err != nil {
		return startedResponse{}, err
	}
	req.Resolve = s.itemResolver(ctx, tenant)
	if s.tools != nil {
		req.Labelled = s.tools.Labelled
		req.NeedsApproval = func(name string) bool {
			t, ok := s.tools.Get(name)
			return ok && t.Spec().NeedsApproval
		}
		req.HostedTool = s.hostedTool
	}
	spec, err := s.responseSpec(ctx, req, conv)
	if err != nil {
		return startedResponse{}, err
	}
	st := startedResponse{req: req, stream: socket || req.Streaming()}
	if st.done, err = s.streamSlot(w, tenant, st.stream); err != nil {
		return startedResponse{}, err
	}
	var fp string
	if key != "" {
		if fp, err = fingerprint(tenant, "POST /v1/responses", body); err != nil {
			st.done()
			return startedResponse{}, err
		}
	}
	st.run, st.created, err = s.create(w, ctx, newRun(ctx, spec, key, fp))
	if pe := (*agentd.PendingCallsError)(nil); errors.As(err, &pe) {
		err = responses.PendingError(pe)
	}
	if err != nil {
		st.done()
		return startedResponse{}, err
	}
	s.known.add(tenant, st.run.ID)
	return st, nil
}

// responseConversation is the conversation a request continues: that of
// previous_response_id when it is the latest response of its
// conversation, of conversation, or of the approval requests its input
// sends back (approvalConversation); "" for a new one, which for a
// previous_response_id not the latest of its conversation is a fork of
// that conversation up to the response's end (responseSpec).
func (s *server) responseConversation(ctx context.Context, tenant string, req responses.Request) (string, error) {
	prev, err := req.PreviousRunID()
	if err != nil {
		return "", err
	}
	conv, err := req.ConversationRunID()
	if err != nil {
		return "", err
	}
	switch {
	case prev != "" && conv != "":
		return "", fieldError("previous_response_id", "cannot be given with conversation: a response continues one or the other")
	case conv != "":
		if _, err := s.store.ConversationGet(ctx, tenant, conv); err != nil {
			if errors.Is(err, agentd.ErrConversationNotFound) {
				return "", v1NotFound("conversation", "Conversation", strings.Trim(string(req.Conversation), `"`))
			}
			return "", err
		}
		return conv, nil
	case prev == "":
		return s.approvalConversation(ctx, tenant, req)
	}
	run, err := s.storedRun(ctx, tenant, prev)
	if err != nil {
		if errors.Is(err, agentd.ErrRunNotFound) {
			return "", v1NotFound("previous_response_id", "Previous response", *req.PreviousResponseID)
		}
		return "", err
	}
	latest, err := s.store.RunList(ctx, agentd.RunListParams{TenantID: tenant, ConversationID: run.ConversationID, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(latest) == 1 && latest[0].ID != run.ID {
		return "", nil // a new conversation, forked from the response's (responseSpec)
	}
	return run.ConversationID, nil
}

// itemResolver finds the output items of the tenant's responses that a
// request's item_reference items name (msg_<run>_<n>, fc_<run>_<n>), each
// response built once.
func (s *server) itemResolver(ctx context.Context, tenant string) func(id string) (*responses.Item, error) {
	built := map[string]responses.Response{}
	return func(id string) (*responses.Item, error) {
		runID, ok := responses.ItemRun(id)
		if !ok {
			return nil, nil
		}
		resp, ok := built[runID]
		if !ok {
			run, err := s.storedRun(ctx, tenant, runID)
			if errors.Is(err, agentd.ErrRunNotFound) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if resp, err = s.response(ctx, run); err != nil {
				return nil, err
			}
			built[runID] = resp
		}
		for i := range resp.Output {
			if resp.Output[i].ID == id {
				return &resp.Output[i], nil
			}
		}
		return nil, nil
	}
}

// v1NotFound is OpenAI's 404 for an id that names nothing of the tenant's.
func v1NotFound(param, what, id string) *apiError {
	e := newError(http.StatusNotFound, CodeNotFound, what+" not found", fmt.Sprintf("%s with id '%s' not found.", what, id))
	e.field = param
	return e
}

// responseRun reads the run of the {id} of the path, for the tenant.
func (s *server) responseRun(r *http.Request) (agentd.Run, error) {
	id := chi.URLParam(r, "id")
	runID, ok := responses.RunID(id)
	if !ok {
		return agentd.Run{}, v1NotFound("", "Response", id)
	}
	run, err := s.storedRun(r.Context(), TenantFromContext(r.Context()), runID)
	if errors.Is(err, agentd.ErrRunNotFound) {
		return run, v1NotFound("", "Response", id)
	}
	return run, err
}

// storedRun reads a run of the tenant's that is a stored response:
// ErrRunNotFound for one that is not kept (store: false), which no route
// but its creation answers about, as OpenAI's does not.
func (s *server) storedRun(ctx context.Context, tenant, runID string) (agentd.Run, error) {
	run, err := s.store.RunGet(ctx, tenant, runID)
	if err == nil && run.Params.Unstored {
		return agentd.Run{}, agentd.ErrRunNotFound
	}
	return run, err
}

// forgetUnstored deletes a run that is not to be kept once it ended, with
// its conversation, after its creation answered (the sweeper deletes those
// whose answer did not finish). It is best effort: the request is over.
func (s *server) forgetUnstored(ctx context.Context, run agentd.Run) {
	if !run.Params.Unstored {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	run, err := s.store.RunGet(ctx, run.TenantID, run.ID)
	if err != nil || !run.Status.Terminal() {
		return // the sweeper deletes it once it ended
	}
	ids, err := s.store.ConversationDelete(ctx, run.TenantID, run.ConversationID)
	if err != nil {
		s.log.Warn("delete a response that is not stored", "run_id", run.ID, "error", err)
		return
	}
	if f, ok := s.events.(runForgetter); ok && len(ids) > 0 {
		f.Forget(ids...)
	}
}

// responseGet answers GET /v1/responses/{id}: the response, or its stream
// (stream=true, an Accept of text/event-stream, or a JSON body with
// "stream": true, as openai-go sends it) from the event after
// starting_after.
func (s *server) responseGet(w http.ResponseWriter, r *http.Request) error {
	run, err := s.responseRun(r)
	if err != nil {
		return err
	}
	stream, after, err := streamAsk(r)
	if err != nil {
		return err
	}
	if !stream {
		return s.writeResponse(w, r, run)
	}
	done, err := s.streamSlot(w, TenantFromContext(r.Context()), true)
	if err != nil {
		return err
	}
	defer done()
	r, stop := s.whileAuthorized(r)
	defer stop()
	_, err = s.events.StreamRunAs(w, r, run.ID, 0, responses.NewEncoder(run, after))
	return streamErr(w, err)
}

// streamAsk reads whether a GET asks for a stream, and after which event.
func streamAsk(r *http.Request) (stream bool, after int, err error) {
	q := r.URL.Query()
	after = -1
	if v := q.Get("stream"); v != "" {
		if stream, err = strconv.ParseBool(v); err != nil {
			return false, 0, fieldError("stream", "must be true or false")
		}
	}
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return false, 0, fieldError("starting_after", "must be a sequence number (0 or more)")
		}
		after = n
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		stream = true
	}
	if r.Body != nil && r.ContentLength != 0 {
		b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			return false, 0, err
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			var body struct {
				Stream        *bool `json:"stream"`
				StartingAfter *int  `json:"starting_after"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				return false, 0, fieldError("body", "a GET's body, when sent, must be a JSON object such as {\"stream\": true}")
			}
			if body.Stream != nil && *body.Stream {
				stream = true
			}
			if body.StartingAfter != nil && *body.StartingAfter >= 0 && after < 0 {
				after = *body.StartingAfter
			}
		}
	}
	return stream, after, nil
}

// responseCancel answers POST /v1/responses/{id}/cancel: the response
// once the cancel had its effect (for at most cancelWait), the same final
// object for a response cancelled before.
func (s *server) responseCancel(w http.ResponseWriter, r *http.Request) error {
	run, err := s.responseRun(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	cancelled, err := s.runs.Cancel(ctx, run.TenantID, run.ID, ActorFromContext(ctx))
	if errors.Is(err, agentd.ErrRunFinished) {
		return newError(http.StatusBadRequest, CodeRunFinished, "Response ended",
			fmt.Sprintf("the response has already ended (%s) and cannot be cancelled", run.Status))
	}
	if err != nil {
		return err
	}
	return s.writeResponse(w, r, s.awaitStop(ctx, cancelled))
}

// responseDelete answers DELETE /v1/responses/{id}: the response's
// conversation goes with it when it holds this response alone; a response
// that later ones continue is deleted with its conversation
// (DELETE /v1/conversations/{id} or /conversations/{id}).
func (s *server) responseDelete(w http.ResponseWriter, r *http.Request) error {
	run, err := s.responseRun(r)
	if err != nil {
		return err
	}
	if !run.Status.Terminal() {
		return newError(http.StatusConflict, CodeConversationBusy, "Response in progress",
			fmt.Sprintf("the response is %s: cancel it before deleting it", responses.StatusOf(run)))
	}
	ctx := r.Context()
	runs, err := s.store.RunList(ctx, agentd.RunListParams{TenantID: run.TenantID, ConversationID: run.ConversationID, Limit: 2})
	if err != nil {
		return err
	}
	if len(runs) > 1 {
		return newError(http.StatusBadRequest, CodeConversationBusy, "Response in a conversation",
			"this response belongs to a conversation with other responses: delete the conversation instead")
	}
	ids, err := s.store.ConversationDelete(ctx, run.TenantID, run.ConversationID)
	if err != nil {
		return err
	}
	if f, ok := s.events.(runForgetter); ok && len(ids) > 0 {
		f.Forget(ids...)
	}
	s.writeJSON(w, r, http.StatusOK, responses.Deleted{ID: responses.ResponseID(run.ID), Object: "response", Deleted: true})
	return nil
}

// Paging of GET /v1/responses/{id}/input_items, as OpenAI pages lists.
const (
	defaultItemLimit = 20
	maxItemLimit     = 100
)

// itemPaging reads the limit (1 to maxItemLimit, default 20) and order
// ("asc" or "desc", by default "desc") of a page of items, as OpenAI's
// lists take them.
func itemPaging(q url.Values) (limit int, order string, err error) {
	limit = defaultItemLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxItemLimit {
			return 0, "", fieldError("limit", "must be between 1 and %d", maxItemLimit)
		}
	}
	switch order = q.Get("order"); order {
	case "":
		order = "desc"
	case "asc", "desc":
	default:
		return 0, "", fieldError("order", `must be "asc" or "desc"`)
	}
	return limit, order, nil
}

// responseInputItems answers GET /v1/responses/{id}/input_items: the
// messages the response was given, a page at a time (after, before,
// limit, order: desc by default, as OpenAI's).
func (s *server) responseInputItems(w http.ResponseWriter, r *http.Request) error {
	run, err := s.responseRun(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, order, err := itemPaging(q)
	if err != nil {
		return err
	}
	// The run's input is its messages before its first answer, but for
	// the results of the calls its approvals decided, which it made.
	items := responses.ApprovalItems(run)
	decided := map[string]bool{}
	for _, d := range run.Params.Approvals {
		decided[d.CallID] = true
	}
	answered := false
	for after := 0; !answered; {
		msgs, err := s.store.MessagesList(r.Context(), run.ConversationID, after, 500)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.RunID != run.ID {
				continue
			}
			if answered = m.Role == agentd.RoleAssistant; answered {
				break
			}
			if m.Role != agentd.RoleTool || !decided[responses.ResultCallID(m)] {
				items = append(items, responses.InputItem(m))
			}
		}
		if len(msgs) < 500 {
			break
		}
		after = msgs[len(msgs)-1].Seq
	}
	page, err := responses.Page(items, order, q.Get("after"), q.Get("before"), limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page)
	return nil
}

// writeResponse writes run's response object, built from its events.
func (s *server) writeResponse(w http.ResponseWriter, r *http.Request, run agentd.Run) error {
	resp, err := s.response(r.Context(), run)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, resp)
	return nil
}

// response builds run's response from its stored events.
func (s *server) response(ctx context.Context, run agentd.Run) (responses.Response, error) {
	b := responses.NewBuilder(run, nil)
	const page = 500
	for after := int64(0); ; {
		evs, err := s.store.EventsReplay(ctx, run.ID, after, page)
		if err != nil {
			return responses.Response{}, err
		}
		for _, ev := range evs {
			b.Add(ev)
		}
		if len(evs) < page {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	return b.Response(), nil
}

// awaitAnswer waits until run ended or waits for a client, and returns it
// as it then is: it follows the run's feed (the hub's WaitStop, as a wait
// of GET /runs/{id} does), so that it reads the run again only when an
// event stopped it, never on a timer; a server without streams polls.
func (s *server) awaitAnswer(ctx context.Context, run agentd.Run) (agentd.Run, error) {
	for !run.Status.Terminal() && run.Status != agentd.StatusRequiresAction {
		if s.events == nil {
			select {
			case <-ctx.Done():
				return run, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		} else if _, err := s.events.WaitStop(ctx, run.ID, run.LastEventSeq); err != nil {
			return run, err
		}
		got, err := s.store.RunGet(ctx, run.TenantID, run.ID)
		if err != nil {
			return run, err
		}
		run = got
	}
	return run, nil
}

// openAIError is the body of an error on /v1, as OpenAI's API writes it.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// openAIProblem is p as OpenAI's error, with OpenAI's status for it: a
// request OpenAI's API would refuse with 400 (agentd's 422) is 400.
func openAIProblem(p problem) (int, openAIError) {
	status := p.Status
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest
	}
	typ := "invalid_request_error"
	switch {
	case status >= 500:
		typ = "server_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusForbidden:
		typ = "permission_error"
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	body := openAIErrorBody{Message: msg, Type: typ}
	if p.Field != "" {
		body.Param = &p.Field
	}
	if p.Code != "" {
		code := p.Code
		body.Code = &code
	}
	return status, openAIError{Error: body}
}

// responseSpec builds a response's run spec, over the agent its prompt
// names if any; errors name the Responses API's fields.
func (s *server) responseSpec(ctx context.Context, req responses.Request, conv string) (agentd.RunSpec, error) {
	sr, err := req.Spec(conv)
	if err != nil {
		return agentd.RunSpec{}, err
	}
	var fork *agentd.ForkRef
	if prev, _ := req.PreviousRunID(); prev != "" && conv == "" {
		if sr, fork, err = s.responseFork(ctx, sr, prev); err != nil {
			return agentd.RunSpec{}, err
		}
	}
	var spec agentd.RunSpec
	var agent compose.Agent
	if sr, agent, err = promptAgent(req, sr); err == nil {
		spec, err = s.compose.Build(ctx, TenantFromContext(ctx), sr, agent)
	}
	if fe := (*runspec.FieldError)(nil); errors.As(err, &fe) {
		return spec, fieldError(responses.Param(fe.Field), "%s", fe.Message)
	}
	if err == nil && fork != nil {
		spec.Params.ForkedFrom = fork
	}
	if err == nil && len(spec.Params.Echo) > 0 {
		for _, w := range responses.EchoOf(agentd.Run{Params: spec.Params}).Warnings {
			s.log.Info("a response goes on without a tool of its request", "param", w.Param, "warning", w.Message)
		}
	}
	return spec, err
}

// promptAgent is the agent that a request's prompt names, whose
// definition goes under the response's own fields (its tools the agent's
// unless it gives its own), with the prompt's variables on sr; errors
// name the prompt's fields.
func promptAgent(req responses.Request, sr runspec.Request) (runspec.Request, compose.Agent, error) {
	name, version, vars, ok, err := req.AgentPrompt()
	if !ok || err != nil {
		return sr, compose.Agent{}, err
	}
	if !req.HasTools() {
		sr.Tools, sr.ClientTools = nil, nil
	}
	sr.Variables = vars
	return sr, compose.Agent{Name: name, Version: version}, nil
}
