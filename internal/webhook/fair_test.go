package webhook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/webhook"
)

// TestTenantCannotHoldAnothersDeliveries: one tenant's twenty endpoints
// that never answer leave another tenant's deliveries as fast as they are
// without them (within a second): the claim takes tenants in turn, and
// one tenant's attempts hold at most half the workers.
func TestTenantCannotHoldAnothersDeliveries(t *testing.T) {
	f := newFixture(t)
	secret := webhook.NewSecret()

	var mu sync.Mutex
	got := map[string]time.Time{} // by run id: when alice's endpoint got it
	alice := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Data struct {
				Run struct {
					ID string `json:"id"`
				} `json:"run"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		if _, ok := got[p.Data.Run.ID]; !ok {
			got[p.Data.Run.ID] = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer alice.Close()
	f.subscribe(t, "alice", alice.URL, secret)

	hang := make(chan struct{})
	var hanging atomic.Int64
	var bob []string
	for range 20 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hanging.Add(1)
			defer hanging.Add(-1)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		bob = append(bob, srv.URL)
	}
	defer close(hang) // before the servers close: they wait for their handlers
	f.start(t, webhook.Config{Workers: 8, PerURL: 2, Timeout: 5 * time.Second})

	// latencies sends n of alice's stops, a few milliseconds apart, and
	// returns how long each took to reach her endpoint, sorted.
	latencies := func(n int) []time.Duration {
		sent := map[string]time.Time{}
		for range n {
			at := time.Now()
			sent[f.stop(t, "alice", agentd.EventRunCompleted)] = at
			time.Sleep(20 * time.Millisecond)
		}
		waitForWithin(t, 60*time.Second, "alice's deliveries", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id := range sent {
				if _, ok := got[id]; !ok {
					return false
				}
			}
			return true
		})
		mu.Lock()
		defer mu.Unlock()
		var out []time.Duration
		for id, at := range sent {
			out = append(out, got[id].Sub(at))
		}
		slices.Sort(out)
		return out
	}

	base := latencies(10)
	t.Logf("alice alone: median %v, max %v", base[len(base)/2], base[len(base)-1])

	for _, u := range bob {
		f.subscribe(t, "bob", u, secret)
	}
	for range 3 { // sixty deliveries, none of which will be answered
		f.stop(t, "bob", agentd.EventRunCompleted)
	}
	waitForWithin(t, 15*time.Second, "bob's attempts to hang", func() bool { return hanging.Load() >= 4 })
	time.Sleep(200 * time.Millisecond) // the workers bob may have are taken
	held := latencies(10)
	t.Logf("alice beside bob's 20 hanging endpoints: median %v, max %v (%d of bob's attempts under way)",
		held[len(held)/2], held[len(held)-1], hanging.Load())
	if held[len(held)-1] > base[len(base)-1]+time.Second {
		t.Fatalf("alice's slowest delivery took %v beside bob's hanging endpoints, %v without them",
			held[len(held)-1], base[len(base)-1])
	}
}

func waitForWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
