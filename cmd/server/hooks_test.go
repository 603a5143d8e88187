package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools"
)

// loopHooks serves the tools file's hooks: on_input refuses a text with
// "forbidden", rewrites "rewrite me", and adds a note to "note"; on_answer
// continues the answer "first" with "/say second".
type loopHooks struct {
	mu   sync.Mutex
	keys map[string]int // idempotency keys seen, and how often
}

func (h *loopHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.keys[r.Header.Get("Idempotency-Key")]++
	h.mu.Unlock()
	switch r.URL.Path {
	case "/on_input":
		var c tools.InputCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		text := strings.Join(c.Texts, " ")
		v := tools.InputVerdict{Action: tools.InputAllow}
		switch {
		case strings.Contains(text, "forbidden"):
			v = tools.InputVerdict{Action: tools.InputRefuse, Reason: "no forbidden words here"}
		case strings.Contains(text, "rewrite me"):
			v = tools.InputVerdict{Action: tools.InputRewrite, Texts: []string{"/say rewritten"}}
		case strings.Contains(text, "note"):
			v.Note = "the user is in a hurry"
		}
		_ = json.NewEncoder(w).Encode(v)
	case "/on_answer":
		var c tools.AnswerCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if c.Answer == "first" {
			_ = json.NewEncoder(w).Encode(tools.AnswerVerdict{Continue: "/say second"})
		}
	}
}

func TestLoopHooks(t *testing.T) {
	t.Parallel()
	h := &loopHooks{keys: map[string]int{}}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools": [], "hooks": {"on_input": {"url": %q, "timeout_ms": 2000},
		"on_answer": {"url": %q, "max_continues": 2}}}`, hs.URL+"/on_input", hs.URL+"/on_answer")))
	ctx := context.Background()
	wait := func(id string) *client.Run {
		t.Helper()
		r, err := s.Client.WaitRun(ctx, id, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	t.Run("on_input refuses", func(t *testing.T) {
		_, err := s.Client.CreateRun(ctx, client.CreateRun{Input: "a forbidden question"})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusUnprocessableEntity || ce.Code != "input_refused" ||
			!strings.Contains(ce.Detail, "no forbidden words here") {
			t.Fatalf("err %v; want 422 input_refused with the hook's reason", err)
		}
	})
	t.Run("on_input rewrites", func(t *testing.T) {
		r, err := s.Client.CreateRun(ctx, client.CreateRun{Input: "rewrite me"})
		if err != nil {
			t.Fatal(err)
		}
		if r = wait(r.ID); r.OutputText == nil || *r.OutputText != "rewritten" {
			t.Fatalf("output %v, want the rewritten input's answer", r.OutputText)
		}
	})
	t.Run("on_answer continues, on_input notes a steer", func(t *testing.T) {
		r, err := s.Client.CreateRun(ctx, client.CreateRun{Input: "/say first"})
		if err != nil {
			t.Fatal(err)
		}
		if r = wait(r.ID); r.OutputText == nil || *r.OutputText != "second" || r.Status != agentd.StatusCompleted {
			t.Fatalf("run %s output %v, want the answer after the hook's continue", r.Status, r.OutputText)
		}
		page, err := s.Client.Messages(ctx, r.ConversationID, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range page.Data {
			got = append(got, string(m.Role)+": "+agentd.TextOf(m.Content))
		}
		if want := "user: /say first | assistant: first | user: /say second | assistant: second"; strings.Join(got, " | ") != want {
			t.Fatalf("messages %q, want %q", strings.Join(got, " | "), want)
		}
		// The conversation's door: a note goes with the message.
		sent, err := s.Client.SendMessage(ctx, r.ConversationID, client.SendMessage{Input: "note: /say noted"})
		if err != nil {
			t.Fatal(err)
		}
		if sent.Action != agentd.SendStarted {
			t.Fatalf("action %s, want started", sent.Action)
		}
		wait(sent.Run.ID)
		page, err = s.Client.Messages(ctx, r.ConversationID, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		n := len(page.Data)
		if n < 3 || page.Data[n-3].Role != agentd.RoleSystem || agentd.TextOf(page.Data[n-3].Content) != "the user is in a hurry" ||
			agentd.TextOf(page.Data[n-2].Content) != "note: /say noted" {
			t.Fatalf("the last messages do not hold the hook's note before the message: %+v", page.Data[max(n-3, 0):])
		}
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, n := range h.keys {
		if !strings.HasPrefix(k, "on_input:") && !strings.HasPrefix(k, "on_answer:") || n != 1 {
			t.Errorf("hook key %q seen %d times", k, n)
		}
	}
}
