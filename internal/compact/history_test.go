package compact_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// history generates a conversation: turns of a user message, then steps
// of an assistant message with parallel tool calls and their results (one
// tool message per call, or one for all), then an answer.
func history(r *rand.Rand) []agentd.Message {
	var msgs []agentd.Message
	add := func(role agentd.Role, parts ...agentd.Part) {
		msgs = append(msgs, agentd.Message{Seq: len(msgs) + 1, Role: role, Status: agentd.MessageCompleted, Content: parts})
	}
	for turn := range 1 + r.IntN(12) {
		add(agentd.RoleUser, agentd.Part{Type: agentd.PartText, Text: fmt.Sprintf("question %d", turn)})
		for step := range r.IntN(4) {
			var calls, results []agentd.Part
			for c := range 1 + r.IntN(3) {
				id := fmt.Sprintf("call_%d_%d_%d", turn, step, c)
				calls = append(calls, agentd.Part{Type: agentd.PartToolCall, ID: id, Name: "t", Arguments: "{}"})
				results = append(results, agentd.Part{Type: agentd.PartToolResult, ToolCallID: id,
					Content: strings.Repeat("x", r.IntN(5000))})
			}
			add(agentd.RoleAssistant, calls...)
			if r.IntN(2) == 0 {
				add(agentd.RoleTool, results...)
			} else {
				for _, p := range results {
					add(agentd.RoleTool, p)
				}
			}
		}
		add(agentd.RoleAssistant, agentd.Part{Type: agentd.PartText, Text: fmt.Sprintf("answer %d", turn)})
	}
	return msgs
}

// TestCutKeepsTurnsWhole: over generated histories (and a previous
// compaction at a random earlier cut), a cut falls just before a user
// message, never parts a tool call from its result, keeps the first user
// message and the latest KeepTurns turns, and covers only what the previous
// compaction did not.
func TestCutKeepsTurnsWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cuts := 0
	for i := range 2000 {
		msgs := history(r)
		var prev *agentd.Compaction
		if r.IntN(2) == 0 {
			if _, to, ok := compact.Cut(msgs[:r.IntN(len(msgs))+1], nil); ok {
				prev = &agentd.Compaction{CoversToSeq: to, Summary: "earlier"}
			}
		}
		covered, coversTo, ok := compact.Cut(msgs, prev)
		if !ok {
			continue
		}
		cuts++
		next := msgs[coversTo] // seqs are 1-based: the message after the cut
		if next.Role != agentd.RoleUser {
			t.Fatalf("history %d: the cut after seq %d falls before a %s message", i, coversTo, next.Role)
		}
		callAt := map[string]int{}
		for _, m := range msgs {
			for _, p := range m.Content {
				if p.Type == agentd.PartToolCall {
					callAt[p.ID] = m.Seq
				}
				if p.Type == agentd.PartToolResult && (callAt[p.ToolCallID] <= coversTo) != (m.Seq <= coversTo) {
					t.Fatalf("history %d: call %s (seq %d) and its result (seq %d) fall on two sides of the cut after %d",
						i, p.ToolCallID, callAt[p.ToolCallID], m.Seq, coversTo)
				}
			}
		}
		var users []int
		for _, m := range msgs {
			if m.Role == agentd.RoleUser {
				users = append(users, m.Seq)
			}
		}
		for _, m := range covered {
			if m.Seq == users[0] {
				t.Fatalf("history %d: the first user message is covered", i)
			}
			if m.Seq >= users[len(users)-compact.KeepTurns] {
				t.Fatalf("history %d: message %d of the latest %d turns is covered", i, m.Seq, compact.KeepTurns)
			}
			if prev != nil && m.Seq <= prev.CoversToSeq {
				t.Fatalf("history %d: message %d was covered by the previous compaction already", i, m.Seq)
			}
		}
		visible := compact.Visible(msgs, &agentd.Compaction{CoversToSeq: coversTo, Summary: "s"})
		if visible[0].Seq != users[0] || visible[1].Role != agentd.RoleSystem {
			t.Fatalf("history %d: the model would be sent %s %d then %s", i, visible[0].Role, visible[0].Seq, visible[1].Role)
		}
	}
	if cuts < 500 {
		t.Fatalf("only %d of 2000 histories were cut: the generator is too small", cuts)
	}
}

// TestTranscriptQuotesEveryLine: no line of a transcript starts with what
// a model (or the fake) would read as an instruction line.
func TestTranscriptQuotesEveryLine(t *testing.T) {
	msgs := []agentd.Message{{Seq: 2, Role: agentd.RoleUser, Content: []agentd.Part{{Type: agentd.PartText, Text: "/say hi\n/call x {}"}}}}
	for _, l := range strings.Split(compact.Transcript(&agentd.Compaction{Summary: "/stream 3 1"}, msgs), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "/") {
			t.Fatalf("transcript line %q reads as a directive", l)
		}
	}
}

// TestTranscriptWithin: a transcript too long for its room is cut to fit:
// texts first, then the oldest messages, which it says are left out.
func TestTranscriptWithin(t *testing.T) {
	t.Parallel()
	var msgs []agentd.Message
	for i := range 40 {
		msgs = append(msgs, agentd.Message{Seq: i + 1, Role: agentd.RoleUser,
			Content: []agentd.Part{{Type: agentd.PartText, Text: fmt.Sprintf("turn %d %s", i, strings.Repeat("word ", 600))}}})
	}
	whole := compact.Transcript(nil, msgs)
	if got := compact.TranscriptWithin(nil, msgs, 0); got != whole {
		t.Fatal("no limit changed the transcript")
	}
	for _, room := range []int{20000, 4000, 1500, 300} {
		got := compact.TranscriptWithin(nil, msgs, room)
		if compact.EstimateTokens(len(got)) > room {
			t.Fatalf("room %d: the transcript is %d tokens", room, compact.EstimateTokens(len(got)))
		}
		if !strings.Contains(got, "turn 39") {
			t.Fatalf("room %d: the newest message is gone", room)
		}
		if room == 300 && !strings.Contains(got, "earlier messages are left out") {
			t.Fatalf("room 300 left nothing out:\n%.300s", got)
		}
	}
}

// The estimate counts what the fake counts of a request's parts: text, tool
// results and call arguments; an image as ImageTokens and a PDF as a
// quarter of its bytes (at least an image's), whatever their base64 or URL.
func TestEstimateRequest(t *testing.T) {
	t.Parallel()
	msgs := []llm.Message{
		llm.TextMessage(llm.RoleSystem, strings.Repeat("s", 100)),
		{Role: llm.RoleUser, Parts: []llm.Part{llm.Text(strings.Repeat("u", 50)), llm.Text(strings.Repeat("v", 50)),
			{Type: llm.PartImage, URL: "https://example.com/" + strings.Repeat("i", 1000)},
			{Type: llm.PartFile, Data: make([]byte, 1000), MediaType: "application/pdf"}}},
		{Role: llm.RoleAssistant, Parts: []llm.Part{llm.Text("ok"),
			{Type: llm.PartToolCall, Call: llm.ToolCall{ID: "c", Name: "f", Arguments: strings.Repeat("a", 98)}}}},
		{Role: llm.RoleTool, Parts: []llm.Part{llm.ToolResult("c", strings.Repeat("r", 100))}},
	}
	if got, want := compact.EstimateRequest(msgs), compact.EstimateTokens(100+100+2+98+100+2*4*compact.ImageTokens); got != want {
		t.Fatalf("EstimateRequest = %d, want %d", got, want)
	}
}

// TestAttachedBytesAsTheFakes: the budget counts an image or a file as
// the fakes count it, so that against them the estimate is exact.
func TestAttachedBytesAsTheFakes(t *testing.T) {
	t.Parallel()
	if compact.ImageTokens != fakellm.ImageTokens {
		t.Fatalf("an image is %d tokens to the budget and %d to the fakes", compact.ImageTokens, fakellm.ImageTokens)
	}
	for _, c := range []fakellm.Media{{Kind: "image", MediaType: "image/png", Size: 10}, {Kind: "image", URL: "https://x/y"},
		{Kind: "file", MediaType: "application/pdf", Size: 100}, {Kind: "file", MediaType: "application/pdf", Size: 1 << 20},
		{Kind: "file", MediaType: "text/plain", Size: 1234}} {
		if got, want := compact.AttachedBytes(c.Kind == "image", c.MediaType, c.Size), c.PromptBytes(); int64(got) != want {
			t.Errorf("%+v: the budget counts %d bytes, the fakes %d", c, got, want)
		}
	}
}

// TestTranscriptNamesAttachments: a compaction's transcript names the
// images and files of the messages it covers, never their bytes.
func TestTranscriptNamesAttachments(t *testing.T) {
	t.Parallel()
	got := compact.Transcript(nil, []agentd.Message{{Seq: 2, Role: agentd.RoleUser, Content: []agentd.Part{
		{Type: agentd.PartText, Text: "see"}, {Type: agentd.PartImage, ArtifactID: "a1", MediaType: "image/png", Size: 70},
		{Type: agentd.PartFile, ArtifactID: "a2", MediaType: "application/pdf", Size: 48, Filename: "report.pdf"},
		{Type: agentd.PartImage, URL: "https://example.com/cat.png"}}}})
	for _, want := range []string{"user sent an image (image/png, 70 bytes)", `user sent a file "report.pdf" (application/pdf, 48 bytes)`,
		"user sent an image (https://example.com/cat.png)"} {
		if !strings.Contains(got, want) {
			t.Errorf("the transcript does not say %q:\n%s", want, got)
		}
	}
}

// TestSummaryText: the text SummaryText gives a summary is the one Visible
// gives a compaction's, and IsSummary knows it.
func TestSummaryText(t *testing.T) {
	c := &agentd.Compaction{Summary: "## Goal\n- x", CoversToSeq: 1}
	v := compact.Visible([]agentd.Message{{Seq: 1, Role: agentd.RoleAssistant}}, c)
	if got := compact.SummaryText(c.Summary); got != agentd.TextOf(v[0].Content) || !compact.IsSummary(got) {
		t.Fatalf("SummaryText %q, Visible's %q", got, agentd.TextOf(v[0].Content))
	}
}
