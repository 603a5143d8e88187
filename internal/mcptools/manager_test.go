package mcptools

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/tools"
)

// TestStderrLinesAndConnectTimeout: a server command's stderr is logged
// one record per line, with the server's name, and a connection attempt
// ends after the server's connect_timeout_ms, with an error that says so.
// The command never answers MCP's initialize.
func TestStderrLinesAndConnectTimeout(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	m := New(reg, []ServerConfig{{Name: "mute", Command: "sh",
		Args:             []string{"-c", "echo a >&2; printf 'b c\\r\\nd' >&2; exec sleep 30"},
		ConnectTimeoutMS: 300}}, log)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()

	deadline := time.Now().Add(20 * time.Second)
	for m.Statuses()[0].Error == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e := m.Statuses()[0].Error; !strings.Contains(e, "no answer within 300ms") {
		t.Fatalf("status error %q, want the connect timeout of 300ms", e)
	}
	want := []string{"a", "b c", "d"} // the last line has no newline: logged when the process ends
	var got []string
	for time.Now().Before(deadline) {
		got = out.stderrLines(t, "mute")
		if len(got) >= len(want) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Join(got[:min(len(got), len(want))], "|") != strings.Join(want, "|") {
		t.Errorf("stderr records %q, want %q first", got, want)
	}
}

// syncBuffer is a log's output, written by several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// stderrLines returns the lines of the records of server's stderr.
func (b *syncBuffer) stderrLines(t *testing.T, server string) []string {
	t.Helper()
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	var lines []string
	for _, raw := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var rec struct {
			Msg    string `json:"msg"`
			Server string `json:"mcp_server"`
			Line   string `json:"line"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("log record %q: %v", raw, err)
		}
		if rec.Msg == "mcp: stderr" && rec.Server == server {
			lines = append(lines, rec.Line)
		}
	}
	return lines
}

// TestStderrLogSplits: lines written in pieces are logged whole, and a line
// longer than maxStderrLine is logged in parts of that size.
func TestStderrLogSplits(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	w := &stderrLog{log: slog.New(slog.NewJSONHandler(&out, nil)).With("mcp_server", "s")}
	long := strings.Repeat("x", maxStderrLine+10)
	for _, p := range []string{"he", "llo\nwor", "ld\n\n", long, "\n", "tail"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	w.flush()
	want := []string{"hello", "world", long[:maxStderrLine], long[maxStderrLine:], "tail"}
	if got := out.stderrLines(t, "s"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
}

// TestManagerStartStop: a manager stops safely before it starts and
// twice, and does not start again once stopped.
func TestManagerStartStop(t *testing.T) {
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := []ServerConfig{{Name: "idle", Command: "sh", Args: []string{"-c", "exec sleep 30"}, ConnectTimeoutMS: 300}}
	never := New(reg, cfg, nil)
	for i, err := range []error{never.Stop(ctx), never.Start(ctx), never.Stop(ctx)} {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	m := New(reg, cfg, nil)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for range 2 {
		if err := m.Stop(sctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
}
