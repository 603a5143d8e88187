package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// openaiNode runs one scenario of test/openai/responses.mjs (the npm
// openai package, unchanged) against base and decodes what it prints.
func openaiNode(t *testing.T, base string, out any, args ...string) {
	t.Helper()
	dir, _ := filepath.Abs("../../test/openai")
	cmd := exec.Command("node", append([]string{"responses.mjs", base}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node responses.mjs %s: %v\n%s", args[0], err, stderr.String())
	}
	var failed struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(stdout.Bytes(), &failed) == nil && len(failed.Error) > 0 {
		t.Fatalf("responses.mjs %s failed: %s", args[0], failed.Error)
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("responses.mjs %s printed %q: %v", args[0], stdout.String(), err)
	}
}

func needOpenAINode(t *testing.T) {
	t.Helper()
	needNode(t, "openai", "openai")
}

// streamed is what responses.mjs reads of a stream.
type streamed struct {
	ID    string   `json:"id"`
	Types []string `json:"types"`
	Seqs  []int    `json:"seqs"`
	Text  string   `json:"text"`
	Final *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	} `json:"final"`
}

// sdkError is what responses.mjs reports of an error the SDK raised.
type sdkError struct {
	Class, Param, Code, Type, Message, RequestID string
	Status                                       int
}

// TestOpenAINodeSDK: OpenAI's Node.js SDK, pointed at agentd's /v1, creates
// responses, streams them, continues them with previous_response_id, lists
// their input items, cancels and deletes them, and raises its typed errors
// with agentd's answers.
func TestOpenAINodeSDK(t *testing.T) {
	t.Parallel()
	needOpenAINode(t)
	base, _ := startServer(t, nil)

	t.Run("create", func(t *testing.T) {
		var r struct {
			ID, Status, OutputText, Object, Instructions string
			Temperature                                  float64
			MaxOutputTokens                              int `json:"max_output_tokens"`
			Metadata                                     map[string]string
			Usage                                        struct {
				TotalTokens int `json:"total_tokens"`
			}
		}
		openaiNode(t, base, &r, "create", "/say Hello from agentd.")
		if r.Status != "completed" || !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Metadata["k"] != "v" ||
			r.Instructions != "be brief" || r.Temperature != 0.5 || r.MaxOutputTokens != 200 || r.Usage.TotalTokens == 0 {
			t.Fatalf("created: %+v", r)
		}
		var got struct {
			OutputText string `json:"output_text"`
		}
		openaiNode(t, base, &got, "create", "/say Hello from agentd.")
		if got.OutputText != "Hello from agentd." {
			t.Fatalf("output_text %q", got.OutputText)
		}
	})

	t.Run("stream", func(t *testing.T) {
		var s streamed
		openaiNode(t, base, &s, "stream", "/stream 12 5")
		if s.Final == nil || s.Final.Status != "completed" || s.Types[0] != "response.created" {
			t.Fatalf("stream: %+v", s)
		}
		contiguous(t, s.Seqs, 0)
		if s.Text != s.Final.Output[0].Content[0].Text || !strings.HasPrefix(s.Text, "tok1 tok2") {
			t.Fatalf("deltas %q, final %q", s.Text, s.Final.Output[0].Content[0].Text)
		}
	})

	t.Run("background, resume and replay", func(t *testing.T) {
		var first streamed
		openaiNode(t, base, &first, "background", "/stream 40 20", "7")
		if len(first.Seqs) != 7 || first.Types[1] != "response.queued" {
			t.Fatalf("the first read: %+v", first)
		}
		var rest streamed
		openaiNode(t, base, &rest, "resume", first.ID, "6")
		contiguous(t, append(first.Seqs, rest.Seqs...), 0)
		if rest.Final == nil || first.Text+rest.Text != rest.Final.Output[0].Content[0].Text {
			t.Fatalf("the two reads' deltas %q, the final text %+v", first.Text+rest.Text, rest.Final)
		}
		var replay struct {
			ID, Status, Deltas string
			OutputText         string `json:"output_text"`
		}
		openaiNode(t, base, &replay, "replay", first.ID)
		if replay.Status != "completed" || replay.OutputText != rest.Final.Output[0].Content[0].Text {
			t.Fatalf("the stream helper's replay: %+v", replay)
		}
	})

	t.Run("cancel twice", func(t *testing.T) {
		var r struct {
			First, Second, Retrieved string
			Same                     bool
		}
		openaiNode(t, base, &r, "cancel", "/stream 400 50")
		if r.First != "cancelled" || r.Second != "cancelled" || !r.Same || r.Retrieved != "cancelled" {
			t.Fatalf("cancel: %+v", r)
		}
	})

	t.Run("previous_response_id and input items", func(t *testing.T) {
		var r struct {
			A, B, BStatus, Previous string
			Branch                  struct{ ID, Status, Text, Previous string }
			Next                    struct{ Status, Text string }
			Items, BranchItems      []struct{ Type, Role, Text string }
		}
		openaiNode(t, base, &r, "chain")
		if r.BStatus != "completed" || r.Previous != r.A {
			t.Fatalf("chain: %+v", r)
		}
		// A branch from a response that is not the latest: a fork of the
		// conversation up to it, which its own continuation follows.
		if r.Branch.Status != "completed" || r.Branch.Text != "branched" || r.Branch.Previous != r.A ||
			r.Next.Status != "completed" || r.Next.Text != "on the branch" {
			t.Fatalf("a branch from an older response: %+v then %+v", r.Branch, r.Next)
		}
		var texts []string
		for _, it := range r.BranchItems {
			texts = append(texts, it.Role+":"+it.Text)
		}
		if got := strings.Join(texts, "|"); got != "user:/say on the branch" {
			t.Fatalf("the branch's continuation's input items: %s", got)
		}
		if len(r.Items) != 1 || r.Items[0].Role != "user" || r.Items[0].Text != "second question" {
			t.Fatalf("input items: %+v", r.Items)
		}
	})

	t.Run("function tools", func(t *testing.T) {
		var r struct {
			A struct {
				Status     string
				OutputText string `json:"output_text"`
				Tools      []map[string]any
				Call       *struct {
					Name, Arguments, ID, Status string
					CallID                      string `json:"call_id"`
				}
			}
			Unanswered sdkError
			B          struct{ ID, Status, Text, Previous string }
			Items      []struct {
				Type, Output string
				CallID       string `json:"call_id"`
			}
		}
		openaiNode(t, base, &r, "tools")
		if c := r.A.Call; c == nil || c.Name != "get_weather" || c.Arguments != `{"city":"Paris"}` || c.CallID == "" ||
			!strings.HasPrefix(c.ID, "fc_") || c.Status != "completed" || len(r.A.Tools) != 1 || r.A.Tools[0]["name"] != "get_weather" {
			t.Fatalf("the response that calls the tool: %+v", r.A)
		}
		if r.Unanswered.Class != "BadRequestError" || r.Unanswered.Param != "input" {
			t.Fatalf("a continuation without the call's output: %+v", r.Unanswered)
		}
		if r.B.Status != "completed" || r.B.Text != "It is sunny in Paris." {
			t.Fatalf("the continuation with the output: %+v", r.B)
		}
		if len(r.Items) != 1 || r.Items[0].Type != "function_call_output" || r.Items[0].CallID != r.A.Call.CallID ||
			r.Items[0].Output != `{"sky":"clear"}` {
			t.Fatalf("the continuation's input items: %+v", r.Items)
		}
	})

	t.Run("mcp tools", func(t *testing.T) {
		var r struct {
			Status     string
			OutputText string `json:"output_text"`
			Items      []struct {
				Type, Name, Output, Status string
				ServerLabel                string `json:"server_label"`
			}
			Types   []string
			Text    string
			Unknown sdkError
		}
		openaiNode(t, base, &r, "mcp")
		if r.Status != "completed" || r.OutputText != "The answer is 42." || len(r.Items) != 2 || r.Items[0].Type != "mcp_call" ||
			r.Items[0].Name != "calculator" || r.Items[0].ServerLabel != "agentd" || r.Items[0].Output != `{"result":42}` ||
			r.Items[0].Status != "completed" {
			t.Fatalf("a response that calls agentd's calculator: %+v", r)
		}
		if !slices.Contains(r.Types, "response.mcp_call.completed") || r.Text != "The answer is 42." {
			t.Fatalf("its stream: %v, text %q", r.Types, r.Text)
		}
		if r.Unknown.Class != "BadRequestError" || r.Unknown.Param != "tools[0].server_label" {
			t.Fatalf("an unknown server_label: %+v", r.Unknown)
		}
	})

	t.Run("conversations", func(t *testing.T) {
		var r struct {
			ID, Object string
			Metadata   map[string]string
			A          struct {
				Status       string
				Conversation struct{ ID string }
			}
			B            string
			Items        []struct{ ID, Type, Role, Text string }
			One          struct{ ID, Role string }
			Updated, Got map[string]string
			Deleted      struct {
				ID, Object string
				Deleted    bool
			}
			After, Seeded sdkError
		}
		openaiNode(t, base, &r, "conversations")
		if !strings.HasPrefix(r.ID, "conv_") || r.Object != "conversation" || r.Metadata["topic"] != "demo" ||
			r.A.Status != "completed" || r.A.Conversation.ID != r.ID || r.B != "Second answer." {
			t.Fatalf("conversation and its responses: %+v", r)
		}
		var got []string
		for _, it := range r.Items {
			got = append(got, it.Role+":"+it.Text)
		}
		if strings.Join(got, "|") != "user:/say First answer.|assistant:First answer.|user:/say Second answer.|assistant:Second answer." {
			t.Fatalf("items, paged by 2: %v", got)
		}
		if r.One.ID != r.Items[1].ID || r.One.Role != "assistant" || r.Updated["topic"] != "changed" || r.Got["topic"] != "changed" {
			t.Fatalf("item %+v, metadata %v then %v", r.One, r.Updated, r.Got)
		}
		if !r.Deleted.Deleted || r.Deleted.Object != "conversation.deleted" || r.After.Class != "NotFoundError" ||
			r.Seeded.Class != "BadRequestError" || r.Seeded.Param != "items[0].content[0].type" {
			t.Fatalf("delete %+v, then %+v; seeded %+v", r.Deleted, r.After, r.Seeded)
		}
	})

	t.Run("approvals", func(t *testing.T) {
		type item struct {
			Type, ID, Name, Status, Arguments, Output string
			ServerLabel                               string `json:"server_label"`
			Error                                     json.RawMessage
		}
		type response struct {
			ID, Status string
			OutputText string `json:"output_text"`
			Items      []item
		}
		var r struct {
			A, B, C, D       response
			Undecided, Twice sdkError
			Types            []string
			Text             string
			Items            []struct {
				Type              string
				ApprovalRequestID string `json:"approval_request_id"`
				Approve           bool
			}
		}
		openaiNode(t, base, &r, "approvals")
		if r.A.Status != "completed" || len(r.A.Items) != 1 {
			t.Fatalf("the response that asks for an approval: %+v", r.A)
		}
		req := r.A.Items[0]
		if req.Type != "mcp_approval_request" || !strings.HasPrefix(req.ID, "mcpr_") || req.Name != "calculator" ||
			req.ServerLabel != "agentd" || req.Arguments != `{"expression":"6*7"}` {
			t.Fatalf("the approval request: %+v", req)
		}
		if r.Undecided.Class != "BadRequestError" || r.Undecided.Param != "input" || !strings.Contains(r.Undecided.Message, req.ID) {
			t.Fatalf("a continuation that does not decide it: %+v", r.Undecided)
		}
		if r.B.Status != "completed" || r.B.OutputText != "The answer is 42." || len(r.B.Items) != 2 ||
			r.B.Items[0].Type != "mcp_call" || r.B.Items[0].Status != "completed" || !strings.Contains(r.B.Items[0].Output, "42") {
			t.Fatalf("the approved call's response: %+v", r.B)
		}
		if !slices.Contains(r.Types, "response.mcp_call.completed") || r.Text != "The answer is 42." {
			t.Fatalf("its stream: %v %q", r.Types, r.Text)
		}
		if len(r.Items) != 1 || r.Items[0].Type != "mcp_approval_response" || r.Items[0].ApprovalRequestID != req.ID || !r.Items[0].Approve {
			t.Fatalf("its input items: %+v", r.Items)
		}
		if r.Twice.Class != "BadRequestError" || !strings.Contains(r.Twice.Message, req.ID) {
			t.Fatalf("the same approval again: %+v", r.Twice)
		}
		if len(r.D.Items) == 0 || r.D.Items[0].Type != "mcp_call" || r.D.Items[0].Status != "failed" ||
			!strings.Contains(string(r.D.Items[0].Error), "not today") {
			t.Fatalf("the rejected call's response: %+v", r.D)
		}
	})

	t.Run("tool_choice", func(t *testing.T) {
		var r struct {
			A struct {
				Text              string
				ToolChoice        json.RawMessage `json:"tool_choice"`
				ParallelToolCalls bool            `json:"parallel_tool_calls"`
			}
			B struct {
				Text       string
				ToolChoice json.RawMessage `json:"tool_choice"`
			}
			C       struct{ Text, Status string }
			Unknown sdkError
		}
		openaiNode(t, base, &r, "toolchoice")
		if r.A.Text != `{"tool_choice":"required","parallel_tool_calls":false}` || string(r.A.ToolChoice) != `"required"` || r.A.ParallelToolCalls {
			t.Fatalf("required, one call at a time: %+v", r.A)
		}
		if r.B.Text != `{"tool_choice":{"function":{"name":"get_weather"},"type":"function"}}` ||
			!strings.Contains(string(r.B.ToolChoice), `"get_weather"`) {
			t.Fatalf("a forced function: %+v", r.B)
		}
		// The forced call was the first answer's; the second was free.
		if r.C.Status != "completed" || r.C.Text != "{}" {
			t.Fatalf("a forced mcp tool, then the answer: %+v", r.C)
		}
		if r.Unknown.Class != "BadRequestError" || r.Unknown.Param != "tool_choice" {
			t.Fatalf("a forced tool the request does not offer: %+v", r.Unknown)
		}
	})

	t.Run("store false", func(t *testing.T) {
		var r struct {
			ID, Status         string
			OutputText         string `json:"output_text"`
			Store              bool
			After, StreamAfter sdkError
			Stream             struct {
				ID, Status, Text string
				Store            bool
			}
			Chained, Background sdkError
		}
		openaiNode(t, base, &r, "unstored")
		if r.Status != "completed" || r.Store || r.OutputText != "Not kept." || r.After.Class != "NotFoundError" {
			t.Fatalf("store: false, waited for: %+v", r)
		}
		if r.Stream.Status != "completed" || r.Stream.Store || r.Stream.Text != "Streamed, not kept." || r.StreamAfter.Class != "NotFoundError" {
			t.Fatalf("store: false, streamed: %+v", r)
		}
		if r.Chained.Class != "BadRequestError" || r.Chained.Param != "store" || r.Background.Class != "BadRequestError" {
			t.Fatalf("store: false with previous_response_id %+v, in the background %+v", r.Chained, r.Background)
		}
		// Gone from agentd's own API too: the run and its conversation
		// were deleted once the answer was given.
		for _, id := range []string{r.ID, r.Stream.ID} {
			runID, err := uuid.Parse(strings.TrimPrefix(id, "resp_"))
			if err != nil {
				t.Fatalf("response id %q: %v", id, err)
			}
			resp, err := http.Get(base + "/runs/" + runID.String())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /runs/%s after its unstored response: %d, want 404", runID, resp.StatusCode)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		var r struct {
			ID      string
			Deleted struct {
				ID      string
				Deleted bool
			}
			After sdkError
		}
		openaiNode(t, base, &r, "remove")
		if !r.Deleted.Deleted || r.Deleted.ID != r.ID || r.After.Class != "NotFoundError" || r.After.Status != 404 {
			t.Fatalf("delete: %+v", r)
		}
	})

	t.Run("media", func(t *testing.T) {
		// The fake's /media answers with what the model received.
		var r struct {
			Status     string `json:"status"`
			OutputText string `json:"output_text"`
			Content    []struct {
				Type     string  `json:"type"`
				ImageURL string  `json:"image_url"`
				FileURL  string  `json:"file_url"`
				Filename string  `json:"filename"`
				Detail   string  `json:"detail"`
				FileID   *string `json:"file_id"`
			}
			Fetched []struct {
				Status int    `json:"status"`
				Type   string `json:"type"`
				Size   int    `json:"size"`
			}
		}
		openaiNode(t, base, &r, "media")
		want := "image image/png 70 detail=high\nimage https://example.com/cat.png detail=auto\nfile application/pdf 48 report.pdf"
		if r.Status != "completed" || r.OutputText != want {
			t.Fatalf("the response %s answered %q, want %q", r.Status, r.OutputText, want)
		}
		if len(r.Content) != 4 || r.Content[1].Type != "input_image" || !strings.HasPrefix(r.Content[1].ImageURL, "/runs/") ||
			r.Content[2].ImageURL != "https://example.com/cat.png" || r.Content[3].Type != "input_file" || r.Content[3].Filename != "report.pdf" {
			t.Fatalf("the input items: %+v", r.Content)
		}
		if len(r.Fetched) != 2 || r.Fetched[0].Type != "image/png" || r.Fetched[0].Size != 70 || r.Fetched[1].Type != "application/pdf" ||
			r.Fetched[1].Size != 48 {
			t.Fatalf("the artifacts: %+v", r.Fetched)
		}
	})

	t.Run("errors", func(t *testing.T) {
		var r map[string]sdkError
		openaiNode(t, base, &r, "errors")
		for name, want := range map[string]struct{ class, param string }{
			"unknownField":   {"BadRequestError", "bogus"},
			"badTemperature": {"BadRequestError", "temperature"},
			"image":          {"BadRequestError", "input[0].content[0].image_url"},
			"missing":        {"NotFoundError", ""},
		} {
			got := r[name]
			if got.Class != want.class || got.Param != want.param || got.Type != "invalid_request_error" || got.RequestID == "" {
				t.Errorf("%s: %+v, want %s about %q", name, got, want.class, want.param)
			}
		}
	})
}

// contiguous checks that seqs count up from first without a gap.
func contiguous(t *testing.T, seqs []int, first int) {
	t.Helper()
	for i, n := range seqs {
		if n != first+i {
			t.Fatalf("sequence numbers %v are not contiguous from %d", seqs, first)
		}
	}
}

// TestOpenAIStreamSurvivesAKill: a background response's stream is read
// with the Node.js SDK, agentd is killed (SIGKILL) mid-answer, and the
// stream is picked up with starting_after from another instance: the
// sequence numbers follow on, and the response completes with the answer
// the run stored.
func TestOpenAIStreamSurvivesAKill(t *testing.T) {
	t.Parallel()
	needOpenAINode(t)
	db := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + db, "AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=200ms", "AGENTD_LOG_LEVEL=info"}
	a := startChild(t, env)
	var first streamed
	openaiNode(t, "http://"+a.addr, &first, "background", "/stream 60 40", "10")
	a.kill(t)
	b := startChild(t, env)
	defer b.cmd.Process.Kill()
	var rest streamed
	openaiNode(t, "http://"+b.addr, &rest, "resume", first.ID, "9")
	contiguous(t, append(first.Seqs, rest.Seqs...), 0)
	if rest.Final == nil || rest.Final.Status != "completed" {
		t.Fatalf("after the kill: %+v", rest)
	}
	var stored struct {
		OutputText string `json:"output_text"`
	}
	getJSON(t, "http://"+b.addr+"/runs/"+runOfResponse(t, first.ID), &stored)
	if got := rest.Final.Output[len(rest.Final.Output)-1].Content[0].Text; got != stored.OutputText || !strings.HasSuffix(got, "tok60") {
		t.Fatalf("the final answer %q, the run's %q", got, stored.OutputText)
	}
}

// runOfResponse is the run id of a response id.
func runOfResponse(t *testing.T, id string) string {
	t.Helper()
	h := strings.TrimPrefix(id, "resp_")
	if len(h) != 32 {
		t.Fatalf("%q is not a response id", id)
	}
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestOpenAIGoSDK: openai-go's Responses client against agentd: New,
// NewStreaming, Get, and GetStreaming, which sends its stream parameters
// in the body of a GET.
func TestOpenAIGoSDK(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("local"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "fake",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("/say Hello, Go.")}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusCompleted || r.OutputText() != "Hello, Go." {
		t.Fatalf("New: %s %q", r.Status, r.OutputText())
	}

	s := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "fake",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("/stream 8 5")}})
	var deltas string
	var final responses.Response
	var n int64
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber != n {
			t.Fatalf("event %d has sequence number %d", n, ev.SequenceNumber)
		}
		n++
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.completed":
			final = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if final.Status != responses.ResponseStatusCompleted || final.OutputText() != deltas || deltas == "" {
		t.Fatalf("NewStreaming: %s, deltas %q, final %q", final.Status, deltas, final.OutputText())
	}

	got, err := client.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != deltas {
		t.Fatalf("Get: %v %q", err, got.OutputText())
	}
	g := client.Responses.GetStreaming(ctx, final.ID, responses.ResponseGetParams{StartingAfter: openai.Int(3)})
	var seqs []int
	for g.Next() {
		seqs = append(seqs, int(g.Current().SequenceNumber))
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	contiguous(t, seqs, 4)
	if len(seqs) == 0 || int64(seqs[len(seqs)-1]) != n-1 {
		t.Fatalf("GetStreaming after 3: %v, want 4 to %d", seqs, n-1)
	}
}

// TestOpenAIGoSDKPrompt: openai-go's prompt names an agent of agentd: its
// instructions, filled with the prompt's variables (a string, or an
// input_text), its tools, and its pinned version; a prompt of no agent, or
// of a version it does not have, is a 400 naming the prompt's field.
func TestOpenAIGoSDKPrompt(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	for _, body := range []string{`{"name": "pirate", "instructions": "Talk like a {{kind}} pirate.", "tools": ["calculator"]}`,
		`{"instructions": "Talk like a {{kind}} parrot."}`} {
		method, path := http.MethodPost, "/agents"
		if strings.Contains(body, "parrot") {
			method, path = http.MethodPut, "/agents/pirate"
		}
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %v %v", method, path, resp, err)
		}
		resp.Body.Close()
	}
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("local"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ask := func(p responses.ResponsePromptParam, input string) (*responses.Response, error) {
		return client.Responses.New(ctx, responses.ResponseNewParams{Prompt: p,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}})
	}
	r, err := ask(responses.ResponsePromptParam{ID: "pirate", Version: openai.String("1"),
		Variables: map[string]responses.ResponsePromptVariableUnionParam{"kind": {OfString: openai.String("grumpy")}}}, "/system")
	if err != nil || r.OutputText() != "Talk like a grumpy pirate." {
		t.Fatalf("version 1: %v %q", err, r.OutputText())
	}
	if r.Prompt.ID != "pirate" || r.Prompt.Version != "1" || r.Prompt.Variables["kind"].OfString != "grumpy" {
		t.Fatalf("the response's prompt: %+v", r.Prompt)
	}
	r, err = ask(responses.ResponsePromptParam{ID: "pirate",
		Variables: map[string]responses.ResponsePromptVariableUnionParam{"kind": {OfInputText: &responses.ResponseInputTextParam{Text: "sleepy"}}}},
		"/system")
	if err != nil || r.OutputText() != "Talk like a sleepy parrot." {
		t.Fatalf("the latest version: %v %q", err, r.OutputText())
	}
	r, err = ask(responses.ResponsePromptParam{ID: "pirate", Version: openai.String("1"),
		Variables: map[string]responses.ResponsePromptVariableUnionParam{"kind": {OfString: openai.String("x")}}},
		"/call calculator {\"expression\":\"6*7\"}\n/say done")
	if err != nil || r.OutputText() != "done" {
		t.Fatalf("version 1's tool: %v %q", err, r.OutputText())
	}
	// The agent's calculator ran: the model's "done" alone would not say
	// so (a call of a tool not offered fails, and the model goes on).
	runID, err := uuid.Parse(strings.TrimPrefix(r.ID, "resp_"))
	if err != nil {
		t.Fatalf("response id %s: %v", r.ID, err)
	}
	var steps struct {
		Data []struct {
			ToolCalls []struct {
				Name   string          `json:"name"`
				Status string          `json:"status"`
				Result json.RawMessage `json:"result"`
			} `json:"tool_calls"`
		} `json:"data"`
	}
	getJSON(t, base+"/runs/"+runID.String()+"/steps", &steps)
	if len(steps.Data) == 0 || len(steps.Data[0].ToolCalls) != 1 || steps.Data[0].ToolCalls[0].Name != "calculator" ||
		steps.Data[0].ToolCalls[0].Status != "succeeded" || string(steps.Data[0].ToolCalls[0].Result) != `{"result":42}` {
		t.Fatalf("version 1's tool call: %+v", steps.Data)
	}
	for _, c := range []struct {
		p     responses.ResponsePromptParam
		param string
	}{
		{responses.ResponsePromptParam{ID: "nobody"}, "prompt.id"},
		{responses.ResponsePromptParam{ID: "pirate", Version: openai.String("9")}, "prompt.version"},
		{responses.ResponsePromptParam{ID: "pirate"}, "prompt.variables.kind"},
	} {
		_, err := ask(c.p, "x")
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != c.param {
			t.Errorf("prompt %+v: %v, want a 400 naming %s", c.p, err, c.param)
		}
	}
}

// TestOpenAITruncation: a conversation that outgrows its model's window (the
// fake model's fake-4k: 4,096 tokens) goes on with truncation auto, which
// is agentd's compaction, and fails with OpenAI's context error with
// truncation disabled.
func TestOpenAITruncation(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("local"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	turns := func(truncation responses.ResponseNewParamsTruncation) (completed int, last *responses.Response) {
		t.Helper()
		prev := ""
		for n := range 8 {
			p := responses.ResponseNewParams{Model: "fake-4k", Truncation: truncation,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(
					fmt.Sprintf("turn %d: %s\n/say noted", n, strings.Repeat("lorem ipsum ", 230)))}}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			r, err := client.Responses.New(ctx, p)
			if err != nil {
				t.Fatalf("turn %d: %v", n, err)
			}
			if r.Status != responses.ResponseStatusCompleted {
				return completed, r
			}
			completed++
			prev = r.ID
		}
		return completed, nil
	}
	if n, failed := turns(responses.ResponseNewParamsTruncationAuto); failed != nil {
		t.Fatalf("with truncation auto, turn %d ended %s: %+v", n, failed.Status, failed.Error)
	}
	n, failed := turns(responses.ResponseNewParamsTruncationDisabled)
	if failed == nil || failed.Status != responses.ResponseStatusFailed || string(failed.Error.Code) != "context_length_exceeded" ||
		failed.Truncation != responses.ResponseTruncationDisabled {
		t.Fatalf("with truncation disabled, %d turns completed, then %+v", n, failed)
	}
}
