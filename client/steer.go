package client

import (
	"context"
	"net/http"

	"github.com/agentd/agentd"
)

// Input is an input sent to a run while it works (steering): its place in
// the order the run accepted its inputs (N), when it is applied (When),
// its messages, and where it is (Status: agentd.InputPending,
// InputApplied, or InputUnapplied when its run ended without it, with
// Reason, and CarriedTo the run of the conversation that took it over).
type Input = agentd.InputView

// InputContent is a message of an Input, of role user, as its parts (an
// image or a file names its artifact).
type InputContent = agentd.InputMessageView

// Send is what a message sent to a conversation did (POST
// /conversations/{id}/messages): its Action, agentd.SendSteered (the run
// in flight, Run, took it as Input) or agentd.SendStarted (it started the
// conversation's next run, Run; Input is nil).
type Send = agentd.SendView

// SteerInput is a POST /runs/{id}/input request: a user message for a run
// that is working, applied at its next step boundary (When
// agentd.InputNext, the default) or at once (agentd.InputNow: a model call
// under way is cut, its streamed text retracted, and asked again with the
// input; tool calls under way are never cut).
type SteerInput struct {
	// Text is the message's text; Messages, when given, replaces it:
	// user messages with parts (images, files), as CreateRun's
	// InputMessages (a message without a Role is sent as a user one).
	Text     string
	Messages []InputMessage
	When     agentd.InputWhen // "": agentd.InputNext
	// IdempotencyKey is sent as the Idempotency-Key header: the same key
	// again answers the input it first made, accepted once. Empty: the
	// client makes one, and sends it again on each retry of the call.
	IdempotencyKey string
}

// inputBody is the body of the routes that take a user message: "input",
// a string or messages, and "when".
type inputBody struct {
	Input any              `json:"input"`
	When  agentd.InputWhen `json:"when,omitempty"`
}

// inputOf is the "input" of a request: text, or messages (each without a
// role made a user one) when there are some.
func inputOf(text string, msgs []InputMessage) any {
	if msgs == nil {
		return text
	}
	out := make([]InputMessage, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			m.Role = agentd.RoleUser
		}
		out[i] = m
	}
	return out
}

// SteerRun sends input to run runID while it works (POST
// /runs/{id}/input). The run takes it once, at its next step boundary (or
// at once, with agentd.InputNow), after the results of the tool calls
// under way: it is in the conversation before the run's next model call,
// and the run goes on after an answer it was about to end with. The
// answer is the Input, pending (an *Error of code run_ended when the run
// has ended: send the message to its conversation with SendMessage, which
// starts the next run; one of code invalid_field for a bad message or
// when the run holds as many pending inputs as it may). The run's stream
// says input.accepted, then input.applied, or input.unapplied when the
// run ended without it.
func (c *Client) SteerRun(ctx context.Context, runID string, in SteerInput) (*Input, error) {
	var out Input
	body := inputBody{Input: inputOf(in.Text, in.Messages), When: in.When}
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + esc(runID) + "/input", body: body, key: in.IdempotencyKey}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListInputs reads every input sent to a run, in the order it accepted
// them (GET /runs/{id}/inputs).
func (c *Client) ListInputs(ctx context.Context, runID string) ([]Input, error) {
	var out struct{ Data []Input }
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + esc(runID) + "/inputs"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// SendMessage is a POST /conversations/{id}/messages request: a user
// message for the conversation.
type SendMessage struct {
	// Input is the message's text; InputMessages, when given, replaces
	// it: user messages with parts, as CreateRun's (a message without a
	// Role is sent as a user one).
	Input         string
	InputMessages []InputMessage
	// When is when a run in flight applies it, as SteerInput's ("":
	// agentd.InputNext).
	When agentd.InputWhen
	// IdempotencyKey: as in SteerInput; a replay answers what the first
	// call did.
	IdempotencyKey string
	// NewRun, when set, holds the parameters (Model, Agent, Instructions,
	// Tools, ...) of the run the message starts in a conversation that
	// has had none yet, as POST /runs takes them; a conversation's next
	// run takes its last run's instead. Its Input, InputMessages,
	// ConversationID, Webhook, Wait and IdempotencyKey are not sent.
	NewRun *CreateRun
}

// sendBody is the body of POST /conversations/{id}/messages: a POST /runs
// body and when.
type sendBody struct {
	createRunBody
	When agentd.InputWhen `json:"when,omitempty"`
}

// SendMessage sends a user message to a conversation, whatever it is
// doing (POST /conversations/{id}/messages): a run of the conversation in
// flight takes it as steering input, as SteerRun sends it (Action
// agentd.SendSteered, and Input); else it starts the conversation's next
// run (Action agentd.SendStarted), with its last run's agent and
// parameters, after the inputs that run ended without. Run is the run
// that took it, either way: follow its Events.
func (c *Client) SendMessage(ctx context.Context, conversationID string, m SendMessage) (*Send, error) {
	var out Send
	var r CreateRun
	if m.NewRun != nil {
		r = *m.NewRun
		r.ConversationID, r.Webhook = "", nil
	}
	body := sendBody{createRunBody: bodyOf(r), When: m.When}
	body.Input = inputOf(m.Input, m.InputMessages)
	req := request{method: http.MethodPost, path: "/conversations/" + esc(conversationID) + "/messages", body: body, key: m.IdempotencyKey}
	if _, err := c.do(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
