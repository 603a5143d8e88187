package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ParseHostedTools reads the "hosted_tools" of a tools file, strictly
// (none when absent): an object mapping a hosted tool type of OpenAI's
// Responses API (one of kinds, such as web_search) to the name of the
// server's tool that stands for it, a tool of the file or of one of its
// MCP servers. A request that offers the hosted tool offers that tool
// instead. A name that names no tool when a request comes is as if it
// were not mapped.
func ParseHostedTools(data []byte, kinds []string) (map[string]string, error) {
	var file struct {
		HostedTools json.RawMessage `json:"hosted_tools"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	if len(file.HostedTools) == 0 || string(file.HostedTools) == "null" {
		return nil, nil
	}
	var m map[string]string
	if err := decodeStrict(file.HostedTools, &m); err != nil {
		return nil, fmt.Errorf("hosted_tools: must be an object of tool names by hosted tool type: %w", err)
	}
	for kind, name := range m {
		if !slices.Contains(kinds, kind) {
			return nil, fmt.Errorf("hosted_tools: %q is none of the hosted tool types (%s)", kind, strings.Join(kinds, ", "))
		}
		if name == "" {
			return nil, fmt.Errorf("hosted_tools.%s: must name a tool", kind)
		}
	}
	return m, nil
}
