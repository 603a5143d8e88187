package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/clean"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/tools"
)

// Limits of a POST /runs body beyond its overall size.
const (
	maxMetadataBytes = 16 << 10
	maxModelLen      = 256
	maxKeyLen        = 255
	// maxInputMessages caps the messages of "input"; the body's size
	// (AGENTD_MAX_BODY_BYTES) caps their text.
	maxInputMessages = 1000
)

// createRunRequest is the body of POST /runs. Pointers tell an absent field
// from a zero one.
type createRunRequest struct {
	ConversationID *string          `json:"conversation_id"`
	Input          json.RawMessage  `json:"input"`
	Model          *string          `json:"model"`
	Instructions   *string          `json:"instructions"`
	Tools          *[]string        `json:"tools"`
	MaxSteps       *int             `json:"max_steps"`
	Timeouts       *timeoutsRequest `json:"timeouts"`
	Stream         *bool            `json:"stream"`
	OnDisconnect   *string          `json:"on_disconnect"`
	IfBusy         *string          `json:"if_busy"`
	OnQuota        *string          `json:"on_quota"`
	CompactAt      *float64         `json:"compact_at"`
	LoopLimits     *struct {
		FailuresInARow *int `json:"failures_in_a_row"`
		IdenticalCalls *int `json:"identical_calls"`
	} `json:"loop_limits"`
	Metadata    json.RawMessage      `json:"metadata"`
	ClientTools *[]clientToolRequest `json:"client_tools"`
}

// clientToolRequest is one of a run's client_tools.
type clientToolRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// maxClientTools caps a run's client_tools.
const maxClientTools = 64

// clientTools checks a run's client tools: names as tool names go, not
// the name of a server tool nor used twice, descriptions of at most 4 KiB,
// parameters a JSON object schema (absent: no arguments).
func (s *server) clientTools(req *[]clientToolRequest) ([]agentd.ClientTool, error) {
	if req == nil {
		return nil, nil
	}
	if len(*req) > maxClientTools {
		return nil, fieldError("client_tools", "must hold at most %d tools", maxClientTools)
	}
	out := make([]agentd.ClientTool, 0, len(*req))
	seen := map[string]bool{}
	for i, t := range *req {
		field := func(name string) string { return fmt.Sprintf("client_tools[%d].%s", i, name) }
		if t.Name == nil || !tools.ValidName(*t.Name) {
			return nil, fieldError(field("name"), "must match ^[a-zA-Z0-9_-]{1,64}$")
		}
		name := *t.Name
		if seen[name] {
			return nil, fieldError(field("name"), "%q is used twice", name)
		}
		seen[name] = true
		if s.tools != nil {
			if _, ok := s.tools.Get(name); ok {
				return nil, fieldError(field("name"), "%q is the name of a server tool (GET /tools)", name)
			}
		}
		ct := agentd.ClientTool{Name: name, Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}
		if t.Description != nil {
			if len(*t.Description) > 4096 {
				return nil, fieldError(field("description"), "must be at most 4096 bytes")
			}
			if err := storable(field("description"), *t.Description); err != nil {
				return nil, err
			}
			ct.Description = *t.Description
		}
		if !isNull(t.Parameters) {
			if err := storableJSON(field("parameters"), t.Parameters); err != nil {
				return nil, err
			}
			if err := tools.CheckParameters(name, t.Parameters); err != nil {
				return nil, fieldError(field("parameters"), "%v", err)
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, t.Parameters); err != nil {
				return nil, fieldError(field("parameters"), "is not JSON")
			}
			ct.Parameters = buf.Bytes()
		}
		out = append(out, ct)
	}
	return out, nil
}

type timeoutsRequest struct {
	TotalMS  *int64 `json:"total_ms"`
	StepMS   *int64 `json:"step_ms"`
	IdleMS   *int64 `json:"idle_ms"`
	ToolMS   *int64 `json:"tool_ms"`
	ActionMS *int64 `json:"action_ms"`
}

// inputMessage is one element of an "input" array.
type inputMessage struct {
	Role    *string `json:"role"`
	Content *string `json:"content"`
}

// readBody reads a request body of at most limit bytes.
// readBody reads a request body of at most s.maxBody bytes, within
// s.bodyTimeout: a client that sends its body too slowly is answered 408
// and its connection released, rather than held.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{}) //nolint:errcheck // the connection may be gone
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
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

// decodeStrict decodes exactly one JSON value from data into v, refusing
// fields that v does not have. prefix names where data sits in the body,
// for error messages ("" for the body itself).
func decodeStrict(data []byte, v any, prefix string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, prefix)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body must hold one JSON value")
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
		field := joinField(prefix, typ.Field)
		if field == "" {
			return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body must be a JSON object")
		}
		return fieldError(field, "must be %s, not %s", jsonType(typ.Type), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field := joinField(prefix, strings.Trim(name, `"`))
		return fieldError(field, "is not a known field")
	}
	return newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body could not be decoded")
}

func joinField(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// jsonType names the JSON type that a Go type decodes from.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// runParams checks a decoded request and fills in the defaults. It returns
// the create parameters (without tenant and idempotency key) and whether the
// client asked for a stream.
func (s *server) runParams(req createRunRequest) (persist.RunCreateParams, bool, error) {
	var p persist.RunCreateParams
	var err error
	if req.ConversationID != nil {
		id, err := uuid.Parse(*req.ConversationID)
		if err != nil {
			return p, false, fieldError("conversation_id", "must be a UUID")
		}
		p.ConversationID = id.String()
	}
	if p.Input, err = parseInput(req.Input); err != nil {
		return p, false, err
	}
	if p.Model, err = s.model(req.Model); err != nil {
		return p, false, err
	}
	if req.Instructions != nil {
		if err := storable("instructions", *req.Instructions); err != nil {
			return p, false, err
		}
		p.Params.Instructions = *req.Instructions
	}
	if p.Params.Tools, err = s.toolNames(req.Tools); err != nil {
		return p, false, err
	}
	if p.Params.ClientTools, err = s.clientTools(req.ClientTools); err != nil {
		return p, false, err
	}
	p.Params.MaxSteps = s.defaults.MaxSteps
	if req.MaxSteps != nil {
		if *req.MaxSteps < 1 || *req.MaxSteps > s.defaults.MaxStepsLimit {
			return p, false, fieldError("max_steps", "must be between 1 and %d", s.defaults.MaxStepsLimit)
		}
		p.Params.MaxSteps = *req.MaxSteps
	}
	if p.Params.Timeouts, err = s.timeouts(req.Timeouts); err != nil {
		return p, false, err
	}
	if p.Params.OnDisconnect, err = oneOf("on_disconnect", req.OnDisconnect, agentd.OnDisconnectPolicies()); err != nil {
		return p, false, err
	}
	if p.Params.IfBusy, err = oneOf("if_busy", req.IfBusy, agentd.IfBusyPolicies()); err != nil {
		return p, false, err
	}
	onQuota, err := oneOf("on_quota", req.OnQuota, agentd.OnQuotaPolicies())
	if err != nil {
		return p, false, err
	}
	p.RejectOverQuota = onQuota == agentd.OnQuotaReject
	if req.CompactAt != nil {
		if *req.CompactAt <= 0 || *req.CompactAt >= 1 {
			return p, false, fieldError("compact_at", "must be a fraction between 0 and 1 (exclusive), such as 0.8")
		}
		p.Params.CompactAt = *req.CompactAt
	}
	p.Params.LoopLimits = agentd.LoopLimits{}.OrDefaults()
	if l := req.LoopLimits; l != nil {
		for _, f := range []struct {
			name string
			in   *int
			out  *int
		}{
			{"loop_limits.failures_in_a_row", l.FailuresInARow, &p.Params.LoopLimits.FailuresInARow},
			{"loop_limits.identical_calls", l.IdenticalCalls, &p.Params.LoopLimits.IdenticalCalls},
		} {
			if f.in == nil {
				continue
			}
			if *f.in < 1 || *f.in > 1000 {
				return p, false, fieldError(f.name, "must be between 1 and 1000")
			}
			*f.out = *f.in
		}
	}
	if p.Params.Metadata, err = parseMetadata(req.Metadata); err != nil {
		return p, false, err
	}
	return p, req.Stream != nil && *req.Stream, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// parseInput reads "input": a non-empty string (one user message) or a
// non-empty array of messages.
func parseInput(raw json.RawMessage) ([]agentd.InputMessage, error) {
	if isNull(raw) {
		return nil, fieldError("input", "is required: a non-empty string or a non-empty array of messages")
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fieldError("input", "must be a string or an array of messages")
		}
		if strings.TrimSpace(text) == "" {
			return nil, fieldError("input", "must not be empty")
		}
		if err := storable("input", text); err != nil {
			return nil, err
		}
		return []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}, nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fieldError("input", "must be a string or an array of messages")
		}
		if len(items) == 0 {
			return nil, fieldError("input", "must not be an empty array")
		}
		if len(items) > maxInputMessages {
			return nil, fieldError("input", "must hold at most %d messages, not %d", maxInputMessages, len(items))
		}
		out := make([]agentd.InputMessage, 0, len(items))
		for i, item := range items {
			m, err := parseInputMessage(item, fmt.Sprintf("input[%d]", i))
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	return nil, fieldError("input", "must be a string or an array of messages")
}

func parseInputMessage(raw json.RawMessage, field string) (agentd.InputMessage, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return agentd.InputMessage{}, fieldError(field, "must be an object with role and content")
	}
	var m inputMessage
	if err := decodeStrict(raw, &m, field); err != nil {
		return agentd.InputMessage{}, err
	}
	if m.Role == nil {
		return agentd.InputMessage{}, fieldError(field+".role", "is required")
	}
	switch *m.Role {
	case "user", "assistant", "system":
	default:
		return agentd.InputMessage{}, fieldError(field+".role", "must be user, assistant or system, not %q", *m.Role)
	}
	if m.Content == nil || *m.Content == "" {
		return agentd.InputMessage{}, fieldError(field+".content", "is required: a non-empty string")
	}
	if err := storable(field+".content", *m.Content); err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: agentd.Role(*m.Role), Content: *m.Content}, nil
}

func (s *server) model(m *string) (string, error) {
	if m == nil {
		if s.defaults.Model == "" {
			return "", fieldError("model", "is required: the server has no default model")
		}
		return s.defaults.Model, nil
	}
	if strings.TrimSpace(*m) == "" || len(*m) > maxModelLen {
		return "", fieldError("model", "must be a non-empty string of at most %d bytes", maxModelLen)
	}
	if err := storable("model", *m); err != nil {
		return "", err
	}
	return *m, nil
}

// toolNames checks the requested tools: nil (absent) means every registered
// tool, an empty list none.
func (s *server) toolNames(names *[]string) ([]string, error) {
	if names == nil {
		return nil, nil
	}
	out := make([]string, 0, len(*names))
	for _, n := range *names {
		known := false
		if s.tools != nil {
			_, known = s.tools.Get(n)
		}
		if !known {
			e := newError(http.StatusUnprocessableEntity, CodeUnknownTool, "Unknown tool",
				fmt.Sprintf("tools: no tool named %q is registered (see GET /tools)", n))
			e.field, e.tool = "tools", n
			return nil, e
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// timeouts checks the requested timeouts against the server's ceilings: a
// field may not exceed its ceiling, and 0 asks for the ceiling itself.
func (s *server) timeouts(t *timeoutsRequest) (agentd.Timeouts, error) {
	out, ceil := s.defaults.Timeouts, s.defaults.MaxTimeouts
	if t == nil {
		return out, nil
	}
	for _, f := range []struct {
		name string
		in   *int64
		max  int64
		out  *int64
	}{
		{"timeouts.total_ms", t.TotalMS, ceil.TotalMS, &out.TotalMS},
		{"timeouts.step_ms", t.StepMS, ceil.StepMS, &out.StepMS},
		{"timeouts.idle_ms", t.IdleMS, ceil.IdleMS, &out.IdleMS},
		{"timeouts.tool_ms", t.ToolMS, ceil.ToolMS, &out.ToolMS},
		{"timeouts.action_ms", t.ActionMS, ceil.ActionMS, &out.ActionMS},
	} {
		switch {
		case f.in == nil:
		case *f.in < 0 || *f.in > f.max:
			return out, fieldError(f.name, "must be between 0 (the server's ceiling) and %d, the server's ceiling", f.max)
		case *f.in == 0:
			*f.out = f.max
		default:
			*f.out = *f.in
		}
	}
	return out, nil
}

// oneOf checks an optional enum field against values; absent gives the
// first value.
func oneOf[T ~string](field string, v *string, values []T) (T, error) {
	if v == nil {
		return values[0], nil
	}
	if slices.Contains(values, T(*v)) {
		return T(*v), nil
	}
	names := make([]string, len(values))
	for i, x := range values {
		names[i] = string(x)
	}
	return "", fieldError(field, "must be one of %s, not %q", strings.Join(names, ", "), *v)
}

func parseMetadata(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] != '{' {
		return nil, fieldError("metadata", "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fieldError("metadata", "must be a JSON object")
	}
	if buf.Len() > maxMetadataBytes {
		return nil, fieldError("metadata", "must be at most %d bytes of JSON", maxMetadataBytes)
	}
	if err := storableJSON("metadata", buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// storable refuses a string field that cannot be stored as it is (a NUL
// character, invalid UTF-8): agentd keeps what a client sends, or refuses it.
func storable(field, s string) error {
	if problem := clean.TextProblem(s); problem != "" {
		return fieldError(field, "%s; send valid UTF-8 text without NUL characters", problem)
	}
	return nil
}

// storableJSON refuses a JSON field that cannot be stored as it is: a NUL
// character, a lone surrogate escape, invalid UTF-8, or a number outside
// float64's range (send it as a string).
func storableJSON(field string, raw []byte) error {
	if problem := clean.JSONProblem(raw); problem != "" {
		return fieldError(field, "%s; numbers must fit a float64 (send others as strings) and strings must be valid Unicode without NUL", problem)
	}
	return nil
}

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
