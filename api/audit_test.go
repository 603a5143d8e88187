package api_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// chargeAnswer is what the charge webhook answers, byte for byte.
const chargeAnswer = `{"z":1,"charged":true,"a":[1,2]}`

// auditSetup starts the API over an engine whose tools are a side-effect
// webhook that a policy makes wait for approval, and the calculator.
func auditSetup(t *testing.T) (*bundle, *webhooktest.Sink) {
	t.Helper()
	store, _ := persisttest.New(t)
	checkEventsAtEnd(t, store)
	fake := httptest.NewServer(fakellm.New())
	t.Cleanup(fake.Close)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/charge": webhooktest.Respond(http.StatusOK, chargeAnswer)})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	charge, err := tools.NewWebhook(tools.WebhookConfig{Name: "charge", Description: "charge a card",
		Parameters: json.RawMessage(`{"type":"object"}`), URL: sink.URL + "/charge", Effect: agentd.EffectSideEffect,
		TimeoutMS: 5000}, client)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(charge, tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := tools.ParsePolicies([]byte(`{"policies": [{"tool": "charge", "action": "require_approval"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg.SetHook(ps)
	e := startEngine(t, store, run.Config{Tools: reg,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "test", HTTPClient: client})})
	b := setupWith(t, store, store, func(c *api.Config) { c.Runs, c.Tools = e.Service(), reg })
	return b, sink
}

// waitFor polls a run until cond holds.
func (b *bundle) waitFor(id string, cond func(runBody) bool) runBody {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := want[runBody](b.t, b.do(http.MethodGet, "/runs/"+id, ""), http.StatusOK)
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("run %s is still %s", id, r.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// auditLine is a line of the export, as a client reads it.
type auditLine struct {
	Kind           string                  `json:"kind"`
	Seq            int64                   `json:"seq"`
	Actor          *string                 `json:"actor"`
	TenantID       string                  `json:"tenant_id"`
	Request        json.RawMessage         `json:"request"`
	ToolCalls      []struct{ Name string } `json:"tool_calls"`
	ToolCallID     string                  `json:"tool_call_id"`
	Name           string                  `json:"name"`
	Status         string                  `json:"status"`
	Decision       string                  `json:"decision"`
	Rule           string                  `json:"rule"`
	ResolvedBy     string                  `json:"resolved_by"`
	IdempotencyKey string                  `json:"idempotency_key"`
	Receipt        *agentd.Receipt         `json:"receipt"`
	Reason         string                  `json:"reason"`
	Lines          int                     `json:"lines"`
}

// TestReceiptsAndAudit: a side-effect call that a policy makes wait for
// approval runs once approved; its receipt, in the steps view and in the
// audit export, is the sha256 of the arguments the webhook received and
// of the body it answered, under the key it received; the export's lines,
// each an AuditLine of openapi.yaml, tell the run in order, with who
// created it and who approved the call.
func TestReceiptsAndAudit(t *testing.T) {
	t.Parallel()
	b, sink := auditSetup(t)
	r := b.createRun(`{"input": "/call charge {\"card\":\"visa\",\"amount\":12}\n/call calculator {\"expression\":\"1+1\"}\n/say done"}`)
	r = b.waitFor(r.ID, func(r runBody) bool { return r.Status != "queued" && r.Status != "running" })
	var waiting struct {
		RequiredAction *agentd.RequiredAction `json:"required_action"`
	}
	json.Unmarshal(b.do(http.MethodGet, "/runs/"+r.ID, "").body, &waiting)
	if r.Status != "requires_action" || waiting.RequiredAction == nil || waiting.RequiredAction.Type != agentd.ActionToolApproval {
		t.Fatalf("run is %s, want requires_action for an approval", r.Status)
	}
	want[runBody](t, b.do(http.MethodPost, "/runs/"+r.ID+"/actions",
		`{"decision":"approve","tool_call_id":"`+waiting.RequiredAction.ToolCallID+`"}`), http.StatusOK)
	r = b.waitFor(r.ID, func(r runBody) bool { return r.Status == "completed" || r.Status == "failed" })
	if r.Status != "completed" {
		t.Fatalf("run ended %s", r.Status)
	}

	reqs := sink.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the webhook had %d requests, want 1", len(reqs))
	}
	var sent struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	wantReceipt := agentd.Receipt{IdempotencyKey: reqs[0].Key, Attempt: 1}
	args, result := sha(sent.Arguments), sha([]byte(chargeAnswer))
	wantReceipt.ArgumentsSHA256, wantReceipt.ResultSHA256 = &args, &result
	checkReceipt := func(where string, got *agentd.Receipt) {
		t.Helper()
		if got == nil || got.IdempotencyKey != wantReceipt.IdempotencyKey || got.Attempt != 1 || got.ArgumentsSHA256 == nil ||
			*got.ArgumentsSHA256 != args || got.ResultSHA256 == nil || *got.ResultSHA256 != result {
			t.Errorf("%s: receipt %+v, want key %s, arguments %s (of %s), result %s", where, got, reqs[0].Key, args, sent.Arguments, result)
		}
	}

	steps := want[struct {
		Data []agentd.StepView `json:"data"`
	}](t, b.do(http.MethodGet, "/runs/"+r.ID+"/steps", ""), http.StatusOK).Data
	for _, c := range steps[0].ToolCalls {
		switch c.Name {
		case "charge":
			checkReceipt("the steps view", c.Receipt)
			if a := c.AttemptLog[0]; a.ArgumentsSHA256 == nil || *a.ArgumentsSHA256 != args || a.ResultSHA256 == nil || *a.ResultSHA256 != result {
				t.Errorf("the attempt's hashes: %+v", a)
			}
		case "calculator":
			if c.Receipt != nil || c.AttemptLog[0].ArgumentsSHA256 != nil {
				t.Errorf("the read_only call has a receipt: %+v", c.Receipt)
			}
		}
	}

	lines := readAudit(t, b, r.ID)
	var kinds []string
	for _, l := range lines {
		kinds = append(kinds, l.Kind)
	}
	wantKinds := []string{"run.created", "model.tool_calls", "tool_call.planned", "policy.decision", "tool_call.planned",
		"tool_attempt", "tool_call.completed", "action.required", "action.decided", "run.resumed", "tool_call.reused", "tool_attempt",
		"tool_call.completed", "run.ended", "end"}
	if !slices.Equal(kinds, wantKinds) {
		t.Fatalf("the export's lines are\n%v, want\n%v", kinds, wantKinds)
	}
	for i := 1; i < len(lines)-1; i++ {
		if lines[i].Seq < lines[i-1].Seq {
			t.Errorf("line %d (%s, seq %d) after seq %d", i, lines[i].Kind, lines[i].Seq, lines[i-1].Seq)
		}
	}
	actor := func(l auditLine) string {
		if l.Actor == nil {
			return ""
		}
		return *l.Actor
	}
	if l := lines[0]; actor(l) != "local" || l.TenantID != "default" || !strings.Contains(string(l.Request), `"model":"test-model"`) {
		t.Errorf("the creation: %+v", l)
	}
	if l := lines[1]; len(l.ToolCalls) != 2 || l.ToolCalls[0].Name != "charge" {
		t.Errorf("the model's decision: %+v", l)
	}
	if l := lines[3]; l.Decision != "require_approval" || l.Rule != "policies[0]" || l.Name != "charge" || l.Actor != nil {
		t.Errorf("the policy's decision: %+v", l)
	}
	if l := lines[5]; l.Name != "calculator" || l.Receipt != nil || l.Status != "succeeded" {
		t.Errorf("the read_only attempt: %+v", l)
	}
	if l := lines[8]; l.Decision != "approve" || actor(l) != "local" || l.ResolvedBy != "client" || l.ToolCallID != waiting.RequiredAction.ToolCallID {
		t.Errorf("the approval: %+v", l)
	}
	if l := lines[9]; actor(l) != "local" || l.Reason != agentd.ResumedByClient {
		t.Errorf("the resume after the decision: %+v", l)
	}
	if l := lines[10]; l.Name != "calculator" {
		t.Errorf("the reuse of the calculator's result on the claim after the decision: %+v", l)
	}
	if l := lines[11]; l.Name != "charge" || l.Status != "succeeded" || l.IdempotencyKey != reqs[0].Key {
		t.Errorf("the charge's attempt: %+v", l)
	}
	checkReceipt("the audit", lines[11].Receipt)
	if l := lines[len(lines)-1]; l.Status != "completed" || l.Lines != len(lines) {
		t.Errorf("the end: %+v (%d lines)", l, len(lines))
	}
}

// readAudit reads a run's export, checking its media type and each line
// against openapi.yaml's AuditLine.
func readAudit(t *testing.T, b *bundle, id string) []auditLine {
	t.Helper()
	resp := b.do(http.MethodGet, "/runs/"+id+"/audit", "")
	if resp.status != http.StatusOK || resp.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("audit: %d %s: %s", resp.status, resp.header.Get("Content-Type"), resp.body)
	}
	schema := auditSchema(t)
	var out []auditLine
	sc := bufio.NewScanner(bytes.NewReader(resp.body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(sc.Bytes()))
		if err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", len(out)+1, err, sc.Bytes())
		}
		if err := schema.Validate(v); err != nil {
			t.Errorf("line %d is not an AuditLine of openapi.yaml: %v\n%s", len(out)+1, err, sc.Bytes())
		}
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// auditSchema compiles openapi.yaml's AuditLine, its objects closed as
// api/spectest closes those of responses.
func auditSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	js, err := yaml.YAMLToJSON(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	closeAll(doc)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	const url = "https://agentd.invalid/openapi.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url + "#/components/schemas/AuditLine")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// closeAll adds "unevaluatedProperties": false to every schema that lists
// properties and says nothing of others.
func closeAll(v any) {
	switch v := v.(type) {
	case map[string]any:
		_, props := v["properties"].(map[string]any)
		_, ap := v["additionalProperties"]
		_, up := v["unevaluatedProperties"]
		if props && !ap && !up {
			v["unevaluatedProperties"] = false
		}
		for k, sub := range v {
			if k != "example" && k != "examples" && k != "enum" && k != "const" && k != "default" {
				closeAll(sub)
			}
		}
	case []any:
		for _, sub := range v {
			closeAll(sub)
		}
	}
}

// TestAuditNeedsReadScopeAndTenant: the export needs runs:read, and another
// tenant's run is 404, as for the steps.
func TestAuditNeedsReadScopeAndTenant(t *testing.T) {
	f := newTenantFixture(t)
	path := "/runs/" + f.run + "/audit"
	wantProblem(t, f.do("b", http.MethodGet, path, ""), http.StatusNotFound, "run_not_found")
	wantProblem(t, f.do("a-actions", http.MethodGet, path, ""), http.StatusForbidden, "insufficient_scope")
	wantProblem(t, f.do("", http.MethodGet, path, ""), http.StatusUnauthorized, "unauthorized")
	r := f.do("a-read", http.MethodGet, path, "")
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"kind":"run.created"`)) || !bytes.Contains(r.body, []byte(`"kind":"end"`)) {
		t.Fatalf("the owner's export: %d %s", r.status, r.body)
	}
}
