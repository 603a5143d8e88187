package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/aisdk"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/tools"
)

// chatRequest is the body the AI SDK's DefaultChatTransport sends, with
// the fields of a new run an app may add (compose.Fields). Only the last
// message is read: agentd keeps the conversation, and earlier messages a
// client sends are never trusted.
type chatRequest struct {
	ID        string     `json:"id"`
	Messages  uiMessages `json:"messages"`
	Trigger   string     `json:"trigger"`
	MessageID string     `json:"messageId"`
	compose.Fields
	compose.AgentFields
}

// uiMessages are a chat's messages, read leniently: the AI SDK's messages
// carry fields (metadata, provider data) that agentd does not read.
type uiMessages []uiMessage

// UnmarshalJSON reads the messages without refusing fields agentd does not
// know, even when the body around them is decoded strictly.
func (m *uiMessages) UnmarshalJSON(b []byte) error {
	var msgs []uiMessage
	if err := json.Unmarshal(b, &msgs); err != nil {
		return err
	}
	*m = msgs
	return nil
}

type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

type uiPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	MediaType  string          `json:"mediaType"` // file
	URL        string          `json:"url"`       // file: a data URL, or an image's http(s) URL
	Filename   string          `json:"filename"`  // file`
	ToolCallID string          `json:"toolCallId"`
	State      string          `json:"state"`
	Output     json.RawMessage `json:"output"`
	ErrorText  string          `json:"errorText"`
	Approval   *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	} `json:"approval"`
}

// chatTransportFields are the body fields the AI SDK itself sends; the
// others an app adds go to the run, as in POST /runs (runFieldNames).
var chatTransportFields = jsonNames(reflect.TypeFor[chatRequest]())

// maxChatIDLen caps a chat's id.
const maxChatIDLen = 255

// chatSend answers POST /ai-sdk/chat: the chat's last message starts a run
// of the chat's conversation (a user message), or answers the approval the
// chat's run waits for (an assistant message whose tool part was
// approved or denied); the answer is the run's UI message stream.
func (s *server) chatSend(w http.ResponseWriter, r *http.Request) error {
	if s.events == nil {
		return errStreamingUnavailable
	}
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	req, fields, err := decodeChat(body)
	if err != nil {
		return err
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "assistant" {
		return s.chatApprove(w, r, req.ID, last)
	}
	return s.chatStart(w, r, req, fields)
}

// chatRead is what agentd reads of a chat request whose top-level fields
// are fields, as a body for checkText: every field, with each message but
// the last as null. Earlier messages are history that the AI SDK sends
// back with every request and agentd never reads, so a message refused
// once does not refuse the chat's later requests; the last keeps its
// index, which the error names.
func chatRead(fields map[string]json.RawMessage) []byte {
	read := maps.Clone(fields)
	var msgs []json.RawMessage
	if json.Unmarshal(fields["messages"], &msgs) == nil && len(msgs) > 0 {
		for i := range msgs[:len(msgs)-1] {
			msgs[i] = json.RawMessage("null")
		}
		read["messages"], _ = json.Marshal(msgs) // raw messages always encode
	}
	b, _ := json.Marshal(read) // valid JSON values always encode
	return b
}

// decodeChat reads a chat request's body: its own fields and the run's,
// each checked, and the body's top-level fields for the request's
// fingerprint.
func decodeChat(body []byte) (chatRequest, map[string]json.RawMessage, error) {
	var req chatRequest
	var fields map[string]json.RawMessage
	if err := decodeStrict(body, &fields, ""); err != nil {
		return req, nil, err
	}
	for k := range fields {
		if !slices.Contains(chatTransportFields, k) && !slices.Contains(runFieldNames, k) {
			return req, nil, fieldError(k, "is not a field of a chat request: the AI SDK's id, messages, trigger and messageId, and of POST /runs %s",
				strings.Join(runFieldNames, ", "))
		}
	}
	if err := decodeStrict(body, &req, ""); err != nil {
		return req, nil, err
	}
	if err := checkText(chatRead(fields)); err != nil {
		return req, nil, err
	}
	if req.ID == "" || len(req.ID) > maxChatIDLen {
		return req, nil, fieldError("id", "must be the chat's id: 1 to %d bytes", maxChatIDLen)
	}
	if err := storable("id", req.ID); err != nil {
		return req, nil, err
	}
	switch req.Trigger {
	case "", "submit-message":
	case "regenerate-message":
		return req, nil, fieldError("trigger", "regenerate-message is not supported: agentd keeps the conversation, and an answer stays in it; send the message again")
	default:
		return req, nil, fieldError("trigger", "must be submit-message, not %q", req.Trigger)
	}
	if len(req.Messages) == 0 {
		return req, nil, fieldError("messages", "must hold the chat's messages, the new one last")
	}
	switch role := req.Messages[len(req.Messages)-1].Role; role {
	case "user", "assistant":
	default:
		return req, nil, fieldError("messages", "the last message must be the user's (a new message) or the assistant's (an approval), not %q", role)
	}
	return req, fields, nil
}

// chatStart starts a run of the chat's conversation with the text of the
// chat's last message, a user's, and streams it.
func (s *server) chatStart(w http.ResponseWriter, r *http.Request, req chatRequest, fields map[string]json.RawMessage) error {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	last := req.Messages[len(req.Messages)-1]
	in, inputKey, partField, err := chatInput(last, len(req.Messages)-1)
	if err != nil {
		return err
	}
	sr, err := req.Fields.Request()
	if err != nil {
		return err
	}
	agent, err := req.AgentFields.Resolve(&sr)
	if err != nil {
		return err
	}
	sr.Input, sr.InputText, sr.PartField = []agentd.InputMessage{in}, len(in.Parts) == 0, partField
	spec, err := s.compose.Build(ctx, tenant, sr, agent)
	if err != nil {
		return err
	}
	conv, err := s.store.ConversationForChat(ctx, tenant, req.ID, true)
	if err != nil {
		return err
	}
	spec.ConversationID = conv.ID
	var key, fp string
	if last.ID != "" {
		// The same message sent again (a retry) is the same run, or the
		// same input.
		sum := sha256.Sum256([]byte(req.ID + "\x00" + last.ID))
		key = "ai-sdk:" + hex.EncodeToString(sum[:])
		if fp, err = chatFingerprint(tenant, fields, inputKey); err != nil {
			return err
		}
	}
	done, ok := s.limits.openStream(tenant)
	if !ok {
		return errTooManyStreams(w)
	}
	defer done()
	if spec.Params.IfBusy == agentd.IfBusySteer {
		return s.chatSteer(w, r, newRun(ctx, spec, key, fp), in)
	}
	created, _, err := s.create(w, ctx, newRun(ctx, spec, key, fp))
	if err != nil {
		return err
	}
	s.known.add(tenant, created.ID)
	w.Header().Set("Location", "/runs/"+created.ID)
	return s.chatStream(w, r, created.ID, aisdk.NewEncoder(created.ID))
}

// chatSteer sends the chat's new message, in, to the run in flight in its
// conversation as input (if_busy: steer), and streams that run's answer to
// it: the assistant message that begins where the run takes the message
// (docs/clients.md). With no run in flight, it starts p, as chatStart does.
// A message sent again is the run, or the input, it made the first time.
func (s *server) chatSteer(w http.ResponseWriter, r *http.Request, p agentd.RunCreate, in agentd.InputMessage) error {
	ctx := r.Context()
	if p.IdempotencyKey != "" {
		run, ok, err := s.store.RunByKey(ctx, p.TenantID, p.IdempotencyKey, p.RequestHash)
		if err != nil {
			return err
		}
		if ok {
			w.Header().Set("Location", "/runs/"+run.ID)
			return s.chatStream(w, r, run.ID, aisdk.NewEncoder(run.ID))
		}
		input, ok, err := s.store.InputByKey(ctx, p.TenantID, p.IdempotencyKey, p.RequestHash)
		if err != nil {
			return err
		}
		if ok {
			return s.chatSteered(w, r, input)
		}
	}
	st := steering{msgs: []agentd.InputMessage{in}, text: len(in.Parts) == 0, when: agentd.InputNext,
		key: p.IdempotencyKey, fp: p.RequestHash}
	for try := 1; try <= maxSendTries; try++ {
		last, err := s.store.RunOfConversation(ctx, p.TenantID, p.Spec.ConversationID)
		if err != nil && !errors.Is(err, agentd.ErrRunNotFound) {
			return err
		}
		if err == nil && agentd.Steerable(last.Status) {
			if last.Status == agentd.StatusRequiresAction {
				// The chat shows what the run waits for, and its answer
				// must be the chat's last message.
				return newError(http.StatusConflict, CodeConversationBusy, "Conversation busy",
					"the chat's run waits for a decision: answer it before sending a message")
			}
			input, _, err := s.accept(ctx, last, st)
			var ended *agentd.RunEndedError
			if errors.As(err, &ended) {
				continue
			}
			releaseBody(ctx)
			if err != nil {
				return err
			}
			return s.chatSteered(w, r, input)
		}
		run, _, err := s.create(w, ctx, p)
		var busy *agentd.BusyError
		if errors.As(err, &busy) {
			continue
		}
		if err != nil {
			return err
		}
		s.known.add(p.TenantID, run.ID)
		w.Header().Set("Location", "/runs/"+run.ID)
		return s.chatStream(w, r, run.ID, aisdk.NewEncoder(run.ID))
	}
	return agentd.ErrConflict
}

// chatSteered streams the answer to a chat's message that went to run
// in.RunID as input in: the message that begins where the run applies it.
func (s *server) chatSteered(w http.ResponseWriter, r *http.Request, in agentd.RunInput) error {
	s.known.add(TenantFromContext(r.Context()), in.RunID)
	w.Header().Set("Location", "/runs/"+in.RunID)
	w.Header().Set(HeaderInputID, in.ID)
	return s.chatStream(w, r, in.RunID, aisdk.NewTurnEncoder(in.RunID, in.ID, 0))
}

// chatFingerprint identifies a chat's request to start a run, for its
// idempotency key: its run fields and its input text, so that a retry of
// the same message (whatever the history sent with it) matches.
func chatFingerprint(tenant string, fields map[string]json.RawMessage, input string) (string, error) {
	run := map[string]json.RawMessage{}
	for k, v := range fields {
		if slices.Contains(runFieldNames, k) {
			run[k] = v
		}
	}
	run["input"], _ = json.Marshal(input) // a string always encodes
	b, err := json.Marshal(run)
	if err != nil {
		return "", fmt.Errorf("fingerprint chat request: %w", err)
	}
	return fingerprint(tenant, "POST /ai-sdk/chat", b)
}

// chatApprove answers a chat request whose last message is the assistant's:
// the approval or denial of the call the chat's run waits for, or the
// outputs of its client tool calls; then the run's stream from that answer
// on.
func (s *server) chatApprove(w http.ResponseWriter, r *http.Request, chatID string, last uiMessage) error {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	if c, _ := ctx.Value(keyCaller).(*caller); c == nil || !c.Has(auth.ActionsWrite) {
		return newError(http.StatusForbidden, CodeInsufficientScope, "Insufficient scope",
			"answering an approval needs the "+string(auth.ActionsWrite)+" scope")
	}
	conv, err := s.store.ConversationForChat(ctx, tenant, chatID, false)
	if err != nil {
		return err
	}
	latest, err := s.latestRun(r, conv.ID)
	if err != nil {
		return err
	}
	if latest == nil || latest.Status != agentd.StatusRequiresAction {
		return newError(http.StatusConflict, CodeRunNotWaiting, "Run not waiting", "the chat's run waits for no approval")
	}
	var action agentd.RequiredAction
	_ = json.Unmarshal(latest.RequiredAction, &action)
	if action.Type == agentd.ActionClientToolCalls {
		return s.chatOutputs(w, r, latest, action, last)
	}
	for _, p := range last.Parts {
		if p.Approval == nil || p.Approval.Approved == nil || p.State != "approval-responded" || p.Approval.ID != action.ToolCallID {
			continue
		}
		decision, message := agentd.DecisionApprove, ""
		if !*p.Approval.Approved {
			decision, message = agentd.DecisionReject, p.Approval.Reason
		}
		if len(message) > 4096 {
			return fieldError("messages", "the denial's reason must be at most 4096 bytes")
		}
		if err := storable("messages", message); err != nil {
			return err
		}
		run, err := s.runs.ResolveAction(ctx, agentd.ActionParams{TenantID: tenant, RunID: latest.ID,
			ToolCallID: action.ToolCallID, Decision: decision, Message: message, Actor: ActorFromContext(ctx)})
		if err != nil {
			return err
		}
		done, ok := s.limits.openStream(tenant)
		if !ok {
			return errTooManyStreams(w)
		}
		defer done()
		// From the decision's event on: the chat has what came before.
		return s.chatStream(w, r, run.ID, aisdk.NewTurnEncoder(run.ID, "", run.LastEventSeq-1))
	}
	return fieldError("messages", "the last message answers no approval the run waits for (tool call %s)", action.ToolCallID)
}

// chatResume answers GET /ai-sdk/chat/{id}/stream, which useChat's resume
// calls: the stream of the answer of the chat's run in progress from its
// first chunk (the AI SDK takes a resumed stream as a replay of the whole
// answer), on any instance; 204 when the chat has none. The answer is the
// run's last turn: the answer to the last message the run took from a
// client, or to its input.
func (s *server) chatResume(w http.ResponseWriter, r *http.Request) error {
	run, err := s.chatRunInProgress(r)
	if err != nil {
		return err
	}
	if run == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if s.events == nil {
		return errStreamingUnavailable
	}
	done, ok := s.limits.openStream(TenantFromContext(r.Context()))
	if !ok {
		return errTooManyStreams(w)
	}
	defer done()
	turn, err := s.chatTurn(r.Context(), *run)
	if err != nil {
		return err
	}
	return s.chatStream(w, r, run.ID, aisdk.NewTurnEncoder(run.ID, turn, 0))
}

// chatTurn is the input whose answer is run's last turn: the last input
// from a client the run applied; "" for the answer to the run's input.
func (s *server) chatTurn(ctx context.Context, run agentd.Run) (string, error) {
	ins, err := s.store.InputList(ctx, run.ID, false)
	if err != nil {
		return "", err
	}
	turn := ""
	for _, in := range ins { // in the order the run accepted them, and so applied them
		if in.Source == agentd.InputFromClient && in.Status == agentd.InputApplied {
			turn = in.ID
		}
	}
	return turn, nil
}

// chatStop answers DELETE /ai-sdk/chat/{id}/stream: it cancels the chat's
// run in progress (a dropped connection does not: the run goes on, to be
// resumed). 204 either way.
func (s *server) chatStop(w http.ResponseWriter, r *http.Request) error {
	run, err := s.chatRunInProgress(r)
	if err != nil {
		return err
	}
	if run != nil {
		ctx := r.Context()
		if _, err := s.runs.Cancel(ctx, TenantFromContext(ctx), run.ID, ActorFromContext(ctx)); err != nil &&
			!errors.Is(err, agentd.ErrRunFinished) {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// chatRunInProgress returns the run in progress of the chat the path
// names, or nil.
func (s *server) chatRunInProgress(r *http.Request) (*agentd.Run, error) {
	chatID, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil || chatID == "" {
		return nil, nil
	}
	conv, err := s.store.ConversationForChat(r.Context(), TenantFromContext(r.Context()), chatID, false)
	if errors.Is(err, agentd.ErrConversationNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	run, err := s.latestRun(r, conv.ID)
	if err != nil || run == nil {
		return nil, err
	}
	switch run.Status {
	case agentd.StatusQueued, agentd.StatusRunning, agentd.StatusRequiresAction:
		return run, nil
	}
	return nil, nil
}

// latestRun returns a conversation's newest run, or nil.
func (s *server) latestRun(r *http.Request, conversationID string) (*agentd.Run, error) {
	runs, err := s.store.RunList(r.Context(), agentd.RunListParams{TenantID: TenantFromContext(r.Context()),
		ConversationID: conversationID, Limit: 1})
	if err != nil || len(runs) == 0 {
		return nil, err
	}
	return &runs[0], nil
}

// chatStream writes run's UI message stream as enc makes it from the
// run's events, while the request's credential holds. A client that leaves
// does not stop the run: it may resume.
func (s *server) chatStream(w http.ResponseWriter, r *http.Request, runID string, enc *aisdk.Encoder) error {
	r, stop := s.whileAuthorized(r)
	defer stop()
	_, err := s.events.StreamRunAs(w, r, runID, 0, enc)
	return streamErr(w, err)
}

// chatOutputs answers the client tool calls the chat's run waits for with
// the outputs the chat's tool parts hold (output-available, or
// output-error), then streams the run on.
func (s *server) chatOutputs(w http.ResponseWriter, r *http.Request, run *agentd.Run, action agentd.RequiredAction, last uiMessage) error {
	ctx := r.Context()
	parts := map[string]uiPart{}
	for _, p := range last.Parts {
		if p.State == "output-available" || p.State == "output-error" {
			parts[p.ToolCallID] = p
		}
	}
	p := agentd.ActionParams{TenantID: TenantFromContext(ctx), RunID: run.ID, Decision: agentd.DecisionOutputs, Actor: ActorFromContext(ctx)}
	for _, c := range action.Calls {
		part, ok := parts[c.ToolCallID]
		if !ok {
			return fieldError("messages", "the last message has no output for the client tool call %s (%s)", c.ToolCallID, c.Name)
		}
		o := agentd.ToolOutput{ToolCallID: c.ToolCallID}
		if part.State == "output-error" {
			o.Error = cmp.Or(part.ErrorText, "the client tool failed")
			if len(o.Error) > 4096 {
				o.Error = o.Error[:4096]
			}
			if err := storable("messages", o.Error); err != nil {
				return err
			}
		} else {
			out := part.Output
			if len(out) == 0 {
				out = json.RawMessage("null")
			}
			if err := storableJSON("messages", out); err != nil {
				return err
			}
			o.Output, o.Artifact = tools.Offload(out, tools.DefaultMaxResultBytes, uuid.NewString())
		}
		p.Outputs = append(p.Outputs, o)
	}
	resolved, err := s.runs.ResolveAction(ctx, p)
	if err != nil {
		return err
	}
	done, ok := s.limits.openStream(p.TenantID)
	if !ok {
		return errTooManyStreams(w)
	}
	defer done()
	return s.chatStream(w, r, resolved.ID, aisdk.NewTurnEncoder(resolved.ID, "", resolved.LastEventSeq-int64(len(p.Outputs))))
}
