package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// TestImagesAndFiles: runs create -image and -file send a PNG, a PDF and
// an image by URL after the text, in the order of the flags, and the
// model receives them (the fake's /media says what it received); a file
// the server refuses is an error naming its part, one that cannot be read
// a usage error naming the flag.
func TestImagesAndFiles(t *testing.T) {
	t.Parallel()
	base := newServer(t)
	dir := t.TempDir()
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	pdf := "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
	for name, content := range map[string]string{"dot.png": img.String(), "report.pdf": pdf, "notes.png": "not a PNG"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	r := ctl(t, base, "-o", "json", "runs", "create", "-wait", "-image", filepath.Join(dir, "dot.png"),
		"-file", filepath.Join(dir, "report.pdf"), "-image", "https://example.com/chart.png", "/media")
	var run client.Run
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || r.code != exitOK {
		t.Fatalf("runs create -image -file: %v %s", err, r)
	}
	want := fmt.Sprintf("image image/png %d\nfile application/pdf %d report.pdf\nimage https://example.com/chart.png", img.Len(), len(pdf))
	if run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != want {
		t.Fatalf("the model received %v, want %q", run.OutputText, want)
	}

	r = ctl(t, base, "runs", "create", "-image", filepath.Join(dir, "notes.png"), "see")
	if r.code != exitError || !strings.Contains(r.stderr, "invalid_field (field input[0].content[1])") {
		t.Fatalf("an image that is not one: %s", r)
	}
	r = ctl(t, base, "runs", "create", "-file", filepath.Join(dir, "missing.pdf"), "see")
	if r.code != exitError || !strings.Contains(r.stderr, "-file") || !strings.Contains(r.stderr, "usage:") {
		t.Fatalf("a file that is not there: %s", r)
	}
}
