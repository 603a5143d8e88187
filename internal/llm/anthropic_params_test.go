package llm

import (
	"slices"
	"testing"
)

// marked returns, per turn of p, the indexes of the blocks with
// cache_control, and whether the last tool and the system prompt have one.
func marked(t *testing.T, req Request) (turns [][]int, tool, system bool) {
	t.Helper()
	ar, err := anthropicParams(req, 100)
	if err != nil {
		t.Fatal(err)
	}
	p := ar.params
	for _, turn := range p.Messages {
		var at []int
		for i, b := range turnBlocks(turn) {
			if cc := b.GetCacheControl(); cc != nil && cc.Type != "" {
				at = append(at, i)
			}
		}
		turns = append(turns, at)
	}
	tool = len(p.Tools) > 0 && p.Tools[len(p.Tools)-1].OfTool.CacheControl.Type != ""
	system = len(p.System) > 0 && p.System[len(p.System)-1].CacheControl.Type != ""
	return turns, tool, system
}

// TestBreakpointPlacement: the last tool, the system prompt, the
// breakpoints asked for and the last message, never more than four, the
// oldest message breakpoints dropped first; one on a block that cannot
// carry it moves to the block before.
func TestBreakpointPlacement(t *testing.T) {
	conv := []Message{TextMessage(RoleSystem, "sys"),
		TextMessage(RoleUser, "u0"), TextMessage(RoleAssistant, "a1"), TextMessage(RoleUser, "u2"),
		TextMessage(RoleAssistant, "a3"), TextMessage(RoleUser, "u4")}
	tools := []ToolSpec{{Name: "a"}, {Name: "b"}}

	turns, tool, system := marked(t, Request{Messages: conv, Tools: tools, CacheBreakpoints: []int{1, 2, 3}})
	if !tool || !system || !slices.EqualFunc(turns, [][]int{nil, nil, {0}, nil, {0}}, slices.Equal) {
		t.Fatalf("with tools: turns %v, tool %v, system %v", turns, tool, system)
	}
	turns, _, _ = marked(t, Request{Messages: conv[1:], CacheBreakpoints: []int{0, 1, 2, 3}})
	if !slices.EqualFunc(turns, [][]int{nil, {0}, {0}, {0}, {0}}, slices.Equal) {
		t.Fatalf("without tools or system: turns %v", turns)
	}
	// Thinking alone cannot carry cache_control: the mark goes back to the
	// block before it, here the user's.
	thinking := []Message{TextMessage(RoleUser, "u0"),
		{Role: RoleAssistant, Parts: []Part{Reasoning(ReasoningBlock{Type: ReasoningThinking, Text: "t", Signature: "s"})}}}
	turns, _, _ = marked(t, Request{Messages: thinking})
	if !slices.EqualFunc(turns, [][]int{{0}, nil}, slices.Equal) {
		t.Fatalf("thinking: turns %v", turns)
	}
}
