package run_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

// bigTool returns a long text: lines numbered from 1, with characters of
// every UTF-8 length.
type bigTool struct{ lines int }

func (bigTool) Spec() tools.Spec {
	return tools.Spec{Name: "big", Description: "a long text", Parameters: json.RawMessage(`{"type":"object"}`),
		Effect: agentd.EffectReadOnly}
}

func (b bigTool) text() string {
	var sb strings.Builder
	for i := 1; i <= b.lines; i++ {
		fmt.Fprintf(&sb, "line %05d: café € 😀 <&>\n", i)
	}
	return sb.String()
}

func (b bigTool) Invoke(context.Context, tools.Call) (json.RawMessage, error) {
	return json.Marshal(b.text())
}

// TestToolOutputOffload: a result over the limit is kept whole as an
// artifact, the model sees a 2 KiB preview, read_artifact pages through it
// within the conversation and nowhere else.
func TestToolOutputOffload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := bigTool{lines: 4000} // about 130 KB
	reg, err := tools.NewRegistry(big, tools.Calculator(), tools.ReadArtifact(b.store))
	if err != nil {
		t.Fatal(err)
	}
	b.start(t, run.Config{Tools: reg, LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, Workers: 2})
	ctx := context.Background()
	start := func(conv, input string) agentd.Run {
		t.Helper()
		r, _, err := b.store.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "fake", ConversationID: conv,
			Params: agentd.RunParams{MaxSteps: 10, Tools: []string{"big"}}, Input: []agentd.InputMessage{{Role: "user", Content: input}}})
		if err != nil {
			t.Fatal(err)
		}
		r = b.wait(t, r.ID, nil)
		if r.Status != agentd.StatusCompleted {
			t.Fatalf("run ended %s/%s: %s", r.Status, r.TerminalReason, r.Error)
		}
		return r
	}
	r := start("", "/call big {}\n/say read")
	steps, err := b.store.StepsList(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	call := steps[0].Calls[0]
	var pv struct {
		ArtifactID string `json:"artifact_id"`
		Bytes      int    `json:"bytes"`
		SHA256     string `json:"sha256"`
		Preview    string `json:"preview"`
	}
	if err := json.Unmarshal(call.Result, &pv); err != nil || pv.ArtifactID == "" {
		t.Fatalf("the call's result is not a preview: %.200s", call.Result)
	}
	text := big.text()
	sum := sha256.Sum256([]byte(text))
	if pv.Bytes != len(text) || pv.SHA256 != hex.EncodeToString(sum[:]) || !strings.HasPrefix(text, pv.Preview) || len(pv.Preview) > tools.PreviewBytes {
		t.Fatalf("preview: %d bytes, sha %s, preview of %d bytes", pv.Bytes, pv.SHA256, len(pv.Preview))
	}
	a, err := b.store.ArtifactGet(ctx, "default", r.ID, pv.ArtifactID)
	if err != nil || string(a.Content) != text || a.MediaType != "text/plain; charset=utf-8" || a.ToolCallID != call.ID {
		t.Fatalf("stored artifact: %v, %d bytes, %s", err, len(a.Content), a.MediaType)
	}
	if _, err := b.store.ArtifactGet(ctx, "other", r.ID, pv.ArtifactID); err == nil {
		t.Fatal("another tenant reads the artifact")
	}
	// What the model was sent for the call is the preview, not the text.
	reqs := b.fake.Requests()
	last := reqs[len(reqs)-1].Sent
	toolMsg := string(last[len(last)-1])
	if !strings.Contains(toolMsg, pv.ArtifactID) || len(toolMsg) > 4*tools.PreviewBytes {
		t.Fatalf("the model was sent %d bytes for the call", len(toolMsg))
	}
	// A later run of the conversation pages through it; read_artifact came
	// with the run's tool list.
	var got strings.Builder
	got.WriteString(pv.Preview)
	offset := len(pv.Preview)
	for page := 0; offset < len(text); page++ {
		if page > 20 {
			t.Fatal("paging does not end")
		}
		r2 := start(r.ConversationID, fmt.Sprintf(`/call read_artifact {"id":%q,"offset":%d,"length":65536}`+"\n/say ok", pv.ArtifactID, offset))
		steps, err := b.store.StepsList(ctx, r2.ID)
		if err != nil || len(steps) == 0 || len(steps[0].Calls) != 1 || steps[0].Calls[0].Status != agentd.CallSucceeded {
			t.Fatalf("read_artifact: %v %+v", err, steps)
		}
		var p struct {
			Content    string `json:"content"`
			NextOffset int    `json:"next_offset"`
			EOF        bool   `json:"eof"`
		}
		if err := json.Unmarshal(steps[0].Calls[0].Result, &p); err != nil {
			t.Fatalf("page: %v: %.200s", err, steps[0].Calls[0].Result)
		}
		got.WriteString(p.Content)
		if p.EOF != (p.NextOffset == len(text)) || p.NextOffset <= offset {
			t.Fatalf("page at %d: next %d, eof %v", offset, p.NextOffset, p.EOF)
		}
		offset = p.NextOffset
	}
	if got.String() != text {
		t.Fatalf("the pages join to %d bytes, want the %d of the result", got.Len(), len(text))
	}
	// Another conversation cannot read it.
	r3 := start("", fmt.Sprintf(`/call read_artifact {"id":%q}`+"\n/say ok", pv.ArtifactID))
	steps, err = b.store.StepsList(ctx, r3.ID)
	if err != nil || steps[0].Calls[0].Status != agentd.CallFailed || !strings.Contains(string(steps[0].Calls[0].Error), "no artifact") {
		t.Fatalf("another conversation's read: %v %s %s", err, steps[0].Calls[0].Status, steps[0].Calls[0].Error)
	}
}
