package compose

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// A dataset's case keeps what its runs will start from: an input as POST
// /runs takes it, and, for a case captured from a run, the recorded
// conversation as agentd.CaseMessage. These read them back as a run's
// input messages and check them as the builder checks a run's, so that
// a case that was stored builds its runs.

// CheckInput checks the messages of an input (text: it came as one text)
// as a new run's, its images and files included, naming its fields under
// field in place of "input".
func (c *Composer) CheckInput(msgs []agentd.InputMessage, text bool, field string) error {
	return Renamed(c.cfg.Builder.CheckInput(msgs, text), "input", field)
}

// ParseInputAt is ParseInput for an input at field of what was sent.
func ParseInputAt(raw json.RawMessage, field string) (msgs []agentd.InputMessage, text bool, err error) {
	msgs, text, err = ParseInput(raw)
	return msgs, text, Renamed(err, "input", field)
}

// Renamed is err with the field of a *runspec.FieldError that is from, or
// under from, put under to instead; any other error as it is.
func Renamed(err error, from, to string) error {
	var fe *runspec.FieldError
	if !errors.As(err, &fe) || from == to {
		return err
	}
	rest, ok := strings.CutPrefix(fe.Field, from)
	if !ok || (rest != "" && rest[0] != '.' && rest[0] != '[') {
		return err
	}
	return &runspec.FieldError{Field: to + rest, Message: fe.Message}
}

// RecordedInput reads a case's recorded messages as a run's input
// messages (field names them, for errors). What it reads is to be checked
// with CheckInput.
func RecordedInput(msgs []agentd.CaseMessage, field string) ([]agentd.InputMessage, error) {
	if len(msgs) > runspec.MaxInputMessages {
		return nil, fieldError(field, "must hold at most %d messages, not %d", runspec.MaxInputMessages, len(msgs))
	}
	out := make([]agentd.InputMessage, 0, len(msgs))
	for i, m := range msgs {
		f := fmt.Sprintf("%s[%d]", field, i)
		in := agentd.InputMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		switch {
		case m.Role == agentd.RoleTool:
			if m.ToolCallID == "" {
				return nil, fieldError(f+".tool_call_id", "is required: the call whose result the message is")
			}
			if err := json.Unmarshal(m.Content, &in.Content); err != nil {
				return nil, fieldError(f+".content", "must be a string: the call's result as its model was given it")
			}
		case m.ToolCallID != "" || m.IsError:
			return nil, fieldError(f+".role", "must be tool for a message with a tool_call_id or is_error")
		case len(m.ToolCalls) > 0 && runspec.IsNull(m.Content):
		default:
			var err error
			if in.Content, in.Parts, err = ParseContent(m.Content, f+".content"); err != nil {
				return nil, err
			}
		}
		for _, c := range m.ToolCalls {
			in.ToolCalls = append(in.ToolCalls, agentd.InputCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, in)
	}
	return out, nil
}

// casePart is a part of a recorded message's content, as POST /runs
// takes it (inputPart): an image or a file with its bytes as a data URL.
type casePart struct {
	Type     agentd.PartType `json:"type"`
	Text     *string         `json:"text,omitempty"`
	URL      string          `json:"url,omitempty"`
	Detail   string          `json:"detail,omitempty"`
	Data     string          `json:"data,omitempty"`
	Filename string          `json:"filename,omitempty"`
}

// CaseMessages is msgs as a case's recorded messages, which RecordedInput
// reads back: the parts of a message with images or files as POST /runs
// takes them, their bytes as data URLs.
func CaseMessages(msgs []agentd.InputMessage) []agentd.CaseMessage {
	out := make([]agentd.CaseMessage, 0, len(msgs))
	for _, m := range msgs {
		cm := agentd.CaseMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		switch {
		case len(m.Parts) > 0:
			parts := make([]casePart, 0, len(m.Parts))
			for _, p := range m.Parts {
				parts = append(parts, casePartOf(p))
			}
			cm.Content, _ = json.Marshal(parts)
		case m.Content != "" || m.Role == agentd.RoleTool || len(m.ToolCalls) == 0:
			cm.Content, _ = json.Marshal(m.Content)
		}
		for _, c := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, agentd.CaseCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, cm)
	}
	return out
}

func casePartOf(p agentd.InputPart) casePart {
	switch p.Type {
	case agentd.PartImage:
		cp := casePart{Type: p.Type, URL: p.URL, Detail: p.Detail, Filename: p.Filename}
		if len(p.Data) > 0 {
			cp.URL = dataURL(p.MediaType, p.Data)
		}
		return cp
	case agentd.PartFile:
		return casePart{Type: p.Type, Data: dataURL(p.MediaType, p.Data), Filename: p.Filename}
	}
	text := p.Text
	return casePart{Type: agentd.PartText, Text: &text}
}

// dataURL is data as a data URL of its media type, in base64.
func dataURL(mediaType string, data []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(data)
}
