package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

// This file holds the failover test's agentd processes.

// failoverFleet is the agentd processes of the test. A SIGKILLed one
// leaves its slot empty until it is restarted. Under AGENTD_FAILOVER_LOGS
// their log lines, and the test's marks of its kills, go to that file.
type failoverFleet struct {
	t    *testing.T
	env  []string
	logs *lockedWriter // nil: not kept

	mu    sync.Mutex
	live  []*child // nil: killed, not yet restarted
	kills int
}

// startFleet starts n agentd processes with env.
func startFleet(t *testing.T, n int, env []string) *failoverFleet {
	t.Helper()
	f := &failoverFleet{t: t, env: env}
	if path := os.Getenv("AGENTD_FAILOVER_LOGS"); path != "" {
		file, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { file.Close() })
		f.logs = &lockedWriter{w: file}
	}
	for range n {
		f.live = append(f.live, f.start())
	}
	return f
}

// start starts one agentd process.
func (f *failoverFleet) start() *child {
	if f.logs == nil {
		return startChild(f.t, f.env)
	}
	return startChildLogged(f.t, f.env, f.logs)
}

// mark writes a line of the test's own into the agentd log file, if kept.
func (f *failoverFleet) mark(format string, args ...any) {
	if f.logs != nil {
		fmt.Fprintf(f.logs, "%s TEST %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
}

// lockedWriter is a writer for several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p whole before another goroutine writes.
func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// addr is the address of a random live instance ("" when none is).
func (f *failoverFleet) addr() string {
	addrs := f.addrs()
	if len(addrs) == 0 {
		return ""
	}
	return addrs[rand.IntN(len(addrs))]
}

// addrs are the addresses of the live instances.
func (f *failoverFleet) addrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.live {
		if c != nil {
			out = append(out, c.addr)
		}
	}
	return out
}

// kill SIGKILLs a random live instance and returns its slot.
func (f *failoverFleet) kill() int {
	f.mu.Lock()
	var alive []int
	for i, c := range f.live {
		if c != nil {
			alive = append(alive, i)
		}
	}
	i := alive[rand.IntN(len(alive))]
	victim := f.live[i]
	f.live[i] = nil
	f.kills++
	f.mu.Unlock()
	f.mark("SIGKILL agentd pid %d", victim.cmd.Process.Pid)
	victim.kill(f.t)
	return i
}

// restart starts a fresh instance in slot i.
func (f *failoverFleet) restart(i int) {
	c := f.start()
	f.mu.Lock()
	f.live[i] = c
	f.mu.Unlock()
}

// killed counts the SIGKILLs so far.
func (f *failoverFleet) killed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills
}
