package compose

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// inputMessage is one element of an "input" array: its content a string,
// or a list of parts (inputPart).
type inputMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// inputPart is one part of an input message's content, in agentd's own
// JSON:
//
//	{"type": "text", "text": "..."}
//	{"type": "image", "url": "https://..." | "data:image/png;base64,...", "detail": "auto" | "low" | "high"}
//	{"type": "file", "data": "data:application/pdf;base64,..." | "<base64>", "media_type": "...", "filename": "x.pdf"}
//
// A file's data is a data URL, or base64 with its media_type; an image's
// url an http(s) URL, which agentd passes on without fetching it, or a
// data URL.
type inputPart struct {
	Type      *string `json:"type"`
	Text      *string `json:"text"`
	URL       *string `json:"url"`
	Detail    *string `json:"detail"`
	Data      *string `json:"data"`
	MediaType *string `json:"media_type"`
	Filename  *string `json:"filename"`
}

// parseUUID is id in its canonical form.
func parseUUID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// ParseInput reads "input": a string (one user message: text is true) or
// a non-empty array of messages. Their content is the builder's to check.
func ParseInput(raw json.RawMessage) (msgs []agentd.InputMessage, text bool, err error) {
	if runspec.IsNull(raw) {
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
		items, ok := runspec.SplitArray(raw)
		if !ok {
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
	if err := decodeField(raw, &m, field); err != nil {
		return agentd.InputMessage{}, err
	}
	if m.Role == nil {
		return agentd.InputMessage{}, fieldError(field+".role", "is required")
	}
	content, parts, err := ParseContent(m.Content, field+".content")
	if err != nil {
		return agentd.InputMessage{}, err
	}
	return agentd.InputMessage{Role: agentd.Role(*m.Role), Content: content, Parts: parts}, nil
}

// ParseContent reads an input message's content, at field: a string, or
// a list of parts (inputPart). The parts' bytes are the builder's to
// check.
func ParseContent(raw json.RawMessage, field string) (string, []agentd.InputPart, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, fieldError(field, "is required: a non-empty string or a list of parts")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, fieldError(field, "must be a string or a list of parts")
		}
		return s, nil, nil
	}
	items, ok := runspec.SplitArray(raw)
	if !ok {
		return "", nil, fieldError(field, "must be a string or a list of parts (text, image, file)")
	}
	if len(items) == 0 {
		return "", nil, fieldError(field, "must not be an empty list")
	}
	if len(items) > runspec.MaxInputParts {
		return "", nil, fieldError(field, "must hold at most %d parts, not %d", runspec.MaxInputParts, len(items))
	}
	parts := make([]agentd.InputPart, 0, len(items))
	for j, item := range items {
		p, err := parsePart(item, fmt.Sprintf("%s[%d]", field, j))
		if err != nil {
			return "", nil, err
		}
		parts = append(parts, p)
	}
	return "", parts, nil
}

// parsePart reads one part of an input message's content.
func parsePart(raw json.RawMessage, field string) (agentd.InputPart, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return agentd.InputPart{}, fieldError(field, "must be a part: an object with a type (text, image or file)")
	}
	var p inputPart
	if err := decodeField(raw, &p, field); err != nil {
		return agentd.InputPart{}, err
	}
	// given refuses a field that a part of its type does not take.
	given := func(names ...string) error {
		for _, f := range []struct {
			name string
			v    *string
		}{{"text", p.Text}, {"url", p.URL}, {"detail", p.Detail}, {"data", p.Data}, {"media_type", p.MediaType}, {"filename", p.Filename}} {
			if f.v != nil && !slices.Contains(names, f.name) {
				return fieldError(field+"."+f.name, "is not a field of a %s part", *p.Type)
			}
		}
		return nil
	}
	switch {
	case p.Type == nil:
		return agentd.InputPart{}, fieldError(field+".type", "is required: text, image or file")
	case *p.Type == "text":
		if err := given("text"); err != nil {
			return agentd.InputPart{}, err
		}
		if p.Text == nil {
			return agentd.InputPart{}, fieldError(field+".text", "is required")
		}
		return agentd.InputPart{Type: agentd.PartText, Text: *p.Text}, nil
	case *p.Type == "image":
		if err := given("url", "detail", "filename"); err != nil {
			return agentd.InputPart{}, err
		}
		if p.URL == nil || *p.URL == "" {
			return agentd.InputPart{}, fieldError(field+".url", "is required: an http(s) URL or a data URL of the image")
		}
		part := agentd.InputPart{Type: agentd.PartImage, Detail: deref(p.Detail), Filename: deref(p.Filename)}
		return imageOf(part, field+".url", *p.URL)
	case *p.Type == "file":
		if err := given("data", "media_type", "filename"); err != nil {
			return agentd.InputPart{}, err
		}
		if p.Data == nil || *p.Data == "" {
			return agentd.InputPart{}, fieldError(field+".data", "is required: a data URL of the file, or its base64 with media_type")
		}
		part := agentd.InputPart{Type: agentd.PartFile, Filename: deref(p.Filename)}
		return fileOf(part, field, *p.Data, deref(p.MediaType))
	}
	return agentd.InputPart{}, fieldError(field+".type", "must be text, image or file, not %q", *p.Type)
}

// imageOf is image part p given by url (which field names): a data URL
// becomes its data, any other stays the URL, for the builder to check.
func imageOf(p agentd.InputPart, field, url string) (agentd.InputPart, error) {
	if !isDataURL(url) {
		p.URL = url
		return p, nil
	}
	var err error
	p.MediaType, p.Data, err = runspec.ParseDataURL(field, url)
	return p, err
}

// fileOf is file part p given by data (a data URL, or base64 of
// mediaType; field names the part).
func fileOf(p agentd.InputPart, field, data, mediaType string) (agentd.InputPart, error) {
	var err error
	if isDataURL(data) {
		if mediaType != "" {
			return p, fieldError(field+".media_type", "is the data URL's own: leave it out")
		}
		p.MediaType, p.Data, err = runspec.ParseDataURL(field+".data", data)
		return p, err
	}
	if mediaType == "" {
		return p, fieldError(field+".media_type", "is required with data in base64 (or send data as a data URL)")
	}
	p.MediaType = strings.ToLower(mediaType)
	p.Data, err = runspec.DecodeBase64(field+".data", data)
	return p, err
}

// isDataURL reports whether s starts with "data:", in any case; it looks
// at those five bytes only (s may be a 30 MB image).
func isDataURL(s string) bool { return len(s) >= 5 && strings.EqualFold(s[:5], "data:") }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
