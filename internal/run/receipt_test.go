package run_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Bodies the webhooks of TestReceiptsAreOfTheBytesTheToolSaw answer, byte
// for byte: keys out of order, so that jsonb stores them otherwise; the
// second over its tool's max_result_bytes, so that it is kept as an
// artifact.
const (
	chargeAnswer = `{"z":1,"id":"ch_1","a":[1,2]}`
	notifyAnswer = `{"sent":true,"note":"a result longer than the sixty-four bytes its tool shows whole"}`
)

// TestReceiptsAreOfTheBytesTheToolSaw: a side-effect call (made after an
// approval its policy asks for) and an idempotent one (attempted with the
// model's output, its result an artifact) carry receipts whose hashes are
// those of the arguments the webhook received and of the body it
// answered, named by the key it received; the stored arguments and result
// (jsonb) hash otherwise; a read_only call keeps none.
func TestReceiptsAreOfTheBytesTheToolSaw(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/charge": webhooktest.Respond(200, chargeAnswer),
		"/notify": webhooktest.Respond(200, notifyAnswer),
	})
	obj := json.RawMessage(`{"type":"object"}`)
	charge, err := tools.NewWebhook(tools.WebhookConfig{Name: "charge", Description: "charge", Parameters: obj,
		URL: sink.URL + "/charge", Effect: agentd.EffectSideEffect, TimeoutMS: 5000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	notify, err := tools.NewWebhook(tools.WebhookConfig{Name: "notify", Description: "notify", Parameters: obj,
		URL: sink.URL + "/notify", Effect: agentd.EffectIdempotent, TimeoutMS: 5000, MaxResultBytes: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(charge, notify, tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := tools.ParsePolicies([]byte(`{"policies": [{"tool": "charge", "action": "require_approval"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg.SetHook(ps)
	b.start(t, run.Config{Tools: reg, Workers: 2})
	ctx := context.Background()

	r := b.wait(t, b.create(t, `/call charge {"zeta":"last","amount":12}`+"\n"+`/call notify {"to":"ops","b":2,"a":1}`+"\n"+
		`/call calculator {"expression":"1+1"}`+"\n/say done", agentd.RunParams{}).ID, nil)
	if r.Status != agentd.StatusRequiresAction {
		t.Fatalf("run is %s, want requires_action for the approval", r.Status)
	}
	var action agentd.RequiredAction
	json.Unmarshal(r.RequiredAction, &action)
	if _, err := b.store.RunResolveAction(ctx, agentd.ActionParams{TenantID: "default", RunID: r.ID, ToolCallID: action.ToolCallID,
		Decision: agentd.DecisionApprove, Actor: "local"}); err != nil {
		t.Fatal(err)
	}
	r = b.wait(t, r.ID, func(r agentd.Run) bool { return r.Status.Terminal() })
	if r.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %s: %s", r.Status, r.Error)
	}
	steps, err := b.store.StepsList(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	calls := steps[0].Calls
	answered := map[string]string{"/charge": chargeAnswer, "/notify": notifyAnswer}
	reqs := sink.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the webhooks had %d requests, want 2", len(reqs))
	}
	for _, req := range reqs {
		var body struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil {
			t.Fatal(err)
		}
		var c *agentd.CallDetail
		for i := range calls {
			if "/"+calls[i].Name == req.Path {
				c = &calls[i]
			}
		}
		if c == nil || len(c.Attempts) != 1 {
			t.Fatalf("%s: no call with one attempt: %+v", req.Path, calls)
		}
		a := c.Attempts[0]
		if req.Key != c.IdempotencyKey {
			t.Errorf("%s: the webhook received key %q, the call's is %q", req.Path, req.Key, c.IdempotencyKey)
		}
		if a.ArgumentsSHA256 != sum(body.Arguments) {
			t.Errorf("%s: arguments_sha256 %s, want the sha256 of %s as received: %s", req.Path, a.ArgumentsSHA256, body.Arguments, sum(body.Arguments))
		}
		if a.ResultSHA256 != sum([]byte(answered[req.Path])) {
			t.Errorf("%s: result_sha256 %s, want the sha256 of the answer %s", req.Path, a.ResultSHA256, answered[req.Path])
		}
		// What jsonb gives back is other bytes: a hash computed at read
		// time would not be the receipt.
		if string(c.Arguments) == string(body.Arguments) || sum(c.Arguments) == a.ArgumentsSHA256 {
			t.Errorf("%s: the stored arguments %s are the bytes received; the test proves nothing", req.Path, c.Arguments)
		}
		if sum(c.Result) == a.ResultSHA256 {
			t.Errorf("%s: the stored result hashes as the receipt", req.Path)
		}
	}
	// The artifact holds the whole result as the tool returned it: its
	// sha256 is the receipt's.
	for _, c := range calls {
		if c.Name != "notify" {
			continue
		}
		var preview struct {
			ArtifactID string `json:"artifact_id"`
			SHA256     string `json:"sha256"`
		}
		if err := json.Unmarshal(c.Result, &preview); err != nil || preview.ArtifactID == "" {
			t.Fatalf("notify's result is not an artifact's preview: %s", c.Result)
		}
		if preview.SHA256 != c.Attempts[0].ResultSHA256 {
			t.Errorf("artifact sha256 %s, receipt %s", preview.SHA256, c.Attempts[0].ResultSHA256)
		}
	}
	for _, c := range calls {
		if c.Name == "calculator" && (len(c.Attempts) != 1 || c.Attempts[0].ArgumentsSHA256 != "" || c.Attempts[0].ResultSHA256 != "") {
			t.Errorf("the read_only call keeps a receipt: %+v", c.Attempts)
		}
	}
	if !strings.Contains(string(calls[0].Policy), "require_approval") {
		t.Errorf("the charge's policy decision: %s", calls[0].Policy)
	}
}
