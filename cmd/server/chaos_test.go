package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"agentd/internal/persist"
	"agentd/internal/persist/persisttest"
)

// The chaos test runs the server as real child processes: this test binary,
// re-executed with AGENTD_CHAOS_CHILD=1, is the server.
func init() {
	if os.Getenv("AGENTD_CHAOS_CHILD") != "1" {
		return
	}
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, nil, os.Getenv, os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type child struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

func startChild(t *testing.T, env []string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "AGENTD_CHAOS_CHILD=1", "AGENTD_ADDR=127.0.0.1:0")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "agentd serving" {
				addr <- line.Addr
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	select {
	case c.addr = <-addr:
	case <-c.done:
		t.Fatal("server process exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("server process did not start")
	}
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

// TestChaosKill starts two server processes on one database, starts runs
// whose tools have effects, SIGKILLs one process in the middle, and checks
// that every run reaches an end (completed, or waiting on a client for a
// side effect whose outcome the dead process took with it), that no side
// effect ran twice, and that every run's events are gapless.
// AGENTD_CHAOS_RUNS and AGENTD_CHAOS_KILLS make it longer.
func TestChaosKill(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test starts server processes")
	}
	runs := envInt("AGENTD_CHAOS_RUNS", 12)
	kills := envInt("AGENTD_CHAOS_KILLS", 1)

	var mu sync.Mutex
	seen := map[string]int{} // path + idempotency key -> requests
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.URL.Path+" "+r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer sink.Close()
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[
		{"name":"charge","description":"a side effect","parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":5000},
		{"name":"lookup","description":"an idempotent call","parameters":{"type":"object"},"url":%q,"effect":"idempotent","timeout_ms":5000}]}`,
		sink.URL+"/charge", sink.URL+"/slow")), 0o600)

	dbURL := persisttest.NewDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL, "AGENTD_TOOLS_FILE=" + toolsFile, "AGENTD_LEASE_TTL=1s",
		"AGENTD_POLL_INTERVAL=200ms", "AGENTD_LOG_LEVEL=info", "AGENTD_WORKERS=8"}
	a := startChild(t, env)
	b := startChild(t, env)

	ids := make([]string, runs)
	for i := range ids {
		input := "/call lookup {}\n/next\n/call charge {}\n/call lookup {\"n\":2}\n/next\n/stream 20 10"
		body, _ := json.Marshal(map[string]any{"input": input})
		target := a
		if i%2 == 1 {
			target = b
		}
		resp, err := http.Post("http://"+target.addr+"/runs", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /runs: %d", resp.StatusCode)
		}
		ids[i] = r.ID
	}
	victim, survivor := a, b
	for k := 0; k < kills; k++ {
		time.Sleep(400 * time.Millisecond) // let the runs get into their tools
		victim.kill(t)
		victim = startChild(t, env) // a restarted instance joins the survivor
		victim, survivor = survivor, victim
	}

	store, err := persist.Open(context.Background(), dbURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline := time.Now().Add(60 * time.Second)
	var completed, waiting, recovered int
	for _, id := range ids {
		for {
			r, err := store.RunByID(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == persist.StatusCompleted {
				completed++
				if r.Epoch > 1 {
					recovered++
				}
				break
			}
			if r.Status == persist.StatusRequiresAction {
				if !strings.Contains(string(r.RequiredAction), "tool_outcome_unknown") {
					t.Fatalf("run %s waits on %s", id, r.RequiredAction)
				}
				waiting++
				break
			}
			if r.Status != persist.StatusQueued && r.Status != persist.StatusRunning {
				t.Fatalf("run %s ended %s/%s: %s", id, r.Status, r.TerminalReason, r.Error)
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s still %s after the kill", id, r.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
		evs, err := store.EventsAfter(context.Background(), id, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("run %s: event %d has seq %d", id, i, e.Seq)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range seen {
		if strings.HasPrefix(k, "/charge ") && n != 1 {
			t.Fatalf("side effect %s ran %d times", k, n)
		}
	}
	t.Logf("%d runs: %d completed (%d of them taken over from a killed process), %d waiting on an unknown side effect, after %d kills",
		runs, completed, recovered, waiting, kills)
	if recovered+waiting == 0 {
		t.Fatal("the kill caught no run in flight: the test proved nothing")
	}
	_ = survivor
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}
