package fakeanthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

// event is one Server-Sent Event of a streamed answer.
type event struct {
	name string
	data any
	gap  bool // the /stream pause comes before it
}

func (a answer) wireUsage() wireUsage {
	u := wireUsage{InputTokens: a.usage.InputTokens, CacheCreationInputTokens: a.usage.CacheCreationInputTokens,
		CacheReadInputTokens: a.usage.CacheReadInputTokens, OutputTokens: a.usage.OutputTokens}
	u.OutputTokensDetails.ThinkingTokens = a.usage.ThinkingTokens
	return u
}

// events returns the stream of a's answer, as Anthropic sends it.
func (a answer) events() []event {
	start := a.wireUsage()
	start.OutputTokens, start.OutputTokensDetails.ThinkingTokens = 1, 0
	evs := []event{
		{name: "message_start", data: map[string]any{"type": "message_start", "message": map[string]any{
			"id": a.id, "type": "message", "role": "assistant", "model": a.model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": start}}},
		{name: "ping", data: map[string]any{"type": "ping"}},
	}
	for i, b := range a.blocks {
		evs = append(evs, event{name: "content_block_start", data: map[string]any{"type": "content_block_start", "index": i, "content_block": b.start()}})
		for k, p := range b.pieces {
			evs = append(evs, event{name: "content_block_delta", gap: k > 0 || i > 0,
				data: map[string]any{"type": "content_block_delta", "index": i, "delta": b.delta(p)}})
		}
		if b.typ == "thinking" {
			evs = append(evs, event{name: "content_block_delta", data: map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "signature_delta", "signature": b.signature}}})
		}
		evs = append(evs, event{name: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": i}})
	}
	return append(evs,
		event{name: "message_delta", data: map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": a.stop, "stop_sequence": nil}, "usage": a.wireUsage()}},
		event{name: "message_stop", data: map[string]any{"type": "message_stop"}})
}

// start is b as its content_block_start gives it: empty, but for a
// redacted thinking's data and a tool use's id and name.
func (b outBlock) start() map[string]any {
	switch b.typ {
	case "thinking":
		return map[string]any{"type": "thinking", "thinking": "", "signature": ""}
	case "redacted_thinking":
		return map[string]any{"type": "redacted_thinking", "data": b.data}
	case "tool_use":
		return map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": map[string]any{}}
	}
	return map[string]any{"type": "text", "text": ""}
}

// delta is the content_block_delta of piece p of b.
func (b outBlock) delta(p string) map[string]any {
	switch b.typ {
	case "thinking":
		return map[string]any{"type": "thinking_delta", "thinking": p}
	case "tool_use":
		return map[string]any{"type": "input_json_delta", "partial_json": p}
	}
	return map[string]any{"type": "text_delta", "text": p}
}

// stream writes a's answer as Server-Sent Events; it reports whether the
// whole answer was written.
func stream(ctx context.Context, w http.ResponseWriter, a answer) bool {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return false
	}
	if a.fault == FaultHang {
		<-ctx.Done()
		return false
	}
	evs := a.events()
	if a.fault == FaultTruncate {
		evs = evs[:len(evs)/2]
	}
	for _, ev := range evs {
		if ev.gap && !fakellm.Pause(ctx, a.gap) {
			return false
		}
		b, err := json.Marshal(ev.data)
		if err != nil {
			panic(err) // our own values always encode
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, b); err != nil || rc.Flush() != nil {
			return false
		}
	}
	if a.fault == FaultTruncate {
		// The connection closes without the end of the chunked body.
		panic(http.ErrAbortHandler)
	}
	return true
}

// complete writes a's answer as one message object; it reports whether it
// was written.
func complete(ctx context.Context, w http.ResponseWriter, a answer) bool {
	if a.fault == FaultHang {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-ctx.Done()
		return false
	}
	var content []map[string]any
	for _, b := range a.blocks {
		c := b.start()
		joined := strings.Join(b.pieces, "")
		switch b.typ {
		case "thinking":
			c["thinking"], c["signature"] = joined, b.signature
		case "tool_use":
			var input any = map[string]any{}
			_ = json.Unmarshal([]byte(joined), &input)
			c["input"] = input
		case "text":
			c["text"] = joined
		}
		content = append(content, c)
	}
	b, err := json.Marshal(map[string]any{"id": a.id, "type": "message", "role": "assistant", "model": a.model,
		"content": content, "stop_reason": a.stop, "stop_sequence": nil, "usage": a.wireUsage()})
	if err != nil {
		panic(err)
	}
	if a.fault == FaultTruncate {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err == nil
}
