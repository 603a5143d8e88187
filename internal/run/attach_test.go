package run_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

var (
	onePixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
		"\x00\x00\x00\rIDATx\xdac\xfc\xff\x9f\xa1\x0e\x00\x07\x82\x02\x7f=\xc8H\xef\x00\x00\x00\x00IEND\xaeB`\x82")
	tinyPDF = []byte("%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n")
)

// TestAttachmentsReachTheModel: a run's input image and PDF are loaded
// from their artifacts and sent to the model with their media types, in
// every step (the state the engine carries from step to step as well as
// the one its creation knew), an image by URL as its URL.
func TestAttachmentsReachTheModel(t *testing.T) {
	b := setup(t)
	e := b.start(t, run.Config{Workers: 2, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond, Profiles: compact.DefaultProfiles()})
	in := []agentd.InputMessage{{Role: agentd.RoleUser, Parts: []agentd.InputPart{
		{Type: agentd.PartText, Text: `/call calculator {"expression": "1+1"}` + "\n/media"},
		{Type: agentd.PartImage, MediaType: "image/png", Data: onePixel, Detail: "high"},
		{Type: agentd.PartImage, URL: "https://example.com/cat.png"},
		{Type: agentd.PartFile, MediaType: "application/pdf", Data: tinyPDF, Filename: "x.pdf"},
	}}}
	r, _, err := e.Service().Create(context.Background(), agentd.RunCreate{TenantID: "default",
		Spec: agentd.RunSpec{Model: "fake", Input: in, Params: agentd.RunParams{MaxSteps: 5, Tools: []string{"calculator"},
			LoopLimits: agentd.LoopLimits{}.OrDefaults()}}})
	if err != nil {
		t.Fatal(err)
	}
	if r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() }); r.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s %s", r.Status, r.TerminalReason, r.Error)
	}
	want := "image image/png 70 detail=high\nimage https://example.com/cat.png\nfile application/pdf 48 x.pdf"
	reqs := b.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for i, req := range reqs {
		if got := fakellm.MediaAnswer(req.Media); got != want {
			t.Errorf("request %d sent %q, want %q", i+1, got, want)
		}
	}
	if reqs[1].Text != want {
		t.Errorf("the answer is %q", reqs[1].Text)
	}
	st, err := b.store.RunStateLoad(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Messages[0].Content[1]; p.ArtifactID == "" || p.Size != int64(len(onePixel)) {
		t.Fatalf("the stored image part: %+v", p)
	}
}

// TestAttachmentsWithinTheCap: a model request holds the newest images
// and files of its conversation within Config.MaxInputFilesBytes; an
// older one past it is a note that names it.
func TestAttachmentsWithinTheCap(t *testing.T) {
	b := setup(t)
	b.start(t, run.Config{Workers: 1, LeaseTTL: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		MaxInputFilesBytes: int64(len(tinyPDF)) + 10})
	ask := func(conv string, data []byte, name string) agentd.Run {
		r, _, err := b.store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", ConversationID: conv,
			Model: "fake", Params: agentd.RunParams{MaxSteps: 2, IfBusy: agentd.IfBusyEnqueue},
			Input: []agentd.InputMessage{{Role: agentd.RoleUser, Parts: []agentd.InputPart{{Type: agentd.PartText, Text: "/media"},
				{Type: agentd.PartFile, MediaType: "application/pdf", Data: data, Filename: name}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	}
	first := ask("", tinyPDF, "old.pdf")
	second := ask(first.ConversationID, append(bytes.Clone(tinyPDF), "% newer\n"...), "new.pdf")
	if second.Status != agentd.StatusCompleted {
		t.Fatalf("run %s/%s %s", second.Status, second.TerminalReason, second.Error)
	}
	reqs := b.fake.Requests()
	last := reqs[len(reqs)-1]
	if got := fakellm.MediaAnswer(last.Media); got != "file application/pdf 56 new.pdf" {
		t.Fatalf("the second run's request sent %q", got)
	}
	var sent strings.Builder
	for _, m := range last.Sent {
		sent.Write(m)
	}
	if !strings.Contains(sent.String(), "old.pdf (application/pdf, 48 bytes)") {
		t.Fatalf("the older file is not named in its place: %s", sent.String())
	}
}
