package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func TestMain(m *testing.M) {
	// Each test here runs agentd, in this process or as processes, with a
	// pool of its own (workers + 16): 54 connections at once at the most
	// seen on 2 CPUs.
	persisttest.NeedConnections(60)
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// TestServerEndToEnd starts the real server (fake model, migrations on a
// fresh database), runs a tool-calling run through the Go SDK, and shuts
// down cleanly.
func TestServerEndToEnd(t *testing.T) {
	s := setup(t)
	ctx := testCtx(t)
	created, err := s.Client.CreateRun(ctx, client.CreateRun{Input: "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42."})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Wire.last(t, http.MethodPost, "/runs"); a.Status != http.StatusAccepted || a.Header.Get("Location") != "/runs/"+created.ID {
		t.Fatalf("POST /runs: %d, Location %q", a.Status, a.Header.Get("Location"))
	}
	got := runEnded(t, s.Client, created.ID)
	if got.Status != agentd.StatusCompleted {
		t.Fatalf("run ended %q", got.Status)
	}
	if got.Usage.InputTokens == 0 {
		t.Fatal("completed run reports no usage")
	}
	if got.OutputText == nil || *got.OutputText != "The answer is 42." || len(got.Output) != 1 || got.Output[0].Text != *got.OutputText {
		t.Fatalf("completed run's answer: output_text %v, output %+v", got.OutputText, got.Output)
	}
	// The metrics are Prometheus's text, scraped as Prometheus does.
	r, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, series := range []string{`agentd_runs_total{reason="completed",status="completed"} 1`, `agentd_tool_attempts_total{outcome="succeeded",tool="calculator"} 1`} {
		if !strings.Contains(string(metrics), series) {
			t.Fatalf("metrics lack %s", series)
		}
	}
	s.Stop()
}

// startServer runs the server in-process on a fresh database with env
// added to its environment; stop shuts it down and checks it stopped cleanly.
func startServer(t *testing.T, extra map[string]string) (base string, stop func()) {
	t.Helper()
	env := map[string]string{"DATABASE_URL": persisttest.NewDatabase(t), "AGENTD_LOG_LEVEL": "warn"}
	for k, v := range extra {
		env[k] = v
	}
	base, stopped := serveInProcess(t, env, io.Discard)
	stop = func() {
		if err := stopped(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return base, stop
}

// errNotStopped: the server did not stop within 30 s of its cancel.
var errNotStopped = errors.New("server did not stop")

// serveInProcess runs the server in-process with exactly env as its
// environment and its log in logs, on a loopback port, and returns its
// base URL once it serves. stopped cancels it and waits for it (at most
// 30 s), returning why it stopped, or errNotStopped; a second call returns
// what the first did. The caller stops it.
func serveInProcess(t *testing.T, env map[string]string, logs io.Writer) (base string, stopped func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, func(k string) string { return env[k] },
			logs, io.Discard, func(a string) { addrc <- a })
	}()
	select {
	case a := <-addrc:
		base = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("server exited: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("server did not start")
	}
	var once sync.Once
	var err error
	return base, func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
				if err != nil {
					err = fmt.Errorf("server stopped with %v", err)
				}
			case <-time.After(30 * time.Second):
				err = errNotStopped
			}
		})
		return err
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := parseConfig([]string{"-workers", "0", "-lease-ttl", "soon"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "workers") || !strings.Contains(err.Error(), "lease-ttl") {
		t.Fatalf("bad config accepted or not explained: %v", err)
	}
	c, err := parseConfig(nil, func(k string) string {
		return map[string]string{"AGENTD_ADDR": "0.0.0.0:9999", "AGENTD_WORKERS": "3", "AGENTD_AUTH": "keys"}[k]
	}, io.Discard)
	if err != nil || c.Addr != "0.0.0.0:9999" || c.Workers != 3 || c.DatabaseURL != defaultDatabaseURL || c.LeaseTTL != 15*time.Second ||
		c.Retention != 0 {
		t.Fatalf("env config: %+v %v", c, err)
	}
	for v, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "36h": 36 * time.Hour} {
		c, err := parseConfig([]string{"-retention", v}, func(string) string { return "" }, io.Discard)
		if err != nil || c.Retention != want || c.RetentionEvery != 10*time.Minute {
			t.Errorf("retention %s: %v %v", v, c.Retention, err)
		}
	}
	for _, v := range []string{"soon", "30s", "-3d"} {
		if _, err := parseConfig([]string{"-retention", v}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "retention") {
			t.Errorf("retention %s accepted: %v", v, err)
		}
	}
}

// TestAuthModes: without authentication agentd serves only a loopback
// address; anywhere else it refuses to start and says why in one line.
func TestAuthModes(t *testing.T) {
	cases := []struct {
		env      map[string]string
		wantAuth string
		wantErr  string
	}{
		{env: map[string]string{}, wantAuth: authNone},
		{env: map[string]string{"AGENTD_ADDR": "[::1]:8080"}, wantAuth: authNone},
		{env: map[string]string{"AGENTD_ADDR": "localhost:8080"}, wantAuth: authNone},
		{env: map[string]string{"AGENTD_ADDR": "0.0.0.0:8080"}, wantErr: "refusing to serve 0.0.0.0:8080 without authentication"},
		{env: map[string]string{"AGENTD_ADDR": ":8080"}, wantErr: "refusing to serve :8080 without authentication"},
		{env: map[string]string{"AGENTD_ADDR": "10.1.2.3:8080", "AGENTD_AUTH": "none"}, wantErr: "none is allowed only on a loopback address"},
		{env: map[string]string{"AGENTD_ADDR": "0.0.0.0:8080", "AGENTD_AUTH": "keys"}, wantAuth: authKeys},
		{env: map[string]string{"AGENTD_AUTH": "oidc"}, wantErr: "needs AGENTD_OIDC_ISSUER and AGENTD_OIDC_AUDIENCE"},
		{env: map[string]string{"AGENTD_AUTH": "oidc", "AGENTD_OIDC_ISSUER": "https://id.example", "AGENTD_OIDC_AUDIENCE": "agentd"}, wantAuth: authOIDC},
		{env: map[string]string{"AGENTD_AUTH": "basic"}, wantErr: `want keys, oidc or none, got "basic"`},
	}
	for _, c := range cases {
		cfg, err := parseConfig(nil, func(k string) string { return c.env[k] }, io.Discard)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v: err %v, want one line with %q", c.env, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", c.env, err)
		case cfg.Auth != c.wantAuth:
			t.Errorf("%v: auth %q, want %q", c.env, cfg.Auth, c.wantAuth)
		}
	}
}

// TestConnectionCap: with AGENTD_MAX_CONNECTIONS 4, four connections that
// never finish their headers hold every slot: a fifth client is not served
// while they stay (its connection waits in the listen backlog), and is
// served as soon as one of them closes.
func TestConnectionCap(t *testing.T) {
	// Raw connections and a plain HTTP client: the test is about
	// connections, below any API call.
	base := setup(t, withEnv("AGENTD_MAX_CONNECTIONS", "4")).URL
	addr := strings.TrimPrefix(base, "http://")
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\n")); err != nil { // headers never end
			t.Fatal(err)
		}
		held = append(held, c)
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := client.Get(base + "/livez"); err == nil {
		resp.Body.Close()
		t.Fatalf("a fifth connection was served (%d) while four held every slot", resp.StatusCode)
	}
	held[0].Close()
	client.Timeout = 10 * time.Second
	resp, err := client.Get(base + "/livez")
	if err != nil {
		t.Fatalf("no connection served after a slot was freed: %v", err)
	}
	resp.Body.Close()
	for _, c := range held[1:] {
		c.Close()
	}
}
