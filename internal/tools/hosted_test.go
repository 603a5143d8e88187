package tools

import (
	"strings"
	"testing"
)

// TestParseHostedTools: hosted_tools maps known hosted tool types to tool
// names; an unknown type, an empty name or a value of another kind is an
// error naming it; a file without it maps nothing.
func TestParseHostedTools(t *testing.T) {
	kinds := []string{"web_search", "file_search"}
	m, err := ParseHostedTools([]byte(`{"tools": [], "hosted_tools": {"web_search": "search"}}`), kinds)
	if err != nil || len(m) != 1 || m["web_search"] != "search" {
		t.Fatalf("%v %v", m, err)
	}
	if m, err := ParseHostedTools([]byte(`{"tools": []}`), kinds); err != nil || m != nil {
		t.Fatalf("absent: %v %v", m, err)
	}
	for body, want := range map[string]string{
		`{"hosted_tools": {"browser": "search"}}`: `"browser" is none of`,
		`{"hosted_tools": {"web_search": ""}}`:    "hosted_tools.web_search",
		`{"hosted_tools": {"web_search": ["a"]}}`: "hosted_tools: must be an object",
		`{"hosted_tools": ["web_search"]}`:        "hosted_tools: must be an object",
	} {
		if _, err := ParseHostedTools([]byte(body), kinds); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	if _, err := ParseWebhooks([]byte(`{"hosted_tools": {"web_search": "search"}}`), nil); err != nil {
		t.Fatalf("a tools file of hosted_tools alone: %v", err)
	}
}
