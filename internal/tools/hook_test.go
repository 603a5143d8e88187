package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestPolicies(t *testing.T) {
	t.Parallel()
	ps, err := ParsePolicies([]byte(`{"tools": [], "policies": [
		{"tool": "mail__send", "arguments": {"/to": "*@example.com"}, "action": "allow", "redact": ["/token", "/rows/1"]},
		{"tool": "mail__*", "action": "deny", "reason": "mail goes to example.com only"},
		{"tool": "crm__delete_*", "arguments": {"/force": "true"}, "action": "require_approval"}]}`))
	if err != nil || len(ps) != 3 {
		t.Fatalf("%d policies: %v", len(ps), err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		tool, args string
		want       PolicyAction
		policy     string
	}{
		{"mail__send", `{"to": "ann@example.com"}`, PolicyAllow, "policies[0]"},
		{"mail__send", `{"to": "bob@elsewhere.org"}`, PolicyDeny, "policies[1]"},
		{"mail__list", `{}`, PolicyDeny, "policies[1]"},
		{"crm__delete_contact", `{"force": true}`, PolicyRequireApproval, "policies[2]"},
		{"crm__delete_contact", `{"force": false}`, PolicyAllow, ""},
		{"crm__delete_contact", `{}`, PolicyAllow, ""},
		{"calculator", `{"expression": "1"}`, PolicyAllow, ""},
	} {
		v, err := ps.Before(ctx, HookCall{Tool: c.tool, Arguments: json.RawMessage(c.args)})
		if err != nil || v.Action != c.want || v.Policy != c.policy {
			t.Errorf("%s %s: %+v %v, want %s by %q", c.tool, c.args, v, err, c.want, c.policy)
		}
		if v.Action == PolicyDeny && v.Reason == "" {
			t.Errorf("%s: a denial without a reason", c.tool)
		}
	}
	out, err := ps.After(ctx, HookCall{Tool: "mail__send", Arguments: json.RawMessage(`{"to":"ann@example.com"}`)},
		json.RawMessage(`{"id": 7, "token": "s3cr3t", "rows": ["a", "b", "c"]}`))
	if err != nil || strings.Contains(string(out), "s3cr3t") || !strings.Contains(string(out), `"rows":["a","[redacted]","c"]`) {
		t.Fatalf("redacted result: %s %v", out, err)
	}
	if out, _ := ps.After(ctx, HookCall{Tool: "calculator"}, json.RawMessage(`{"token":"x"}`)); string(out) != `{"token":"x"}` {
		t.Fatalf("a result no policy redacts changed: %s", out)
	}
	for _, bad := range []string{
		`{"policies": [{"tool": "x", "action": "maybe"}]}`,
		`{"policies": [{"action": "deny"}]}`,
		`{"policies": [{"tool": "[", "action": "deny"}]}`,
		`{"policies": [{"tool": "x", "arguments": {"to": "*"}, "action": "deny"}]}`,
		`{"policies": [{"tool": "x", "action": "deny", "redact": ["/a"]}]}`,
		`{"policies": [{"tool": "x", "action": "deny", "extra": 1}]}`,
	} {
		if _, err := ParsePolicies([]byte(bad)); err == nil || !strings.Contains(err.Error(), "policies[0]") {
			t.Errorf("%s: %v, want an error naming policies[0]", bad, err)
		}
	}
}
