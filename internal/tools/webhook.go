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
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/agentd/agentd"
)

// maxWebhookAttempts caps max_attempts in a tools file.
const maxWebhookAttempts = 10

// WebhookConfig is one entry of a tools file: a tool run by POSTing to URL.
type WebhookConfig struct {
	Name          string            `json:"name"`
	Description   string            `json:"description"`
	Parameters    json.RawMessage   `json:"parameters"`
	URL           string            `json:"url"`
	Effect        agentd.Effect     `json:"effect"`
	TimeoutMS     int               `json:"timeout_ms"`
	Headers       map[string]string `json:"headers"`
	MaxAttempts   int               `json:"max_attempts"`
	NeedsApproval bool              `json:"needs_approval"`
	ReconcileURL  string            `json:"reconcile_url"`
	// MaxResultBytes is the largest result shown to the model whole; a
	// larger one is kept as an artifact (0: 16 KiB).
	MaxResultBytes int `json:"max_result_bytes"`
}

// LoadFile reads a tools file (see ParseWebhooks).
func LoadFile(path string, client *http.Client) ([]Tool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tools file: %w", err)
	}
	tools, err := ParseWebhooks(data, client)
	if err != nil {
		return nil, fmt.Errorf("load tools file %s: %w", path, err)
	}
	return tools, nil
}

// ParseWebhooks reads a tools file, {"tools": [WebhookConfig...]}, strictly:
// an unknown field, a missing name or url, a missing or unknown effect, a
// URL that is not absolute http(s), a negative timeout, or a parameters
// schema that does not compile is an error naming the entry by index and
// name. All problems are reported together. A missing parameters schema
// means an object with no properties. The tools use a copy of client (nil: a
// client over the tools' pooled transport, which keeps up to 64 idle
// connections per host) that does not follow redirects.
func ParseWebhooks(data []byte, client *http.Client) ([]Tool, error) {
	var file struct {
		Tools []json.RawMessage `json:"tools"`
		// Read by internal/mcptools and by the policies.
		MCPServers json.RawMessage `json:"mcp_servers"`
		Policies   json.RawMessage `json:"policies"`
		Hooks      json.RawMessage `json:"hooks"`
		// Read by ParseHostedTools.
		HostedTools json.RawMessage `json:"hosted_tools"`
	}
	if err := decodeStrict(data, &file); err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	if file.Tools == nil && file.MCPServers == nil && file.Hooks == nil && file.HostedTools == nil {
		return nil, errors.New(`tools file: missing "tools" array (or "mcp_servers", "hooks" or "hosted_tools")`)
	}
	c := noRedirects(client)
	var (
		tools []Tool
		errs  []error
		seen  = map[string]int{}
	)
	for i, raw := range file.Tools {
		var cfg WebhookConfig
		if err := decodeStrict(raw, &cfg); err != nil {
			var loose struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(raw, &loose) // for the message only
			errs = append(errs, fmt.Errorf("%s: %w", entryName(i, loose.Name), err))
			continue
		}
		if j, dup := seen[cfg.Name]; dup && cfg.Name != "" {
			errs = append(errs, fmt.Errorf("%s: duplicate name, already used by tools[%d]", entryName(i, cfg.Name), j))
			continue
		}
		seen[cfg.Name] = i
		t, err := NewWebhook(cfg, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", entryName(i, cfg.Name), err))
			continue
		}
		tools = append(tools, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return tools, nil
}

func entryName(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("tools[%d]", i)
	}
	return fmt.Sprintf("tools[%d] (%q)", i, name)
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// NewWebhook checks cfg and returns the tool it describes. A nil client means
// a client over the tools' pooled transport; unlike ParseWebhooks, client is
// used as given, so it should not follow redirects.
func NewWebhook(cfg WebhookConfig, client *http.Client) (Tool, error) {
	var errs []error
	if !namePattern.MatchString(cfg.Name) {
		errs = append(errs, fmt.Errorf("invalid or missing name %q: want ^[a-zA-Z0-9_-]{1,64}$", cfg.Name))
	}
	switch {
	case cfg.Effect == "":
		errs = append(errs, fmt.Errorf("missing effect: want %s, %s or %s", agentd.EffectReadOnly, agentd.EffectIdempotent, agentd.EffectSideEffect))
	case !cfg.Effect.Valid():
		errs = append(errs, fmt.Errorf("invalid effect %q: want %s, %s or %s", cfg.Effect, agentd.EffectReadOnly, agentd.EffectIdempotent, agentd.EffectSideEffect))
	}
	if cfg.URL == "" {
		errs = append(errs, errors.New("missing url"))
	} else if err := checkURL(cfg.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	if cfg.ReconcileURL != "" {
		if err := checkURL(cfg.ReconcileURL); err != nil {
			errs = append(errs, fmt.Errorf("reconcile_url: %w", err))
		}
	}
	if cfg.TimeoutMS < 0 {
		errs = append(errs, fmt.Errorf("negative timeout_ms %d", cfg.TimeoutMS))
	}
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > maxWebhookAttempts {
		errs = append(errs, fmt.Errorf("max_attempts %d out of range 0..%d", cfg.MaxAttempts, maxWebhookAttempts))
	}
	if cfg.MaxResultBytes < 0 || cfg.MaxResultBytes > MaxResultBytes {
		errs = append(errs, fmt.Errorf("max_result_bytes %d out of range 0..%d", cfg.MaxResultBytes, MaxResultBytes))
	}
	for k := range cfg.Headers {
		if http.CanonicalHeaderKey(k) == "Content-Type" || http.CanonicalHeaderKey(k) == "Idempotency-Key" {
			errs = append(errs, fmt.Errorf("headers: %s is set by the server", k))
		}
	}
	params := cfg.Parameters
	if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	} else if _, err := compileSchema(cfg.Name, params); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if client == nil {
		client = &http.Client{Transport: pooledTransport()}
	}
	return &webhook{
		spec: Spec{
			Name:           cfg.Name,
			Description:    cfg.Description,
			Parameters:     params,
			Effect:         cfg.Effect,
			Timeout:        time.Duration(cfg.TimeoutMS) * time.Millisecond,
			MaxAttempts:    cfg.MaxAttempts,
			NeedsApproval:  cfg.NeedsApproval,
			MaxResultBytes: cfg.MaxResultBytes,
		},
		url:          cfg.URL,
		reconcileURL: cfg.ReconcileURL,
		headers:      cfg.Headers,
		secrets:      secretsOf(cfg.Headers),
		client:       client,
	}, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q not supported: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("missing host")
	}
	return nil
}

type webhook struct {
	spec         Spec
	url          string
	reconcileURL string
	headers      map[string]string
	secrets      [][]byte // see redact
	client       *http.Client
}

// minSecret is the shortest header value (or word of one) that redact
// hides: shorter ones (a version, a flag) would hide ordinary text.
const minSecret = 8

// secretsOf lists the configured header values, and each of their
// space-separated words (the token of "Bearer <token>"), of minSecret bytes
// or more, longest first.
func secretsOf(headers map[string]string) [][]byte {
	var out [][]byte
	add := func(s string) {
		if len(s) >= minSecret && !slices.ContainsFunc(out, func(b []byte) bool { return string(b) == s }) {
			out = append(out, []byte(s))
		}
	}
	for _, v := range headers {
		add(v)
		for _, f := range strings.Fields(v) {
			add(f)
		}
	}
	slices.SortFunc(out, func(a, b []byte) int { return len(b) - len(a) })
	return out
}

// redacted replaces a configured header value in what a webhook answered.
var redacted = []byte("[redacted]")

// redact hides the webhook's configured header values in b, its answer: a
// server that echoes its request's headers (in an error page, say) must not
// carry them into results, errors, events or logs.
func (w *webhook) redact(b []byte) []byte {
	for _, s := range w.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, redacted)
		}
	}
	return b
}

var _ Reconciler = (*webhook)(nil)

func (w *webhook) Spec() Spec { return w.spec }

// webhookRequest is the body POSTed to a webhook.
type webhookRequest struct {
	Arguments      json.RawMessage `json:"arguments"`
	IdempotencyKey string          `json:"idempotency_key"`
	RunID          string          `json:"run_id"`
	CallID         string          `json:"call_id"`
	Attempt        int             `json:"attempt,omitempty"`
}

// requestBody is the JSON body sent for call; attempt 0 leaves it out.
func requestBody(call Call, attempt int) ([]byte, error) {
	args := call.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	return json.Marshal(webhookRequest{Arguments: args, IdempotencyKey: call.IdempotencyKey,
		RunID: call.RunID, CallID: call.CallID, Attempt: attempt})
}

// post sends body to url and returns the 2xx answer, or a classified error.
func (w *webhook) post(ctx context.Context, url, key string, body []byte) ([]byte, bool, error) {
	req, err := newRequest(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, false, &Error{Kind: KindFinal, Message: "cannot build webhook request", Err: err}
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// The attempt's trace context (traceparent), when tracing is on.
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := do(ctx, w.client, req, "webhook")
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	data, more, err := readBody(ctx, resp.Body, MaxResultBytes, "webhook")
	if err != nil {
		return nil, false, err
	}
	data = w.redact(data)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, false, statusError(resp, data, "webhook")
	}
	return data, more, nil
}

// Invoke POSTs {"arguments", "idempotency_key", "run_id", "call_id",
// "attempt"} to the webhook. A 2xx JSON body is the result; any other 2xx
// body is returned as a JSON string, an empty one as null.
func (w *webhook) Invoke(ctx context.Context, call Call) (json.RawMessage, error) {
	body, err := requestBody(call, call.Attempt)
	if err != nil {
		return nil, &Error{Kind: KindFinal, Message: "arguments are not valid JSON", Err: err}
	}
	data, more, err := w.post(ctx, w.url, call.IdempotencyKey, body)
	if err != nil {
		return nil, err
	}
	if more {
		return nil, TooLarge(-1)
	}
	return asResult(data), nil
}

// TooLarge is the final error of a tool whose result of n bytes (-1: not
// read to its end) is over MaxResultBytes.
func TooLarge(n int) *Error {
	size := fmt.Sprintf("%d bytes", n)
	if n < 0 {
		size = fmt.Sprintf("larger than %d bytes", MaxResultBytes)
	}
	return &Error{Kind: KindFinal, Message: fmt.Sprintf("the tool's result is %s, over the %d bytes agentd keeps of a result", size, MaxResultBytes)}
}

// asResult turns a 2xx body into a JSON result.
func asResult(data []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return json.RawMessage(`null`)
	}
	if json.Valid(trimmed) {
		return json.RawMessage(trimmed)
	}
	s, _ := json.Marshal(string(bytes.ToValidUTF8(data, []byte("\uFFFD"))))
	return s
}

// Outcome is what a reconciler found out about a call whose outcome was
// unknown.
type Outcome string

// Outcomes of reconciliation.
const (
	// OutcomeSucceeded: the effect happened; Reconciliation.Result holds the
	// result.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the call failed for good; Reconciliation.Message says why.
	OutcomeFailed Outcome = "failed"
	// OutcomeNotApplied: the effect did not happen; the call may be retried
	// with the same idempotency key.
	OutcomeNotApplied Outcome = "not_applied"
	// OutcomeUnknown: the reconciler cannot tell yet.
	OutcomeUnknown Outcome = "unknown"
)

// Reconciliation is the answer of a Reconciler.
type Reconciliation struct {
	Outcome Outcome         `json:"status"`
	Result  json.RawMessage `json:"result,omitempty"`
	Message string          `json:"error,omitempty"`
}

// Reconciler is implemented by tools that can find out what became of a
// side_effect call whose attempt ended with an unknown outcome. The engine
// asserts it on a Tool.
type Reconciler interface {
	// Reconcile asks about call (by its idempotency key). An error means
	// the question could not be answered; the outcome stays unknown.
	Reconcile(ctx context.Context, call Call) (Reconciliation, error)
	// CanReconcile reports whether this tool has a reconciler configured.
	CanReconcile() bool
}

// CanReconcile reports whether the webhook has a reconcile_url.
func (w *webhook) CanReconcile() bool { return w.reconcileURL != "" }

// Reconcile POSTs the body of Invoke, without the attempt, to reconcile_url and expects a 2xx
// JSON answer {"status": "succeeded"|"failed"|"not_applied"|"unknown",
// "result"?: any, "error"?: string}.
func (w *webhook) Reconcile(ctx context.Context, call Call) (Reconciliation, error) {
	if w.reconcileURL == "" {
		return Reconciliation{}, errors.New("webhook: no reconcile_url")
	}
	body, err := requestBody(call, 0) // no attempt: it asks about the call
	if err != nil {
		return Reconciliation{}, fmt.Errorf("reconcile: %w", err)
	}
	data, _, err := w.post(ctx, w.reconcileURL, call.IdempotencyKey, body)
	if err != nil {
		return Reconciliation{}, fmt.Errorf("reconcile: %w", err)
	}
	var r Reconciliation
	if err := json.Unmarshal(data, &r); err != nil {
		return Reconciliation{}, fmt.Errorf("reconcile: bad answer: %w", err)
	}
	switch r.Outcome {
	case OutcomeSucceeded:
		if len(r.Result) == 0 {
			r.Result = json.RawMessage(`null`)
		}
	case OutcomeFailed, OutcomeNotApplied, OutcomeUnknown:
	default:
		return Reconciliation{}, fmt.Errorf("reconcile: unknown status %q", r.Outcome)
	}
	return r, nil
}
