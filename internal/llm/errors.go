package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

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

// bearerToken finds a bearer token, as in an Authorization header that a
// proxy echoes.
var bearerToken = regexp.MustCompile(`(?i)\bbearer\s+[^\s"',;]+`)

// errorBody reads what the body of an HTTP error response says. The SDK
// keeps the body it read in memory, so it can be read again here.
func (m *OpenAI) errorBody(res *http.Response) said {
	if res == nil || res.Body == nil {
		return said{}
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	return m.providerSaid(body)
}

// providerSaid reads an error body or the data of an error event: OpenAI's
// {"error":{"message","type","code"}}, or {"error": "text"}, or a top-level
// "message" or "detail" text (as FastAPI servers answer); any other body
// gives an excerpt of itself as the message.
func (m *OpenAI) providerSaid(body []byte) said {
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
				code:   m.clip(scalar(e.Code), maxCodeBytes),
				typ:    m.clip(scalar(e.Type), maxCodeBytes),
				msg:    m.clip(scalar(e.Message), MaxMessageBytes),
				status: scalar(e.Status),
			}
			if s.code != "" || s.typ != "" || s.msg != "" {
				return s
			}
		}
		for _, raw := range []json.RawMessage{top.Error, top.Message, top.Detail} {
			if text := scalar(raw); text != "" {
				return said{msg: m.clip(text, MaxMessageBytes)}
			}
		}
	}
	return said{msg: m.clip(excerpt(body), MaxExcerptBytes)}
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

// clip makes s fit to keep: the API key and bearer tokens scrubbed,
// invalid UTF-8 replaced, control characters and runs of white space made
// one space, and the result cut to at most n bytes on a rune boundary
// (ending with "…" when it was cut).
func (m *OpenAI) clip(s string, n int) string {
	s = strings.ToValidUTF8(m.scrub(s), "\uFFFD")
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

// scrub replaces the adapter's API key, and any bearer token, in s.
func (m *OpenAI) scrub(s string) string {
	if len(m.key) >= minKeyBytes {
		s = strings.ReplaceAll(s, m.key, redacted)
	}
	return bearerToken.ReplaceAllString(s, "Bearer "+redacted)
}

// scrubbedError is an error whose text had a secret in it: it says the
// text without it, and still unwraps to the error.
type scrubbedError struct {
	err  error
	text string
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubErr returns err, or an error that says err's text scrubbed when that
// text held the API key or a bearer token.
func (m *OpenAI) scrubErr(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if clean := m.scrub(text); clean != text {
		return &scrubbedError{err: err, text: clean}
	}
	return err
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
	for _, k := range []string{"incorrect api key", "invalid api key", "invalid_api_key"} {
		if strings.Contains(msg, k) {
			return true
		}
	}
	return false
}

// with sets what the provider said on e.
func (e *Error) with(s said) *Error {
	e.Code, e.Type, e.Message = s.code, s.typ, s.msg
	return e
}
