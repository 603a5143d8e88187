package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// TestFork: a run of an agent whose first step charged a card (a
// side-effect webhook) is forked after each of its steps, and the sink
// sees no new charge: the copied steps' results are reused. A fork after
// step 1 goes on where the run was; one after step 2 under the agent's
// version 2, with a new message, runs that version's instructions; one
// after the last step, with another model, answers the new message. A
// fork records its origin, holds the original's messages in a
// conversation of its own, is made once per Idempotency-Key, and a step
// out of range, or a fork after an answer with nothing new to say, is
// refused naming the field.
func TestFork(t *testing.T) {
	t.Parallel()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/charge": webhooktest.OK()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[{"name":"charge","description":"charges a card",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect"}]}`, sink.URL+"/charge")))
	c, ctx := s.Client, testCtx(t)
	ended := func(id string) *client.Run {
		t.Helper()
		v := runEnded(t, c, id)
		if v.Status != agentd.StatusCompleted {
			t.Fatalf("run %s ended %s", id, v.Status)
		}
		return v
	}
	output := func(r *client.Run) string {
		if r.OutputText == nil {
			return ""
		}
		return *r.OutputText
	}
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "payer", Instructions: "v1 pays", Tools: &[]string{"charge", "calculator"}}); err != nil {
		t.Fatalf("agent: %v", err)
	}
	orig, err := c.CreateRun(ctx, client.CreateRun{Agent: "payer",
		Input: "/call charge {\"amount\": 5}\n/next\n/call calculator {\"expression\": \"1+1\"}\n/say paid"})
	if err != nil {
		t.Fatal(err)
	}
	if orig = ended(orig.ID); orig.StepCount != 3 || output(orig) != "paid" || sink.Count("/charge") != 1 {
		t.Fatalf("the original: %+v, %d charges", orig, sink.Count("/charge"))
	}
	if _, err := c.UpdateAgent(ctx, "payer", client.AgentDefinition{Instructions: "v2 pays", Tools: &[]string{"charge", "calculator"}}); err != nil {
		t.Fatalf("version 2: %v", err)
	}

	forkPath := "/runs/" + orig.ID + "/fork"
	for _, f := range []struct {
		fork                  client.Fork
		version, steps        int
		model, output         string
		messagesBeforeTheFork int // the original's messages the fork's conversation starts with
	}{
		{client.Fork{AtStep: 1}, 1, 2, "fake", "paid", 3},
		{client.Fork{AtStep: 2, AgentVersion: 2, Input: "/system"}, 2, 1, "fake", "v2 pays", 5},
		{client.Fork{AtStep: 3, Model: "fake-4k", Input: "/say forked"}, 1, 1, "fake-4k", "forked", 6},
	} {
		f.fork.IdempotencyKey = "fork-" + fmt.Sprint(f.fork.AtStep)
		fork, err := c.ForkRun(ctx, orig.ID, f.fork)
		if a := s.Wire.last(t, http.MethodPost, forkPath); err != nil || a.Status != http.StatusAccepted {
			t.Fatalf("%+v: %d %v", f.fork, a.Status, err)
		}
		// The same key again: the same run, a replay (200).
		if twice, err := c.ForkRun(ctx, orig.ID, f.fork); err != nil || twice.ID != fork.ID || s.Wire.last(t, http.MethodPost, forkPath).Status != http.StatusOK {
			t.Fatalf("%+v again: %+v %v, want the same run %s", f.fork, twice, err, fork.ID)
		}
		fork = ended(fork.ID)
		if fork.ForkedFrom == nil || fork.ForkedFrom.RunID != orig.ID || fork.ForkedFrom.Step != f.fork.AtStep || fork.Agent == nil ||
			fork.Agent.Version != f.version || fork.Model != f.model || output(fork) != f.output || fork.StepCount != f.steps ||
			fork.ConversationID == orig.ConversationID {
			t.Errorf("%+v: fork %+v", f.fork, fork)
		}
		msgs, err := c.Messages(ctx, fork.ConversationID, 100, "")
		if err != nil || len(msgs.Data) < f.messagesBeforeTheFork || msgs.Data[0].Role != agentd.RoleUser {
			t.Errorf("%+v: the fork's conversation %+v (%v)", f.fork, msgs, err)
		}
	}
	if n := sink.Count("/charge"); n != 1 {
		t.Fatalf("the sink saw %d charges, want the original's 1: a fork ran a copied step's call again", n)
	}
	for _, f := range []struct {
		fork  client.Fork
		field string
	}{
		{client.Fork{AtStep: 0}, "at_step"},
		{client.Fork{AtStep: 4}, "at_step"},
		{client.Fork{AtStep: 3}, "input"},
		{client.Fork{AtStep: 1, AgentVersion: 7}, "agent_version"},
	} {
		var e *client.Error
		if _, err := c.ForkRun(ctx, orig.ID, f.fork); !errors.As(err, &e) || e.Status/100 != 4 || e.Field != f.field {
			t.Errorf("%+v: %v, want a refusal naming %s", f.fork, err, f.field)
		}
	}
	// A field the server does not know, which the SDK cannot send: raw.
	resp, err := http.Post(s.URL+forkPath, "application/json", strings.NewReader(`{"at_step": 1, "agent_versio": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	var p client.Error
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode/100 != 4 || p.Field != "agent_versio" {
		t.Errorf("an unknown field: %d %+v, want a refusal naming agent_versio", resp.StatusCode, p)
	}
}

// TestForkKeepsImages: a fork copies the images and files of the
// messages it copies, as artifacts of its own, and its model receives
// them again (the fake's /media says what it received): an image by its
// data and one by URL after a fork of the run whose input they were; and,
// after a fork of the conversation's next run, the newest that fit the
// server's cap of a run's images and files, the older left out as a text
// that names it. The fork's artifacts outlive the original's
// conversation. A fork to a model that takes no images is refused naming
// at_step, and a bad part of the fork's own input is named as POST /runs
// names it.
func TestForkKeepsImages(t *testing.T) {
	t.Parallel()
	oa := fakellm.New()
	osrv := httptest.NewServer(oa)
	t.Cleanup(osrv.Close)
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(fmt.Sprintf(`{"models": {
		"vision": {"provider": "openai", "base_url": %q, "api_key_env": "TEST_OPENAI_KEY", "context_window": 128000, "input": ["text", "image", "file"]},
		"texty": {"provider": "openai", "base_url": %q, "api_key_env": "TEST_OPENAI_KEY", "context_window": 128000, "input": ["text"]}}}`,
		osrv.URL+"/v1", osrv.URL+"/v1")), 0o600); err != nil {
		t.Fatal(err)
	}
	// 100 bytes: the PNG (70) or the PDF (48) fits, not both.
	s := setup(t, withEnv("AGENTD_MODELS_FILE", models), withEnv("TEST_OPENAI_KEY", "sk-test"),
		withEnv("AGENTD_MAX_INPUT_FILE_BYTES", "100"), withEnv("AGENTD_MAX_INPUT_FILES_BYTES", "100"))
	c, ctx := s.Client, testCtx(t)
	pngBytes, _ := base64.StdEncoding.DecodeString(testPNG)
	chart := client.ImageURL("https://example.com/chart.png", "")
	seen := client.ImageData("image/png", pngBytes)
	seen.Detail = agentd.DetailHigh
	first, err := c.CreateRun(ctx, client.CreateRun{Model: "vision", Wait: 20 * time.Second, InputMessages: []client.InputMessage{{
		Role: agentd.RoleUser, Content: "/say seen", Parts: []client.InputPart{seen, chart}}}})
	if err != nil || first.Status != agentd.StatusCompleted {
		t.Fatalf("the first run: %+v %v", first, err)
	}
	second, err := c.CreateRun(ctx, client.CreateRun{Model: "vision", ConversationID: first.ConversationID, Wait: 20 * time.Second,
		InputMessages: []client.InputMessage{{Role: agentd.RoleUser, Content: "/say read",
			Parts: []client.InputPart{client.FileData("application/pdf", "report.pdf", []byte(testPDF))}}}})
	if err != nil || second.Status != agentd.StatusCompleted {
		t.Fatalf("the second run: %+v %v", second, err)
	}

	fork := func(runID, want string) *client.Run {
		t.Helper()
		f, err := c.ForkRun(ctx, runID, client.Fork{AtStep: 1, Input: "/media"})
		if err != nil {
			t.Fatalf("fork of %s: %v", runID, err)
		}
		got := runEnded(t, c, f.ID)
		reqs := oa.Requests()
		if got.Status != agentd.StatusCompleted || got.OutputText == nil || *got.OutputText != want || fakellm.MediaAnswer(reqs[len(reqs)-1].Media) != want {
			t.Fatalf("the fork of %s answered %+v, want %q", runID, got, want)
		}
		return got
	}
	f1 := fork(first.ID, "image image/png 70 detail=high\nimage https://example.com/chart.png")
	f2 := fork(second.ID, "image https://example.com/chart.png\nfile application/pdf 48 report.pdf")
	msgs, err := c.Messages(ctx, f2.ConversationID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := msgs.Data[0].Content; len(p) != 3 || p[1].Type != agentd.PartText || !strings.Contains(p[1].Text, "image (image/png, 70 bytes)") {
		t.Fatalf("the second fork's first message: %+v, want the PNG left out, named", p)
	}

	// The first fork's PNG is an artifact of its own, which outlives the
	// original's conversation.
	if msgs, err = c.Messages(ctx, f1.ConversationID, 0, ""); err != nil {
		t.Fatal(err)
	}
	png := msgs.Data[0].Content[1]
	if err := c.DeleteConversation(ctx, first.ConversationID); err != nil {
		t.Fatalf("delete the original's conversation: %v", err)
	}
	if b, _, err := c.Artifact(ctx, f1.ID, png.ArtifactID); err != nil || string(b) != string(pngBytes) {
		t.Fatalf("the fork's PNG: %d bytes (%v)", len(b), err)
	}

	for _, f := range []struct {
		fork  client.Fork
		field string
	}{
		{client.Fork{AtStep: 1, Model: "texty", Input: "/media"}, "at_step"},
		{client.Fork{AtStep: 1, InputMessages: []client.InputMessage{{Role: agentd.RoleUser, Content: "see",
			Parts: []client.InputPart{client.ImageData("image/png", []byte("hello"))}}}}, "input[0].content[1]"},
	} {
		var e *client.Error
		if _, err := c.ForkRun(ctx, f1.ID, f.fork); !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Field != f.field {
			t.Errorf("%+v: %v, want a 422 naming %s", f.fork, err, f.field)
		}
	}
}

// TestForkOverrides: a fork fills its agent's instructions with
// variables of its own (onto a version that added a placeholder), or
// replaces the run's instructions and tools, without saving a version;
// variables of a run started from no agent, and tools the server has not,
// are refused naming the field.
func TestForkOverrides(t *testing.T) {
	t.Parallel()
	s := setup(t)
	c, ctx := s.Client, testCtx(t)
	if _, err := c.CreateAgent(ctx, client.AgentDefinition{Name: "greeter", Instructions: "Greet warmly."}); err != nil {
		t.Fatal(err)
	}
	orig, err := c.CreateRun(ctx, client.CreateRun{Agent: "greeter", Input: "/call calculator {\"expression\": \"1+1\"}\n/say hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r := runEnded(t, c, orig.ID); r.Status != agentd.StatusCompleted {
		t.Fatalf("the original: %+v", r)
	}
	if _, err := c.UpdateAgent(ctx, "greeter", client.AgentDefinition{Instructions: "Greet {{who}} warmly."}); err != nil {
		t.Fatal(err)
	}
	system := func(f client.Fork) *client.Run {
		t.Helper()
		f.AtStep, f.Input = 1, "/system"
		fork, err := c.ForkRun(ctx, orig.ID, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		return runEnded(t, c, fork.ID)
	}
	if r := system(client.Fork{AgentVersion: 2, Variables: map[string]string{"who": "Ada"}}); r.OutputText == nil ||
		*r.OutputText != "Greet Ada warmly." || r.Agent == nil || r.Agent.Version != 2 {
		t.Fatalf("a fork onto version 2 with its variable: %+v", r)
	}
	prompt, none := "Be terse.", []string{}
	if r := system(client.Fork{Instructions: &prompt, Tools: &none}); r.OutputText == nil || *r.OutputText != "Be terse." ||
		len(r.Tools) != 0 || r.Agent == nil || r.Agent.Version != 1 {
		t.Fatalf("a fork with instructions and tools of its own: %+v", r)
	}
	bare, err := c.CreateRun(ctx, client.CreateRun{Input: "/say hi"})
	if err != nil {
		t.Fatal(err)
	}
	runEnded(t, c, bare.ID)
	for _, f := range []struct {
		run   string
		fork  client.Fork
		field string
	}{
		{bare.ID, client.Fork{AtStep: 1, Input: "more", Variables: map[string]string{"who": "Ada"}}, "variables"},
		{orig.ID, client.Fork{AtStep: 1, Input: "more", Tools: &[]string{"no_such_tool"}}, "tools"},
		{orig.ID, client.Fork{AtStep: 1, Input: "more", AgentVersion: 2}, "variables.who"}, // the run had no variable
	} {
		var e *client.Error
		if _, err := c.ForkRun(ctx, f.run, f.fork); !errors.As(err, &e) || e.Status/100 != 4 || e.Field != f.field {
			t.Errorf("%+v: %v, want a refusal naming %s", f.fork, err, f.field)
		}
	}
}
