package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// skipShort skips the test under -short (`make test-short`), saying what
// keeps it to the full tier (`make test`). The helpers that start server
// processes, drive a Node.js client, open a browser or start a PostgreSQL
// formation call it, so that their tests need no check of their own.
func skipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: in the full tier (make test), not under -short", why)
	}
}

// needNode returns the directory of test/dir once node is installed and
// so is each of modules in that directory's node_modules; otherwise it
// skips the test, or fails it under AGENTD_REQUIRE_NODE (`make test`,
// which runs npm ci there first).
func needNode(t *testing.T, dir string, modules ...string) string {
	t.Helper()
	skipShort(t, "drives a Node.js client")
	require := os.Getenv("AGENTD_REQUIRE_NODE") != ""
	if _, err := exec.LookPath("node"); err != nil {
		if require {
			t.Fatalf("test/%s needs node: %v", dir, err)
		}
		t.Skipf("node is not installed: test/%s runs under Node.js", dir)
	}
	abs, _ := filepath.Abs(filepath.Join("../../test", dir))
	for _, m := range modules {
		if _, err := os.Stat(filepath.Join(abs, "node_modules", m)); err != nil {
			if require {
				t.Fatalf("test/%s has no node_modules (run npm ci there): %v", dir, err)
			}
			t.Skipf("test/%s/node_modules is missing; `make test` installs it", dir)
		}
	}
	return abs
}
