package fakellm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ExtractionMarker is the sentence of agentd's memory extraction prompt
// that makes a request an extraction request: one whose first message is
// a system prompt holding it (see "Memory extraction" in the package doc).
const ExtractionMarker = "You are agentd's memory extractor."

// FaultInvalid is the kind of /extract-fail that answers text that is no
// JSON, in place of the extractor's JSON.
const FaultInvalid = "invalid"

// invalidAnswer is the answer of /extract-fail invalid.
const invalidAnswer = "I would rather not answer in JSON."

// extraction is what an extraction request asks of the fake's extractor.
type extraction struct {
	keys   []string          // the memories' keys, in the order first seen
	values map[string]string // by key, the last value given
	fail   string            // /extract-fail's kind, or ""
	times  int               // ... for the first times the request is seen (-1: every time)
	delay  time.Duration     // /extract-delay
}

// isExtraction reports whether msgs are an extraction request's: the
// first is a system prompt that holds ExtractionMarker.
func isExtraction(msgs []wireMessage) bool {
	return len(msgs) > 0 && msgs[0].Role == "system" && strings.Contains(msgs[0].text(), ExtractionMarker)
}

// parseExtraction reads the extractor's directives from every message of
// msgs; see the package doc.
func parseExtraction(msgs []wireMessage) (extraction, error) {
	x := extraction{values: map[string]string{}}
	for _, m := range msgs {
		for line := range strings.Lines(m.text()) {
			name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
			rest = strings.TrimSpace(rest)
			var err error
			switch name {
			case "/remember":
				err = x.remember(rest)
			case "/extract-fail":
				err = x.parseFail(rest)
			case "/extract-delay":
				ms, perr := strconv.Atoi(rest)
				if perr != nil || ms < 0 {
					err = fmt.Errorf("/extract-delay: want MS, a non-negative integer, got %q", rest)
				}
				x.delay = time.Duration(ms) * time.Millisecond
			}
			if err != nil {
				return x, err
			}
		}
	}
	return x, nil
}

// remember reads "/remember KEY=VALUE".
func (x *extraction) remember(rest string) error {
	key, value, ok := strings.Cut(rest, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("/remember: want KEY=VALUE, got %q", rest)
	}
	if _, seen := x.values[key]; !seen {
		x.keys = append(x.keys, key)
	}
	x.values[key] = strings.TrimSpace(value)
	return nil
}

// parseFail reads "/extract-fail KIND [N]".
func (x *extraction) parseFail(rest string) error {
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return fmt.Errorf("/extract-fail: want KIND and an optional count, got %q", rest)
	}
	switch f[0] {
	case FaultRateLimit, FaultServer, FaultInvalid:
	default:
		return fmt.Errorf("/extract-fail: unknown kind %q (429, 500 or invalid)", f[0])
	}
	x.fail, x.times = f[0], -1
	if len(f) == 2 {
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return fmt.Errorf("/extract-fail: the count must be a positive integer, got %q", f[1])
		}
		x.times = n
	}
	return nil
}

// answer is the extractor's answer: {"memories": [{"key", "value"}, ...]}.
func (x extraction) answer() string {
	type memory struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	out := struct {
		Memories []memory `json:"memories"`
	}{Memories: []memory{}}
	for _, k := range x.keys {
		out.Memories = append(out.Memories, memory{Key: k, Value: x.values[k]})
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // strings always encode
	}
	return string(b)
}
