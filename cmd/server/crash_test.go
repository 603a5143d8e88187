package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// TestKillBetweenEffectAndCommit kills the server process while a
// side-effect webhook has done its effect but not answered. Without a
// reconciler the run waits for a client (tool_outcome_unknown) and completes
// once told, the effect still done once; with one it completes by itself.
func TestKillBetweenEffectAndCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	for _, withReconciler := range []bool{false, true} {
		t.Run(fmt.Sprintf("reconciler=%v", withReconciler), func(t *testing.T) {
			// The charge happens (the sink counts its key) and then hangs
			// the first time, so that the process can be killed between
			// the effect and the commit of its result. The reconcile
			// endpoint says the effect happened when it saw the key.
			sink := webhooktest.New(t, map[string]webhooktest.Behaviour{
				"/charge":    webhooktest.First(1, webhooktest.Hang(), webhooktest.OK()),
				"/reconcile": webhooktest.Reconcile("/charge"),
			})
			reconcile := ""
			if withReconciler {
				reconcile = fmt.Sprintf(`,"reconcile_url":%q`, sink.URL+"/reconcile")
			}
			toolsFile := filepath.Join(t.TempDir(), "tools.json")
			os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"charge","description":"charge a card",
				"parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":60000%s}]}`, sink.URL+"/charge", reconcile)), 0o600)
			dbURL := persisttest.NewDatabase(t)
			env := []string{"DATABASE_URL=" + dbURL, "AGENTD_TOOLS_FILE=" + toolsFile, "AGENTD_LEASE_TTL=1s",
				"AGENTD_POLL_INTERVAL=100ms", "AGENTD_LOG_LEVEL=info"}
			a := startChild(t, env)
			resp, err := http.Post("http://"+a.addr+"/runs", "application/json", strings.NewReader(`{"input":"/call charge {}\n/say charged"}`))
			if err != nil {
				t.Fatal(err)
			}
			var run struct{ ID string }
			json.NewDecoder(resp.Body).Decode(&run)
			resp.Body.Close()
			sink.WaitEntered(t, "/charge", 20*time.Second)
			keys := sink.Keys("/charge")
			if len(keys) != 1 {
				t.Fatalf("the webhook saw keys %v, want one", keys)
			}
			key := slices.Collect(maps.Keys(keys))[0]
			a.kill(t)
			killed := time.Now()
			b := startChild(t, env)
			store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			r := persisttest.WaitRun(t, store, run.ID, func(r agentd.Run) bool { return r.Epoch >= 2 }, 30*time.Second)
			t.Logf("taken over %v after the SIGKILL (lease TTL 1s)", time.Since(killed).Round(time.Millisecond))
			if !withReconciler {
				r = persisttest.WaitRun(t, store, run.ID, nil, 30*time.Second)
				var action struct {
					Type       string `json:"type"`
					ToolCallID string `json:"tool_call_id"`
				}
				json.Unmarshal(r.RequiredAction, &action)
				if r.Status != agentd.StatusRequiresAction || action.Type != "tool_outcome_unknown" {
					t.Fatalf("run is %s with %s, want requires_action tool_outcome_unknown", r.Status, r.RequiredAction)
				}
				body := fmt.Sprintf(`{"tool_call_id":%q,"decision":"result","result":{"charged":true}}`, action.ToolCallID)
				resp, err := http.Post("http://"+b.addr+"/runs/"+run.ID+"/actions", "application/json", strings.NewReader(body))
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("resolve: %v %v", err, resp.Status)
				}
				resp.Body.Close()
			}
			r = persisttest.WaitRun(t, store, run.ID, func(r agentd.Run) bool { return r.Status.Terminal() }, 30*time.Second)
			if r.Status != agentd.StatusCompleted {
				t.Fatalf("run ended %s/%s", r.Status, r.TerminalReason)
			}
			if n := sink.Keys("/charge")[key]; n != 1 {
				t.Fatalf("the side effect ran %d times, want 1", n)
			}
			evs, err := store.EventsAfter(context.Background(), run.ID, 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			spectest.CheckEvents(t, evs)
			steps, _ := store.StepsList(context.Background(), run.ID)
			call := steps[0].Calls[0]
			if call.Status != agentd.CallSucceeded || len(call.Attempts) != 1 || call.Attempts[0].Status != agentd.AttemptUnknown {
				t.Fatalf("call %s with %d attempts", call.Status, len(call.Attempts))
			}
		})
	}
}

// TestConcurrentIdempotentCreateAcrossInstances sends 50 concurrent POST
// /runs with one Idempotency-Key to two server processes: one run.
func TestConcurrentIdempotentCreateAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_LOG_LEVEL=info"}
	servers := []*child{startChild(t, env), startChild(t, env)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	statuses := map[int]int{}
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://"+servers[i%2].addr+"/runs", strings.NewReader(`{"input":"/say once"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "order-42")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("POST: %v", err)
				return
			}
			var r struct{ ID string }
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			mu.Lock()
			ids[r.ID]++
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(ids) != 1 || statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != 49 {
		t.Fatalf("runs %v, statuses %v; want one run, one 202 and 49 replays", ids, statuses)
	}
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	runs, err := store.RunList(context.Background(), agentd.RunListParams{TenantID: "default", Limit: 100})
	if err != nil || len(runs) != 1 {
		t.Fatalf("%d runs stored (%v)", len(runs), err)
	}
}
