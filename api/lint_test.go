package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOpenAPILint lints openapi.yaml with Redocly's CLI and its recommended
// rules (test/openapi/redocly.yaml): an error fails the test; warnings are
// logged.
func TestOpenAPILint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Node.js linter: in the full tier (make test), not under -short")
	}
	dir, _ := filepath.Abs("../test/openapi")
	redocly := filepath.Join(dir, "node_modules", ".bin", "redocly")
	if _, err := os.Stat(redocly); err != nil {
		if os.Getenv("AGENTD_REQUIRE_NODE") != "" {
			t.Fatalf("test/openapi has no node_modules (run npm ci there): %v", err)
		}
		t.Skip("test/openapi/node_modules is missing; `make test` installs it")
	}
	cmd := exec.Command(redocly, "lint", "../../api/openapi.yaml", "--config", "redocly.yaml", "--format=summary")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("redocly lint:\n%s", out)
	if err != nil {
		t.Fatalf("redocly lint found errors in api/openapi.yaml: %v", err)
	}
}
