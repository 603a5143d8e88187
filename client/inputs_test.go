package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// onePixelPNG is a valid PNG of one pixel.
func onePixelPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 200, G: 30, B: 90, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// minimalPDF is the smallest PDF the server's check takes: it starts with
// %PDF- and ends with %%EOF.
const minimalPDF = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"

// TestInputMessageJSON: a message of text alone is written as before
// (content a string); one with parts as POST /runs takes them (content a
// list, Content its first text, bytes as data URLs).
func TestInputMessageJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		msg  client.InputMessage
		want string
	}{
		{client.InputMessage{Role: agentd.RoleUser, Content: "hi"}, `{"role":"user","content":"hi"}`},
		{client.InputMessage{Role: agentd.RoleSystem}, `{"role":"system","content":""}`},
		{client.InputMessage{Role: agentd.RoleUser, Content: "see", Parts: []client.InputPart{
			client.TextPart(""),
			client.ImageURL("https://example.com/a.png", agentd.DetailLow),
			client.ImageData("image/png", []byte("png")),
			client.FileData("application/pdf", "r.pdf", []byte("%PDF-")),
		}}, `{"role":"user","content":[{"type":"text","text":"see"},{"type":"text","text":""},` +
			`{"type":"image","url":"https://example.com/a.png","detail":"low"},{"type":"image","url":"data:image/png;base64,cG5n"},` +
			`{"type":"file","data":"data:application/pdf;base64,JVBERi0=","filename":"r.pdf"}]}`},
	} {
		b, err := json.Marshal(c.msg)
		if err != nil || string(b) != c.want {
			t.Errorf("%+v is written\n%s (%v), want\n%s", c.msg, b, err, c.want)
		}
	}
}

// TestImagesAndFiles: against a real server, a PNG, a PDF and an image by URL
// sent with the SDK reach the model (the fake's /media says what it
// received), the message holds references to artifacts whose bytes are the
// ones sent, and a bad part comes back as an *Error naming it.
func TestImagesAndFiles(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	ctx := context.Background()
	c := client.New("http://" + addr)
	pngBytes := onePixelPNG(t)
	img := client.ImageData("image/png", pngBytes)
	img.Detail = agentd.DetailHigh

	run, err := c.CreateRun(ctx, client.CreateRun{Wait: 20 * time.Second, InputMessages: []client.InputMessage{{
		Role: agentd.RoleUser, Content: "/media",
		Parts: []client.InputPart{img, client.FileData("application/pdf", "report.pdf", []byte(minimalPDF)),
			client.ImageURL("https://example.com/chart.png", "")}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("image image/png %d detail=high\nfile application/pdf %d report.pdf\nimage https://example.com/chart.png",
		len(pngBytes), len(minimalPDF))
	if run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != want {
		t.Fatalf("the run %+v answered %v, want %q", run, run.OutputText, want)
	}
	msgs, err := c.Messages(ctx, run.ConversationID, 10, "")
	if err != nil || len(msgs.Data) != 2 || len(msgs.Data[0].Content) != 4 {
		t.Fatalf("messages: %+v %v", msgs, err)
	}
	for i, sent := range [][]byte{pngBytes, []byte(minimalPDF)} {
		p := msgs.Data[0].Content[i+1]
		b, mediaType, err := c.Artifact(ctx, run.ID, p.ArtifactID)
		if err != nil || !bytes.Equal(b, sent) || mediaType != p.MediaType || p.Size != int64(len(sent)) {
			t.Fatalf("part %d %+v: its artifact is %d bytes of %s (%v)", i+1, p, len(b), mediaType, err)
		}
	}

	// A fork's new message may hold parts too: the fork's model receives
	// the copied message's parts, then the fork's own.
	fork, err := c.ForkRun(ctx, run.ID, client.Fork{AtStep: 1, InputMessages: []client.InputMessage{{Role: agentd.RoleUser,
		Content: "/media", Parts: []client.InputPart{client.ImageURL("https://example.com/fork.png", "")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if fork, err = c.WaitRun(ctx, fork.ID, 20*time.Second); err != nil || fork.Status != agentd.StatusCompleted || fork.OutputText == nil ||
		!strings.HasPrefix(*fork.OutputText, want) || !strings.HasSuffix(*fork.OutputText, "\nimage https://example.com/fork.png") {
		t.Fatalf("the fork with an image %+v answered %v (%v)", fork, fork.OutputText, err)
	}

	for _, c2 := range []struct {
		name  string
		part  client.InputPart
		field string
	}{
		{"bytes that are not a PNG", client.ImageData("image/png", []byte("hello")), "input[0].content[1]"},
		{"a media type agentd does not take", client.FileData("application/zip", "a.zip", []byte("PK")), "input[0].content[1]"},
		{"a URL that is not http(s)", client.ImageURL("ftp://example.com/a.png", ""), "input[0].content[1].url"},
		{"a detail that is none", client.ImageURL("https://example.com/a.png", "huge"), "input[0].content[1].detail"},
	} {
		_, err := c.CreateRun(ctx, client.CreateRun{InputMessages: []client.InputMessage{{Role: agentd.RoleUser,
			Parts: []client.InputPart{client.TextPart("see"), c2.part}}}})
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != "invalid_field" || apiErr.Field != c2.field {
			t.Errorf("%s: %v, want a 422 invalid_field naming %s", c2.name, err, c2.field)
		}
	}
}
