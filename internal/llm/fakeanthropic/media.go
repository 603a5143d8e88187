package fakeanthropic

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// imageTypes are the media types of images the real API takes.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// source is an image's or a document's source.
type source struct {
	Type      string `json:"type"` // base64, url, text, file
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// blockMedia is the image or document block b as a fakellm.Media; ok is
// false for another block.
func blockMedia(b block) (m fakellm.Media, ok bool, err error) {
	if b.Type != "image" && b.Type != "document" {
		return m, false, nil
	}
	var src source
	if err := json.Unmarshal(b.Source, &src); err != nil {
		return m, true, fmt.Errorf("%s.source: %w", b.Type, err)
	}
	m = fakellm.Media{Kind: "image", MediaType: src.MediaType, URL: src.URL}
	if b.Type == "document" {
		m.Kind, m.Filename = "file", b.Title
	}
	switch src.Type {
	case "base64":
		data, err := base64.StdEncoding.DecodeString(src.Data)
		if err != nil {
			return m, true, fmt.Errorf("%s.source.data: invalid base64 data", b.Type)
		}
		m.Size = len(data)
	case "text":
		m.Size = len(src.Data)
	case "url", "file":
	default:
		return m, true, fmt.Errorf("%s.source.type: %q is not a source type", b.Type, src.Type)
	}
	return m, true, nil
}

// rawSize is what block raw (its canonical JSON c) counts for in the
// prompt's bytes: an image or a document as fakellm.Media.PromptBytes
// says, any other block its JSON.
func rawSize(raw json.RawMessage, c []byte) int64 {
	var b block
	if json.Unmarshal(raw, &b) != nil {
		return int64(len(c))
	}
	if m, ok, err := blockMedia(b); ok && err == nil {
		return m.PromptBytes()
	}
	return int64(len(c))
}

// media returns the images and documents of req's messages, in order.
func (req *request) media() []fakellm.Media {
	var out []fakellm.Media
	for _, m := range req.Messages {
		for _, b := range m.blocks {
			if md, ok, err := blockMedia(b); ok && err == nil {
				out = append(out, md)
			}
		}
	}
	return out
}

// mediaRefusal refuses, as the real API does, an image or a document
// outside a user message, a source it cannot read, an image of a media
// type it does not take, a base64 document that is not a PDF, and a text
// document that is not text/plain.
func mediaRefusal(req *request) *refusal {
	for i, m := range req.Messages {
		for j, b := range m.blocks {
			md, ok, err := blockMedia(b)
			at := fmt.Sprintf("messages.%d.content.%d", i, j)
			switch {
			case !ok:
				continue
			case err != nil:
				return invalid(at + "." + err.Error())
			case m.Role != "user":
				return invalid(fmt.Sprintf("%s: %s blocks are only allowed in user messages", at, b.Type))
			case b.Type == "image" && md.URL == "" && !slices.Contains(imageTypes, md.MediaType):
				return invalid(fmt.Sprintf("%s.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "+
					"'image/gif' or 'image/webp'", at))
			case b.Type == "document" && md.URL == "" && md.Size > 0 && md.MediaType != "application/pdf" && md.MediaType != "text/plain":
				return invalid(fmt.Sprintf("%s.document.source: a base64 document must be application/pdf and a text one text/plain, not %q",
					at, md.MediaType))
			}
		}
	}
	return nil
}
