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

	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// maxKeyLen caps an Idempotency-Key.
const maxKeyLen = 255

// createRunRequest is the body of POST /runs. Pointers tell an absent field
// from a zero one.
type createRunRequest struct {
	ConversationID *string          `json:"conversation_id"`
	Input          json.RawMessage  `json:"input"`
	Stream         *bool            `json:"stream"`
	OnDisconnect   *string          `json:"on_disconnect"`
	Sampling       *samplingRequest `json:"sampling"`
	Webhook        json.RawMessage  `json:"webhook"` // a URL, or {"url", "secret"}
	runFields
	agentFields
}

// samplingRequest is a run's sampling.
type samplingRequest struct {
	MaxOutputTokens *int     `json:"max_output_tokens"`
	Temperature     *float64 `json:"temperature"`
	TopP            *float64 `json:"top_p"`
	Format          *struct {
		Type        *string         `json:"type"`
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"format"`
	// ToolChoice is auto, none, required, or {"type": "function", "name"}.
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

// request is s as the run spec builder takes it.
func (s *samplingRequest) request() (*runspec.Sampling, error) {
	if s == nil {
		return nil, nil
	}
	out := &runspec.Sampling{MaxOutputTokens: s.MaxOutputTokens, Temperature: s.Temperature, TopP: s.TopP,
		ParallelToolCalls: s.ParallelToolCalls}
	if f := s.Format; f != nil {
		out.Format = &runspec.OutputFormat{Type: f.Type, Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}
	}
	if !isNull(s.ToolChoice) {
		c, err := toolChoice(s.ToolChoice)
		if err != nil {
			return nil, err
		}
		out.ToolChoice = &c
	}
	return out, nil
}

// toolChoice reads sampling.tool_choice: "auto", "none", "required", or
// {"type": "function", "name"} for the tool the model must call.
func toolChoice(raw json.RawMessage) (agentd.ToolChoice, error) {
	const field = "sampling.tool_choice"
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		if mode == agentd.ToolChoiceTool {
			return agentd.ToolChoice{}, fieldError(field, "names its tool as {\"type\": \"function\", \"name\": ...}")
		}
		return agentd.ToolChoice{Mode: mode}, nil // the builder checks the mode
	}
	var named struct {
		Type *string `json:"type"`
		Name *string `json:"name"`
	}
	if err := decodeStrict(raw, &named, field); err != nil {
		return agentd.ToolChoice{}, fieldError(field, "must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
	}
	if named.Type == nil || *named.Type != "function" || named.Name == nil || *named.Name == "" {
		return agentd.ToolChoice{}, fieldError(field, "must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
	}
	return agentd.ToolChoice{Mode: agentd.ToolChoiceTool, Name: *named.Name}, nil
}

// runFields are the fields of a new run that every door taking agentd's
// own JSON reads alike: POST /runs, and the AI SDK's chat beside its own.
type runFields struct {
	Model        *string              `json:"model"`
	Instructions *string              `json:"instructions"`
	Tools        *[]json.RawMessage   `json:"tools"`
	ClientTools  *[]clientToolRequest `json:"client_tools"`
	MaxSteps     *int                 `json:"max_steps"`
	Timeouts     *timeoutsRequest     `json:"timeouts"`
	IfBusy       *string              `json:"if_busy"`
	OnQuota      *string              `json:"on_quota"`
	CompactAt    *float64             `json:"compact_at"`
	LoopLimits   *struct {
		FailuresInARow *int `json:"failures_in_a_row"`
		IdenticalCalls *int `json:"identical_calls"`
	} `json:"loop_limits"`
	Metadata json.RawMessage `json:"metadata"`
	Models   *[]string       `json:"models"`
	Thinking *struct {
		BudgetTokens *int `json:"budget_tokens"`
	} `json:"thinking"`
	MaxCost *float64 `json:"max_cost"`
}

// request is f as the run spec builder takes it, without input.
func (f runFields) request() (runspec.Request, error) {
	out := runspec.Request{Model: f.Model, Instructions: f.Instructions, MaxSteps: f.MaxSteps,
		IfBusy: f.IfBusy, OnQuota: f.OnQuota, CompactAt: f.CompactAt, Metadata: f.Metadata,
		Models: f.Models, MaxCost: f.MaxCost}
	if t := f.Thinking; t != nil {
		if t.BudgetTokens == nil {
			return out, fieldError("thinking.budget_tokens", "is required: the tokens the model may think with (0 for none)")
		}
		out.Thinking = t.BudgetTokens
	}
	if t := f.Timeouts; t != nil {
		out.Timeouts = &runspec.Timeouts{TotalMS: t.TotalMS, StepMS: t.StepMS, IdleMS: t.IdleMS, ToolMS: t.ToolMS, ActionMS: t.ActionMS}
	}
	if l := f.LoopLimits; l != nil {
		out.LoopLimits = &runspec.LoopLimits{FailuresInARow: l.FailuresInARow, IdenticalCalls: l.IdenticalCalls}
	}
	var cts []runspec.ClientTool
	if f.Tools != nil {
		names, functions, agents, err := toolList(*f.Tools)
		if err != nil {
			return out, err
		}
		out.Tools, cts, out.SubAgents = &names, functions, agents
	}
	if f.ClientTools != nil {
		for _, t := range *f.ClientTools {
			cts = append(cts, runspec.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	if f.Tools != nil || f.ClientTools != nil {
		out.ClientTools = &cts
	}
	return out, nil
}

// toolEntry is an object of a "tools" list: a client tool (type function)
// or an agent (type agent).
type toolEntry struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Agent       *string         `json:"agent"`
}

// toolList reads a "tools" list: the name of a server tool (an operator's
// or the tenant's) as a string, a client tool as {"type": "function",
// "name", "description", "parameters"}, which joins the client tools, or
// a sub-agent as {"type": "agent", "agent": "<name>"}.
func toolList(entries []json.RawMessage) (names []string, functions []runspec.ClientTool, agents []string, err error) {
	names, agents = []string{}, []string{}
	for i, raw := range entries {
		field := fmt.Sprintf("tools[%d]", i)
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '"' {
			var name string
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, nil, nil, fieldError(field, "must be a tool's name or a tool object")
			}
			names = append(names, name)
			continue
		}
		if len(raw) == 0 || raw[0] != '{' {
			return nil, nil, nil, fieldError(field, "must be a tool's name (a string) or a tool object with a type")
		}
		var t toolEntry
		if err := decodeStrict(raw, &t, field); err != nil {
			return nil, nil, nil, err
		}
		switch {
		case t.Type == nil:
			return nil, nil, nil, fieldError(field+".type", "is required: function or agent")
		case *t.Type == "agent":
			if t.Agent == nil || *t.Agent == "" {
				return nil, nil, nil, fieldError(field+".agent", "is required: the name of one of the tenant's agents")
			}
			if t.Name != nil || t.Description != nil || t.Parameters != nil {
				return nil, nil, nil, fieldError(field, "an agent tool takes only type and agent: the agent's name and "+
					"description are its tool's, and its input a task")
			}
			agents = append(agents, *t.Agent)
			continue
		case *t.Type != "function":
			return nil, nil, nil, fieldError(field+".type", "must be function or agent, not %q", *t.Type)
		case t.Agent != nil:
			return nil, nil, nil, fieldError(field+".agent", "is taken only by an agent tool")
		}
		functions = append(functions, runspec.ClientTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return names, functions, agents, nil
}

// runFieldNames are the JSON names of runFields.
var runFieldNames = append(jsonNames(reflect.TypeFor[runFields]()), jsonNames(reflect.TypeFor[agentFields]())...)

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

// clientToolRequest is one of a run's client_tools.
type clientToolRequest struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type timeoutsRequest struct {
	TotalMS  *int64 `json:"total_ms"`
	StepMS   *int64 `json:"step_ms"`
	IdleMS   *int64 `json:"idle_ms"`
	ToolMS   *int64 `json:"tool_ms"`
	ActionMS *int64 `json:"action_ms"`
}

// inputMessage is one element of an "input" array: its content a string,
// or a list of parts (inputPart).
type inputMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// readBody reads a request body of at most s.maxBody bytes, within
// s.bodyTimeout: a client that sends its body too slowly is answered 408
// and its connection released, rather than held.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return s.readBodyUpTo(w, r, s.maxBody)
}

// readBodyUpTo is readBody for a body of at most limit bytes.
func (s *server) readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{}) //nolint:errcheck // the connection may be gone
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
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
		// A field of an embedded struct is named with the struct's Go name
		// first (runFields.max_steps): the client knows only its JSON name.
		field := joinField(prefix, strings.NewReplacer("runFields.", "", "agentFields.", "", "agentDefinition.", "").Replace(typ.Field))
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

// specRequest is req as the run spec builder takes it, with its input
// parsed.
func specRequest(req createRunRequest) (runspec.Request, error) {
	out, err := req.runFields.request()
	if err != nil {
		return out, err
	}
	out.OnDisconnect = req.OnDisconnect
	if out.Sampling, err = req.Sampling.request(); err != nil {
		return out, err
	}
	if req.ConversationID != nil {
		id, err := uuid.Parse(*req.ConversationID)
		if err != nil {
			return out, fieldError("conversation_id", "must be a UUID")
		}
		out.ConversationID = id.String()
	}
	out.Input, out.InputText, err = parseInput(req.Input)
	return out, err
}

// runSpec checks a decoded POST /runs body and builds its run's spec, over
// its agent's definition if it names one. It returns whether the client
// asked for a stream.
func (s *server) runSpec(ctx context.Context, req createRunRequest) (agentd.RunSpec, bool, error) {
	sr, err := specRequest(req)
	if err != nil {
		return agentd.RunSpec{}, false, err
	}
	if sr, err = s.withAgent(ctx, sr, req.agentFields); err != nil {
		return agentd.RunSpec{}, false, err
	}
	spec, err := s.build(ctx, sr)
	return spec, req.Stream != nil && *req.Stream, err
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool { return runspec.IsNull(raw) }

// parseInput reads "input": a string (one user message: text is true) or a
// non-empty array of messages. Their content is the builder's to check.
func parseInput(raw json.RawMessage) (msgs []agentd.InputMessage, text bool, err error) {
	if isNull(raw) {
		return nil, false, fieldError("input", "is required: a non-empty string or a non-empty array of messages")
	}
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, false, fieldError("input", "must be a string or an array of messages")
		}
		return []agentd.InputMessage{{Role: agentd.RoleUser, Content: text}}, true, nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, false, fieldError("input", "must be a string or an array of messages")
		}
		if len(items) == 0 {
			return nil, false, fieldError("input", "must not be an empty array")
		}
		if len(items) > runspec.MaxInputMessages {
			return nil, false, fieldError("input", "must hold at most %d messages, not %d", runspec.MaxInputMessages, len(items))
		}
		out := make([]agentd.InputMessage, 0, len(items))
		for i, item := range items {
			m, err := parseInputMessage(item, fmt.Sprintf("input[%d]", i))
			if err != nil {
				return nil, false, err
			}
			out = append(out, m)
		}
		return out, false, nil
	}
	return nil, false, fieldError("input", "must be a string or an array of messages")
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
	content, parts, err := parseContent(m.Content, field+".content")
	if err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: agentd.Role(*m.Role), Content: content, Parts: parts}, nil
}

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
