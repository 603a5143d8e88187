package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// testServer is what an end-to-end test works with: agentd started in
// this process by run (bound to a loopback :0, the fake model, a fresh
// database), and a client of it from the public SDK, as a user has one.
type testServer struct {
	URL    string         // the base URL, http://127.0.0.1:port
	Client *client.Client // a client of URL, without a key
	Wire   *wire          // what Client's calls were answered
	DBURL  string         // the server's database
	// Stop shuts the server down and fails the test if it did not stop
	// cleanly; the test's cleanup calls it too (a second call does
	// nothing).
	Stop func()
}

// setupOption adds to the environment setup starts the server with.
type setupOption func(t *testing.T, env map[string]string)

// withEnv sets the server's environment variable key to value.
func withEnv(key, value string) setupOption {
	return func(_ *testing.T, env map[string]string) { env[key] = value }
}

// withToolsFile gives the server a tools file (AGENTD_TOOLS_FILE) that
// holds text.
func withToolsFile(text string) setupOption {
	return withFile("AGENTD_TOOLS_FILE", "tools.json", text)
}

// withModelsFile gives the server a models file (AGENTD_MODELS_FILE) that
// holds text.
func withModelsFile(text string) setupOption {
	return withFile("AGENTD_MODELS_FILE", "models.json", text)
}

func withFile(key, name, text string) setupOption {
	return func(t *testing.T, env map[string]string) {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		env[key] = path
	}
}

// setup starts agentd in-process for t on a fresh database (or on the one
// withEnv("DATABASE_URL", ...) names) and returns it with a client.
func setup(t *testing.T, opts ...setupOption) *testServer {
	t.Helper()
	env := map[string]string{"AGENTD_LOG_LEVEL": "warn"}
	for _, o := range opts {
		o(t, env)
	}
	if env["DATABASE_URL"] == "" {
		env["DATABASE_URL"] = persisttest.NewDatabase(t)
	}
	base, stopped := serveInProcess(t, env, io.Discard)
	stop := func() {
		if err := stopped(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	w := &wire{next: http.DefaultTransport}
	c := client.New(base, client.WithHTTPClient(&http.Client{Transport: w}))
	return &testServer{URL: base, Client: c, Wire: w, DBURL: env["DATABASE_URL"], Stop: stop}
}

// wire keeps the status and headers of each answer a client got, for the
// checks that are about the wire (a replay's 200, a Location, a header
// the SDK reads for its caller) in a test that speaks through the SDK.
type wire struct {
	next    http.RoundTripper
	mu      sync.Mutex
	answers []wireAnswer
}

// wireAnswer is one answer: to which request, its status and headers.
type wireAnswer struct {
	Method, Path string
	Status       int
	Header       http.Header
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(r)
	if err == nil {
		w.mu.Lock()
		w.answers = append(w.answers, wireAnswer{Method: r.Method, Path: r.URL.Path, Status: resp.StatusCode, Header: resp.Header.Clone()})
		w.mu.Unlock()
	}
	return resp, err
}

// last is the last answer to method path; it fails t when there is none.
func (w *wire) last(t *testing.T, method, path string) wireAnswer {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.answers) - 1; i >= 0; i-- {
		if a := w.answers[i]; a.Method == method && a.Path == path {
			return a
		}
	}
	t.Fatalf("no answer to %s %s", method, path)
	return wireAnswer{}
}

// testCtx is a context for one call or wait of a test: 30 s, and no longer
// than the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runEnded waits, through c, until run id has ended (a run in
// requires_action has not), and returns it as it ended.
func runEnded(t *testing.T, c *client.Client, id string) *client.Run {
	t.Helper()
	ctx := testCtx(t)
	for {
		run, err := c.WaitRun(ctx, id, 10*time.Second)
		switch {
		case err != nil:
			t.Fatalf("run %s: %v", id, err)
		case run.Ended():
			return run
		}
		select { // settled, not ended: it waits for a decision
		case <-ctx.Done():
			t.Fatalf("run %s is still %s", id, run.Status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startRun creates a run of input through c and returns its id.
func startRun(t *testing.T, c *client.Client, input string) string {
	t.Helper()
	run, err := c.CreateRun(testCtx(t), client.CreateRun{Input: input})
	if err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	return run.ID
}
