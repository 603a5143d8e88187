package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// This file is the one classifier of model failures that every adapter
// uses: an adapter says what it saw (a failure: the error, the HTTP status
// and headers, what the provider's body or error event said), and classify
// says what kind of failure that is, retryable or not, in words that hold
// no secret.

// said is what a provider said about a failure: the fields of its error
// body or error event, ready to be kept on an *Error (capped, scrubbed).
// status is a status the body itself gave ({"error":{"status":401}}), for
// classifying only.
type said struct {
	code, typ, msg string
	status         string
}

const (
	// maxErrorBody caps how much of an error response's body is read.
	maxErrorBody = 64 << 10
	// maxCodeBytes caps a provider's error code and type.
	maxCodeBytes = 100
	// minKeyBytes is the shortest API key that is scrubbed from what a
	// provider said: a shorter one is no real key (tests use "k"), and
	// replacing it everywhere would garble the text.
	minKeyBytes = 8
	redacted    = "[redacted]"
)

// errIdle is the cancel cause an adapter sets on its request when its idle
// timer fires.
var errIdle = errors.New("no chunk within the idle timeout")

// bearerToken finds a bearer token, as in an Authorization header that a
// proxy echoes.
var bearerToken = regexp.MustCompile(`(?i)\bbearer\s+[^\s"',;]+`)

// scrubber keeps an adapter's API key, and any bearer token, out of what a
// failure says. Its zero value scrubs bearer tokens only.
type scrubber struct {
	key string
}

// scrub replaces the key, and any bearer token, in s.
func (sc scrubber) scrub(s string) string {
	if len(sc.key) >= minKeyBytes {
		s = strings.ReplaceAll(s, sc.key, redacted)
	}
	return bearerToken.ReplaceAllString(s, "Bearer "+redacted)
}

// clip makes s fit to keep: scrubbed, invalid UTF-8 replaced, control
// characters and runs of white space made one space, and the result cut to
// at most n bytes on a rune boundary (ending with "…" when it was cut).
func (sc scrubber) clip(s string, n int) string {
	s = strings.ToValidUTF8(sc.scrub(s), "\uFFFD")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimRight(s[:cut], " ") + ellipsis
}

// scrubbedError is an error whose text had a secret in it: it says the
// text without it, and still unwraps to the error.
type scrubbedError struct {
	err  error
	text string
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }

// err returns err, or an error that says err's text scrubbed when that
// text held the key or a bearer token.
func (sc scrubber) err(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if clean := sc.scrub(text); clean != text {
		return &scrubbedError{err: err, text: clean}
	}
	return err
}

// body reads what the body of an HTTP error response says. It must be one
// that can still be read (an SDK that parsed it keeps it in memory).
func (sc scrubber) body(res *http.Response) said {
	if res == nil || res.Body == nil {
		return said{}
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	return sc.said(body)
}

// said reads an error body or the data of an error event:
// {"error":{"message","type","code"}} (OpenAI's, and Anthropic's inside its
// {"type":"error"} envelope), or {"error": "text"}, or a top-level
// "message" or "detail" text (as FastAPI servers answer); any other body
// gives an excerpt of itself as the message.
func (sc scrubber) said(body []byte) said {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return said{}
	}
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &top) == nil {
		var e struct {
			Code    json.RawMessage `json:"code"`
			Message json.RawMessage `json:"message"`
			Status  json.RawMessage `json:"status"`
			Type    json.RawMessage `json:"type"`
		}
		if json.Unmarshal(top.Error, &e) == nil {
			s := said{
				code:   sc.clip(scalar(e.Code), maxCodeBytes),
				typ:    sc.clip(scalar(e.Type), maxCodeBytes),
				msg:    sc.clip(scalar(e.Message), MaxMessageBytes),
				status: scalar(e.Status),
			}
			if s.code != "" || s.typ != "" || s.msg != "" {
				return s
			}
		}
		for _, raw := range []json.RawMessage{top.Error, top.Message, top.Detail} {
			if text := scalar(raw); text != "" {
				return said{msg: sc.clip(text, MaxMessageBytes)}
			}
		}
	}
	return said{msg: sc.clip(excerpt(body), MaxExcerptBytes)}
}

// scalar returns the text of a JSON string, number or boolean; "" for
// null, an object, an array, or nothing.
func scalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return ""
		}
		return s
	case '{', '[', 'n':
		return ""
	}
	return string(raw)
}

// excerpt returns the text of a body that is not JSON: an HTML page's text
// without its tags (its title and heading say what went wrong), any other
// body as it is.
func excerpt(body []byte) string {
	if body[0] != '<' {
		return string(body)
	}
	var b strings.Builder
	in := false
	for _, c := range string(body) {
		switch {
		case c == '<':
			in = true
			b.WriteByte(' ')
		case c == '>':
			in = false
		case !in:
			b.WriteRune(c)
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return string(body)
	}
	return b.String()
}

// failure is what an adapter saw of a failed request, in terms that every
// provider shares.
type failure struct {
	err    error       // what the request ended with
	status int         // the HTTP status of the response, 0 when none came
	header http.Header // its headers (Retry-After), nil when none came
	said   said        // what the provider said: the error body, or the error event
	// event: the failure is an error event inside a 200 stream (the
	// provider failed mid-way), not an error status.
	event bool
	// malformed: a 200 stream whose data is not what the API promises.
	malformed bool
}

// classify turns a failed request into an *Error. ctx is the caller's
// context, sctx the request's (ctx with the adapter's idle timer, whose
// cause is errIdle when it fired), idleFor the idle timeout. What the
// provider said is kept on the *Error; no text of it holds sc's key.
func (sc scrubber) classify(ctx, sctx context.Context, f failure, idleFor time.Duration) *Error {
	var e *Error
	switch {
	case ctx.Err() != nil:
		e = &Error{Kind: KindCancelled, Err: context.Cause(ctx)}
	case errors.Is(context.Cause(sctx), errIdle):
		e = &Error{Kind: KindIdle, Status: f.status, Err: fmt.Errorf("%w (%s)", errIdle, idleFor)}
	case f.event:
		e = classifyEvent(f.status, f.said, f.err)
	case f.status >= 400:
		e = classifyStatus(f.status, f.header, f.said, f.err)
	case f.malformed:
		e = &Error{Kind: KindServer, Status: f.status, Err: f.err}
	default:
		// Everything else is the transport: refused, reset, EOF, unexpected
		// EOF, DNS, TLS, a stream cut before its end. All of them may mend
		// on a retry.
		e = &Error{Kind: KindConnection, Status: f.status, Err: f.err}
	}
	e.Err = sc.err(e.Err)
	return e
}

// classifyEvent classifies an error event inside a stream of the given
// status; s is what the event said.
func classifyEvent(status int, s said, err error) *Error {
	e := &Error{Status: status, Err: err}
	switch {
	case isOverflow(s.code, s.msg):
		e.Kind = KindContextOverflow
	case isAuth(s):
		// A key refused mid-stream (a proxy checks it upstream) is refused
		// again on a retry.
		e.Kind = KindAuth
	case strings.Contains(s.code, "rate_limit") || strings.Contains(s.typ, "rate_limit"):
		e.Kind = KindRateLimited
	default:
		e.Kind = KindServer
	}
	return e.with(s)
}

// classifyStatus classifies an HTTP error status; s is what its body said.
func classifyStatus(status int, h http.Header, s said, err error) *Error {
	e := &Error{Status: status, Err: err, RetryAfter: retryAfter(h, time.Now())}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = KindAuth
	case isAuth(s):
		// A proxy's 400 or 5xx that says the key is wrong: no retry mends it.
		e.Kind = KindAuth
	case status == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
	case status == http.StatusRequestTimeout:
		// The server gave up waiting for our request: a retry may mend it.
		e.Kind = KindConnection
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge) && isOverflow(s.code, s.msg):
		e.Kind = KindContextOverflow
	case status >= 500:
		e.Kind = KindServer
	default:
		e.Kind = KindBadRequest
	}
	return e.with(s)
}

// with sets what the provider said on e.
func (e *Error) with(s said) *Error {
	e.Code, e.Type, e.Message = s.code, s.typ, s.msg
	return e
}

// isAuth reports whether what a provider said means that the API key is
// missing, wrong or not allowed: no retry of the same request mends that.
func isAuth(s said) bool {
	switch strings.ToLower(s.code) {
	case "invalid_api_key", "401", "403":
		return true
	}
	switch s.status {
	case "401", "403":
		return true
	}
	if strings.EqualFold(s.typ, "authentication_error") {
		return true
	}
	msg := strings.ToLower(s.msg)
	for _, k := range []string{"incorrect api key", "invalid api key", "invalid_api_key", "invalid x-api-key"} {
		if strings.Contains(msg, k) {
			return true
		}
	}
	return false
}

// isOverflow reports whether an error says the prompt is longer than the
// model's context window. OpenAI says so with the code
// context_length_exceeded; Anthropic with "prompt is too long"; compatible
// servers often only in the message.
func isOverflow(code, msg string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	msg = strings.ToLower(msg)
	for _, s := range []string{"context_length_exceeded", "context length", "context window", "maximum context", "prompt is too long"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// maxRetryAfter caps a server's Retry-After, so that a bogus value cannot
// overflow a time.Duration.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads retry-after-ms (milliseconds, OpenAI's) or Retry-After
// (seconds or an HTTP date); 0 when neither is present and valid.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return clampDuration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return clampDuration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampDuration(float64(t.Sub(now)))
	}
	return 0
}

func clampDuration(d float64) time.Duration {
	switch {
	case math.IsNaN(d) || d <= 0:
		return 0
	case d >= float64(maxRetryAfter):
		return maxRetryAfter
	}
	return time.Duration(d)
}
