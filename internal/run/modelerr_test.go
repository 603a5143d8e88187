package run_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/run"
)

// modelKey is the API key of the model in these tests: distinctive, so
// that finding it anywhere stored or logged is a leak.
const modelKey = "sk-agentd-run-test-4b3c2d1e-SECRET"

// logBuffer collects an engine's JSON log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// records returns the log lines whose message is msg.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// provider is a model endpoint for a test: a server that counts the
// requests it gets.
type provider struct {
	srv      *httptest.Server
	requests atomic.Int32
}

func newProvider(t *testing.T, h http.Handler) *provider {
	t.Helper()
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close) // after the engine stops (cleanups run last-in first-out)
	return p
}

// answer is a handler that answers every request with status, content
// type and body.
func answer(status int, contentType, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// failedRun is a run that ended on a model error, with what it left.
type failedRun struct {
	run   agentd.Run
	err   agentd.ErrorDetail // the run's error, as stored in runs.error
	steps []agentd.StepDetail
	evs   []agentd.Event
	logs  *logBuffer
}

// runAgainst runs input on an engine whose model is the OpenAI adapter at
// baseURL, sending modelKey, and returns the run once it ended. The run's
// error is the same in runs.error, in run.failed and in the failed step's
// error.
func runAgainst(t *testing.T, b *bundle, baseURL, input string) failedRun {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	logs := &logBuffer{}
	b.start(t, run.Config{
		Model:    llm.NewOpenAI(llm.OpenAIConfig{BaseURL: baseURL, APIKey: modelKey, HTTPClient: &http.Client{Transport: tr}}),
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, ModelBackoff: 10 * time.Millisecond, Workers: 2,
	})
	r := b.create(t, input, agentd.RunParams{})
	f := failedRun{run: b.wait(t, r.ID, nil), logs: logs}
	if f.run.Status != agentd.StatusFailed {
		t.Fatalf("run ended %s/%s: %s", f.run.Status, f.run.TerminalReason, f.run.Error)
	}
	if err := json.Unmarshal(f.run.Error, &f.err); err != nil {
		t.Fatalf("runs.error %s: %v", f.run.Error, err)
	}
	f.evs = b.events(t, r.ID)
	last := f.evs[len(f.evs)-1]
	var end agentd.RunEndedData
	if err := json.Unmarshal(envelopeData(t, last.Data), &end); err != nil || last.Type != agentd.EventRunFailed || end.Error == nil {
		t.Fatalf("last event %s (%v)", last.Data, err)
	}
	if *end.Error != f.err {
		t.Fatalf("run.failed says %+v, runs.error %+v", *end.Error, f.err)
	}
	var err error
	if f.steps, err = b.store.StepsList(context.Background(), r.ID); err != nil {
		t.Fatal(err)
	}
	var stepErr agentd.ErrorDetail
	if len(f.steps) != 1 || f.steps[0].Status != agentd.StepFailed || json.Unmarshal(f.steps[0].Error, &stepErr) != nil || stepErr != f.err {
		t.Fatalf("steps %+v, want one failed with the run's error %+v", f.steps, f.err)
	}
	return f
}

// checkLoggedOnce checks that the run's model failure was logged once, at
// warn, with the run's id and what its error says.
func (f failedRun) checkLoggedOnce(t *testing.T) {
	t.Helper()
	recs := f.logs.records(t, "model call failed; the run fails")
	if len(recs) != 1 {
		t.Fatalf("the failure was logged %d times:\n%s", len(recs), f.logs)
	}
	rec := recs[0]
	if rec["level"] != "WARN" || rec["run_id"] != f.run.ID || rec["kind"] != string(f.err.Kind) ||
		rec["status"] != float64(f.err.Status) || rec["code"] != f.err.ProviderCode || rec["message"] != f.err.Message {
		t.Fatalf("log record %v does not match the run's error %+v", rec, f.err)
	}
}

// TestModelErrorsSayWhy: a run that fails on a model error keeps what the
// provider said (status, code, type, message) in its error and in
// run.failed, says it in words, logs it once, and retries only what a
// retry may mend.
//
// Its runs' run.failed events carry error keys (provider_code,
// provider_message, provider_type, status) that api/openapi.yaml must
// declare for checkStoredEvents to pass.
func TestModelErrorsSayWhy(t *testing.T) {
	t.Parallel()
	const delta = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}` + "\n\n"

	t.Run("base URL without /v1", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fake := fakellm.New(fakellm.WithV1Only())
		p := newProvider(t, fake)
		f := runAgainst(t, b, p.srv.URL, "hello")
		want := agentd.ErrorDetail{Kind: "bad_request", Status: 404, ProviderType: "invalid_request_error",
			ProviderMessage: "Invalid URL (POST /chat/completions)",
			Message:         "the model's endpoint answered 404 Not Found: Invalid URL (POST /chat/completions)"}
		if f.err != want || f.run.TerminalReason != agentd.ReasonModelError {
			t.Fatalf("run error %+v (%s), want %+v", f.err, f.run.TerminalReason, want)
		}
		if p.requests.Load() != 1 || fake.Calls() != 0 {
			t.Fatalf("%d requests (%d served); a 404 is not retried", p.requests.Load(), fake.Calls())
		}
		f.checkLoggedOnce(t)
	})

	t.Run("plain 404 page", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newProvider(t, http.NotFoundHandler())
		f := runAgainst(t, b, p.srv.URL, "hello")
		want := agentd.ErrorDetail{Kind: "bad_request", Status: 404, ProviderMessage: "404 page not found",
			Message: "the model's endpoint answered 404 Not Found: 404 page not found"}
		if f.err != want || p.requests.Load() != 1 {
			t.Fatalf("run error %+v after %d requests, want %+v after 1", f.err, p.requests.Load(), want)
		}
		f.checkLoggedOnce(t)
	})

	t.Run("invalid key", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newProvider(t, answer(401, "application/json",
			`{"error":{"message":"Incorrect API key provided: sk-agen**********CRET. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
		f := runAgainst(t, b, p.srv.URL+"/v1", "hello")
		msg := "Incorrect API key provided: sk-agen**********CRET. You can find your API key at https://platform.openai.com/account/api-keys."
		want := agentd.ErrorDetail{Kind: "auth", Status: 401, ProviderCode: "invalid_api_key", ProviderType: "invalid_request_error",
			ProviderMessage: msg, Message: "the model's endpoint refused the API key (401): " + msg}
		if f.err != want || p.requests.Load() != 1 || f.steps[0].ModelAttempts != 1 {
			t.Fatalf("run error %+v after %d requests (%d attempts), want %+v after 1", f.err, p.requests.Load(),
				f.steps[0].ModelAttempts, want)
		}
		f.checkLoggedOnce(t)
	})

	t.Run("key refused mid-stream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := newProvider(t, answer(200, "text/event-stream", delta+
			`data: {"error":{"message":"Incorrect API key provided: sk-***","type":"invalid_request_error","code":"invalid_api_key"}}`+"\n\n"))
		f := runAgainst(t, b, p.srv.URL+"/v1", "hello")
		want := agentd.ErrorDetail{Kind: "auth", ProviderCode: "invalid_api_key", ProviderType: "invalid_request_error",
			ProviderMessage: "Incorrect API key provided: sk-***",
			Message:         "the model's endpoint refused the API key: Incorrect API key provided: sk-***"}
		if f.err != want || p.requests.Load() != 1 {
			t.Fatalf("run error %+v after %d requests, want %+v after 1", f.err, p.requests.Load(), want)
		}
		f.checkLoggedOnce(t)
	})

	t.Run("500 is retried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const msg = "The server had an error while processing your request. Sorry about that!"
		p := newProvider(t, answer(500, "application/json", `{"error":{"message":"`+msg+`","type":"server_error","param":null,"code":null}}`))
		f := runAgainst(t, b, p.srv.URL+"/v1", "hello")
		want := agentd.ErrorDetail{Kind: "server_error", Status: 500, ProviderType: "server_error", ProviderMessage: msg,
			Message: "the model's server kept failing (500 Internal Server Error): " + msg}
		// The engine's default: 4 attempts of a model call.
		if f.err != want || p.requests.Load() != 4 || f.steps[0].ModelAttempts != 4 {
			t.Fatalf("run error %+v after %d requests (%d attempts), want %+v after 4", f.err, p.requests.Load(),
				f.steps[0].ModelAttempts, want)
		}
		if n := len(f.logs.records(t, "model call failed; retrying")); n != 3 {
			t.Fatalf("%d retries logged, want 3", n)
		}
		f.checkLoggedOnce(t)
	})
}

// TestModelErrorsNeverShowTheKey: a provider that echoes the API key in its
// error gets it into none of the run's error, its events, its steps or the
// engine's log.
func TestModelErrorsNeverShowTheKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		status      int
		contentType string
		body        string
		kind        string
	}{
		{"401 body", 401, "application/json",
			`{"error":{"message":"Incorrect API key provided: ` + modelKey + `","type":"invalid_request_error","code":"invalid_api_key"}}`, "auth"},
		{"stream event", 200, "text/event-stream",
			`data: {"error":{"message":"Incorrect API key provided: ` + modelKey + `","type":"invalid_request_error","code":"invalid_api_key"}}` + "\n\n", "auth"},
		{"proxy page", 502, "text/html",
			"<html><body><h1>502 Bad Gateway</h1><p>upstream refused Authorization: Bearer " + modelKey + "</p></body></html>", "server_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := newProvider(t, answer(c.status, c.contentType, c.body))
			f := runAgainst(t, b, p.srv.URL+"/v1", "hello")
			if string(f.err.Kind) != c.kind || !strings.Contains(f.err.ProviderMessage, "[redacted]") ||
				!strings.Contains(f.err.Message, f.err.ProviderMessage) {
				t.Fatalf("run error %+v", f.err)
			}
			seen := map[string]string{"runs.error": string(f.run.Error), "log": f.logs.String()}
			for _, e := range f.evs {
				seen["event "+string(e.Type)] += string(e.Data)
			}
			for _, s := range f.steps {
				seen["steps.error"] += string(s.Error)
			}
			for where, text := range seen {
				if strings.Contains(text, modelKey) || strings.Contains(text, "SECRET") {
					t.Fatalf("the API key shows in %s: %s", where, text)
				}
			}
			f.checkLoggedOnce(t)
		})
	}
}
