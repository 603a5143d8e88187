package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
)

// pngData is a 1x1 PNG, as a data URL.
const pngData = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

var pdfDoc = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"

// TestInputParts: a POST /runs message whose content is parts stores its
// image and its file once, as artifacts of the run, in the transaction
// that creates it: the message's parts name them (and keep an image by
// URL as its URL), and GET /runs/{id}/artifacts/{artifact_id} serves
// their bytes.
func TestInputParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body, _ := json.Marshal(map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "what are these?"},
		map[string]any{"type": "image", "url": pngData, "detail": "low"},
		map[string]any{"type": "image", "url": "https://example.com/cat.png"},
		map[string]any{"type": "file", "data": base64.StdEncoding.EncodeToString([]byte(pdfDoc)), "media_type": "application/pdf",
			"filename": "report.pdf"},
	}}}})
	run := want[struct {
		ID             string `json:"id"`
		ConversationID string `json:"conversation_id"`
	}](t, b.do("POST", "/runs", string(body)), http.StatusAccepted)
	r := b.do("GET", "/conversations/"+run.ConversationID+"/messages", "")
	msgs := want[struct{ Data []agentd.MessageView }](t, r, http.StatusOK)
	if strings.Contains(string(r.body), "iVBOR") || strings.Contains(string(r.body), "JVBER") || len(msgs.Data) != 1 {
		t.Fatalf("the messages hold bytes, or not one message: %s", r.body)
	}
	c := msgs.Data[0].Content
	if len(c) != 4 || c[1].Type != agentd.PartImage || c[1].ArtifactID == "" || c[1].MediaType != "image/png" || c[1].Detail != "low" ||
		c[2].URL != "https://example.com/cat.png" || c[2].ArtifactID != "" ||
		c[3].Type != agentd.PartFile || c[3].Filename != "report.pdf" || c[3].Size != int64(len(pdfDoc)) {
		t.Fatalf("the message's content: %+v", c)
	}
	for _, p := range []agentd.Part{c[1], c[3]} {
		a := b.do("GET", "/runs/"+run.ID+"/artifacts/"+p.ArtifactID, "")
		if a.status != 200 || a.header.Get("Content-Type") != p.MediaType || int64(len(a.body)) != p.Size {
			t.Errorf("artifact %s: %d %s, %d bytes", p.ArtifactID, a.status, a.header.Get("Content-Type"), len(a.body))
		}
	}
	if got := string(b.do("GET", "/runs/"+run.ID+"/artifacts/"+c[3].ArtifactID, "").body); got != pdfDoc {
		t.Errorf("the PDF came back as %q", got)
	}
}

// TestInputPartsRefused: what is wrong with an image or a file is a 422
// naming its part, and nothing of the run is stored: a bad data URL, a
// type agentd does not take, bytes that are not what they say, one past
// the cap, and one the run's model (or a fallback's) does not take.
func TestInputPartsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) {
		c.Defaults.MaxInputFileBytes = 200
		c.Defaults.Accepts = func(model string, kind agentd.PartType) bool { return model != "text-only" }
	})
	msg := func(parts ...string) string {
		return `{"input":[{"role":"user","content":"hello"},{"role":"user","content":[{"type":"text","text":"see"},` +
			strings.Join(parts, ",") + `]}]}`
	}
	big := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 201)))
	for _, c := range []struct{ name, body, field string }{
		{"bad data URL", msg(`{"type":"image","url":"data:image/png;base64,***"}`), "input[1].content[1].url"},
		{"no media type", msg(`{"type":"file","data":"aGk="}`), "input[1].content[1].media_type"},
		{"svg", msg(`{"type":"image","url":"data:image/svg+xml;base64,PHN2Zy8+"}`), "input[1].content[1]"},
		{"not a png", msg(`{"type":"image","url":"data:image/png;base64,aGVsbG8="}`), "input[1].content[1]"},
		{"a zip", msg(`{"type":"file","data":"data:application/zip;base64,UEsDBA=="}`), "input[1].content[1]"},
		{"oversize", msg(`{"type":"file","data":"` + big + `","media_type":"text/plain"}`), "input[1].content[1]"},
		{"unknown type", msg(`{"type":"audio","data":"aGk="}`), "input[1].content[1].type"},
		{"unknown field", msg(`{"type":"image","url":"https://x/y.png","data":"aGk="}`), "input[1].content[1].data"},
		{"text-only model", `{"model":"text-only","input":[{"role":"user","content":[{"type":"image","url":"` + pngData + `"}]}]}`,
			"input[0].content[0]"},
		{"text-only fallback", `{"models":["m","text-only"],"input":[{"role":"user","content":[{"type":"image","url":"https://x/y.png"}]}]}`,
			"input[0].content[0]"},
	} {
		p := wantProblem(t, b.do("POST", "/runs", c.body), http.StatusUnprocessableEntity, "invalid_field")
		if p.Field != c.field {
			t.Errorf("%s: field %q (%s), want %q", c.name, p.Field, p.Detail, c.field)
		}
	}
	runs, err := b.store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", Limit: 10})
	if err != nil || len(runs) != 0 {
		t.Fatalf("%d runs stored (%v), want none", len(runs), err)
	}
}

// TestInputBodyCap: the data of images and files may take a body past
// AGENTD_MAX_BODY_BYTES (up to the base64 of the input files' cap), the
// rest of it may not.
func TestInputBodyCap(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.MaxBodyBytes = 4096 })
	text := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", 6000)))
	file := `{"input":[{"role":"user","content":[{"type":"text","text":"read"},{"type":"file","data":"data:text/plain;base64,` + text + `"}]}]}`
	if r := b.do("POST", "/runs", file); r.status != http.StatusAccepted {
		t.Fatalf("a file past the body cap: %d %s", r.status, r.body)
	}
	wantProblem(t, b.do("POST", "/runs", `{"input":"`+strings.Repeat("x", 5000)+`"}`), http.StatusRequestEntityTooLarge, "body_too_large")
}

// TestResponsesInputMedia: a response's input_image and input_file are
// stored as the run's artifacts, and its input items list them by URL
// (the artifact's route, or the image's own), as openapi.yaml describes.
func TestResponsesInputMedia(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body, _ := json.Marshal(map[string]any{"model": "fake", "background": true, "input": []any{map[string]any{"role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "look"},
			map[string]any{"type": "input_image", "image_url": pngData, "detail": "low"},
			map[string]any{"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
			map[string]any{"type": "input_file", "file_data": "data:application/pdf;base64," + base64.StdEncoding.EncodeToString([]byte(pdfDoc)),
				"filename": "report.pdf"}}}}})
	resp := want[struct{ ID string }](t, b.do("POST", "/v1/responses", string(body)), http.StatusOK)
	items := want[struct {
		Data []struct {
			Content []map[string]any `json:"content"`
		} `json:"data"`
	}](t, b.do("GET", "/v1/responses/"+resp.ID+"/input_items", ""), http.StatusOK)
	if len(items.Data) != 1 || len(items.Data[0].Content) != 4 {
		t.Fatalf("input items %+v", items)
	}
	c := items.Data[0].Content
	img, file := c[1]["image_url"].(string), c[3]["file_url"].(string)
	if c[1]["type"] != "input_image" || !strings.HasPrefix(img, "/runs/") || c[1]["detail"] != "low" ||
		c[2]["image_url"] != "https://example.com/cat.png" || c[3]["type"] != "input_file" || c[3]["filename"] != "report.pdf" {
		t.Fatalf("the content %+v", c)
	}
	if got := b.do("GET", img, ""); got.status != 200 || got.header.Get("Content-Type") != "image/png" {
		t.Fatalf("GET %s: %d %s", img, got.status, got.header.Get("Content-Type"))
	}
	if got := b.do("GET", file, ""); got.status != 200 || string(got.body) != pdfDoc {
		t.Fatalf("GET %s: %d %q", file, got.status, got.body)
	}
}
