package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// inputPart is one part of an input message's content, in POST /runs:
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

// parseContent reads an input message's content: a string, or a list of
// parts (inputPart). The parts' bytes are the builder's to check.
func parseContent(raw json.RawMessage, field string) (string, []agentd.InputPart, error) {
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
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
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
	if err := decodeStrict(raw, &p, field); err != nil {
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
	if !strings.HasPrefix(strings.ToLower(url), "data:") {
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
	if strings.HasPrefix(strings.ToLower(data), "data:") {
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

// readInputBody reads the body of a request that may carry images and
// files (POST /runs, the AI SDK's chat, the Responses API): the data of
// its images and files (data URLs, and base64 data) may take it past
// AGENTD_MAX_BODY_BYTES, by up to the base64 of the input files' cap, but
// the rest of it may not.
func (s *server) readInputBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	files := s.spec.Defaults().MaxInputFilesBytes
	slack := int64(base64.StdEncoding.EncodedLen(int(files))) + int64(runspec.MaxInputParts)*64
	body, err := s.readBodyUpTo(w, r, s.maxBody+slack)
	if err != nil {
		return nil, err
	}
	if n := int64(len(body)); n > s.maxBody && n-inputDataBytes(body) > s.maxBody {
		return nil, &http.MaxBytesError{Limit: s.maxBody}
	}
	return body, nil
}

// dataKeys are the keys whose string values hold the data of images and
// files, in the wire formats of the doors that take them.
var dataKeys = map[string]bool{"url": true, "data": true, "file_data": true, "image_url": true}

// inputDataBytes is the length of the strings of body (JSON) that hold
// the data of images and files: data URLs under dataKeys, and the base64
// of "data" and "file_data".
func inputDataBytes(body []byte) int64 {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		object bool
		key    bool // the next string of an object is a key
		last   string
	}
	var stack []level
	var n int64
	for {
		tok, err := dec.Token()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return 0
			}
			return n
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				stack = append(stack, level{object: v == '{', key: true})
				continue
			}
			stack = stack[:top]
			top--
		case string:
			if top >= 0 && stack[top].object && stack[top].key {
				stack[top].last, stack[top].key = v, false
				continue
			}
			if top >= 0 && stack[top].object && dataKeys[stack[top].last] {
				if strings.HasPrefix(v, "data:") || stack[top].last == "data" || stack[top].last == "file_data" {
					n += int64(len(v))
				}
			}
		}
		if top >= 0 && stack[top].object {
			stack[top].key = true
		}
	}
}
