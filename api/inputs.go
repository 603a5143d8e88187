package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/tools"
)

// Sessions and steering: input sent to a run while it works (POST
// /runs/{id}/input), and the conversation's door (POST
// /conversations/{id}/messages), which steers the run in flight or starts
// the conversation's next run. See docs/api.md, "Sessions and steering".

// MaxPendingInputs bounds the inputs a run holds pending; one more is
// refused with a 422 naming "input".
const MaxPendingInputs = 64

// maxSendTries bounds how often the conversation's door tries again when
// the run it chose ended, or one started, while it sent.
const maxSendTries = 8

// inputRequest is the body of POST /runs/{id}/input.
type inputRequest struct {
	Input json.RawMessage `json:"input"`
	When  *string         `json:"when"`
}

// sendRequest is the body of POST /conversations/{id}/messages: a POST
// /runs body, whose run fields serve a conversation that has no run yet,
// and when.
type sendRequest struct {
	compose.Template
	When *string `json:"when"`
}

// steering is an input as a request asked for it, checked.
type steering struct {
	msgs []agentd.InputMessage
	text bool
	when agentd.InputWhen
	key  string
	fp   string
}

// readSteering reads the input and when of a request's body, and its
// Idempotency-Key with the fingerprint of its method, path and body: the
// same key sent to another run (or conversation) is another request.
func readSteering(r *http.Request, raw json.RawMessage, when *string, body []byte) (steering, error) {
	var st steering
	st.key = r.Header.Get(HeaderIdempotencyKey)
	if st.key != "" && !validKey(st.key) {
		return st, fieldError(HeaderIdempotencyKey, "must be 1 to %d printable ASCII characters", maxKeyLen)
	}
	var err error
	if st.msgs, st.text, err = compose.ParseInput(raw); err != nil {
		return st, err
	}
	if st.when, err = oneOf("when", when, agentd.InputWhens()); err != nil {
		return st, err
	}
	if st.key != "" {
		st.fp, err = fingerprint(TenantFromContext(r.Context()), r.Method+" "+strings.ToLower(r.URL.Path), body)
	}
	return st, err
}

// accept commits st as input of run.
func (s *server) accept(ctx context.Context, run agentd.Run, st steering) (agentd.RunInput, bool, error) {
	if err := s.compose.Steering(run, st.msgs, st.text); err != nil {
		return agentd.RunInput{}, false, err
	}
	if st.key != "" && s.hooks != nil && s.hooks.OnInput != nil {
		// A replay is answered as it was, without the hook.
		if in, ok, err := s.store.InputByKey(ctx, run.TenantID, st.key, st.fp); ok || err != nil {
			return in, false, err
		}
	}
	msgs, hook, err := s.onInput(ctx, run.ID, run.ConversationID, st.msgs, st.key)
	if err != nil {
		return agentd.RunInput{}, false, err
	}
	in, created, err := s.store.InputAccept(ctx, agentd.InputCreate{TenantID: run.TenantID, RunID: run.ID, Source: agentd.InputFromClient,
		When: st.when, Messages: msgs, IdempotencyKey: st.key, RequestHash: st.fp, Actor: ActorFromContext(ctx), MaxPending: MaxPendingInputs,
		Hook: hook})
	var many *agentd.TooManyInputsError
	if errors.As(err, &many) {
		return in, false, fieldError("input", "%s", many.Error())
	}
	return in, created, err
}

// runInput answers POST /runs/{id}/input: 202 and the input once it is
// committed, 200 for a replay of its Idempotency-Key.
func (s *server) runInput(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	var req inputRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	id, err := runID(r)
	if err != nil {
		return err
	}
	st, err := readSteering(r, req.Input, req.When, body)
	if err != nil {
		return err
	}
	// The store checks the run as it takes the input: it is read first
	// only for what needs more of it (its models take the images and
	// files; the on_input hook is told its conversation).
	run := agentd.Run{ID: id, TenantID: TenantFromContext(r.Context())}
	if attached(st.msgs) || (s.hooks != nil && s.hooks.OnInput != nil) {
		if run, err = s.runFor(r); err != nil {
			return err
		}
	}
	in, created, err := s.accept(r.Context(), run, st)
	releaseBody(r.Context())
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	w.Header().Set("Location", "/runs/"+id+"/inputs")
	s.writeJSON(w, r, status, in.View())
	return nil
}

// runInputs answers GET /runs/{id}/inputs: the run's inputs, in the order
// it accepted them.
func (s *server) runInputs(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runFor(r)
	if err != nil {
		return err
	}
	ins, err := s.store.InputList(r.Context(), run.ID, false)
	if err != nil {
		return err
	}
	out := listJSON[agentd.InputView]{Data: make([]agentd.InputView, 0, len(ins))}
	for _, in := range ins {
		out.Data = append(out.Data, in.View())
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// withInputs lists the run's pending and unapplied inputs on its view v,
// when it has some.
func (s *server) withInputs(ctx context.Context, run agentd.Run, v *runJSON) error {
	v.Inputs = []agentd.InputView{}
	if run.InputsPending+run.InputsUnapplied == 0 {
		return nil
	}
	ins, err := s.store.InputList(ctx, run.ID, true)
	for _, in := range ins {
		v.Inputs = append(v.Inputs, in.View())
	}
	return err
}

// conversationSend answers POST /conversations/{id}/messages: the
// message steers the conversation's run in flight (202, with the input),
// or starts its next run with the last run's agent and parameters, the
// inputs that run ended without first (201). A conversation without a run
// starts one from the body's run fields, as POST /runs would.
func (s *server) conversationSend(w http.ResponseWriter, r *http.Request) error {
	convID, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return errConversationNotFound
	}
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	var req sendRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	st, err := readSteering(r, req.Input, req.When, body)
	if err != nil {
		return err
	}
	if done, err := s.replayed(w, r, st); done || err != nil {
		return err
	}
	for try := 1; ; try++ {
		done, err := s.sendOnce(w, r, convID.String(), req, st)
		if done || err != nil || try >= maxSendTries {
			if err == nil && !done {
				err = agentd.ErrConflict
			}
			return err
		}
	}
}

// replayed answers a request whose Idempotency-Key made an input, or a
// run, already: done is true when it did.
func (s *server) replayed(w http.ResponseWriter, r *http.Request, st steering) (done bool, err error) {
	if st.key == "" {
		return false, nil
	}
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	if in, ok, err := s.store.InputByKey(ctx, tenant, st.key, st.fp); ok || err != nil {
		if err != nil {
			return true, err
		}
		return true, s.sent(w, r, in.RunID, &in, false)
	}
	run, ok, err := s.store.RunByKey(ctx, tenant, st.key, st.fp)
	if ok || err != nil {
		if err != nil {
			return true, err
		}
		return true, s.sent(w, r, run.ID, nil, false)
	}
	return false, nil
}

// sendOnce is one try of conversationSend; done false: the
// conversation's runs moved meanwhile, and it tries again.
func (s *server) sendOnce(w http.ResponseWriter, r *http.Request, convID string, req sendRequest, st steering) (done bool, err error) {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	last, err := s.store.RunOfConversation(ctx, tenant, convID)
	if err != nil && !errors.Is(err, agentd.ErrRunNotFound) {
		return false, err
	}
	if err == nil && agentd.Steerable(last.Status) {
		in, created, err := s.accept(ctx, last, st)
		var ended *agentd.RunEndedError
		if errors.As(err, &ended) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, s.sent(w, r, last.ID, &in, created)
	}
	rc, err := s.nextRun(ctx, convID, last, req, st)
	if err != nil {
		return false, err
	}
	rc.IdempotencyKey, rc.RequestHash = st.key, st.fp
	rc.Spec.Params.IfBusy = agentd.IfBusyReject
	run, created, err := s.create(w, ctx, rc)
	var busy *agentd.BusyError
	if errors.As(err, &busy) || errors.Is(err, agentd.ErrInputsChanged) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.known.add(tenant, run.ID)
	return true, s.sent(w, r, run.ID, nil, created)
}

// nextRun composes the run a message starts in a conversation whose last
// run (zero: none) is not in flight.
func (s *server) nextRun(ctx context.Context, convID string, last agentd.Run, req sendRequest, st steering) (agentd.RunCreate, error) {
	who := callerOf(ctx)
	if last.ID == "" {
		t := req.Template
		t.ConversationID = &convID
		return s.compose.Template(ctx, who, t)
	}
	var input []agentd.InputMessage
	var carried []string
	if last.InputsUnapplied > 0 {
		ins, err := s.store.InputList(ctx, last.ID, true)
		if err != nil {
			return agentd.RunCreate{}, err
		}
		for _, in := range ins {
			if in.Status != agentd.InputUnapplied {
				continue
			}
			msgs, err := s.inputMessages(ctx, last, in)
			if err != nil {
				return agentd.RunCreate{}, err
			}
			input = append(input, msgs...)
			carried = append(carried, in.ID)
		}
	}
	rc, err := s.compose.Next(ctx, who, last, append(input, st.msgs...))
	if err != nil {
		return rc, err
	}
	if len(carried) > 0 {
		rc.Carry = &agentd.InputCarry{RunID: last.ID, IDs: carried}
	}
	return rc, nil
}

// inputMessages are the messages of an input of run as a new run's input:
// its texts, its images by URL, and the bytes of its images and files
// from their artifacts.
func (s *server) inputMessages(ctx context.Context, run agentd.Run, in agentd.RunInput) ([]agentd.InputMessage, error) {
	out := make([]agentd.InputMessage, 0, len(in.Messages))
	for _, im := range in.Messages {
		m := agentd.InputMessage{Role: im.Role}
		for _, p := range im.Content {
			ip := agentd.InputPart{Type: p.Type, Text: p.Text, URL: p.URL, Detail: p.Detail, Filename: p.Filename, MediaType: p.MediaType}
			if p.ArtifactID != "" {
				a, err := s.store.ArtifactGet(ctx, run.TenantID, run.ID, p.ArtifactID)
				if err != nil {
					return nil, err
				}
				ip.Data = a.Content
			}
			m.Parts = append(m.Parts, ip)
		}
		if len(m.Parts) == 1 && m.Parts[0].Type == agentd.PartText {
			m.Content, m.Parts = m.Parts[0].Text, nil
		}
		out = append(out, m)
	}
	return out, nil
}

// sent answers a message to a conversation: what it did to run runID.
func (s *server) sent(w http.ResponseWriter, r *http.Request, runID string, in *agentd.RunInput, created bool) error {
	ctx := r.Context()
	run, err := s.store.RunGet(ctx, TenantFromContext(ctx), runID)
	if err != nil {
		return err
	}
	v := runView(run)
	if err := s.withInputs(ctx, run, &v); err != nil {
		return err
	}
	out := agentd.SendView{Object: "conversation.send", Action: agentd.SendStarted, Run: v}
	status := http.StatusCreated
	if in != nil {
		iv := in.View()
		out.Action, out.Input, status = agentd.SendSteered, &iv, http.StatusAccepted
	}
	if !created {
		status = http.StatusOK
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	w.Header().Set("Location", "/runs/"+run.ID)
	s.writeJSON(w, r, status, out)
	return nil
}

// steerBusy answers POST /runs with if_busy: steer whose idempotency key
// made an input already: done is true when it did.
func (s *server) steerBusy(w http.ResponseWriter, r *http.Request, p agentd.RunCreate) (done bool, err error) {
	if p.IdempotencyKey == "" {
		return false, nil
	}
	in, ok, err := s.store.InputByKey(r.Context(), p.TenantID, p.IdempotencyKey, p.RequestHash)
	if !ok || err != nil {
		return ok, err
	}
	return true, s.steered(w, r, in, false)
}

// steerBusyNow sends the input of POST /runs with if_busy: steer, whose
// conversation was busy, to the run in flight there, or creates the run
// once none is.
func (s *server) steerBusyNow(w http.ResponseWriter, r *http.Request, p agentd.RunCreate) error {
	ctx := r.Context()
	st := steering{msgs: p.Spec.Input, when: agentd.InputNext, key: p.IdempotencyKey, fp: p.RequestHash}
	for try := 1; try <= maxSendTries; try++ {
		last, err := s.store.RunOfConversation(ctx, p.TenantID, p.Spec.ConversationID)
		if err != nil && !errors.Is(err, agentd.ErrRunNotFound) {
			return err
		}
		if err == nil && agentd.Steerable(last.Status) {
			in, created, err := s.accept(ctx, last, st)
			var ended *agentd.RunEndedError
			if errors.As(err, &ended) {
				continue
			}
			if err != nil {
				return err
			}
			return s.steered(w, r, in, created)
		}
		run, created, err := s.create(w, ctx, p)
		var busy *agentd.BusyError
		if errors.As(err, &busy) {
			continue
		}
		if err != nil {
			return err
		}
		status := http.StatusAccepted
		if !created {
			status = http.StatusOK
			w.Header().Set(HeaderIdempotentReplayed, "true")
		}
		s.known.add(p.TenantID, run.ID)
		w.Header().Set("Location", "/runs/"+run.ID)
		s.writeJSON(w, r, status, runView(run))
		return nil
	}
	return agentd.ErrConflict
}

// steered answers POST /runs with if_busy: steer that went to the run in
// flight as input in: 202 (200 for a replay) with that run, its inputs
// listed; the Location names it.
func (s *server) steered(w http.ResponseWriter, r *http.Request, in agentd.RunInput, created bool) error {
	ctx := r.Context()
	run, err := s.store.RunGet(ctx, TenantFromContext(ctx), in.RunID)
	if err != nil {
		return err
	}
	v := runView(run)
	if err := s.withInputs(ctx, run, &v); err != nil {
		return err
	}
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	s.known.add(run.TenantID, run.ID)
	w.Header().Set("Location", "/runs/"+run.ID)
	w.Header().Set(HeaderInputID, in.ID)
	s.writeJSON(w, r, status, v)
	return nil
}

// HeaderInputID names the input that POST /runs with if_busy: steer sent
// to the run in flight.
const HeaderInputID = "Agentd-Input-Id"

// CodeInputRefused is the problem code of an input the on_input hook
// refused (422, "input"); the detail is the hook's reason.
const CodeInputRefused = "input_refused"

// onInput calls the on_input hook, if there is one, about the user
// messages of an input to run runID (none yet: a new run's) of
// conversation convID: a refusal is a 422 with its reason; a rewrite
// replaces their texts; a note goes before them as a system message. It
// returns the messages to store and what the hook decided (nil: no hook,
// or no user message). A hook that fails lets the input in as it came,
// which its hook.called event says. key is the request's idempotency key
// ("": none), which the hook's key is made of.
func (s *server) onInput(ctx context.Context, runID, convID string, msgs []agentd.InputMessage, key string) ([]agentd.InputMessage, *agentd.HookCalledData, error) {
	if s.hooks == nil || s.hooks.OnInput == nil {
		return msgs, nil, nil
	}
	var texts []string
	var users []int
	for i, m := range msgs {
		if m.Role == agentd.RoleUser {
			texts, users = append(texts, m.TextOf()), append(users, i)
		}
	}
	if len(users) == 0 {
		return msgs, nil, nil
	}
	tenant := TenantFromContext(ctx)
	if key == "" {
		key = agentd.NewID()
	}
	v, _, err := s.hooks.Input(ctx, "on_input:"+tenant+":"+key, tools.InputCall{TenantID: tenant, Actor: ActorFromContext(ctx),
		RunID: runID, ConversationID: convID, Texts: texts})
	data := &agentd.HookCalledData{Hook: agentd.HookOnInput, Outcome: agentd.HookAllow}
	switch {
	case err != nil:
		data.Outcome, data.Error = agentd.HookFailed, err.Error()
		return msgs, data, nil
	case v.Action == tools.InputRefuse:
		reason := cmp.Or(strings.TrimSpace(v.Reason), "the operator's input policy refused it")
		e := fieldError("input", "%s", reason)
		e.code, e.title = CodeInputRefused, "Input refused"
		return nil, nil, e
	}
	out := append([]agentd.InputMessage(nil), msgs...)
	if v.Action == tools.InputRewrite {
		data.Outcome = agentd.HookRewrite
		for k, i := range users {
			out[i] = rewritten(out[i], v.Texts[k])
		}
	}
	if note := strings.TrimSpace(v.Note); note != "" {
		data.Note = true
		out = slices.Insert(out, users[0], agentd.InputMessage{Role: agentd.RoleSystem, Content: note})
	}
	for _, m := range out {
		if err := storable("input", m.TextOf()); err != nil {
			return nil, nil, err
		}
	}
	return out, data, nil
}

// rewritten is user message m with its text replaced by text: its text
// parts give way to one, before its images and files.
func rewritten(m agentd.InputMessage, text string) agentd.InputMessage {
	if len(m.Parts) == 0 {
		m.Content = text
		return m
	}
	parts := []agentd.InputPart{{Type: agentd.PartText, Text: text}}
	for _, p := range m.Parts {
		if p.Type != agentd.PartText {
			parts = append(parts, p)
		}
	}
	m.Parts = parts
	return m
}

// attached reports whether a message of msgs has an image or a file.
func attached(msgs []agentd.InputMessage) bool {
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Attached() {
				return true
			}
		}
	}
	return false
}
