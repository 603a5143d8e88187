package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// caseRequest is a case as POST /datasets and POST /datasets/{name}/cases
// take it: agentd.DatasetCase's fields, and the read-only keys of its view
// (agentd.CaseViewKeys), which are ignored, so that a case that GET gave
// may be sent back as it is.
type caseRequest struct {
	ID        *string           `json:"id"`
	Name      *string           `json:"name"`
	Input     json.RawMessage   `json:"input"`
	Variables map[string]string `json:"variables"`
	User      *string           `json:"user"`
	FromRun   *string           `json:"from_run"`
	AtStep    *int              `json:"at_step"`
	Recorded  json.RawMessage   `json:"recorded"`
	Checks    json.RawMessage   `json:"checks"`
	Stubs     json.RawMessage   `json:"stubs"`
	Metadata  json.RawMessage   `json:"metadata"`

	Object    json.RawMessage `json:"object"`
	Kind      json.RawMessage `json:"kind"`
	AddedIn   json.RawMessage `json:"added_in"`
	CreatedBy json.RawMessage `json:"created_by"`
	CreatedAt json.RawMessage `json:"created_at"`
}

// fieldAt names field name of what sits at prefix ("": the body).
func fieldAt(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// casesOf reads a list of cases at field, each checked (and captured from
// its run, for one that names from_run), their ids unique.
func (s *server) casesOf(r *http.Request, raw json.RawMessage, field string) ([]agentd.DatasetCase, error) {
	items, err := splitCases(raw, field)
	if err != nil {
		return nil, err
	}
	if err := s.limitCases(len(items)); err != nil {
		return nil, err
	}
	out := make([]agentd.DatasetCase, 0, len(items))
	seen := map[string]int{}
	for i, item := range items {
		at := fmt.Sprintf("%s[%d]", field, i)
		c, err := s.caseOf(r, item, at)
		if err != nil {
			return nil, err
		}
		if j, ok := seen[c.ID]; ok {
			return nil, fieldError(at+".id", "%q is the id of %s[%d] too: a case's id is unique in its dataset", c.ID, field, j)
		}
		seen[c.ID] = i
		out = append(out, c)
	}
	return out, nil
}

// caseOf reads and checks one case at prefix ("": the body). A case that
// names from_run without recorded is captured from the run now.
func (s *server) caseOf(r *http.Request, raw json.RawMessage, prefix string) (agentd.DatasetCase, error) {
	var req caseRequest
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return agentd.DatasetCase{}, fieldError(cmpField(prefix), "must be a case: an object")
	}
	if err := decodeStrict(raw, &req, prefix); err != nil {
		return agentd.DatasetCase{}, err
	}
	c, err := s.caseFields(req, prefix)
	if err != nil {
		return c, err
	}
	switch {
	case !isNull(req.Recorded):
		if c.Recorded, err = s.recordedOf(req.Recorded, fieldAt(prefix, "recorded")); err != nil {
			return c, err
		}
		if req.FromRun != nil {
			if err := provenance(*req.FromRun, fieldAt(prefix, "from_run")); err != nil {
				return c, err
			}
			c.FromRun = *req.FromRun
		}
		c.AtStep = req.AtStep
	case req.FromRun != nil:
		if err := s.capture(r, &c, *req.FromRun, req.AtStep, prefix); err != nil {
			return c, err
		}
	case req.AtStep != nil:
		return c, fieldError(fieldAt(prefix, "at_step"), "is the step of a case from a run: give from_run too")
	case isNull(c.Input):
		return c, fieldError(fieldAt(prefix, "input"), "is required: the run's input, or from_run (a recorded run to start from)")
	}
	if c.AtStep != nil && *c.AtStep < 0 {
		return c, fieldError(fieldAt(prefix, "at_step"), "must be 0 (the run's input) or a step of the run")
	}
	return c, s.caseSize(c, prefix)
}

// cmpField is prefix, or "body" for the body itself.
func cmpField(prefix string) string {
	if prefix == "" {
		return "body"
	}
	return prefix
}

// caseSize refuses a case whose JSON is past the bytes a case may hold.
func (s *server) caseSize(c agentd.DatasetCase, prefix string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if len(b) > s.datasets.BytesPerCase {
		e := newError(http.StatusUnprocessableEntity, CodeDatasetLimit, "Dataset limit",
			fmt.Sprintf("%s: the case is %d bytes of JSON; dataset limit %s is %d (a recorded conversation's images and files count)",
				cmpField(prefix), len(b), agentd.LimitBytesPerCase, s.datasets.BytesPerCase))
		e.limit, e.field = string(agentd.LimitBytesPerCase), cmpField(prefix)
		return e
	}
	return nil
}

// caseFields reads the fields every case has: its id (a new one when it
// gives none), name, input, variables, user, checks, stubs and metadata.
func (s *server) caseFields(req caseRequest, prefix string) (agentd.DatasetCase, error) {
	c := agentd.DatasetCase{ID: agentd.NewID(), Variables: req.Variables}
	if req.ID != nil {
		if !tools.ValidName(*req.ID) {
			return c, fieldError(fieldAt(prefix, "id"), "must match ^[a-zA-Z0-9_-]{1,64}$")
		}
		c.ID = *req.ID
	}
	if n := req.Name; n != nil {
		if len(*n) > agentd.MaxCaseNameBytes {
			return c, fieldError(fieldAt(prefix, "name"), "must be at most %d bytes", agentd.MaxCaseNameBytes)
		}
		if err := storable(fieldAt(prefix, "name"), *n); err != nil {
			return c, err
		}
		c.Name = *n
	}
	if err := compose.Renamed(runspec.CheckVariables(req.Variables), "variables", fieldAt(prefix, "variables")); err != nil {
		return c, err
	}
	if req.User != nil {
		if err := compose.Renamed(runspec.CheckUser(*req.User), "user", fieldAt(prefix, "user")); err != nil {
			return c, err
		}
		c.User = *req.User
	}
	var err error
	if c.Metadata, err = parseMetadata(req.Metadata); err != nil {
		return c, compose.Renamed(err, "metadata", fieldAt(prefix, "metadata"))
	}
	if c.Checks, err = s.checksOf(req.Checks, fieldAt(prefix, "checks")); err != nil {
		return c, err
	}
	if c.Stubs, err = stubsOf(req.Stubs, fieldAt(prefix, "stubs")); err != nil {
		return c, err
	}
	if !isNull(req.Input) {
		field := fieldAt(prefix, "input")
		msgs, text, err := compose.ParseInputAt(req.Input, field)
		if err != nil {
			return c, err
		}
		if err := s.compose.CheckInput(msgs, text, field); err != nil {
			return c, err
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Input); err != nil {
			return c, fieldError(field, "is not valid JSON")
		}
		c.Input = buf.Bytes()
	}
	return c, nil
}

// provenance checks the from_run of a case given with what it recorded:
// the id of the run it came from, kept as it is.
func provenance(id, field string) error {
	if len(id) > 64 {
		return fieldError(field, "must be a run's id")
	}
	return storable(field, id)
}

// recordedOf reads and checks what a case recorded of a run, as given (a
// case that GET gave, sent back): its messages must make a run's input.
func (s *server) recordedOf(raw json.RawMessage, field string) (*agentd.Recorded, error) {
	var rec agentd.Recorded
	if err := decodeStrict(raw, &rec, field); err != nil {
		return nil, err
	}
	if rec.AsOf.IsZero() {
		return nil, fieldError(field+".as_of", "is required: when the recorded step committed (memory is read as of then)")
	}
	msgs, err := compose.RecordedInput(rec.Messages, field+".messages")
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, fieldError(field+".messages", "must not be empty: the conversation the case starts from")
	}
	if err := s.compose.CheckInput(msgs, false, field+".messages"); err != nil {
		return nil, err
	}
	if a := rec.Agent; a != nil && (!tools.ValidName(a.Name) || a.Version < 1) {
		return nil, fieldError(field+".agent", "must be {name, version} of an agent")
	}
	if err := storable(field+".model", rec.Model); err != nil {
		return nil, err
	}
	for i, c := range rec.Calls {
		at := fmt.Sprintf("%s.calls[%d]", field, i)
		if !tools.ValidName(c.Tool) {
			return nil, fieldError(at+".tool", "must be a tool's name")
		}
		for _, v := range []string{c.Arguments, c.Result} {
			if err := storable(at, v); err != nil {
				return nil, err
			}
		}
	}
	if rec.Calls == nil {
		rec.Calls = []agentd.RecordedCall{}
	}
	return &rec, nil
}

// stubsOf reads a case's stubs at field.
func stubsOf(raw json.RawMessage, field string) ([]agentd.Stub, error) {
	if isNull(raw) {
		return nil, nil
	}
	items, ok := runspec.SplitArray(raw)
	if !ok {
		return nil, fieldError(field, "must be a list of stubs: {tool, match, result}")
	}
	if len(items) > agentd.MaxCaseStubs {
		return nil, fieldError(field, "must hold at most %d stubs", agentd.MaxCaseStubs)
	}
	out := make([]agentd.Stub, 0, len(items))
	for i, item := range items {
		at := fmt.Sprintf("%s[%d]", field, i)
		var st struct {
			Tool    *string         `json:"tool"`
			Match   json.RawMessage `json:"match"`
			Result  json.RawMessage `json:"result"`
			IsError *bool           `json:"is_error"`
		}
		if err := decodeStrict(item, &st, at); err != nil {
			return nil, err
		}
		switch {
		case st.Tool == nil || !tools.ValidName(*st.Tool):
			return nil, fieldError(at+".tool", "is required: the name of the tool the stub answers")
		case !isNull(st.Match) && !isObject(st.Match):
			return nil, fieldError(at+".match", "must be an object: arguments the call's must hold")
		case isNull(st.Result):
			return nil, fieldError(at+".result", "is required: what the tool returns (any JSON)")
		}
		if err := storableJSON(at, item); err != nil {
			return nil, err
		}
		stub := agentd.Stub{Tool: *st.Tool, Match: compacted(st.Match), Result: compacted(st.Result)}
		if st.IsError != nil {
			stub.IsError = *st.IsError
		}
		out = append(out, stub)
	}
	return out, nil
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// compacted is raw without spaces (nil for nothing or null).
func compacted(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

// checksOf reads a case's checks at field.
func (s *server) checksOf(raw json.RawMessage, field string) ([]agentd.Check, error) {
	if isNull(raw) {
		return nil, nil
	}
	items, ok := runspec.SplitArray(raw)
	if !ok {
		return nil, fieldError(field, "must be a list of checks, each {type, ...}")
	}
	if len(items) > agentd.MaxCaseChecks {
		return nil, fieldError(field, "must hold at most %d checks", agentd.MaxCaseChecks)
	}
	out := make([]agentd.Check, 0, len(items))
	for i, item := range items {
		c, err := s.checkOf(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// checkOf reads one check at field: a type of agentd.CheckTypes with the
// fields of its type (CheckType.Fields), and nothing else.
func (s *server) checkOf(raw json.RawMessage, field string) (agentd.Check, error) {
	var c agentd.Check
	var keys map[string]json.RawMessage
	if !isObject(raw) {
		return c, fieldError(field, "must be a check: an object with a type")
	}
	if err := decodeStrict(raw, &keys, field); err != nil {
		return c, err
	}
	var typ string
	if err := json.Unmarshal(keys["type"], &typ); err != nil || !slices.Contains(agentd.CheckTypes(), agentd.CheckType(typ)) {
		return c, fieldError(field+".type", "must be one of %s", strings.Join(strs(agentd.CheckTypes()), ", "))
	}
	t := agentd.CheckType(typ)
	required, optional := t.Fields()
	allowed := slices.Concat([]string{"type", "name"}, required, optional)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !slices.Contains(allowed, k) {
			return c, fieldError(field+"."+k, "is not a field of a %s check (it takes %s)", t, strings.Join(allowed, ", "))
		}
	}
	for _, k := range required {
		if isNull(keys[k]) {
			return c, fieldError(field+"."+k, "is required by a %s check", t)
		}
	}
	if err := decodeStrict(raw, &c, field); err != nil {
		return c, err
	}
	if err := storableJSON(field, raw); err != nil {
		return c, err
	}
	c.Schema, c.Arguments = compacted(c.Schema), compacted(c.Arguments)
	return c, s.checkValues(c, field)
}

// checkValues checks the values of a check's fields, by its type.
func (s *server) checkValues(c agentd.Check, field string) error {
	integral := func(f float64) bool { return f == math.Trunc(f) && f >= 1 && f <= math.MaxInt32 }
	switch c.Type {
	case agentd.CheckRegex:
		if _, err := regexp.Compile(c.Pattern); err != nil {
			return fieldError(field+".pattern", "is not a regular expression (RE2 syntax): %v", err)
		}
	case agentd.CheckJSONSchema:
		return jsonSchema(c.Schema, field+".schema")
	case agentd.CheckCalled, agentd.CheckNotCalled:
		switch {
		case !tools.ValidName(c.Tool):
			return fieldError(field+".tool", "must be a tool's name")
		case c.Arguments != nil && !isObject(c.Arguments):
			return fieldError(field+".arguments", "must be an object: arguments the call's must hold")
		case c.Count != nil && *c.Count < 1:
			return fieldError(field+".count", "must be 1 or more (not_called checks that a tool is not called)")
		}
	case agentd.CheckStatus:
		return checkStatus(c, field)
	case agentd.CheckMaxSteps, agentd.CheckMaxLatencyMS:
		if !integral(*c.Max) {
			return fieldError(field+".max", "must be an integer, 1 or more")
		}
	case agentd.CheckMaxCost:
		if *c.Max < 0 {
			return fieldError(field+".max", "must not be negative")
		}
	case agentd.CheckRubric:
		switch {
		case strings.TrimSpace(c.Rubric) == "":
			return fieldError(field+".rubric", "must not be empty: what the judge grades the answer by")
		case c.Threshold != nil && (*c.Threshold < 0 || *c.Threshold > 1):
			return fieldError(field+".threshold", "must be between 0 and 1")
		case len(c.Model) > 256:
			return fieldError(field+".model", "must be a model's name")
		}
	case agentd.CheckWebhook:
		return s.checkWebhookURL(field+".url", c.URL)
	}
	return nil
}

// checkStatus checks a status check: a status of agentd.CheckedStatuses, a
// reason of agentd's, at least one of them.
func checkStatus(c agentd.Check, field string) error {
	stops := strs(agentd.CheckedStatuses())
	switch {
	case c.Status == "" && c.Reason == "":
		return fieldError(field, "is a status check: give status, reason or both")
	case c.Status != "" && !slices.Contains(stops, string(c.Status)):
		return fieldError(field+".status", "must be a status a run stops with: %s", strings.Join(stops, ", "))
	case c.Reason != "" && !slices.Contains(agentd.Reasons(), c.Reason):
		return fieldError(field+".reason", "must be one of %s", strings.Join(strs(agentd.Reasons()), ", "))
	}
	return nil
}

// jsonSchema checks that raw is a JSON Schema (draft 2020-12 unless it
// says another) that compiles without loading anything from outside it.
func jsonSchema(raw json.RawMessage, field string) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fieldError(field, "is not valid JSON")
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, ok := doc.(bool); !ok {
			return fieldError(field, "must be a JSON Schema: an object (or a boolean)")
		}
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network references
	if err := c.AddResource("mem:///check.json", doc); err != nil {
		return fieldError(field, "is not a JSON Schema: %v", err)
	}
	if _, err := c.Compile("mem:///check.json"); err != nil {
		return fieldError(field, "is not a JSON Schema: %v", err)
	}
	return nil
}

// strs is vs as strings.
func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
