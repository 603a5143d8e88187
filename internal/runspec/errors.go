package runspec

import "fmt"

// FieldError says that one field of a request is wrong: Field names it as
// the request's JSON does (input[2].content, timeouts.step_ms), Message
// says what is wrong with it.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldError(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// UnknownToolError says that a request's tools name a tool the server does
// not have (see GET /tools).
type UnknownToolError struct {
	Tool string
}

func (e *UnknownToolError) Error() string {
	return fmt.Sprintf("tools: no tool named %q is registered (see GET /tools)", e.Tool)
}
