package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// contentParts reads a message's content: a text, or content parts. A
// list without images or files is its text (input_text parts; output_text
// for an assistant's), and parts is nil; a user message's list with
// input_image (image_url: an http(s) URL, which agentd passes on without
// fetching it, or a data URL; detail) or input_file (file_data: a data
// URL, or base64 whose media type its filename's extension says;
// filename) parts is every part in order, for the builder to check.
func contentParts(name string, raw json.RawMessage, role agentd.Role) (string, []agentd.InputPart, error) {
	var list []json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' || json.Unmarshal(t, &list) != nil || !hasMedia(list) {
		text, err := contentText(name, raw, role)
		return text, nil, err
	}
	parts := make([]agentd.InputPart, 0, len(list))
	for i, p := range list {
		pname := fmt.Sprintf("%s[%d]", name, i)
		var probe struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(p, &probe) // hasMedia read it
		if probe.Type != "input_image" && probe.Type != "input_file" {
			text, err := contentText(name, json.RawMessage("["+string(p)+"]"), role)
			if err != nil {
				if fe, ok := err.(*runspec.FieldError); ok {
					fe.Field = strings.Replace(fe.Field, name+"[0]", pname, 1)
				}
				return "", nil, err
			}
			parts = append(parts, agentd.InputPart{Type: agentd.PartText, Text: text})
			continue
		}
		if role != agentd.RoleUser {
			return "", nil, field(pname+".type", "%s is a user message's content", probe.Type)
		}
		part, err := mediaPart(pname, probe.Type, p)
		if err != nil {
			return "", nil, err
		}
		parts = append(parts, part)
	}
	return "", parts, nil
}

// hasMedia reports whether a content list holds an input_image or an
// input_file part.
func hasMedia(list []json.RawMessage) bool {
	for _, p := range list {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(p, &probe) == nil && (probe.Type == "input_image" || probe.Type == "input_file") {
			return true
		}
	}
	return false
}

// mediaPart reads an input_image or input_file content part (typ) that
// pname names.
func mediaPart(pname, typ string, raw json.RawMessage) (agentd.InputPart, error) {
	var it struct {
		Type     string  `json:"type"`
		ImageURL *string `json:"image_url"`
		Detail   *string `json:"detail"`
		FileID   *string `json:"file_id"`
		FileData *string `json:"file_data"`
		FileURL  *string `json:"file_url"`
		Filename *string `json:"filename"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputPart{}, decodeItemError(pname, err)
	}
	if it.FileID != nil && *it.FileID != "" {
		return agentd.InputPart{}, field(pname+".file_id", "agentd has no Files API: send the %s's data instead", strings.TrimPrefix(typ, "input_"))
	}
	if typ == "input_image" {
		if it.FileData != nil || it.FileURL != nil || it.Filename != nil {
			return agentd.InputPart{}, field(pname, "an input_image takes image_url and detail (file_data, file_url and filename are an input_file's)")
		}
		return imagePart(pname, it.ImageURL, it.Detail)
	}
	if it.ImageURL != nil || it.Detail != nil {
		return agentd.InputPart{}, field(pname, "an input_file takes file_data and filename (image_url and detail are an input_image's)")
	}
	if it.FileURL != nil && *it.FileURL != "" {
		return agentd.InputPart{}, field(pname+".file_url", "agentd does not fetch files: send the file's data as file_data")
	}
	return filePart(pname, it.FileData, it.Filename)
}

// imagePart is an input_image of image_url (a data URL or an http(s)
// URL) and detail.
func imagePart(pname string, url, detail *string) (agentd.InputPart, error) {
	if url == nil || *url == "" {
		return agentd.InputPart{}, field(pname+".image_url", "is required: an http(s) URL or a data URL of the image")
	}
	p := agentd.InputPart{Type: agentd.PartImage}
	if detail != nil {
		p.Detail = *detail
	}
	if !strings.HasPrefix(strings.ToLower(*url), "data:") {
		p.URL = *url
		return p, nil
	}
	var err error
	p.MediaType, p.Data, err = runspec.ParseDataURL(pname+".image_url", *url)
	return p, err
}

// fileTypes are the media types of files by their name's extension, for
// file_data given as bare base64.
var fileTypes = map[string]string{".pdf": "application/pdf", ".txt": "text/plain", ".text": "text/plain",
	".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv"}

// filePart is an input_file of file_data (a data URL, or base64 whose
// type filename says) and filename.
func filePart(pname string, data, filename *string) (agentd.InputPart, error) {
	if data == nil || *data == "" {
		return agentd.InputPart{}, field(pname+".file_data", "is required: the file as a data URL (data:application/pdf;base64,...)")
	}
	p := agentd.InputPart{Type: agentd.PartFile}
	if filename != nil {
		p.Filename = *filename
	}
	var err error
	if strings.HasPrefix(strings.ToLower(*data), "data:") {
		p.MediaType, p.Data, err = runspec.ParseDataURL(pname+".file_data", *data)
		return p, err
	}
	p.MediaType = fileTypes[strings.ToLower(path.Ext(p.Filename))]
	if p.MediaType == "" {
		return p, field(pname+".file_data", "is bare base64 of a file whose filename does not say its type (.pdf, .txt, .md, .csv): "+
			"send a data URL (data:<media type>;base64,...)")
	}
	p.Data, err = runspec.DecodeBase64(pname+".file_data", *data)
	return p, err
}
