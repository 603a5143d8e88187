package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestConcurrentSavesStoreNoCycle: two saves at once that would each
// close a cycle of sub-agents (pp → qq and qq → pp) never both succeed:
// the check runs under the lock of the tenant's agents' saves, against
// what the other stored.
func TestConcurrentSavesStoreNoCycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"pp", "qq"} {
		if r := b.do("POST", "/agents", fmt.Sprintf(`{"name": %q, "instructions": "work"}`, name)); r.status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, r.status, r.body)
		}
	}
	calls := func(other string) string {
		return fmt.Sprintf(`{"instructions": "work", "tools": [{"type": "agent", "agent": %q}]}`, other)
	}
	for trial := range 20 {
		var wg sync.WaitGroup
		var codes [2]int
		for i, pair := range [][2]string{{"pp", "qq"}, {"qq", "pp"}} {
			wg.Go(func() { codes[i] = b.do("PUT", "/agents/"+pair[0], calls(pair[1])).status })
		}
		wg.Wait()
		if codes[0] == http.StatusOK && codes[1] == http.StatusOK {
			t.Fatalf("trial %d: both saves succeeded, storing the cycle pp → qq → pp", trial)
		}
		if codes[0] != http.StatusOK && codes[1] != http.StatusOK {
			t.Fatalf("trial %d: neither save succeeded: %v", trial, codes)
		}
		for _, name := range []string{"pp", "qq"} {
			if r := b.do("PUT", "/agents/"+name, `{"instructions": "work"}`); r.status != http.StatusOK {
				t.Fatalf("reset %s: %d %s", name, r.status, r.body)
			}
		}
	}
}
