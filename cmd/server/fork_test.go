package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
