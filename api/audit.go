package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentd/agentd"
)

// The kinds of the audit export's lines.
const (
	auditRunCreated     = "run.created"       // who created the run, for which tenant, with what request
	auditModelToolCalls = "model.tool_calls"  // a model step asked for tool calls
	auditCallPlanned    = "tool_call.planned" // a call as it was planned
	auditPolicy         = "policy.decision"   // the operator's policy decided about a call
	auditActionRequired = "action.required"   // the run waits for a client's decision
	auditActionDecided  = "action.decided"    // a decision: approve, reject, result, fail, retry, tool_outputs
	auditAttempt        = "tool_attempt"      // an attempt, with its receipt and outcome
	auditCallReused     = "tool_call.reused"  // a committed result was reused, not run again
	auditCallCompleted  = "tool_call.completed"
	auditCallUnknown    = "tool_call.unknown"
	auditRunResumed     = "run.resumed"
	auditRunEnded       = "run.ended"
	auditEnd            = "end" // the last line: the run as the export read it
)

// auditLine is one line of a run's audit export. Kind says which of the
// fields after the first five it has; each is left out where its kind has
// none. Seq is the event the line comes from, Actor who acted (null where
// nobody is recorded: the engine, a policy, a timeout).
type auditLine struct {
	Kind  string    `json:"kind"`
	Seq   int64     `json:"seq"`
	Step  int       `json:"step"`
	At    time.Time `json:"at"`
	Actor *string   `json:"actor"`

	TenantID       string                 `json:"tenant_id,omitempty"`
	RunID          string                 `json:"run_id,omitempty"`
	ConversationID string                 `json:"conversation_id,omitempty"`
	Request        *auditRequest          `json:"request,omitempty"`
	MessageID      string                 `json:"message_id,omitempty"`
	ToolCalls      []auditAsked           `json:"tool_calls,omitempty"`
	ToolCallID     string                 `json:"tool_call_id,omitempty"`
	CallID         string                 `json:"call_id,omitempty"`
	Name           string                 `json:"name,omitempty"`
	Effect         agentd.Effect          `json:"effect,omitempty"`
	IdempotencyKey string                 `json:"idempotency_key,omitempty"`
	Arguments      json.RawMessage        `json:"arguments,omitempty"`
	Decision       string                 `json:"decision,omitempty"`
	Rule           string                 `json:"rule,omitempty"`
	Rewritten      bool                   `json:"rewritten,omitempty"`
	RequiredAction *agentd.RequiredAction `json:"required_action,omitempty"`
	ResolvedBy     string                 `json:"resolved_by,omitempty"`
	Attempt        int                    `json:"attempt,omitempty"`
	Worker         string                 `json:"worker,omitempty"`
	Epoch          int64                  `json:"epoch,omitempty"`
	StartedAt      *time.Time             `json:"started_at,omitempty"`
	FinishedAt     *time.Time             `json:"finished_at,omitempty"`
	Receipt        *agentd.Receipt        `json:"receipt,omitempty"`
	Status         string                 `json:"status,omitempty"`
	Reason         string                 `json:"reason,omitempty"`
	Error          *agentd.ErrorDetail    `json:"error,omitempty"`
	Unresolved     []string               `json:"unresolved_tool_calls,omitempty"`

	CancelRequestedAt    *time.Time `json:"cancel_requested_at,omitempty"`
	CancelledBy          *string    `json:"cancelled_by,omitempty"`
	InterruptRequestedAt *time.Time `json:"interrupt_requested_at,omitempty"`
	Lines                int        `json:"lines,omitempty"`
}

// auditRequest is what a run was created with, as stored.
type auditRequest struct {
	Model          string           `json:"model"`
	IdempotencyKey *string          `json:"idempotency_key"`
	Params         agentd.RunParams `json:"params"`
}

// auditAsked is one tool call a model step asked for.
type auditAsked struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
}

// runAudit answers GET /runs/{id}/audit: the run's decisions and effects
// with who made them, as NDJSON, in the order of its event log, read in
// pages up to the event the run was at when the export began; the last
// line (kind end) says the export is whole. An error after the first
// line cuts the export there, without its end line.
func (s *server) runAudit(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runFor(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	evs, calls, err := s.store.AuditEvents(ctx, run.ID, 0, run.LastEventSeq)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	x := &auditExport{run: run, enc: json.NewEncoder(w)}
	x.enc.SetEscapeHTML(false)
	rc := http.NewResponseController(w)
	for len(evs) > 0 {
		for _, e := range evs {
			x.event(e, calls)
		}
		if x.err == nil {
			x.err = rc.Flush()
		}
		if x.err != nil {
			break
		}
		if evs, calls, err = s.store.AuditEvents(ctx, run.ID, evs[len(evs)-1].Seq, run.LastEventSeq); err != nil {
			x.err = err
		}
	}
	if x.err == nil {
		x.end()
	}
	if x.err != nil && !errors.Is(x.err, context.Canceled) {
		s.log.WarnContext(ctx, "audit export cut", slog.String("run_id", run.ID), slog.Int("lines", x.lines),
			slog.String("error", x.err.Error()), slog.String("request_id", requestIDFrom(ctx)))
	}
	return nil
}

// auditExport writes the lines of one run's audit.
type auditExport struct {
	run     agentd.Run
	enc     *json.Encoder
	waiting agentd.ActionType // what the run last stopped for, to name the decision that answers it
	lines   int
	err     error // the first failure; nothing is written after it
}

// write writes line l.
func (x *auditExport) write(l auditLine) {
	if x.err != nil {
		return
	}
	l.At = l.At.UTC()
	x.err = x.enc.Encode(l)
	x.lines++
}

// base is a line of kind k about event env.
func base(k string, env agentd.Envelope) auditLine {
	return auditLine{Kind: k, Seq: env.Seq, Step: env.Step, At: env.At}
}

// end writes the last line: the run's state as the export read it.
func (x *auditExport) end() {
	r := x.run
	at := r.UpdatedAt
	l := auditLine{Kind: auditEnd, Seq: r.LastEventSeq, Step: r.StepCount, At: at, Status: string(r.Status),
		Reason: string(r.TerminalReason), FinishedAt: utc(r.FinishedAt), Error: agentd.StoredAs[agentd.ErrorDetail](r.Error),
		CancelRequestedAt: utc(r.CancelRequestedAt), CancelledBy: nullString(r.CancelledBy),
		InterruptRequestedAt: utc(r.InterruptRequestedAt)}
	l.Lines = x.lines + 1
	x.write(l)
}

// event writes the lines of one event of the log; calls are the tool calls
// its page's attempts belong to.
func (x *auditExport) event(e agentd.Event, calls []agentd.CallDetail) {
	env, err := agentd.DecodeEnvelope(e.Data)
	if err != nil {
		x.err = fmt.Errorf("decode event %d: %w", e.Seq, err)
		return
	}
	switch env.Type {
	case agentd.EventRunCreated:
		x.created(env)
	case agentd.EventRunResumed:
		var d agentd.RunResumedData
		if x.decode(env, &d) {
			l := base(auditRunResumed, env)
			l.Actor, l.Reason, l.Worker, l.Epoch = nullString(d.Actor), d.Reason, d.Worker, d.Epoch
			x.write(l)
		}
	case agentd.EventMessageCompleted:
		x.asked(env)
	case agentd.EventToolCallCreated:
		x.planned(env)
	case agentd.EventRunRequiresAction:
		var d agentd.RunRequiresActionData
		if x.decode(env, &d) {
			x.waiting = d.RequiredAction.Type
			l := base(auditActionRequired, env)
			l.RequiredAction, l.ToolCallID = &d.RequiredAction, d.RequiredAction.ToolCallID
			x.write(l)
		}
	case agentd.EventToolAttemptStarted:
		x.attempt(env, calls)
	default:
		x.call(env)
	}
}

// decode reads env's data into v; false (and the export cut) when it does
// not decode.
func (x *auditExport) decode(env agentd.Envelope, v any) bool {
	if err := json.Unmarshal(env.Data, v); err != nil {
		x.err = fmt.Errorf("decode the data of event %d (%s): %w", env.Seq, env.Type, err)
		return false
	}
	return true
}

// created writes the run's creation: who, for which tenant, with what.
func (x *auditExport) created(env agentd.Envelope) {
	var d agentd.RunCreatedData
	if !x.decode(env, &d) {
		return
	}
	r := x.run
	l := base(auditRunCreated, env)
	l.Actor = nullString(d.Actor)
	l.TenantID, l.RunID, l.ConversationID = r.TenantID, r.ID, r.ConversationID
	l.Request = &auditRequest{Model: r.Model, IdempotencyKey: nullString(r.IdempotencyKey), Params: r.Params}
	x.write(l)
}

// asked writes a model step's decision to call tools (an answer without
// tool calls decides nothing the audit follows: the run's end carries it).
func (x *auditExport) asked(env agentd.Envelope) {
	var d agentd.MessageCompletedData
	if !x.decode(env, &d) {
		return
	}
	l := base(auditModelToolCalls, env)
	l.MessageID = d.MessageID
	for _, p := range d.Content {
		if p.Type == agentd.PartToolCall {
			l.ToolCalls = append(l.ToolCalls, auditAsked{CallID: p.ID, Name: p.Name})
		}
	}
	if len(l.ToolCalls) > 0 {
		x.write(l)
	}
}

// planned writes a call as it was planned, and the policy's decision on it
// when a policy decided.
func (x *auditExport) planned(env agentd.Envelope) {
	var d agentd.ToolCallCreatedData
	if !x.decode(env, &d) {
		return
	}
	l := base(auditCallPlanned, env)
	l.ToolCallID, l.CallID, l.Name, l.Effect, l.IdempotencyKey = d.ToolCallID, d.CallID, d.Name, d.Effect, d.IdempotencyKey
	l.Arguments, l.Status = d.Arguments, string(d.Status)
	x.write(l)
	if len(d.Policy) == 0 {
		return
	}
	var v struct {
		Action    string `json:"action"`
		Policy    string `json:"policy"`
		Reason    string `json:"reason"`
		Rewritten bool   `json:"rewritten"`
	}
	if err := json.Unmarshal(d.Policy, &v); err != nil {
		x.err = fmt.Errorf("decode the policy of event %d: %w", env.Seq, err)
		return
	}
	p := base(auditPolicy, env)
	p.ToolCallID, p.Name, p.Decision, p.Rule, p.Reason, p.Rewritten = d.ToolCallID, d.Name, v.Action, v.Policy, v.Reason, v.Rewritten
	x.write(p)
}

// attempt writes the attempt an event started, as it ended (or is now),
// with its receipt.
func (x *auditExport) attempt(env agentd.Envelope, calls []agentd.CallDetail) {
	var d agentd.ToolAttemptStartedData
	if !x.decode(env, &d) {
		return
	}
	l := base(auditAttempt, env)
	l.ToolCallID, l.CallID, l.Name, l.Attempt = d.ToolCallID, d.CallID, d.Name, d.Attempt
	for _, c := range calls {
		if c.ID != d.ToolCallID {
			continue
		}
		l.IdempotencyKey = c.IdempotencyKey
		for _, a := range c.Attempts {
			if a.N == d.Attempt {
				l.Worker, l.Epoch, l.Status = a.Worker, a.Epoch, string(a.Status)
				l.StartedAt, l.FinishedAt = utc(&a.StartedAt), utc(a.FinishedAt)
				l.Error, l.Receipt = agentd.StoredAs[agentd.ErrorDetail](a.Error), receiptView(c.IdempotencyKey, a)
			}
		}
	}
	x.write(l)
}

// call writes what became of a tool call (a decision on it, its outcome,
// its reuse) and the run's ends.
func (x *auditExport) call(env agentd.Envelope) {
	if env.Type.Terminal() {
		var d agentd.RunEndedData
		if x.decode(env, &d) {
			l := base(auditRunEnded, env)
			l.Actor, l.Status, l.Reason, l.Error, l.Unresolved = nullString(d.Actor), string(d.Status), string(d.Reason), d.Error,
				d.UnresolvedToolCalls
			x.write(l)
		}
		return
	}
	switch env.Type {
	case agentd.EventToolCallApproved:
		var d agentd.ToolCallApprovedData
		if x.decode(env, &d) {
			x.decided(env, agentd.DecisionApprove, d.Actor, d.ResolvedBy, d.ToolCallID, d.Status, nil)
		}
	case agentd.EventToolCallRetryAllowed:
		var d agentd.ToolCallRetryAllowedData
		if x.decode(env, &d) {
			x.decided(env, agentd.DecisionRetry, d.Actor, d.ResolvedBy, d.ToolCallID, d.Status, nil)
		}
	case agentd.EventToolCallReused:
		var d agentd.ToolCallReusedData
		if x.decode(env, &d) {
			l := base(auditCallReused, env)
			l.ToolCallID, l.CallID, l.Name, l.IdempotencyKey = d.ToolCallID, d.CallID, d.Name, d.IdempotencyKey
			x.write(l)
		}
	case agentd.EventToolCallUnknown:
		var d agentd.ToolCallUnknownData
		if x.decode(env, &d) {
			l := base(auditCallUnknown, env)
			l.ToolCallID, l.CallID, l.Name, l.IdempotencyKey = d.ToolCallID, d.CallID, d.Name, d.IdempotencyKey
			l.Status, l.Error, l.Attempt = string(agentd.CallUnknown), d.Error, d.Attempt
			x.write(l)
		}
	case agentd.EventToolCallCompleted:
		x.completed(env)
	}
}

// completed writes a tool_call.completed: a client's decision (or the
// action timeout's), or the call's outcome.
func (x *auditExport) completed(env agentd.Envelope) {
	var d agentd.ToolCallCompletedData
	if !x.decode(env, &d) {
		return
	}
	if d.ResolvedBy == agentd.ResolvedByClient || d.ResolvedBy == agentd.ResolvedByActionTimeout {
		decision := agentd.DecisionFail
		switch {
		case d.Status == agentd.CallRejected:
			decision = agentd.DecisionReject
		case x.waiting == agentd.ActionClientToolCalls:
			decision = agentd.DecisionOutputs
		case d.Status == agentd.CallSucceeded:
			decision = agentd.DecisionResult
		}
		x.decided(env, decision, d.Actor, d.ResolvedBy, d.ToolCallID, d.Status, d.Error)
		return
	}
	l := base(auditCallCompleted, env)
	l.ToolCallID, l.CallID, l.Name, l.Status, l.Error, l.ResolvedBy = d.ToolCallID, d.CallID, d.Name, string(d.Status), d.Error, d.ResolvedBy
	x.write(l)
}

// decided writes a decision on what the run waited for.
func (x *auditExport) decided(env agentd.Envelope, decision agentd.Decision, actor, resolvedBy, callID string,
	status agentd.CallStatus, e *agentd.ErrorDetail) {
	l := base(auditActionDecided, env)
	l.Decision, l.Actor, l.ResolvedBy, l.ToolCallID, l.Status, l.Error = string(decision), nullString(actor), resolvedBy, callID, string(status), e
	x.write(l)
}
