package responses

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// TestInputMedia: a user message's input_image and input_file parts are
// the run's images and files, in order with its texts; what is wrong with
// one names its field, and the builder's errors name it as the request
// does (PartField), whatever items came before.
func TestInputMedia(t *testing.T) {
	t.Parallel()
	r, err := Decode([]byte(`{"model":"fake","input":[
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
		{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"1"},
		{"type":"function_call_output","call_id":"c2","output":"2"},
		{"role":"user","content":[{"type":"input_text","text":"look"},
			{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"},
			{"type":"input_image","image_url":"https://example.com/cat.png","detail":"auto"},
			{"type":"input_file","file_data":"data:application/pdf;base64,JVBERi0=","filename":"x.pdf"},
			{"type":"input_file","file_data":"aGVsbG8=","filename":"notes.txt"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req, err := r.Spec("")
	if err != nil {
		t.Fatal(err)
	}
	m := req.Input[len(req.Input)-1]
	if len(req.Input) != 4 || len(m.Parts) != 5 || m.Content != "" {
		t.Fatalf("input %+v", req.Input)
	}
	want := []agentd.InputPart{{Type: agentd.PartText, Text: "look"}, {Type: agentd.PartImage, MediaType: "image/png", Detail: "high"},
		{Type: agentd.PartImage, URL: "https://example.com/cat.png", Detail: "auto"},
		{Type: agentd.PartFile, MediaType: "application/pdf", Filename: "x.pdf"}, {Type: agentd.PartFile, MediaType: "text/plain", Filename: "notes.txt"}}
	for i, p := range m.Parts {
		w := want[i]
		if p.Type != w.Type || p.Text != w.Text || p.MediaType != w.MediaType || p.URL != w.URL || p.Detail != w.Detail || p.Filename != w.Filename {
			t.Errorf("part %d: %+v, want %+v", i, p, w)
		}
	}
	if string(m.Parts[4].Data) != "hello" || string(m.Parts[3].Data) != "%PDF-" {
		t.Errorf("the files' bytes: %q %q", m.Parts[3].Data, m.Parts[4].Data)
	}
	if got := req.PartField(3, 2); got != "input[4].content[2]" {
		t.Errorf("the builder names part 2 of message 3 %s, want input[4].content[2]", got)
	}
	for body, param := range map[string]string{
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,!!"}]}]}`:       "input[0].content[0].image_url",
		`{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`:                                              "input[0].content[0].image_url",
		`{"input":[{"role":"user","content":[{"type":"input_file","file_data":"aGk=","filename":"a.bin"}]}]}`:         "input[0].content[0].file_data",
		`{"input":[{"role":"user","content":[{"type":"input_file","file_url":"https://x/y.pdf"}]}]}`:                  "input[0].content[0].file_url",
		`{"input":[{"role":"assistant","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}`:           "input[0].content[0].type",
		`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"x"}]}]}`: "input[0].output[0].type",
	} {
		r, err := Decode([]byte(body))
		if err == nil {
			_, err = r.Spec("")
		}
		var fe *runspec.FieldError
		if !errors.As(err, &fe) || fe.Field != param {
			t.Errorf("%s: %v, want an error about %s", body, err, param)
		}
	}
	if _, err := ItemMessages("items", []json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}`)}); err == nil {
		t.Error("a conversation item with an image is taken")
	}
}

// TestInputItemMedia: a stored message's images and files are listed as
// input_image and input_file, by URL (an image's own, or the artifact's
// route), never their bytes.
func TestInputItemMedia(t *testing.T) {
	t.Parallel()
	m := agentd.Message{ID: "01a234dc-98f7-71a3-b8a0-100ed5226ec1", RunID: runID, Role: agentd.RoleUser, Content: []agentd.Part{
		{Type: agentd.PartText, Text: "look"}, {Type: agentd.PartImage, ArtifactID: "a1", MediaType: "image/png", Size: 8},
		{Type: agentd.PartImage, URL: "https://example.com/cat.png", Detail: "low"},
		{Type: agentd.PartFile, ArtifactID: "a2", MediaType: "application/pdf", Filename: "x.pdf"}}}
	b, err := json.Marshal(InputItem(m).Content)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"/runs/` + runID + `/artifacts/a1","detail":"auto","file_id":null},` +
		`{"type":"input_image","image_url":"https://example.com/cat.png","detail":"low","file_id":null},` +
		`{"type":"input_file","filename":"x.pdf","file_url":"/runs/` + runID + `/artifacts/a2","file_id":null}]`
	if string(b) != want {
		t.Fatalf("content %s\nwant    %s", b, want)
	}
}
