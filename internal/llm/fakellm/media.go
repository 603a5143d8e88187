package fakellm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// ImageTokens is what the fake counts an image as in prompt_tokens,
// whatever its size and detail (see Usage in the package doc); agentd's
// context budget counts it the same (internal/compact).
const ImageTokens = 1600

// Media is an image or a file a request's messages held, as the fake read
// it.
type Media struct {
	Kind      string // "image" or "file"
	MediaType string // of inline data (a data URL, or a base64 source); "" for an image by URL
	Size      int    // bytes of the inline data, decoded
	URL       string // an image by URL
	Detail    string // an image's detail, as sent
	Filename  string // a file's name (Anthropic: its document title)
}

// PromptBytes is what m counts for in P, the bytes of prompt_tokens =
// P/4 + 1: an image 4*ImageTokens; a PDF a quarter of its bytes, and at
// least as much as an image; a text file its bytes.
func (m Media) PromptBytes() int64 {
	switch {
	case m.Kind == "image":
		return 4 * ImageTokens
	case m.MediaType == "application/pdf":
		return max(4*ImageTokens, int64(m.Size)/4)
	}
	return int64(m.Size)
}

// String is m as /media answers it: "image MEDIA_TYPE SIZE", "image URL"
// (each with " detail=D" when sent with one), or "file MEDIA_TYPE SIZE
// FILENAME".
func (m Media) String() string {
	var s string
	switch {
	case m.Kind == "image" && m.URL != "":
		s = "image " + m.URL
	default:
		s = fmt.Sprintf("%s %s %d", m.Kind, m.MediaType, m.Size)
	}
	if m.Kind == "file" && m.Filename != "" {
		s += " " + m.Filename
	}
	if m.Detail != "" {
		s += " detail=" + m.Detail
	}
	return s
}

// MediaAnswer is the answer of /media: one line per image or file of the
// request, in order (Media.String); "no media" for none.
func MediaAnswer(ms []Media) string {
	if len(ms) == 0 {
		return "no media"
	}
	lines := make([]string, len(ms))
	for i, m := range ms {
		lines[i] = m.String()
	}
	return strings.Join(lines, "\n")
}

// DataURL reads a data: URL's media type and the size of its data; ok is
// false for anything else.
func DataURL(url string) (mediaType string, size int, ok bool) {
	meta, payload, found := strings.Cut(strings.TrimPrefix(url, "data:"), ",")
	if !strings.HasPrefix(url, "data:") || !found {
		return "", 0, false
	}
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !isBase64 {
		return mediaType, len(payload), true
	}
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", 0, false
	}
	return mediaType, len(b), true
}

// media returns the images and files of the message's content parts:
// image_url parts ({"url", "detail"}) and file parts ({"file_data": a data
// URL, "filename"}).
func (m wireMessage) media() []Media {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
		File struct {
			FileData string `json:"file_data"`
			Filename string `json:"filename"`
		} `json:"file"`
	}
	if len(m.Content) == 0 || m.Content[0] != '[' || json.Unmarshal(m.Content, &parts) != nil {
		return nil
	}
	var out []Media
	for _, p := range parts {
		switch p.Type {
		case "image_url":
			md := Media{Kind: "image", Detail: p.ImageURL.Detail}
			if t, n, ok := DataURL(p.ImageURL.URL); ok {
				md.MediaType, md.Size = t, n
			} else {
				md.URL = p.ImageURL.URL
			}
			out = append(out, md)
		case "file":
			md := Media{Kind: "file", Filename: p.File.Filename}
			md.MediaType, md.Size, _ = DataURL(p.File.FileData)
			out = append(out, md)
		}
	}
	return out
}
