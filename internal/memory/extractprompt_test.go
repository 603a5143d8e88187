package memory

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

// TestParseMemories: the model's answer is read alone or in a code
// block; memories without a key or a value are left out, a data that is
// no object is dropped, a key given twice keeps its last value, text is
// made storable, and at most MaxExtractedItems are kept; an answer that
// is no JSON is an error.
func TestParseMemories(t *testing.T) {
	t.Parallel()
	got, err := parseMemories("Here:\n```json\n" + `{"memories": [{"key": "home", "value": "Lisbon"},
		{"key": "", "value": "no key"}, {"key": "empty", "value": "  "}, {"key": "diet", "value": "vegan", "data": [1]},
		{"key": "pet", "value": "a cat\u0000", "data": {"kind": "fact"}}, {"key": "home", "value": "Porto"}]}` + "\n```")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Key != "home" || got[0].Value != "Porto" || got[1].Key != "diet" || got[1].Data != nil ||
		got[2].Value != "a cat" || string(got[2].Data) != `{"kind": "fact"}` {
		t.Fatalf("memories: %+v", got)
	}
	var many []string
	for i := range MaxExtractedItems + 5 {
		many = append(many, `{"key": "k`+strings.Repeat("x", i)+`", "value": "v"}`)
	}
	if got, err := parseMemories(`{"memories": [` + strings.Join(many, ",") + `]}`); err != nil || len(got) != MaxExtractedItems {
		t.Fatalf("many: %v %d", err, len(got))
	}
	for _, bad := range []string{"I would rather not answer in JSON.", `{"memories": "none"}`, `{"memories": [`} {
		if _, err := parseMemories(bad); !errors.Is(err, errNoJSON) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestExtractionRequest: the request holds the prompt, then the run's
// instructions; the namespace's items on one line each; the last input
// messages and the answer, cut when long.
func TestExtractionRequest(t *testing.T) {
	t.Parallel()
	var input []agentd.Message
	for i := range maxTurnMessages + 3 {
		input = append(input, agentd.Message{Content: []agentd.Part{{Type: agentd.PartText, Text: "message " + string(rune('A'+i))}}})
	}
	req := extractionRequest("small", "Only preferences.", turn{namespace: agentd.Namespace{"users", "ann"},
		known:  []agentd.MemoryItem{{Key: "home", Value: "lives\nin   Lisbon"}},
		input:  input,
		output: []agentd.Part{{Type: agentd.PartText, Text: strings.Repeat("y", 2*maxTurnBytes)}}})
	system, user := req.Messages[0].Parts[0].Text, req.Messages[1].Parts[0].Text
	if !strings.HasPrefix(system, ExtractionPrompt) || !strings.HasSuffix(system, "\nOnly preferences.") {
		t.Fatalf("system: %q", system)
	}
	if !strings.Contains(user, "Remembered now in users/ann:\n- home: lives in Lisbon\n") ||
		strings.Contains(user, "message C\n") || !strings.Contains(user, "message D\n") || !strings.Contains(user, "y [...]") ||
		len(user) > 3*maxTurnBytes {
		t.Fatalf("user: %q", user[:400])
	}
	if req.Model != "small" || req.Sampling.Format == nil || req.Sampling.Format.Type != "json_object" {
		t.Fatalf("request: %+v", req)
	}
}
