package client

import (
	"encoding/base64"
	"encoding/json"

	"github.com/agentd/agentd"
)

// InputPart is one part of an input message's content (InputMessage.Parts):
// a text, an image by URL or with its bytes, or a file with its bytes, as
// TextPart, ImageURL, ImageData and FileData make them. An image's Detail
// asks the model for a resolution (agentd.ImageDetails; "": its default).
// The server stores an image's or a file's bytes once, as an artifact of
// the run, checks them (an image must be what its media type says, a PDF
// start with %PDF-, a text be UTF-8), and refuses a bad part with an
// *Error of code invalid_field whose Field names it: input[0].content[1]
// (docs/inputs.md).
type InputPart = agentd.InputPart

// TextPart is a text part.
func TextPart(s string) InputPart { return InputPart{Type: agentd.PartText, Text: s} }

// ImageURL is an image by its http(s) URL, which the server passes on to
// the model without fetching it, read at detail (agentd.DetailAuto,
// DetailLow or DetailHigh; "": the model's default).
func ImageURL(url, detail string) InputPart {
	return InputPart{Type: agentd.PartImage, URL: url, Detail: detail}
}

// ImageData is an image of mediaType (image/png, image/jpeg, image/gif or
// image/webp) given as its bytes b.
func ImageData(mediaType string, b []byte) InputPart {
	return InputPart{Type: agentd.PartImage, MediaType: mediaType, Data: b}
}

// FileData is a file of mediaType (application/pdf, or a UTF-8 text:
// text/plain, text/markdown, text/csv) given as its bytes b, which the
// model is given under filename ("": document.pdf or document.txt).
func FileData(mediaType, filename string, b []byte) InputPart {
	return InputPart{Type: agentd.PartFile, MediaType: mediaType, Filename: filename, Data: b}
}

// wirePart is an InputPart as POST /runs takes it: an image's bytes as a
// data URL in url (in place of its URL), a file's as one in data.
type wirePart struct {
	Type     agentd.PartType `json:"type"`
	Text     *string         `json:"text,omitempty"`
	URL      string          `json:"url,omitempty"`
	Detail   string          `json:"detail,omitempty"`
	Data     string          `json:"data,omitempty"`
	Filename string          `json:"filename,omitempty"`
}

// wireOf is p as POST /runs takes it. The fields a part of its type does
// not take are sent as they are, for the server to name in its refusal.
func wireOf(p InputPart) wirePart {
	w := wirePart{Type: p.Type, URL: p.URL, Detail: p.Detail, Filename: p.Filename}
	switch {
	case p.Type == agentd.PartText:
		w.Text = &p.Text
	case p.Type == agentd.PartImage && p.Data != nil:
		w.URL = dataURL(p.MediaType, p.Data)
	case p.Type == agentd.PartFile:
		w.Data = dataURL(p.MediaType, p.Data)
	}
	return w
}

// dataURL is b of mediaType as a data URL (RFC 2397), in base64.
func dataURL(mediaType string, b []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(b)
}

// MarshalJSON writes m as POST /runs takes it: its content a string when
// m has no Parts, else a list of parts.
func (m InputMessage) MarshalJSON() ([]byte, error) {
	if len(m.Parts) == 0 {
		return json.Marshal(struct {
			Role    agentd.Role `json:"role"`
			Content string      `json:"content"`
		}{m.Role, m.Content})
	}
	parts := make([]wirePart, 0, len(m.Parts)+1)
	if m.Content != "" {
		parts = append(parts, wireOf(TextPart(m.Content)))
	}
	for _, p := range m.Parts {
		parts = append(parts, wireOf(p))
	}
	return json.Marshal(struct {
		Role    agentd.Role `json:"role"`
		Content []wirePart  `json:"content"`
	}{m.Role, parts})
}
