package compact

import (
	"fmt"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
)

// KeepTurns is how many of the latest user turns (each with everything
// after it) a compaction keeps verbatim.
const KeepTurns = 2

// summaryLead opens the message that stands, in what the model is sent, for
// the messages a compaction covers.
const summaryLead = "Summary of the earlier conversation (the messages it stands for are kept, but no longer sent):\n\n"

// SummaryText is the text of the message that stands, in what the model
// is sent, for what a summary covers: the text Visible gives a
// compaction's summary, which IsSummary recognizes.
func SummaryText(summary string) string { return summaryLead + summary }

// IsSummary reports whether text is that of the message Visible puts in
// place of what a compaction covers.
func IsSummary(text string) bool { return strings.HasPrefix(text, summaryLead) }

// Visible returns the messages the model is sent, oldest first: without a
// compaction, msgs as they are; with c, the conversation's first user
// message, then a system message holding c's summary, then the messages
// after c.CoversToSeq.
func Visible(msgs []agentd.Message, c *agentd.Compaction) []agentd.Message {
	if c == nil {
		return msgs
	}
	out := make([]agentd.Message, 0, len(msgs))
	first := firstUser(msgs)
	if first >= 0 && msgs[first].Seq <= c.CoversToSeq {
		out = append(out, msgs[first])
	}
	out = append(out, agentd.Message{Role: agentd.RoleSystem, Status: agentd.MessageCompleted,
		Content: []agentd.Part{{Type: agentd.PartText, Text: summaryLead + c.Summary}}})
	for _, m := range msgs {
		if m.Seq > c.CoversToSeq {
			out = append(out, m)
		}
	}
	return out
}

// InContext reports whether the model is still sent m, given the
// conversation's latest compaction c and its first user message's seq.
func InContext(m agentd.Message, c *agentd.Compaction, firstUserSeq int) bool {
	if m.Status != agentd.MessageCompleted {
		return false
	}
	return c == nil || m.Seq > c.CoversToSeq || m.Seq == firstUserSeq
}

func firstUser(msgs []agentd.Message) int {
	for i, m := range msgs {
		if m.Role == agentd.RoleUser {
			return i
		}
	}
	return -1
}

// Cut says what a new compaction of msgs (a conversation's completed
// messages, oldest first) covers, after the previous compaction prev (nil
// for none): the messages to summarize, and the seq of the last of them.
// The first user message and the latest KeepTurns user turns (each user
// message with everything after it) stay verbatim, and the cut falls just
// before a user message, so a tool call and its result are never parted.
// ok is false when there is nothing to summarize.
func Cut(msgs []agentd.Message, prev *agentd.Compaction) (covered []agentd.Message, coversTo int, ok bool) {
	first := firstUser(msgs)
	if first < 0 {
		return nil, 0, false
	}
	var turns []int // indexes of the user messages after the first
	for i := first + 1; i < len(msgs); i++ {
		if msgs[i].Role == agentd.RoleUser {
			turns = append(turns, i)
		}
	}
	if len(turns) < KeepTurns {
		return nil, 0, false
	}
	cut := turns[len(turns)-KeepTurns]
	done := 0
	if prev != nil {
		done = prev.CoversToSeq
	}
	for _, m := range msgs[first+1 : cut] {
		if m.Seq > done {
			covered = append(covered, m)
		}
	}
	if len(covered) == 0 {
		return nil, 0, false
	}
	return covered, msgs[cut-1].Seq, true
}

// Instructions is the system prompt of a compaction's model call: the
// template every summary follows.
const Instructions = `You compact a conversation between a user and an AI agent that uses tools, so that the agent can go on within its context window. Write a summary that replaces the older part of the conversation shown to you (after the previous summary, if there is one, which your summary must include). The agent will see the user's first message, your summary, and the latest turns verbatim.

Answer with exactly these six sections, each a heading line followed by short bullet points (write "- none" when a section is empty):

## Goal
## Constraints and preferences
## Done
## Open items / next steps
## Files and artifacts
## Key facts

Under Key facts, keep names, ids, numbers, paths and values verbatim. Do not invent anything; do not address the user; do not call tools.`

// Sections are the headings of the summary template, in order.
var Sections = []string{"## Goal", "## Constraints and preferences", "## Done", "## Open items / next steps",
	"## Files and artifacts", "## Key facts"}

// maxQuoted caps a tool call's arguments or result in the transcript.
const maxQuoted = 2000

// Transcript renders what a compaction summarizes, as the user message of
// its model call: the previous summary, then each message, every line
// quoted with "> " (so that nothing in it reads as an instruction line).
func Transcript(prev *agentd.Compaction, covered []agentd.Message) string {
	return transcript(prev, covered, 0, 0)
}

// TranscriptWithin is Transcript cut to fit in maxTokens (0: no limit), so
// that the compaction's own request fits the model's window however much
// went uncompacted: each message's text is cut shorter and shorter, down to
// 200 bytes; past that the oldest messages are left out, and the
// transcript says how many.
func TranscriptWithin(prev *agentd.Compaction, covered []agentd.Message, maxTokens int) string {
	t := transcript(prev, covered, 0, 0)
	if maxTokens <= 0 || EstimateTokens(len(t)) <= maxTokens {
		return t
	}
	for limit := 8000; limit >= 200; limit /= 2 {
		if t = transcript(prev, covered, limit, 0); EstimateTokens(len(t)) <= maxTokens {
			return t
		}
	}
	for skip := 1; skip < len(covered); skip++ {
		if t = transcript(prev, covered, 200, skip); EstimateTokens(len(t)) <= maxTokens {
			return t
		}
	}
	return t
}

// transcript renders prev and covered, each text cut to limit bytes (0:
// whole), leaving out the first skip messages.
func transcript(prev *agentd.Compaction, covered []agentd.Message, limit, skip int) string {
	text := func(s string) string {
		if limit > 0 && len(s) > limit {
			return cut(s, limit) + " [cut]"
		}
		return s
	}
	var b strings.Builder
	if prev != nil {
		b.WriteString("Previous summary:\n")
		quote(&b, prev.Summary)
		b.WriteString("\n")
	}
	b.WriteString("Conversation to summarize:\n")
	if skip > 0 {
		fmt.Fprintf(&b, "[%d earlier messages are left out: they do not fit]\n", skip)
		covered = covered[skip:]
	}
	for _, m := range covered {
		for _, p := range m.Content {
			switch p.Type {
			case agentd.PartText:
				fmt.Fprintf(&b, "%s:\n", m.Role)
				quote(&b, text(p.Text))
			case agentd.PartToolCall:
				fmt.Fprintf(&b, "%s called tool %s (call %s) with:\n", m.Role, p.Name, p.ID)
				quote(&b, cut(p.Arguments, maxQuoted))
			case agentd.PartToolResult:
				fmt.Fprintf(&b, "tool result (call %s):\n", p.ToolCallID)
				quote(&b, cut(p.Content, maxQuoted))
			case agentd.PartImage, agentd.PartFile:
				fmt.Fprintf(&b, "%s sent %s:\n", m.Role, attachedName(p))
				quote(&b, "(its content is not in this transcript)")
			}
		}
	}
	return b.String()
}

func quote(b *strings.Builder, text string) {
	for _, line := range strings.Split(text, "\n") {
		b.WriteString("> ")
		b.WriteString(line)
		b.WriteString("\n")
	}
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes in all)", len(s))
}

// EstimateRequest estimates the prompt tokens of msgs the way the built-in
// fakes count them (EstimateTokens of the bytes of every message's text
// and tool results, tool call arguments included), with an image or a
// file counted as AttachedBytes says, not as its base64.
func EstimateRequest(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			switch p.Type {
			case llm.PartText, llm.PartToolResult:
				n += len(p.Text)
			case llm.PartToolCall:
				n += len(p.Call.Arguments)
			case llm.PartImage, llm.PartFile:
				n += AttachedBytes(p.Type == llm.PartImage, p.MediaType, len(p.Data))
			}
		}
	}
	return EstimateTokens(n)
}
