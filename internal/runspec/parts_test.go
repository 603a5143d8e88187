package runspec_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// pngBytes is a 1x1 PNG.
var pngBytes, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

var pdfBytes = []byte("%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n")

func withParts(parts ...agentd.InputPart) []agentd.InputMessage {
	return []agentd.InputMessage{{Role: agentd.RoleUser, Parts: parts}}
}

// TestParseDataURL: base64 and percent-encoded data URLs give their media
// type (lowercased, without parameters) and bytes; anything else names
// the field.
func TestParseDataURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"data:image/png;base64,aGk=":            "image/png hi",
		"DATA:Image/PNG;base64,aGk":             "image/png hi",
		"data:text/plain;charset=utf-8,a%20b":   "text/plain a b",
		"data:text/plain;charset=UTF-8;base64,": "text/plain ",
	} {
		mt, data, err := runspec.ParseDataURL("f", in)
		if err != nil || mt+" "+string(data) != want {
			t.Errorf("%s: %q %q %v, want %s", in, mt, data, err, want)
		}
	}
	for _, in := range []string{"https://x/y.png", "data:image/png;base64", "data:;base64,aGk=", "data:image/png;base64,!!!",
		"data:text/plain;charset=latin1,a"} {
		var fe *runspec.FieldError
		if _, _, err := runspec.ParseDataURL("input[0].content[1].url", in); !errors.As(err, &fe) || fe.Field != "input[0].content[1].url" {
			t.Errorf("%s: %v, want a field error naming the field", in, err)
		}
	}
}

// TestAttachments: images and files that the run's models take are kept
// as given; what is wrong with one is refused naming its part, and so is
// one a model of the chain does not take.
func TestAttachments(t *testing.T) {
	t.Parallel()
	accepts := func(model string, kind agentd.PartType) bool {
		return model != "text-only" && (model != "no-files" || kind == agentd.PartImage)
	}
	b := builder(t, runspec.Defaults{Model: "m", MaxInputFileBytes: 1000, MaxInputFilesBytes: 1500, Accepts: accepts})
	img := agentd.InputPart{Type: agentd.PartImage, MediaType: "image/png", Data: pngBytes, Detail: "high"}
	pdf := agentd.InputPart{Type: agentd.PartFile, MediaType: "application/pdf", Data: pdfBytes, Filename: "x.pdf"}
	text := agentd.InputPart{Type: agentd.PartText, Text: "what is this?"}
	spec, err := b.Build(runspec.Request{Input: withParts(text, img, pdf,
		agentd.InputPart{Type: agentd.PartImage, URL: "https://example.com/cat.png"})})
	if err != nil || len(spec.Input[0].Parts) != 4 {
		t.Fatalf("%+v %v", spec.Input, err)
	}
	big := agentd.InputPart{Type: agentd.PartFile, MediaType: "text/plain", Data: []byte(strings.Repeat("x", 900))}
	for _, c := range []struct {
		name  string
		req   runspec.Request
		field string
		says  string
	}{
		{"not an image", runspec.Request{Input: withParts(text, agentd.InputPart{Type: agentd.PartImage, MediaType: "image/png", Data: pdfBytes})},
			"input[0].content[1]", "its bytes are not"},
		{"an svg", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartImage, MediaType: "image/svg+xml", Data: []byte("<svg/>")})},
			"input[0].content[0]", "image/png"},
		{"a zip", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartFile, MediaType: "application/zip", Data: []byte("PK")})},
			"input[0].content[0]", "application/pdf"},
		{"a fake pdf", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartFile, MediaType: "application/pdf", Data: []byte("hi")})},
			"input[0].content[0]", "PDF"},
		{"oversize", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartFile, MediaType: "text/plain",
			Data: []byte(strings.Repeat("x", 1001))})}, "input[0].content[0]", "at most 1000"},
		{"over the run's", runspec.Request{Input: withParts(big, big)}, "input[0].content[1]", "past 1500"},
		{"a bad detail", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartImage, URL: "https://x/y", Detail: "max"})},
			"input[0].content[0].detail", "auto"},
		{"a file URL", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartImage, URL: "file:///etc/passwd"})},
			"input[0].content[0].url", "http(s)"},
		{"an assistant's image", runspec.Request{Input: []agentd.InputMessage{{Role: agentd.RoleAssistant, Parts: []agentd.InputPart{img}}}},
			"input[0].content[0]", "user"},
		{"nothing to say", runspec.Request{Input: withParts(agentd.InputPart{Type: agentd.PartText, Text: " "})},
			"input[0].content", "nothing to say"},
		{"a text-only model", runspec.Request{Model: ptr("text-only"), Input: withParts(text, img)},
			"input[0].content[1]", `"text-only" does not take images`},
		{"a fallback without files", runspec.Request{Models: &[]string{"m", "no-files"}, Input: withParts(img, pdf)},
			"input[0].content[1]", `"no-files", of the run's models, does not take files`},
		{"named by the door", runspec.Request{Input: withParts(text, agentd.InputPart{Type: agentd.PartImage}),
			PartField: func(i, j int) string { return "messages[3].parts[7]" }}, "messages[3].parts[7]", "without a URL"},
	} {
		_, err := b.Build(c.req)
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Message, c.says) {
			t.Errorf("%s: %v, want %s: ...%s...", c.name, err, c.field, c.says)
		}
	}
}
