package compose

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/agentd/agentd/internal/runspec"
)

// fieldError is a *runspec.FieldError, as the builder's: each door names
// the field in its own terms.
func fieldError(field, format string, args ...any) error {
	return &runspec.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// decodeField decodes exactly one JSON value of data, which sits at field
// (prefix) of what was sent, into v, refusing fields v does not have; a
// problem names its field, as the doors' own decoders do.
func decodeField(data []byte, v any, prefix string) error {
	err := runspec.DecodeStrict(data, v)
	if errors.Is(err, runspec.ErrTrailing) {
		return fieldError(prefix, "must hold one JSON value")
	}
	if err != nil {
		return FieldProblem(err, prefix)
	}
	return nil
}

// embedded are the Go names of the structs this package's types embed,
// which encoding/json puts before a field's JSON name in its errors
// (Fields.max_steps): a client knows the JSON name only.
var embedded = strings.NewReplacer("Template.", "", "AgentDefinition.", "", "AgentFields.", "", "Fields.", "")

// FieldProblem is the *runspec.FieldError of an encoding/json error in a
// value decoded at prefix ("": the body itself): an unknown field, or a
// value of the wrong type; nil for any other error, which the door reports
// as malformed JSON in its own terms.
func FieldProblem(err error, prefix string) error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := joinField(prefix, embedded.Replace(typ.Field))
		if field == "" {
			return nil
		}
		return fieldError(field, "must be %s, not %s", jsonType(typ.Type), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fieldError(joinField(prefix, strings.Trim(name, `"`)), "is not a known field")
	}
	if prefix != "" {
		return fieldError(prefix, "is not valid JSON")
	}
	return nil
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
