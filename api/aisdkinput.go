package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// chatInput is the run input of a chat's last message, the user's and the
// i-th of the chat: its text, or, when it has file parts, its text parts
// and its files in order, a file of an image/* mediaType as an image (by
// its data URL, or an http(s) URL that agentd passes on) and any other as
// a file (a data URL). key identifies the input for the request's
// fingerprint; partField names a part of it as the chat's body does
// (messages[i].parts[k]), for the builder's errors (nil without files).
// Parts of other types (step-start, data parts) are not the model's.
func chatInput(last uiMessage, i int) (in agentd.InputMessage, key string, partField func(int, int) string, err error) {
	in.Role = agentd.RoleUser
	var text []string
	var at []int // the index in last.Parts of each of in.Parts
	keys := []string{}
	for k, p := range last.Parts {
		switch p.Type {
		case "text":
			if p.Text == "" {
				continue
			}
			text = append(text, p.Text)
			in.Parts = append(in.Parts, agentd.InputPart{Type: agentd.PartText, Text: p.Text})
			at = append(at, k)
		case "file":
			part, err := chatFile(p, fmt.Sprintf("messages[%d].parts[%d]", i, k))
			if err != nil {
				return in, "", nil, err
			}
			sum := sha256.Sum256([]byte(p.URL))
			keys = append(keys, p.MediaType+"\x00"+p.Filename+"\x00"+hex.EncodeToString(sum[:]))
			in.Parts = append(in.Parts, part)
			at = append(at, k)
		}
	}
	if len(in.Parts) == 0 {
		return in, "", nil, fieldError("messages", "the last message has no text part and no file part")
	}
	key = strings.Join(text, "\n")
	if len(keys) == 0 {
		in.Content, in.Parts = key, nil
		return in, key, nil, nil
	}
	key += "\x00" + strings.Join(keys, "\x00")
	partField = func(_, j int) string {
		if j < 0 {
			return fmt.Sprintf("messages[%d].parts", i)
		}
		return fmt.Sprintf("messages[%d].parts[%d]", i, at[j])
	}
	return in, key, partField, nil
}

// chatFile reads a UI message's file part (field names it): an image or a
// file, for the builder to check.
func chatFile(p uiPart, field string) (agentd.InputPart, error) {
	if p.URL == "" {
		return agentd.InputPart{}, fieldError(field+".url", "is required: the file as a data URL (or an image's http(s) URL)")
	}
	mediaType := strings.ToLower(p.MediaType)
	part := agentd.InputPart{Type: agentd.PartFile, Filename: p.Filename}
	if !strings.HasPrefix(strings.ToLower(p.URL), "data:") {
		if strings.HasPrefix(mediaType, "image/") {
			part.Type = agentd.PartImage
		}
		part.URL, part.MediaType = p.URL, mediaType
		return part, nil
	}
	urlType, data, err := runspec.ParseDataURL(field+".url", p.URL)
	if err != nil {
		return agentd.InputPart{}, err
	}
	if mediaType == "" {
		mediaType = urlType
	}
	if strings.HasPrefix(mediaType, "image/") {
		part.Type = agentd.PartImage
	}
	part.MediaType, part.Data = mediaType, data
	return part, nil
}
