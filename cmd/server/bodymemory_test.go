package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestBodyMemory: twenty POST /runs at once, each with a 28 MB input (an
// image as a data URL, or a file part's base64), with the body limits
// raised so that they are allowed. Every request is answered (202, 422,
// or 503 server_busy with Retry-After; never a reset), and the process's
// peak RSS (VmHWM) stays under bodyMemoryCeiling: what the requests in
// flight hold together is bounded by AGENTD_MAX_BODY_MEMORY, not by how
// many arrive at once. Without the budget, and with each body decoded
// through copies of itself, the same twenty took agentd to 5.5 GB; with
// it, to about 230 MB, one of them at a time (docs/operations.md).
func TestBodyMemory(t *testing.T) {
	skipShort(t, "starts a server process and sends 560 MB")
	const (
		fileCap  = 32 << 20  // AGENTD_MAX_INPUT_FILE(S)_BYTES
		maxBody  = 1 << 20   // AGENTD_MAX_BODY_BYTES, the default
		budget   = 160 << 20 // AGENTD_MAX_BODY_MEMORY
		baseline = 96 << 20  // an idle agentd with a fresh runtime, and slack
		requests = 20
	)
	// largest is the largest body POST /runs takes with these settings.
	largest := int64(maxBody + base64.StdEncoding.EncodedLen(fileCap) + 100*64)
	ceiling := 4*largest + baseline
	c := startPlain(t, "DATABASE_URL="+persisttest.NewDatabase(t), "AGENTD_WORKERS=1", "AGENTD_MAX_INPUT_FILE_BYTES="+strconv.Itoa(fileCap),
		"AGENTD_MAX_INPUT_FILES_BYTES="+strconv.Itoa(fileCap), "AGENTD_MAX_BODY_MEMORY="+strconv.Itoa(budget))
	before := peakRSS(t, c.cmd.Process.Pid)

	// 21 MB of noise after a PNG's and a PDF's signatures: 28 MB in base64.
	data := func(magic string) string {
		raw := make([]byte, 21<<20)
		rand.Read(raw)
		copy(raw, magic)
		return base64.StdEncoding.EncodeToString(raw)
	}
	bodies := [][]byte{
		[]byte(`{"input": [{"role": "user", "content": [{"type": "text", "text": "what is it?"},
			{"type": "image", "url": "data:image/png;base64,` + data("\x89PNG\r\n\x1a\n") + `"}]}]}`),
		[]byte(`{"input": [{"role": "user", "content": [{"type": "text", "text": "what is it?"},
			{"type": "file", "data": "` + data("%PDF-1.4\n") + `", "media_type": "application/pdf", "filename": "big.pdf"}]}]}`),
	}

	var (
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
	)
	for i := range requests {
		wg.Go(func() {
			tr := &http.Transport{DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
			resp, err := cl.Post("http://"+c.addr+"/runs", "application/json", bytes.NewReader(bodies[i%2]))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusAccepted:
			case http.StatusUnprocessableEntity:
				t.Logf("request %d: 422 %.300s", i, body)
			case http.StatusServiceUnavailable:
				if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"server_busy"`) {
					t.Errorf("request %d: 503 without Retry-After or server_busy: %s", i, body)
				}
			default:
				t.Errorf("request %d: %d %s", i, resp.StatusCode, body)
			}
			mu.Lock()
			counts[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := peakRSS(t, c.cmd.Process.Pid)
	t.Logf("answers %v; peak RSS %d MB (idle %d MB), ceiling %d MB (4 x the largest body, %d MB, + %d MB)",
		counts, peak>>20, before>>20, ceiling>>20, largest>>20, baseline>>20)
	if peak > ceiling {
		t.Errorf("peak RSS %d MB, want at most %d MB", peak>>20, ceiling>>20)
	}
}

// startPlain builds agentd as it ships (the tests' own binary may carry
// the race detector, whose shadow memory would be most of what RSS
// measures) and runs it on a free loopback port with env, until t ends.
func startPlain(t *testing.T, env ...string) *child {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentd")
	build := exec.Command("go", "build", "-o", bin, "github.com/agentd/agentd/cmd/server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agentd: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{"AGENTD_ADDR=" + addr, "AGENTD_LOG_LEVEL=warn", "OPENAI_API_KEY="}, env...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		select {
		case <-c.done:
			t.Fatal("agentd exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("agentd is not ready after 60 s")
		}
	}
}

// peakRSS is process pid's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}
