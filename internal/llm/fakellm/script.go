package fakellm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Fault kinds understood by the /fault directive.
const (
	FaultRateLimit = "429"
	FaultServer    = "500"
	FaultHang      = "hang"
	FaultTruncate  = "truncate"
)

// call is one scripted tool call.
type call struct {
	name string
	args string
}

// script is what the directives of the last user message ask for.
type script struct {
	groups    [][]call
	say       []string
	streamN   int // 0 when /stream was not given
	streamGap time.Duration
	faults    []fault
	finish    string // /finish: the final text's finish_reason ("" for stop)
	finishN   int    // ... for this many final answers in a row (0: all)
	sampling  bool   // /sampling: the final text is the request's sampling
	system    bool   // /system: the final text is the request's system prompt
	media     bool   // /media: the final text lists the request's images and files
	// extract is an extraction request's extractor (its answer is say).
	extract *extraction
}

type fault struct {
	kind string
	step int // -1: any step
}

// parseScript reads the directives of text; see the package doc.
func parseScript(text string) (script, error) {
	var s script
	var group []call
	flush := func() {
		if len(group) > 0 {
			s.groups = append(s.groups, group)
			group = nil
		}
	}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "/") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch name {
		case "/call":
			fn, args, _ := strings.Cut(rest, " ")
			if fn == "" {
				return s, fmt.Errorf("/call: missing function name")
			}
			args = strings.TrimSpace(args)
			if args == "" {
				args = "{}"
			}
			group = append(group, call{name: fn, args: args})
		case "/next":
			flush()
		case "/say":
			s.say = append(s.say, rest)
		case "/sampling":
			s.sampling = true
		case "/system":
			s.system = true
		case "/media":
			s.media = true
		case "/stream":
			if err := s.parseStream(rest); err != nil {
				return s, err
			}
		case "/finish":
			if err := s.parseFinish(rest); err != nil {
				return s, err
			}
		case "/fault":
			if err := s.parseFault(rest); err != nil {
				return s, err
			}
		}
	}
	flush()
	return s, nil
}

// parseStream reads "/stream N MS".
func (s *script) parseStream(rest string) error {
	f := strings.Fields(rest)
	if len(f) != 2 {
		return fmt.Errorf("/stream: want N MS, got %q", rest)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1 {
		return fmt.Errorf("/stream: N must be a positive integer, got %q", f[0])
	}
	ms, err := strconv.Atoi(f[1])
	if err != nil || ms < 0 {
		return fmt.Errorf("/stream: MS must be a non-negative integer, got %q", f[1])
	}
	s.streamN, s.streamGap = n, time.Duration(ms)*time.Millisecond
	return nil
}

// parseFinish reads "/finish length|content_filter [N]".
func (s *script) parseFinish(rest string) error {
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 || (f[0] != "length" && f[0] != "content_filter") {
		return fmt.Errorf("/finish: want length or content_filter, and an optional count, got %q", rest)
	}
	s.finish = f[0]
	if len(f) == 2 {
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return fmt.Errorf("/finish: the count must be a positive integer, got %q", f[1])
		}
		s.finishN = n
	}
	return nil
}

// parseFault reads "/fault KIND[@STEP]".
func (s *script) parseFault(rest string) error {
	kind, stepText, hasStep := strings.Cut(rest, "@")
	switch kind {
	case FaultRateLimit, FaultServer, FaultHang, FaultTruncate:
	default:
		return fmt.Errorf("/fault: unknown kind %q", kind)
	}
	step := -1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n < 0 {
			return fmt.Errorf("/fault: bad step %q", stepText)
		}
		step = n
	}
	s.faults = append(s.faults, fault{kind: kind, step: step})
	return nil
}

// faultAt returns the fault kind scripted for step, or "".
func (s script) faultAt(step int) string {
	for _, f := range s.faults {
		if f.step == -1 || f.step == step {
			return f.kind
		}
	}
	return ""
}

// finishAfter is the final text's finish_reason, given the messages since
// the last user message: /finish's REASON while the assistant text among
// them holds the final text fewer than N times (a client continuing a cut
// answer sends it back, in one message or several), else "" (stop).
func (s script) finishAfter(since []wireMessage) string {
	if s.finish == "" {
		return ""
	}
	var said strings.Builder
	for _, m := range since {
		if m.Role == "assistant" && len(m.ToolCalls) == 0 {
			said.WriteString(m.text())
		}
	}
	answered := 0
	if t := strings.Join(s.finalPieces(), ""); t != "" {
		answered = strings.Count(said.String(), t)
	}
	if s.finishN == 0 || answered < s.finishN {
		return s.finish
	}
	return ""
}

// finalPieces returns the final answer as the content chunks to send.
func (s script) finalPieces() []string {
	if len(s.say) == 0 && s.streamN > 0 {
		pieces := make([]string, s.streamN)
		for i := range pieces {
			sep := " "
			if i == 0 {
				sep = ""
			}
			pieces[i] = sep + "tok" + strconv.Itoa(i+1)
		}
		return pieces
	}
	text := "ok"
	if len(s.say) > 0 {
		text = strings.Join(s.say, "\n")
	}
	if s.streamN <= 1 {
		return []string{text}
	}
	return splitRunes(text, s.streamN)
}

// splitRunes splits text into n near-equal pieces by runes: the first
// len%n pieces are one rune longer. A text of fewer than n runes gives one
// piece per rune.
func splitRunes(text string, n int) []string {
	count := utf8.RuneCountInString(text)
	if count == 0 {
		return []string{""}
	}
	if count < n {
		n = count
	}
	size, extra := count/n, count%n
	pieces := make([]string, 0, n)
	for i := range n {
		k := size
		if i < extra {
			k++
		}
		end := 0
		for range k {
			_, w := utf8.DecodeRuneInString(text[end:])
			end += w
		}
		pieces = append(pieces, text[:end])
		text = text[end:]
	}
	return pieces
}

// empty reports whether the script has no directive at all.
func (s script) empty() bool {
	return len(s.groups) == 0 && len(s.say) == 0 && s.streamN == 0 && len(s.faults) == 0 && s.finish == "" && !s.sampling && !s.system && !s.media
}

// templateAnswer is the answer to a request whose system prompt gives a
// template of Markdown headings ("## " lines) and whose last message has no
// directive: each heading, in order, with one bullet that counts the lines
// of that last message. The fake so writes summaries in the shape asked
// for. "" when the system prompt has no heading.
func templateAnswer(system, last string) string {
	var b strings.Builder
	lines := strings.Count(last, "\n") + 1
	for _, l := range strings.Split(system, "\n") {
		if h := strings.TrimSpace(l); strings.HasPrefix(h, "## ") {
			fmt.Fprintf(&b, "%s\n- noted from %d lines\n", h, lines)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
