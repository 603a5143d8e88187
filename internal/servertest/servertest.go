package servertest

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Main builds agentd into a temporary directory, runs the tests, removes
// it, and exits with the tests' code; call it from TestMain. It returns
// only if the build fails, after printing why. Under -short it builds
// nothing, since Start skips every test then.
func Main(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "agentd-servertest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "agentd")
	build := exec.Command("go", "build", "-o", bin, "github.com/agentd/agentd/cmd/server")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build agentd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bin is the agentd that Main built.
var bin string

// Server is an agentd process.
type Server struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer
}

// Start runs agentd on addr with database url and the built-in fake model,
// short leases and SSE retries, and env (extra NAME=VALUE variables), and
// waits until it is ready; it is killed when t ends. Under -short it skips
// the test: a test of agentd as a process is in the full tier.
func Start(t *testing.T, addr, url string, env ...string) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts agentd as a process: in the full tier (make test), not under -short")
	}
	if bin == "" {
		t.Fatal("servertest: call servertest.Main from TestMain")
	}
	s := &Server{cmd: exec.Command(bin), done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "AGENTD_ADDR="+addr, "AGENTD_LOG_LEVEL=warn",
		"AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms", "AGENTD_SSE_RETRY=50ms", "OPENAI_API_KEY=")
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = &s.logs, &s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Kill)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("agentd exited: %s", s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd is not ready: %s", s.logs.String())
		}
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// FreeAddr returns a loopback address with a free port.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
