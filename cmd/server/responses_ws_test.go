package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// wsLane is what responses-ws.mjs reads of a response's stream.
type wsLane struct {
	ID   string
	Seqs []int
	Text string
}

// TestResponsesWebSocketNodeSDK: OpenAI's Node.js SDK's WebSocket client of
// the Responses API (openai/resources/responses/ws), pointed at agentd's
// GET /v1/responses, multiplexes two responses on two lanes of one socket,
// chains a third with previous_response_id, steers a response while it
// streams, gets error events for bad messages on a socket that goes on,
// and resumes a response whose socket it closed mid-answer, over HTTP and
// over a new socket.
func TestResponsesWebSocketNodeSDK(t *testing.T) {
	t.Parallel()
	dir := needNode(t, "responses-ws", "openai", "ws")
	base, _ := startServer(t, nil)
	cmd := exec.Command("node", "responses-ws.mjs", base)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node responses-ws.mjs: %v\n%s", err, stderr.String())
	}
	var r struct {
		Error     string
		Multiplex struct {
			Lanes   map[string]wsLane
			Order   string
			Chained struct {
				Text               string
				PreviousResponseID string `json:"previous_response_id"`
			}
		}
		Steer struct {
			ID       string
			Accepted *struct {
				ID                 string
				PreviousResponseID string `json:"previous_response_id"`
			}
			Status, Text string
		}
		Bad struct {
			Errors []struct {
				Type, Param, Code string
				Status            int
			}
			After string
		}
		Cut struct {
			Last   int
			HTTP   wsLane
			Socket wsLane
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Error != "" {
		t.Fatalf("responses-ws.mjs printed %s (%v)\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("%s", stdout.String())

	m := r.Multiplex
	if m.Lanes["a"].Text != "alpha beta gamma delta" || m.Lanes["b"].Text != "one two three four" {
		t.Errorf("lanes: %+v", m.Lanes)
	}
	for lane, l := range m.Lanes {
		for i, n := range l.Seqs {
			if n != i {
				t.Errorf("lane %s numbered %v", lane, l.Seqs)
				break
			}
		}
	}
	if half := m.Order[:len(m.Order)/2]; !strings.Contains(half, "a") || !strings.Contains(half, "b") {
		t.Errorf("the lanes did not stream side by side: %s", m.Order)
	}
	if m.Chained.Text != "chained" || m.Chained.PreviousResponseID != m.Lanes["a"].ID {
		t.Errorf("chained: %+v", m.Chained)
	}

	s := r.Steer
	if s.Accepted == nil || !strings.HasPrefix(s.Accepted.ID, "steer_") || s.Accepted.PreviousResponseID != s.ID {
		t.Errorf("steer accepted: %+v", s.Accepted)
	}
	if s.Status != "completed" || !strings.HasPrefix(s.Text, "tok1 tok2") || !strings.HasSuffix(s.Text, "|steered") {
		t.Errorf("steered response: %s %q", s.Status, s.Text)
	}

	b := r.Bad
	if len(b.Errors) != 2 || b.Errors[0].Type != "error" || b.Errors[0].Param != "stream" || b.Errors[0].Status != 400 ||
		b.Errors[1].Code != "invalid_json" || b.After != "fine" {
		t.Errorf("bad messages: %+v", b)
	}

	c := r.Cut
	want := tokensText(20)
	for name, got := range map[string]wsLane{"HTTP": c.HTTP, "socket": c.Socket} {
		if got.Text != want || len(got.Seqs) == 0 || got.Seqs[0] != c.Last+1 || !slices.IsSorted(got.Seqs) {
			t.Errorf("resumed over %s after %d: %+v", name, c.Last, got)
		}
	}
	if !slices.Equal(c.HTTP.Seqs, c.Socket.Seqs) {
		t.Errorf("HTTP resumed with %v, the socket with %v", c.HTTP.Seqs, c.Socket.Seqs)
	}
}

// tokensText is the fake model's answer of /stream N without /say.
func tokensText(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("tok%d", i+1)
	}
	return strings.Join(words, " ")
}
