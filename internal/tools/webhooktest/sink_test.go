package webhooktest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// post sends body to the sink's path with key and returns the status and
// body of the answer; status 0 means no answer came before ctx ended.
func post(ctx context.Context, t *testing.T, s *webhooktest.Sink, path, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.Client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ""
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestSinkCountsAndAnswers(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/ok":        webhooktest.OK(),
		"/flaky":     webhooktest.FailFirst(2),
		"/reconcile": webhooktest.Reconcile("/ok"),
		"/fixed":     webhooktest.Respond(http.StatusAccepted, `{"queued":true}`),
	})
	ctx := context.Background()
	if code, body := post(ctx, t, s, "/ok", "a", `{"x":1}`); code != http.StatusOK || body != `{"ok":true,"path":"/ok","n":1}` {
		t.Fatalf("/ok: %d %s", code, body)
	}
	if _, body := post(ctx, t, s, "/ok", "a", ""); body != `{"ok":true,"path":"/ok","n":2}` {
		t.Fatalf("/ok again: %s", body)
	}
	post(ctx, t, s, "/ok", "b", "")
	for i, want := range []int{500, 500, 200} {
		if code, _ := post(ctx, t, s, "/flaky", "k", ""); code != want {
			t.Fatalf("/flaky request %d: %d, want %d", i+1, code, want)
		}
	}
	if code, _ := post(ctx, t, s, "/flaky", "other", ""); code != 500 {
		t.Fatalf("/flaky, another key: %d, want 500 (counted per key)", code)
	}
	if _, body := post(ctx, t, s, "/reconcile", "a", ""); body != `{"status":"succeeded","result":{"reconciled":true}}` {
		t.Fatalf("reconcile of a seen key: %s", body)
	}
	if _, body := post(ctx, t, s, "/reconcile", "unseen", ""); body != `{"status":"not_applied"}` {
		t.Fatalf("reconcile of an unseen key: %s", body)
	}
	if code, body := post(ctx, t, s, "/fixed", "", ""); code != http.StatusAccepted || body != `{"queued":true}` {
		t.Fatalf("/fixed: %d %s", code, body)
	}
	if n, keys := s.Count("/ok"), s.Keys("/ok"); n != 3 || len(keys) != 2 || keys["a"] != 2 || keys["b"] != 1 {
		t.Fatalf("/ok: %d requests, keys %v", n, keys)
	}
	if n := s.Count("/flaky"); n != 4 {
		t.Fatalf("/flaky: %d requests, want 4", n)
	}
	reqs := s.Requests()
	if len(reqs) != 10 || reqs[0].Path != "/ok" || reqs[0].Key != "a" || string(reqs[0].Body) != `{"x":1}` ||
		reqs[0].Header.Get("Content-Length") != "7" || reqs[0].Method != http.MethodPost {
		t.Fatalf("requests: %d, first %+v", len(reqs), reqs[0])
	}
}

func TestSinkWaits(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/hang":  webhooktest.Hang(),
		"/block": webhooktest.First(1, webhooktest.Block(), webhooktest.OK()),
		"/delay": webhooktest.Delay(10*time.Millisecond, 20*time.Millisecond),
	})
	// A hanging request is cancelled by its client; the sink counts it.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if code, _ := post(ctx, t, s, "/hang", "h", ""); code != 0 {
		t.Fatalf("/hang answered %d", code)
	}
	for i := 0; i < 100 && s.Cancels("/hang") != 1; i++ {
		time.Sleep(10 * time.Millisecond) // the server notices the hang-up asynchronously
	}
	if n := s.Cancels("/hang"); n != 1 {
		t.Fatalf("cancels of /hang: %d, want 1", n)
	}
	// The first request per key blocks until released; a second with the
	// same key answers at once.
	answered := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/block", nil)
		req.Header.Set("Idempotency-Key", "b")
		resp, err := s.Client().Do(req)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	s.WaitEntered(t, "/block", 5*time.Second)
	if code, _ := post(context.Background(), t, s, "/block", "b", ""); code != http.StatusOK {
		t.Fatalf("second /block request: %d", code)
	}
	select {
	case code := <-answered:
		t.Fatalf("first /block request answered %d before the release", code)
	case <-time.After(50 * time.Millisecond):
	}
	s.Release()
	s.Release()
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("released /block request: %d", code)
	}
	start := time.Now()
	if code, _ := post(context.Background(), t, s, "/delay", "d", ""); code != http.StatusOK || time.Since(start) < 10*time.Millisecond {
		t.Fatalf("/delay: %d after %v", code, time.Since(start))
	}
	if s.Conns() == 0 {
		t.Fatal("no connection counted")
	}
}

// A request still waiting when the test ends is let go, so that the
// server closes.
func TestSinkClosesWithWaitingRequest(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	t.Run("sink", func(t *testing.T) {
		s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/hang": webhooktest.Hang()})
		go func() {
			defer close(done)
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/hang", nil)
			if resp, err := s.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		s.WaitEntered(t, "/hang", 5*time.Second)
	})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request was not let go when the sink closed")
	}
}
