package runspec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/runspec"
)

// TestTextAsSent: a string that decoding would change is a *FieldError
// naming its field: its path, cut after the first field of JSON kept
// whole, whose message says where in it the string is.
func TestTextAsSent(t *testing.T) {
	for _, c := range []struct {
		body, field, at string
	}{
		{`{"input":"ok","metadata":{"k":"\ud83d\ude42"}}`, "", ""},
		{"{\"input\":\"\xff\"}", "input", ""},
		{`{"input":[{"role":"user","content":"\ud800"}]}`, "input[0].content", ""},
		{`{"client_tools":[{"name":"a","parameters":{"properties":{"x":{"description":"\udc00"}}}}]}`,
			"client_tools[0].parameters", "client_tools[0].parameters.properties.x.description"},
		{"{\"metadata\":{\"a\":[\"\xc3\"]}}", "metadata", "metadata.a[0]"},
		{"\"\xff\"", "body", ""},
	} {
		err := runspec.TextAsSent([]byte(c.body), "metadata", "parameters")
		var fe *runspec.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("TextAsSent(%q) = %v, want nil", c.body, err)
		case c.field == "":
		case !errors.As(err, &fe) || fe.Field != c.field:
			t.Errorf("TextAsSent(%q) = %v, want a FieldError of %s", c.body, err, c.field)
		case c.at != "" && !strings.Contains(fe.Message, "(at "+c.at+")"):
			t.Errorf("TextAsSent(%q): %q does not say it is at %s", c.body, fe.Message, c.at)
		}
	}
}
