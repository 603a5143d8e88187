package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// TestWait: POST /runs and GET /runs/{id} with Prefer: wait=N or ?wait=N
// answer once the run ends (200, the run as it ended) or waits for a
// decision, and after the wait (capped by AGENTD_MAX_WAIT) with the run as
// it is then (202 for a create), never an error; Preference-Applied says
// what was waited. A wait that is no number of seconds is 422 naming wait
// in the query, and ignored in Prefer (a preference a server may ignore).
func TestWait(t *testing.T) {
	t.Parallel()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/guarded": webhooktest.OK()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`, sink.URL+"/guarded")),
		withEnv("AGENTD_MAX_WAIT", "3s"))
	base, c, ctx := s.URL, s.Client, testCtx(t)
	type view struct {
		ID, Status, OutputText, Field string
		OutputTextP                   *string `json:"output_text"`
	}
	// Prefer: wait, Preference-Applied and a bad ?wait are the wire, sent
	// raw; ?wait goes through the SDK (CreateRun.Wait, WaitRun).
	do := func(method, path, prefer, input string) (int, http.Header, view) {
		t.Helper()
		var body *strings.Reader
		if input != "" {
			b, _ := json.Marshal(map[string]string{"input": input})
			body = strings.NewReader(string(b))
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, base+path, body)
		req.Header.Set("Content-Type", "application/json")
		if prefer != "" {
			req.Header.Set("Prefer", prefer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v view
		_ = json.NewDecoder(resp.Body).Decode(&v)
		if v.OutputTextP != nil {
			v.OutputText = *v.OutputTextP
		}
		return resp.StatusCode, resp.Header, v
	}
	// The answer, in one request.
	code, h, v := do(http.MethodPost, "/runs", "wait=10", "/say the answer is 42")
	if code != http.StatusOK || v.Status != "completed" || v.OutputText != "the answer is 42" || h.Get("Preference-Applied") != "wait=3" {
		t.Fatalf("POST /runs, Prefer: wait=10: %d %+v, Preference-Applied %q", code, v, h.Get("Preference-Applied"))
	}
	// A decision to take: the wait ends there.
	decide, err := c.CreateRun(ctx, client.CreateRun{Input: "/call guarded {}\n/say done", Wait: 10 * time.Second})
	if err != nil || decide.Status != agentd.StatusRequiresAction || s.Wire.last(t, http.MethodPost, "/runs").Status != http.StatusOK {
		t.Fatalf("a run that waits for an approval: %+v %v", decide, err)
	}
	// A run longer than the wait: 202 and the run as it is, then GET waits
	// for the rest.
	slow := "/stream 60 100\n/say " + strings.Repeat("slowly ", 10)
	code, h, v = do(http.MethodPost, "/runs", "respond-async, wait=1", slow)
	if code != http.StatusAccepted || v.Status == "completed" || h.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("a wait shorter than the run: %d %+v", code, v)
	}
	id := v.ID
	if r, err := c.WaitRun(ctx, id, 3*time.Second); err != nil || r.Status != agentd.StatusCompleted {
		t.Fatalf("WaitRun, 3 s a read: %+v %v", r, err)
	}
	// Bad waits.
	if code, _, v = do(http.MethodGet, "/runs/"+id+"?wait=soon", "", ""); code != http.StatusUnprocessableEntity || v.Field != "wait" {
		t.Fatalf("?wait=soon: %d %+v", code, v)
	}
	if code, h, v = do(http.MethodPost, "/runs", "wait=soon", "/stream 20 100\n/say later"); code != http.StatusAccepted ||
		h.Get("Preference-Applied") != "" {
		t.Fatalf("Prefer: wait=soon: %d %+v", code, v)
	}
}
