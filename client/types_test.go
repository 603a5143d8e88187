package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// sameShape reads the answer of GET base+path into a T, refusing any key T
// does not have, and checks that T writes it back as the same JSON: the
// SDK's type is the shape the API answers, no key lost and none added.
func sameShape[T any](t *testing.T, base, path string) T {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, raw, err)
	}
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("GET %s does not read into %T: %v\n%s", path, v, err, raw)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if json.Unmarshal(raw, &want) != nil || json.Unmarshal(again, &got) != nil || !reflect.DeepEqual(want, got) {
		t.Fatalf("GET %s: %T writes back\n%s\nnot\n%s", path, v, again, raw)
	}
	return v
}

// TestTypesAreTheAPIs: every kind of answer (a run that completed after a
// failed attempt, one that timed out, one that waits for an approval, its
// steps, lists, conversation, messages and tools) reads into the SDK's
// types with no key unknown and writes back as the same JSON, and their
// typed fields hold the domain's values; every event decodes into the
// payload of its type.
func TestTypesAreTheAPIs(t *testing.T) {
	t.Parallel()
	var flaky atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/flaky" && flaky.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"busy"}`))
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer sink.Close()
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true},
		{"name":"flaky","description":"fails once","parameters":{"type":"object"},"url":%q,"effect":"idempotent","max_attempts":3}]}`,
		sink.URL+"/guarded", sink.URL+"/flaky")), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t), "AGENTD_TOOLS_FILE="+toolsFile)
	base := "http://" + addr
	c := client.New(base)
	ctx := context.Background()

	// A zero loop limit is left out of the request: the server refuses a 0.
	done, err := c.CreateRun(ctx, client.CreateRun{Input: "/call flaky {}\n/say fine", Metadata: json.RawMessage(`{"app":"test"}`),
		LoopLimits: &client.LoopLimits{IdenticalCalls: 7}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range collect(t, c, ctx, done.ID) {
		if p, err := ev.Payload(); err != nil || p.EventType() != ev.Type {
			t.Fatalf("event %d (%s) decodes as %#v: %v", ev.Seq, ev.Type, p, err)
		}
	}
	slow, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 100 50", Timeouts: &client.Timeouts{TotalMS: 500}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, c, ctx, slow.ID)
	waiting, err := c.CreateRun(ctx, client.CreateRun{Input: "/call guarded {\"to\":\"<b>é</b>\"}"})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range c.Events(ctx, waiting.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == agentd.EventRunRequiresAction {
			break
		}
	}

	run := sameShape[client.Run](t, base, "/runs/"+done.ID)
	if run.Status != agentd.StatusCompleted || !run.Ended() || run.TerminalReason == nil || *run.TerminalReason != agentd.ReasonCompleted ||
		run.LoopLimits != (agentd.LoopLimits{FailuresInARow: agentd.DefaultFailuresInARow, IdenticalCalls: 7}) || len(run.Output) != 1 ||
		run.Output[0].Type != agentd.PartText || run.Error != nil || run.RequiredAction != nil || string(run.Metadata) != `{"app":"test"}` {
		t.Fatalf("the completed run: %+v", run)
	}
	steps := sameShape[struct {
		Data []client.Step `json:"data"`
	}](t, base, "/runs/"+done.ID+"/steps").Data
	if len(steps) != 2 || len(steps[0].ToolCalls) != 1 || len(steps[0].ToolCalls[0].AttemptLog) != 2 {
		t.Fatalf("the steps: %+v", steps)
	}
	call := steps[0].ToolCalls[0]
	failed := call.AttemptLog[0]
	if call.Status != agentd.CallSucceeded || call.Effect != agentd.EffectIdempotent || *steps[0].FinishReason != agentd.FinishToolCalls ||
		failed.Status != agentd.AttemptFailed || failed.Error == nil || failed.Error.Kind != agentd.ToolErrTransient || failed.Error.Status != 503 {
		t.Fatalf("the call %+v, its failed attempt %+v", call, failed.Error)
	}

	timedOut := sameShape[client.Run](t, base, "/runs/"+slow.ID)
	if timedOut.Status != agentd.StatusTimedOut || !timedOut.Ended() || timedOut.Error == nil || timedOut.Error.Message == "" ||
		*timedOut.TerminalReason != agentd.ReasonTimedOutTotal {
		t.Fatalf("the timed-out run: %+v (error %+v)", timedOut, timedOut.Error)
	}
	wait := sameShape[client.Run](t, base, "/runs/"+waiting.ID)
	ra := wait.RequiredAction
	var args struct{ To string }
	if wait.Status != agentd.StatusRequiresAction || wait.Ended() || ra == nil || ra.Type != agentd.ActionToolApproval ||
		ra.Name != "guarded" || ra.Step != 1 || json.Unmarshal(ra.Arguments, &args) != nil || args.To != "<b>é</b>" {
		t.Fatalf("the waiting run: %+v (action %+v)", wait, ra)
	}

	list := sameShape[client.Page[client.Run]](t, base, "/runs?limit=2")
	if len(list.Data) != 2 || !list.HasMore || list.NextCursor == nil || list.Data[0].ID != waiting.ID {
		t.Fatalf("the list: %+v", list)
	}
	conv := sameShape[client.Conversation](t, base, "/conversations/"+done.ConversationID)
	if conv.Object != agentd.ObjectConversation || string(conv.Metadata) != "{}" {
		t.Fatalf("the conversation: %+v", conv)
	}
	msgs := sameShape[client.Page[client.Message]](t, base, "/conversations/"+done.ConversationID+"/messages")
	if len(msgs.Data) != 4 || msgs.Data[0].Role != agentd.RoleUser || msgs.Data[2].Role != agentd.RoleTool ||
		msgs.Data[3].Text() != "fine" || !msgs.Data[3].InContext {
		t.Fatalf("the messages: %+v", msgs)
	}
	tools := sameShape[struct {
		Data []client.Tool `json:"data"`
	}](t, base, "/tools").Data
	effects := map[string]agentd.Effect{}
	for _, tool := range tools {
		effects[tool.Name] = tool.Effect
	}
	if effects["guarded"] != agentd.EffectSideEffect || effects["calculator"] != agentd.EffectReadOnly {
		t.Fatalf("the tools: %+v", tools)
	}
}
