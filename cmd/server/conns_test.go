package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/persist/persisttest"
)

// keyedServer is agentd started in-process with AGENTD_AUTH=keys: its
// address, a key of tenant acme (runs:read, runs:write), its start-up log
// line, and everything it logged.
type keyedServer struct {
	base, token string
	started     map[string]any // the "agentd serving" line
	logs        *lockedBuffer
}

// startKeyed creates a database and a key in it, then runs the server on
// it with env added (AGENTD_AUTH=keys, info logs); the server stops when
// the test ends.
func startKeyed(t *testing.T, env map[string]string) keyedServer {
	t.Helper()
	dbURL := persisttest.NewDatabase(t)
	out, err := keysCmd(t, dbURL, "create", "--tenant", "acme", "--name", "ci", "--scopes", "runs:read,runs:write")
	if err != nil {
		t.Fatal(err)
	}
	s := keyedServer{token: strings.TrimSpace(out), logs: &lockedBuffer{}}
	all := map[string]string{"DATABASE_URL": dbURL, "AGENTD_AUTH": "keys", "AGENTD_LOG_LEVEL": "info"}
	for k, v := range env {
		all[k] = v
	}
	var stopped func() error
	s.base, stopped = serveInProcess(t, all, s.logs)
	t.Cleanup(func() {
		if err := stopped(); err != nil {
			t.Error(err)
		}
	})
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "agentd serving" {
			s.started = l
		}
	}
	if s.started == nil {
		t.Fatalf("no start-up line in the logs:\n%s", s.logs)
	}
	return s
}

// trickler is a client that sends its request's head at once and then its
// body one byte every 50 ms, as long as its connection stays open.
type trickler struct {
	name   string
	conn   net.Conn
	done   chan struct{} // closed once the connection ended
	status int           // the answer's status, 0 when none came
	wg     sync.WaitGroup
}

// trickle opens a trickler's connection to addr and sends head (ending in
// its blank line). The connection is closed when the test ends.
func trickle(t *testing.T, addr, name, head string) *trickler {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trickler{name: name, conn: c, done: make(chan struct{})}
	t.Cleanup(func() {
		c.Close()
		tr.wg.Wait()
	})
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	tr.wg.Add(2)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.done:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	go func() {
		defer tr.wg.Done()
		defer close(tr.done)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err == nil {
			tr.status = resp.StatusCode
		}
		_, _ = io.Copy(io.Discard, br) // until the server closes the connection
	}()
	return tr
}

// ended reports whether the trickler's connection ended.
func (tr *trickler) ended() bool {
	select {
	case <-tr.done:
		return true
	default:
		return false
	}
}

// slowRequest is a request whose body never arrives in time, and the
// status agentd answers it (0: any status).
type slowRequest struct {
	name   string
	head   string
	status int
}

// slowRequests are requests that agentd refuses or answers without reading
// their body: a 404, a 405, a 401 (no credential), a GET with a body, and,
// when token is not empty, an authenticated 415.
func slowRequests(token string) []slowRequest {
	head := func(line, extra string) string {
		return line + " HTTP/1.1\r\nHost: agentd\r\nContent-Length: 100000\r\n" + extra + "\r\n"
	}
	reqs := []slowRequest{
		{"404", head("POST /nowhere", "Content-Type: application/json\r\n"), http.StatusNotFound},
		{"405", head("PUT /runs", "Content-Type: application/json\r\n"), http.StatusMethodNotAllowed},
		{"401", head("POST /runs", "Content-Type: application/json\r\n"), http.StatusUnauthorized},
		{"GET with a body", head("GET /livez", ""), 0},
	}
	if token != "" {
		reqs = append(reqs, slowRequest{"authenticated 415",
			head("POST /runs", "Content-Type: text/plain\r\nAuthorization: Bearer "+token+"\r\n"), http.StatusUnsupportedMediaType})
	}
	return reqs
}

// openTricklers opens n tricklers on addr, going round reqs.
func openTricklers(t *testing.T, addr string, n int, reqs []slowRequest) ([]*trickler, map[*trickler]slowRequest) {
	t.Helper()
	var trs []*trickler
	of := map[*trickler]slowRequest{}
	for i := range n {
		r := reqs[i%len(reqs)]
		tr := trickle(t, addr, r.name, r.head)
		trs = append(trs, tr)
		of[tr] = r
	}
	return trs, of
}

// TestSlowClientsEndWithinTheBodyTimeout: with AGENTD_MAX_CONNECTIONS 8,
// twelve clients whose bodies trickle in a byte at a time (for about 80
// minutes each) on routes that answer without reading the body (404, 405,
// 401, a GET with a body, an authenticated 415) all have their connections
// ended within the body timeout (2 s) rather than held: the older ones are
// closed to make room for newer ones once they had their second of grace,
// those that come while every unauthenticated connection is younger are
// answered 503 with Retry-After at once, and the newest five, one of each
// kind, are answered with their route's status or that 503.
func TestSlowClientsEndWithinTheBodyTimeout(t *testing.T) {
	const bodyTimeout = 2 * time.Second
	s := startKeyed(t, map[string]string{"AGENTD_MAX_CONNECTIONS": "8", "AGENTD_MAX_UNAUTHENTICATED_CONNECTIONS": "5",
		"AGENTD_BODY_TIMEOUT": bodyTimeout.String()})
	addr := strings.TrimPrefix(s.base, "http://")
	reqs := slowRequests(s.token)
	trs, of := openTricklers(t, addr, 12, reqs)
	start := time.Now()
	limit := time.After(10 * bodyTimeout) // far within a trickle's 100,000 bytes
	answered := 0
	for _, tr := range trs {
		select {
		case <-tr.done:
		case <-limit:
			var open []string
			for _, tr := range trs {
				if !tr.ended() {
					open = append(open, tr.name)
				}
			}
			t.Fatalf("%d of %d slow connections still open after %s: %v", len(open), len(trs), 10*bodyTimeout, open)
		}
		if want := of[tr].status; tr.status != 0 {
			answered++
			if want != 0 && tr.status != want && tr.status != http.StatusServiceUnavailable {
				t.Errorf("%s: answered %d, want %d", tr.name, tr.status, want)
			}
		}
	}
	t.Logf("%d slow connections ended in %s: %d answered, %d closed to make room", len(trs),
		time.Since(start).Round(100*time.Millisecond), answered, len(trs)-answered)
	// The newest 5 (the budget of unauthenticated connections), one of
	// each kind, are never closed to make room: they are answered once
	// their body timed out.
	for _, tr := range trs[len(trs)-len(reqs):] {
		if tr.status == 0 {
			t.Errorf("%s: closed without an answer, though none came after it to need its place", tr.name)
		}
	}
}

// TestSlowClientsLeaveRoom: while more unauthenticated clients than
// AGENTD_MAX_CONNECTIONS hold requests whose bodies trickle in (and the
// body timeout is far away), a new client's GET /livez is answered on the
// API's address and on AGENTD_HEALTH_ADDR, an authenticated request is
// answered, and its connection, once authenticated, stays usable through a
// second wave of such clients: unauthenticated connections have a budget of
// their own, and the oldest of them is closed to make room for a new one
// once it had its second of grace (until then a new client is answered 503
// with Retry-After, which it follows, as a client does).
func TestSlowClientsLeaveRoom(t *testing.T) {
	healthAddr := freeAddr(t)
	s := startKeyed(t, map[string]string{"AGENTD_MAX_CONNECTIONS": "8", "AGENTD_MAX_UNAUTHENTICATED_CONNECTIONS": "4",
		"AGENTD_BODY_TIMEOUT": "5m", "AGENTD_HEALTH_ADDR": healthAddr})
	addr := strings.TrimPrefix(s.base, "http://")
	first, _ := openTricklers(t, addr, 12, slowRequests(""))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	get := func(url, token string) (status int, reused bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		for try := 0; ; try++ {
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("GET %s while slow clients hold connections: %v", url, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || try == 5 {
				return resp.StatusCode, reused
			}
			time.Sleep(time.Second)
		}
	}
	for _, url := range []string{s.base + "/livez", "http://" + healthAddr + "/livez", "http://" + healthAddr + "/readyz"} {
		if status, _ := get(url, ""); status != http.StatusOK {
			t.Fatalf("GET %s: %d", url, status)
		}
	}
	authed := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(authed.CloseIdleConnections)
	client = authed
	if status, _ := get(s.base+"/runs", s.token); status != http.StatusOK {
		t.Fatalf("authenticated GET /runs: %d", status)
	}
	second, _ := openTricklers(t, addr, 12, slowRequests(""))
	status, reused := get(s.base+"/runs", s.token)
	if status != http.StatusOK || !reused {
		t.Fatalf("authenticated GET /runs after a second wave: %d, connection reused %v", status, reused)
	}
	hanging := 0
	for _, tr := range slices.Concat(first, second) {
		if !tr.ended() {
			hanging++
		}
	}
	if hanging == 0 {
		t.Fatal("no slow client is left hanging: the answers did not come while they held connections")
	}
}

// TestStartupLog: one line says what agentd loaded: the tools file and how
// many tools it declares, the MCP servers' names, tracing and its endpoint,
// the authentication mode, the health address, and the run viewer's URL.
func TestStartupLog(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(collector.Close)
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	tools := fmt.Sprintf(`{"tools": [
		{"name": "charge", "description": "a side effect", "url": %[1]q, "effect": "side_effect"},
		{"name": "lookup", "description": "a read", "url": %[1]q, "effect": "read_only"}],
		"mcp_servers": [{"name": "docs", "url": "http://127.0.0.1:1/mcp"}, {"name": "files", "url": "http://127.0.0.1:1/mcp"}]}`,
		collector.URL+"/hook")
	if err := os.WriteFile(toolsFile, []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	healthAddr := freeAddr(t)
	s := startKeyed(t, map[string]string{"AGENTD_TOOLS_FILE": toolsFile, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"AGENTD_HEALTH_ADDR": healthAddr})
	want := map[string]any{
		"addr":             strings.TrimPrefix(s.base, "http://"),
		"auth":             "keys",
		"tools_file":       toolsFile,
		"file_tools":       2.0,
		"mcp_servers":      []any{"docs", "files"},
		"tracing":          true,
		"tracing_endpoint": collector.URL + "/v1/traces",
		"health_addr":      healthAddr,
		"ui":               s.base + "/ui/",
	}
	for k, v := range want {
		if got := s.started[k]; fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("start-up line: %s = %v, want %v", k, got, v)
		}
	}
	// With the fake model, its line and this one are the whole start-up.
	var lines []string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) != nil || l.Level != "INFO" || strings.HasPrefix(l.Msg, "mcp:") {
			continue
		}
		lines = append(lines, l.Msg)
		if l.Msg == "agentd serving" {
			break
		}
	}
	if len(lines) > 2 {
		t.Errorf("start-up logged %d info lines, want at most 2: %q", len(lines), lines)
	}
}
