package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// forkView is what the fork test reads of a run.
type forkView struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	ConversationID string `json:"conversation_id"`
	Model          string `json:"model"`
	StepCount      int    `json:"step_count"`
	OutputText     string `json:"output_text"`
	Agent          *struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
	} `json:"agent"`
	ForkedFrom *struct {
		RunID string `json:"run_id"`
		Step  int    `json:"step"`
	} `json:"forked_from"`
	Code  string `json:"code"`
	Field string `json:"field"`
}

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
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"charge","description":"charges a card",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect"}]}`, sink.URL+"/charge")), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, map[string]string{"AGENTD_TOOLS_FILE": toolsFile})
	send := func(method, path, body string, headers ...string) (int, forkView) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v forkView
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	ended := func(id string) forkView {
		t.Helper()
		waitRunEnd(t, base, id)
		_, v := send(http.MethodGet, "/runs/"+id, "")
		if v.Status != "completed" {
			t.Fatalf("run %s ended %s", id, v.Status)
		}
		return v
	}
	if code, _ := send(http.MethodPost, "/agents", `{"name": "payer", "instructions": "v1 pays", "tools": ["charge", "calculator"]}`); code != http.StatusCreated {
		t.Fatalf("agent: %d", code)
	}
	_, orig := send(http.MethodPost, "/runs", `{"agent": "payer", "input": "/call charge {\"amount\": 5}\n/next\n/call calculator {\"expression\": \"1+1\"}\n/say paid"}`)
	if orig = ended(orig.ID); orig.StepCount != 3 || orig.OutputText != "paid" || sink.Count("/charge") != 1 {
		t.Fatalf("the original: %+v, %d charges", orig, sink.Count("/charge"))
	}
	if code, _ := send(http.MethodPut, "/agents/payer", `{"instructions": "v2 pays", "tools": ["charge", "calculator"]}`); code != http.StatusOK {
		t.Fatalf("version 2: %d", code)
	}

	for _, c := range []struct {
		body                  string
		step, version, steps  int
		model, output         string
		messagesBeforeTheFork int // the original's messages the fork's conversation starts with
	}{
		{`{"at_step": 1}`, 1, 1, 2, "fake", "paid", 3},
		{`{"at_step": 2, "agent_version": 2, "input": "/system"}`, 2, 2, 1, "fake", "v2 pays", 5},
		{`{"at_step": 3, "model": "fake-4k", "input": "/say forked"}`, 3, 1, 1, "fake-4k", "forked", 6},
	} {
		code, f := send(http.MethodPost, "/runs/"+orig.ID+"/fork", c.body, "Idempotency-Key", "fork-"+fmt.Sprint(c.step))
		if code != http.StatusAccepted {
			t.Fatalf("%s: %d %+v", c.body, code, f)
		}
		if again, twice := send(http.MethodPost, "/runs/"+orig.ID+"/fork", c.body, "Idempotency-Key", "fork-"+fmt.Sprint(c.step)); again != http.StatusOK || twice.ID != f.ID {
			t.Fatalf("%s again: %d %s, want the same run %s", c.body, again, twice.ID, f.ID)
		}
		f = ended(f.ID)
		if f.ForkedFrom == nil || f.ForkedFrom.RunID != orig.ID || f.ForkedFrom.Step != c.step || f.Agent == nil ||
			f.Agent.Version != c.version || f.Model != c.model || f.OutputText != c.output || f.StepCount != c.steps ||
			f.ConversationID == orig.ConversationID {
			t.Errorf("%s: fork %+v", c.body, f)
		}
		var msgs struct {
			Data []struct {
				Role  string `json:"role"`
				RunID string `json:"run_id"`
			} `json:"data"`
		}
		getJSON(t, base+"/conversations/"+f.ConversationID+"/messages?limit=100", &msgs)
		if len(msgs.Data) < c.messagesBeforeTheFork || msgs.Data[0].Role != "user" {
			t.Errorf("%s: the fork's conversation %+v", c.body, msgs.Data)
		}
	}
	if n := sink.Count("/charge"); n != 1 {
		t.Fatalf("the sink saw %d charges, want the original's 1: a fork ran a copied step's call again", n)
	}
	for _, c := range []struct{ body, field string }{
		{`{"at_step": 0}`, "at_step"},
		{`{"at_step": 4}`, "at_step"},
		{`{"at_step": 3}`, "input"},
		{`{"at_step": 1, "agent_versio": 2}`, "agent_versio"},
		{`{"at_step": 1, "agent_version": 7}`, "agent_version"},
	} {
		if code, p := send(http.MethodPost, "/runs/"+orig.ID+"/fork", c.body); code/100 != 4 || p.Field != c.field {
			t.Errorf("%s: %d %+v, want a refusal naming %s", c.body, code, p, c.field)
		}
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
	base, _ := startServer(t, map[string]string{"AGENTD_MODELS_FILE": models, "TEST_OPENAI_KEY": "sk-test",
		"AGENTD_MAX_INPUT_FILE_BYTES": "100", "AGENTD_MAX_INPUT_FILES_BYTES": "100"})
	post := func(path string, body any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	user := func(parts ...any) []any { return []any{map[string]any{"role": "user", "content": parts}} }
	text := func(s string) any { return map[string]any{"type": "text", "text": s} }
	code, first := post("/runs?wait=20", map[string]any{"model": "vision", "input": user(text("/say seen"),
		map[string]any{"type": "image", "url": "data:image/png;base64," + testPNG, "detail": "high"},
		map[string]any{"type": "image", "url": "https://example.com/chart.png"})})
	if code != http.StatusOK || first["status"] != "completed" {
		t.Fatalf("the first run: %d %v", code, first)
	}
	code, second := post("/runs?wait=20", map[string]any{"model": "vision", "conversation_id": first["conversation_id"],
		"input": user(text("/say read"), map[string]any{"type": "file", "data": "data:application/pdf;base64," +
			base64.StdEncoding.EncodeToString([]byte(testPDF)), "filename": "report.pdf"})})
	if code != http.StatusOK || second["status"] != "completed" {
		t.Fatalf("the second run: %d %v", code, second)
	}

	fork := func(runID, want string) forkView {
		t.Helper()
		code, f := post("/runs/"+runID+"/fork", map[string]any{"at_step": 1, "input": "/media"})
		if code != http.StatusAccepted {
			t.Fatalf("fork of %s: %d %v", runID, code, f)
		}
		v := waitRunEnd(t, base, f["id"].(string))
		var got forkView
		getJSON(t, base+"/runs/"+v.ID, &got)
		reqs := oa.Requests()
		if got.Status != "completed" || got.OutputText != want || fakellm.MediaAnswer(reqs[len(reqs)-1].Media) != want {
			t.Fatalf("the fork of %s answered %+v, want %q", runID, got, want)
		}
		return got
	}
	f1 := fork(first["id"].(string), "image image/png 70 detail=high\nimage https://example.com/chart.png")
	f2 := fork(second["id"].(string), "image https://example.com/chart.png\nfile application/pdf 48 report.pdf")
	var msgs struct {
		Data []struct {
			Content []struct {
				Type       string `json:"type"`
				Text       string `json:"text"`
				ArtifactID string `json:"artifact_id"`
			} `json:"content"`
		} `json:"data"`
	}
	getJSON(t, base+"/conversations/"+f2.ConversationID+"/messages", &msgs)
	if c := msgs.Data[0].Content; len(c) != 3 || c[1].Type != "text" || !strings.Contains(c[1].Text, "image (image/png, 70 bytes)") {
		t.Fatalf("the second fork's first message: %+v, want the PNG left out, named", c)
	}

	// The first fork's PNG is an artifact of its own, which outlives the
	// original's conversation.
	getJSON(t, base+"/conversations/"+f1.ConversationID+"/messages", &msgs)
	png := msgs.Data[0].Content[1]
	req, _ := http.NewRequest(http.MethodDelete, base+"/conversations/"+first["conversation_id"].(string), nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete the original's conversation: %v %v", resp, err)
	}
	resp, err := http.Get(base + "/runs/" + f1.ID + "/artifacts/" + png.ArtifactID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want, _ := base64.StdEncoding.DecodeString(testPNG); resp.StatusCode != http.StatusOK || string(b) != string(want) {
		t.Fatalf("the fork's PNG: %d, %d bytes", resp.StatusCode, len(b))
	}

	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"at_step": 1, "model": "texty", "input": "/media"}, "at_step"},
		{map[string]any{"at_step": 1, "input": user(text("see"), map[string]any{"type": "image", "url": "data:image/png;base64,aGVsbG8="})},
			"input[0].content[1]"},
	} {
		if code, p := post("/runs/"+f1.ID+"/fork", c.body); code != http.StatusUnprocessableEntity || p["field"] != c.field {
			t.Errorf("%v: %d %v, want a 422 naming %s", c.body, code, p, c.field)
		}
	}
}
