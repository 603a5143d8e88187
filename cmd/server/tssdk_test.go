package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// needSDK returns the directory of the TypeScript SDK (sdk/typescript)
// once node is installed and so are the SDK's npm packages; otherwise it
// skips the test, or fails it under AGENTD_REQUIRE_NODE (`make test`, whose
// node-deps runs npm ci there first).
func needSDK(t *testing.T) string {
	t.Helper()
	skipShort(t, "drives the TypeScript SDK under Node.js")
	require := os.Getenv("AGENTD_REQUIRE_NODE") != ""
	if _, err := exec.LookPath("node"); err != nil {
		if require {
			t.Fatalf("sdk/typescript needs node: %v", err)
		}
		t.Skipf("node is not installed: sdk/typescript runs under Node.js")
	}
	dir, _ := filepath.Abs("../../sdk/typescript")
	for _, m := range []string{"openapi-fetch", "openapi-typescript", "typescript"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m)); err != nil {
			if require {
				t.Fatalf("sdk/typescript has no node_modules (run npm ci there): %v", err)
			}
			t.Skipf("sdk/typescript/node_modules is missing; `make node-deps` installs it")
		}
	}
	return dir
}

// nodeIn runs node with args in dir, env added to this process's
// environment, for at most 90 s, and returns what it printed, both
// streams.
func nodeIn(dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestTypeScriptSDKSchema: the SDK's generated types (sdk/typescript/src/schema.ts)
// are what openapi-typescript makes of api/openapi.yaml today, and the
// check that says so fails for a document that changed since.
func TestTypeScriptSDKSchema(t *testing.T) {
	t.Parallel()
	dir := needSDK(t)
	if out, err := nodeIn(dir, nil, "scripts/schema.mjs", "check"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	spec, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const was = "description: The request path."
	if !bytes.Contains(spec, []byte(was)) {
		t.Fatalf("api/openapi.yaml no longer says %q: change the test's edit", was)
	}
	changed := filepath.Join(t.TempDir(), "openapi.yaml")
	edited := bytes.Replace(spec, []byte(was), []byte("description: The path of the request."), 1)
	if err := os.WriteFile(changed, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := nodeIn(dir, nil, "scripts/schema.mjs", "check", changed)
	if err == nil || !strings.Contains(out, "npm run generate") {
		t.Fatalf("the check passed a changed document (%v):\n%s", err, out)
	}
}

// TestTypeScriptSDK runs the TypeScript SDK's tests (sdk/typescript/test,
// node --test) against agentd with the fake model and a tool that needs
// approval: a run created and followed to its end, a stream cut mid-event
// and resumed with Last-Event-ID (the two connections' bytes are the
// stored log's), a POST whose answer was lost retried with the same
// Idempotency-Key (one run), problem+json answers as typed errors with
// their field, steering a run while it streams, an approval, client tools'
// outputs, a sub-agent's events in its parent's stream, cancel then resume
// followed as one log, the calls for agents, schedules, webhooks, memory
// and datasets, the README's examples, and the SSE parser on bodies cut at
// every byte. The tests are compiled with tsc first, which type-checks
// them against the generated types.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	dir := needSDK(t)
	compiled := make(chan error, 1)
	var tscOut string
	go func() {
		var err error
		tscOut, err = nodeIn(dir, nil, "node_modules/typescript/bin/tsc", "-p", "tsconfig.test.json")
		compiled <- err
	}()
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/guarded": webhooktest.OK()})
	s := setup(t, withEnv("AGENTD_SECRET_KEY", newSecretKey(t)), withToolsFile(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`, sink.URL+"/guarded")))
	if err := <-compiled; err != nil {
		t.Fatalf("tsc -p tsconfig.test.json: %v\n%s", err, tscOut)
	}
	out, err := nodeIn(dir, []string{"AGENTD_URL=" + s.URL, "AGENTD_APPROVAL_TOOL=guarded"},
		"--test", "--test-reporter=tap", ".test-build/test/")
	if err != nil {
		t.Fatalf("the SDK's tests failed: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
	// Every test ran: none was skipped for want of the server or the tool.
	for _, want := range []string{`(?m)^# pass [1-9][0-9]*$`, `(?m)^# fail 0$`, `(?m)^# skipped 0$`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("node --test did not report %s:\n%s", want, out)
		}
	}
}
