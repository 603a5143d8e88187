package fakeanthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// Fault kinds of the /fault directive: fakellm's, and Anthropic's 529.
const (
	FaultRateLimit  = fakellm.FaultRateLimit
	FaultServer     = fakellm.FaultServer
	FaultOverloaded = "529"
	FaultHang       = fakellm.FaultHang
	FaultTruncate   = fakellm.FaultTruncate
)

// script is fakellm's script with the directives of this fake.
type script struct {
	fakellm.Script
	think      []string // /think lines
	redacted   []string // /redacted lines
	overloaded []int    // the steps of /fault 529 (-1: any)
}

// parseScript reads the directives of text: this fake's own lines are
// taken out, the rest is read by fakellm.
func parseScript(text string) (script, error) {
	var s script
	var rest strings.Builder
	for line := range strings.Lines(text) {
		t := strings.TrimSpace(line)
		name, arg, _ := strings.Cut(t, " ")
		arg = strings.TrimSpace(arg)
		switch {
		case name == "/think":
			s.think = append(s.think, arg)
		case name == "/redacted":
			s.redacted = append(s.redacted, arg)
		case name == "/fault" && (arg == FaultOverloaded || strings.HasPrefix(arg, FaultOverloaded+"@")):
			step := -1
			if _, at, ok := strings.Cut(arg, "@"); ok {
				n, err := strconv.Atoi(at)
				if err != nil || n < 0 {
					return s, fmt.Errorf("/fault: bad step %q", at)
				}
				step = n
			}
			s.overloaded = append(s.overloaded, step)
		default:
			rest.WriteString(line)
		}
	}
	var err error
	s.Script, err = fakellm.ParseScript(rest.String())
	return s, err
}

// faultAt returns the fault scripted for step, or "".
func (s script) faultAt(step int) string {
	if f := s.FaultAt(step); f != "" {
		return f
	}
	for _, at := range s.overloaded {
		if at == -1 || at == step {
			return FaultOverloaded
		}
	}
	return ""
}

// outBlock is one content block of an answer.
type outBlock struct {
	typ                 string // text, thinking, redacted_thinking, tool_use
	pieces              []string
	id, name, signature string
	data                string
}

// answer is what the fake will send for one request.
type answer struct {
	id     string
	model  string
	hash   [sha256.Size]byte
	step   int
	blocks []outBlock
	stop   string
	gap    time.Duration
	fault  string
	usage  Usage
	prefix prefix // the request's, for the cache
}

// plan decides the answer to req, a pure function of it.
func plan(req *request, body []byte) (answer, error) {
	a := answer{model: req.Model, hash: sha256.Sum256(append([]byte(req.Model+"\x00"), body...))}
	a.id = "msg_" + hex.EncodeToString(a.hash[:12])
	last := -1 // the last user message with text: it holds the directives
	for i, m := range req.Messages {
		if m.Role == "user" && text(m.blocks) != "" {
			last = i
		}
	}
	var sc script
	if last >= 0 {
		var err error
		if sc, err = parseScript(text(req.Messages[last].blocks)); err != nil {
			return a, err
		}
		for _, m := range req.Messages[last+1:] {
			if m.Role == "assistant" && hasToolUse(m.blocks) {
				a.step++
			}
		}
	}
	a.fault, a.gap = sc.faultAt(a.step), sc.StreamGap
	if req.Thinking.on() {
		a.blocks = append(a.blocks, thinkingBlock(sc, a.step))
		for _, r := range sc.redacted {
			a.blocks = append(a.blocks, outBlock{typ: "redacted_thinking", data: redactedData(r)})
		}
	}
	if a.step < len(sc.Groups) {
		for i, c := range sc.Groups[a.step] {
			half := len(c.Args) / 2
			for half > 0 && !utf8.RuneStart(c.Args[half]) {
				half--
			}
			a.blocks = append(a.blocks, outBlock{typ: "tool_use", id: "toolu_" + strconv.Itoa(a.step) + "_" + strconv.Itoa(i),
				name: c.Name, pieces: []string{c.Args[:half], c.Args[half:]}})
		}
		a.stop = "tool_use"
	} else {
		a.finalText(req, sc)
	}
	a.usage.OutputTokens, a.usage.ThinkingTokens = a.outputTokens()
	return a, nil
}

func hasToolUse(blocks []block) bool {
	for _, b := range blocks {
		if b.Type == "tool_use" {
			return true
		}
	}
	return false
}

// thinkingBlock is the thinking of an answer: /think's text, or a line
// that names the step.
func thinkingBlock(sc script, step int) outBlock {
	t := strings.Join(sc.think, "\n")
	if len(sc.think) == 0 {
		t = "Thinking about step " + strconv.Itoa(step) + "."
	}
	return outBlock{typ: "thinking", pieces: []string{t}, signature: sign("thinking", t)}
}

// finalText adds the final text block and its stop reason: /say's text
// (or /sampling's, /system's), ended as /finish says, cut at max_tokens.
func (a *answer) finalText(req *request, sc script) {
	pieces := sc.FinalPieces()
	switch {
	case sc.Sampling:
		pieces = []string{samplingText(req)}
	case sc.System:
		sys, _ := readBlocks(req.System)
		pieces = []string{text(sys)}
	case sc.Media:
		pieces = []string{fakellm.MediaAnswer(req.media())}
	}
	a.stop = "end_turn"
	switch sc.Finish {
	case "length":
		a.stop = "max_tokens"
	case "content_filter":
		a.stop = "refusal"
	}
	// The longest text of at most max_tokens tokens, counted as usage
	// counts them: C/4+1 <= max_tokens.
	left := 4*min(*req.MaxTokens, 1<<40) - 1
	for i, p := range pieces {
		if int64(len(p)) <= left {
			left -= int64(len(p))
			continue
		}
		end := int(max(left, 0))
		for end > 0 && !utf8.RuneStart(p[end]) {
			end--
		}
		pieces = append(pieces[:i:i], p[:end])
		a.stop = "max_tokens"
		break
	}
	a.blocks = append(a.blocks, outBlock{typ: "text", pieces: pieces})
}

// outputTokens counts the answer's output as the package doc says, and its
// thinking among it.
func (a answer) outputTokens() (out, thinking int64) {
	var n, t int64
	for _, b := range a.blocks {
		size := int64(len(b.name) + len(b.data))
		for _, p := range b.pieces {
			size += int64(len(p))
		}
		n += size
		if b.typ == "thinking" || b.typ == "redacted_thinking" {
			t += size
		}
	}
	return n/4 + 1, t / 4
}

// samplingText is /sampling's answer: the request's max_tokens,
// temperature, top_p, tool_choice, thinking and output_config as sent
// (those not sent left out), as a JSON object.
func samplingText(req *request) string {
	compact := func(raw json.RawMessage) json.RawMessage {
		var buf bytes.Buffer
		if len(raw) == 0 || json.Compact(&buf, raw) != nil {
			return nil
		}
		return buf.Bytes()
	}
	b, _ := json.Marshal(struct { // decoded JSON always encodes
		MaxTokens    *int64          `json:"max_tokens,omitempty"`
		Temperature  *float64        `json:"temperature,omitempty"`
		TopP         *float64        `json:"top_p,omitempty"`
		ToolChoice   json.RawMessage `json:"tool_choice,omitempty"`
		Thinking     *thinking       `json:"thinking,omitempty"`
		OutputConfig json.RawMessage `json:"output_config,omitempty"`
	}{req.MaxTokens, req.Temperature, req.TopP, compact(req.ToolChoice), req.Thinking, compact(req.OutputConfig)})
	return string(b)
}
