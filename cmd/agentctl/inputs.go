package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// attachFlags are the -image and -file flags of a command that sends a
// user message: the images and files it sends after the message's text,
// in the order of the flags.
type attachFlags struct{ parts []client.InputPart }

// attachments adds -image and -file to f. Each reads its file as the flag
// is parsed, so that a file that cannot be read is a usage error; the
// server checks what it holds.
func (f *cmdFlags) attachments() *attachFlags {
	a := &attachFlags{}
	f.Func("image", "an image to send with the message: a `PATH` (PNG, JPEG, GIF or WebP), or an http(s) URL "+
		"that the server passes on to the model; repeat it for more", func(s string) error {
		if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
			a.parts = append(a.parts, client.ImageURL(s, ""))
			return nil
		}
		b, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		p := client.ImageData(sniffed(b), b)
		p.Filename = filepath.Base(s)
		a.parts = append(a.parts, p)
		return nil
	})
	f.Func("file", "a file to send with the message: a `PATH` (a PDF, or a text in UTF-8: .txt, .md, .csv); "+
		"repeat it for more", func(s string) error {
		b, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		mediaType, ok := fileTypes[strings.ToLower(filepath.Ext(s))]
		if !ok {
			mediaType = sniffed(b)
		}
		a.parts = append(a.parts, client.FileData(mediaType, filepath.Base(s), b))
		return nil
	})
	return a
}

// fileTypes are the media types of the files agentd takes, by the
// extension of their name.
var fileTypes = map[string]string{".pdf": "application/pdf", ".txt": "text/plain", ".text": "text/plain",
	".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv"}

// sniffed is the media type b starts as (http.DetectContentType), without
// its parameters.
func sniffed(b []byte) string {
	mediaType, _, _ := strings.Cut(http.DetectContentType(b), ";")
	return mediaType
}

// apply makes r's input one user message of its text and the images and
// files, when there are some.
func (a *attachFlags) apply(r *client.CreateRun) {
	if len(a.parts) > 0 {
		r.InputMessages = []client.InputMessage{{Role: agentd.RoleUser, Content: r.Input, Parts: a.parts}}
	}
}
