package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Hooks at the loop's boundaries (the tools file's "hooks"), beside the
// policies on each call: the operator's webhooks that see what the loop
// does and may act on it.
//
//   - on_answer is called when the model ends its turn with an answer; it
//     may answer {"continue": "text"}, which the run takes as input and
//     goes on with (a monitor or a test harness gives the next
//     instruction without starting a new run), at most MaxContinues times
//     a run.
//   - on_input is called for each user input (a run's first, and each
//     input sent to it while it works) before it is committed; it may add
//     a note (a system message stored with it), rewrite its texts, or
//     refuse it with a reason the client is shown.
//
// Each call is a POST of JSON with an Idempotency-Key that names what it is
// about (the same answer, or the same request, gives the same key on a
// retry or a takeover), bounded by the hook's timeout. A hook that fails
// (an error status, a timeout, a body that is no verdict) changes nothing:
// the answer ends the run, the input goes in as it came; the run's events
// record it (hook.called).

// LoopHook is one hook's endpoint.
type LoopHook struct {
	URL       string `json:"url"`
	TimeoutMS int    `json:"timeout_ms"` // 0: DefaultHookTimeout
	// MaxContinues bounds the continues of on_answer per run (0:
	// DefaultMaxContinues); the one past it ends the run with reason
	// max_continues.
	MaxContinues int `json:"max_continues"`
}

// Defaults of the loop hooks.
const (
	DefaultHookTimeout  = 5 * time.Second
	DefaultMaxContinues = 3
	maxVerdictBytes     = 64 << 10
)

// LoopHooks are the tools file's hooks; nil or empty: none.
type LoopHooks struct {
	OnAnswer *LoopHook `json:"on_answer"`
	OnInput  *LoopHook `json:"on_input"`
	client   *http.Client
}

// ParseLoopHooks reads the "hooks" of a tools file, strictly (none when
// absent); its hooks call with a copy of client that does not follow
// redirects (nil: the tools' pooled transport).
func ParseLoopHooks(data []byte, client *http.Client) (*LoopHooks, error) {
	var file struct {
		Hooks json.RawMessage `json:"hooks"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	if len(file.Hooks) == 0 || string(file.Hooks) == "null" {
		return nil, nil
	}
	var h LoopHooks
	if err := decodeStrict(file.Hooks, &h); err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	var errs []error
	for name, hk := range map[string]*LoopHook{"on_answer": h.OnAnswer, "on_input": h.OnInput} {
		if hk == nil {
			continue
		}
		if u, err := url.Parse(hk.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("hooks.%s.url: %q is not an absolute http(s) URL", name, hk.URL))
		}
		if hk.TimeoutMS < 0 || hk.MaxContinues < 0 {
			errs = append(errs, fmt.Errorf("hooks.%s: timeout_ms and max_continues must not be negative", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h.client = noRedirects(client)
	return &h, nil
}

// Continues is the most continues of on_answer a run takes.
func (h *LoopHooks) Continues() int {
	if h == nil || h.OnAnswer == nil || h.OnAnswer.MaxContinues <= 0 {
		return DefaultMaxContinues
	}
	return h.OnAnswer.MaxContinues
}

// AnswerCall is what on_answer is told: the run, the step whose answer it
// is, the answer's text, and how many continues the run took so far.
type AnswerCall struct {
	Hook           string `json:"hook"` // "on_answer"
	TenantID       string `json:"tenant_id"`
	RunID          string `json:"run_id"`
	ConversationID string `json:"conversation_id"`
	Step           int    `json:"step"`
	Answer         string `json:"answer"`
	Continues      int    `json:"continues"`
}

// AnswerVerdict is what on_answer decided: Continue, when not empty, is
// the input the run goes on with.
type AnswerVerdict struct {
	Continue string `json:"continue"`
}

// Answer calls on_answer with c, under key; ok is false when there is no
// such hook.
func (h *LoopHooks) Answer(ctx context.Context, key string, c AnswerCall) (v AnswerVerdict, ok bool, err error) {
	if h == nil || h.OnAnswer == nil {
		return v, false, nil
	}
	c.Hook = "on_answer"
	return v, true, h.call(ctx, h.OnAnswer, key, c, &v)
}

// InputCall is what on_input is told: who sends the input, to which run
// (none yet for a run's first) and conversation, and its messages' texts.
type InputCall struct {
	Hook           string   `json:"hook"` // "on_input"
	TenantID       string   `json:"tenant_id"`
	Actor          string   `json:"actor,omitempty"`
	RunID          string   `json:"run_id,omitempty"`
	ConversationID string   `json:"conversation_id,omitempty"`
	Texts          []string `json:"texts"`
}

// Actions of on_input.
const (
	InputAllow   = "allow"
	InputRefuse  = "refuse"
	InputRewrite = "rewrite"
)

// InputVerdict is what on_input decided: Action allow (also when empty),
// refuse (with Reason), or rewrite (Texts replace the messages' texts, one
// each); Note, when not empty, goes with the input as a system message.
type InputVerdict struct {
	Action string   `json:"action"`
	Reason string   `json:"reason"`
	Texts  []string `json:"texts"`
	Note   string   `json:"note"`
}

// Input calls on_input with c, under key; ok is false when there is no
// such hook. A verdict that is not one of the actions, or a rewrite of
// another number of texts, is an error.
func (h *LoopHooks) Input(ctx context.Context, key string, c InputCall) (v InputVerdict, ok bool, err error) {
	if h == nil || h.OnInput == nil {
		return v, false, nil
	}
	c.Hook = "on_input"
	if err := h.call(ctx, h.OnInput, key, c, &v); err != nil {
		return InputVerdict{}, true, err
	}
	switch v.Action {
	case "", InputAllow, InputRefuse:
	case InputRewrite:
		if len(v.Texts) != len(c.Texts) {
			return InputVerdict{}, true, fmt.Errorf("on_input rewrote %d texts of %d", len(v.Texts), len(c.Texts))
		}
	default:
		return InputVerdict{}, true, fmt.Errorf("on_input answered action %q: want allow, refuse or rewrite", v.Action)
	}
	return v, true, nil
}

// call POSTs body to hk under key, within its timeout, and decodes its
// answer into v: a 2xx with a JSON object, or an empty body (no verdict).
func (h *LoopHooks) call(ctx context.Context, hk *LoopHook, key string, body, v any) error {
	timeout := DefaultHookTimeout
	if hk.TimeoutMS > 0 {
		timeout = time.Duration(hk.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := newRequest(ctx, http.MethodPost, hk.URL, b)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := do(ctx, h.client, req, "hook")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, more, err := readBody(ctx, resp.Body, maxVerdictBytes, "hook")
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp, data, "hook")
	}
	if more {
		return fmt.Errorf("hook answered more than %d bytes", maxVerdictBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("hook answered no verdict: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("hook answered data after its verdict")
	}
	return nil
}
