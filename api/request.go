package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/runspec"
)

// maxKeyLen caps an Idempotency-Key.
const maxKeyLen = 255

// createRunRequest is the body of POST /runs: a run's template (its
// stored form, which schedules keep too) and how it is answered.
type createRunRequest struct {
	compose.Template
	Stream  *bool           `json:"stream"`
	Webhook json.RawMessage `json:"webhook"` // a URL, or {"url", "secret"}
}

// runFieldNames are the JSON names of the fields of a new run that every
// door taking agentd's own JSON reads (compose.Fields, compose.AgentFields).
var runFieldNames = append(jsonNames(reflect.TypeFor[compose.Fields]()), jsonNames(reflect.TypeFor[compose.AgentFields]())...)

// jsonNames lists the JSON names of struct type t's fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// readBody reads a request body of at most s.maxBody bytes, within
// s.bodyTimeout: a client that sends its body too slowly is answered 408
// and its connection released, rather than held.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return s.readBodyUpTo(w, r, s.maxBody)
}

// readBodyUpTo is readBody for a body of at most limit bytes. A body
// whose Content-Length is past limit is refused (413) unread, and one that
// would take the bodies in flight past the instance's budget (see
// bodyBudget) is answered 503 server_busy, unread too.
func (s *server) readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{}) //nolint:errcheck // the connection may be gone
	}
	limited := http.MaxBytesReader(w, r.Body, limit)
	in, err := reserveBody(r, limited)
	if err != nil {
		// The body is read to nothing before the answer: a client that is
		// still sending it when the connection closes gets a reset, not
		// the 503 that says to retry.
		io.Copy(io.Discard, limited) //nolint:errcheck // the answer is the same
		return nil, err
	}
	body, err := readAll(in, r.ContentLength)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		if errors.Is(err, errBodyBusy) {
			io.Copy(io.Discard, limited) //nolint:errcheck // as above
			return nil, errServerBusy
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, newError(http.StatusRequestTimeout, CodeBodyTimeout, "Body too slow",
				fmt.Sprintf("the request body did not arrive within %s", s.bodyTimeout))
		}
		return nil, newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body could not be read")
	}
	return body, nil
}

// readAll reads in to its end. With size, the body's Content-Length, it
// reads into a slice of that size, rather than one that grows by doubling
// (which for a large body allocates twice its size on the way).
func readAll(in io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(in)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(in, body); err != nil {
		return nil, err
	}
	return body, nil
}

// decodeStrict decodes exactly one JSON value from data into v, refusing
// fields that v does not have. prefix names where data sits in the body,
// for error messages ("" for the body itself).
func decodeStrict(data []byte, v any, prefix string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body is empty")
	}
	err := runspec.DecodeStrict(data, v)
	if errors.Is(err, runspec.ErrTrailing) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body must hold one JSON value")
	}
	if err != nil {
		return jsonError(err, prefix)
	}
	return nil
}

// jsonError turns an encoding/json error into a problem.
func jsonError(err error, prefix string) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON",
			fmt.Sprintf("the request body is not valid JSON (at byte %d)", syntax.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body is truncated JSON")
	case errors.As(err, &typ):
		if fe := compose.FieldProblem(err, prefix); fe != nil {
			return fe
		}
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body must be a JSON object")
	}
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		return compose.FieldProblem(err, prefix)
	}
	return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body could not be decoded")
}

// runSpec checks a decoded POST /runs body and composes its run, over
// its agent's definition if it names one, for the request's caller. It
// returns whether the client asked for a stream.
func (s *server) runSpec(ctx context.Context, req createRunRequest) (agentd.RunCreate, bool, error) {
	rc, err := s.compose.Template(ctx, callerOf(ctx), req.Template)
	return rc, req.Stream != nil && *req.Stream, err
}

// callerOf is who the request's runs are made for: its credential's
// tenant and actor.
func callerOf(ctx context.Context) compose.Caller {
	return compose.Caller{Tenant: TenantFromContext(ctx), Actor: ActorFromContext(ctx)}
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool { return runspec.IsNull(raw) }

// oneOf checks an optional enum field against values; absent gives the
// first value.
func oneOf[T ~string](field string, v *string, values []T) (T, error) {
	return runspec.OneOf(field, v, values)
}

// parseMetadata checks a metadata field: nothing, or a JSON object.
func parseMetadata(raw json.RawMessage) (json.RawMessage, error) { return runspec.Metadata(raw) }

// jsonFields are the fields of request bodies whose values are JSON that
// agentd keeps as a whole (a run's metadata, a client tool's parameters, an
// output format's schema, an action's result, a tool output): a problem
// inside one is that field's.
var jsonFields = []string{"metadata", "parameters", "schema", "result", "output"}

// checkText refuses a request body that holds a string which decoding
// would change (see runspec.TextAsSent), naming its field. It reads the
// body as sent, before its fields are decoded: a decoded string no longer
// shows what was replaced.
func checkText(body []byte) error { return runspec.TextAsSent(body, jsonFields...) }

// storable refuses a string field that cannot be stored as it is (a NUL
// character, invalid UTF-8): agentd keeps what a client sends, or refuses it.
func storable(field, s string) error { return runspec.Storable(field, s) }

// storableJSON refuses a JSON field that cannot be stored as it is (see
// runspec.StorableJSON).
func storableJSON(field string, raw []byte) error { return runspec.StorableJSON(field, raw) }

// validKey reports whether an Idempotency-Key is 1 to 255 printable ASCII
// characters.
func validKey(k string) bool {
	if k == "" || len(k) > maxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// fingerprint identifies a request for an idempotency key: the tenant, the
// request's scope (what it acts on) and its body as canonical JSON (keys
// sorted, spacing dropped), so that a client re-encoding the same request
// still matches. An empty body is its own value.
func fingerprint(tenant, scope string, body []byte) (string, error) {
	h := sha256.New()
	h.Write([]byte("github.com/agentd/agentd/v1\x00" + tenant + "\x00" + scope + "\x00"))
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("canonicalise body: %w", err)
		}
		canon, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("canonicalise body: %w", err)
		}
		h.Write(canon)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
