package conns

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// slowHead is a request whose body of 100,000 bytes the test sends a byte
// at a time.
const slowHead = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"

// trickle sends head on c, then a byte every 20 ms until c fails or stop
// is closed; it returns when it stopped.
func trickle(c net.Conn, head string, stop <-chan struct{}) {
	if _, err := io.WriteString(c, head); err != nil {
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
		}
	}
}

// TestBodyDeadlineAnswersARefusedSlowBody: a handler that answers 404
// without reading the body of a request whose body trickles in gets its
// answer out, and the connection closed, once the body's deadline passed
// (net/http reads an unread body before it answers).
func TestBodyDeadlineAnswersARefusedSlowBody(t *testing.T) {
	srv := httptest.NewServer(BodyDeadline(http.NotFoundHandler(), 200*time.Millisecond))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { trickle(c, slowHead, stop) })
	defer wg.Wait()
	defer close(stop)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a trickle lasts 2,000 s
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	if resp.StatusCode != http.StatusNotFound || !resp.Close {
		t.Fatalf("answer %d, close %v; want 404 and the connection closed", resp.StatusCode, resp.Close)
	}
	// Closed: an end of file, or a reset when the server closed while the
	// client was still sending.
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection not closed after the answer: %v", err)
	}
}

// TestBodyDeadlineKeepsLongRequestsAlive: the deadline never cancels the
// context of a request that has no body, nor of one whose body was read,
// however long its handler runs (as an event stream does): net/http's
// background read of the connection would fail at a deadline left set.
func TestBodyDeadlineKeepsLongRequestsAlive(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := httptest.NewServer(BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "context ended: "+context.Cause(r.Context()).Error(), http.StatusInternalServerError)
		case <-time.After(5 * timeout):
			_, _ = io.WriteString(w, "ok")
		}
	}), timeout))
	defer srv.Close()
	for _, body := range []string{"", "a body sent at once"} {
		resp, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Client().CloseIdleConnections() // each case on a connection of its own
		if resp.StatusCode != http.StatusOK {
			t.Errorf("body %q: %d %s", body, resp.StatusCode, got)
		}
	}
}

// acceptAll accepts l's connections in the background; conns yields them.
func acceptAll(t *testing.T, l *Listener) (conns <-chan net.Conn) {
	t.Helper()
	ch := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(ch)
		for c := range ch {
			c.Close()
		}
	})
	return ch
}

// listen is a Listener on a loopback port.
func listen(t *testing.T, cfg Config) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return NewListener(ln, cfg)
}

// dial connects to l, closing the connection when the test ends.
func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (its read ends).
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestListenerClosesTheOldestUnauthenticated: with a budget of 2
// unauthenticated connections (of 4), a third closes the first, a fourth
// the second; the newest two stay.
func TestListenerClosesTheOldestUnauthenticated(t *testing.T) {
	l := listen(t, Config{Max: 4, MaxUnauthenticated: 2, Grace: -1})
	accepted := acceptAll(t, l)
	var clients []net.Conn
	for range 4 {
		clients = append(clients, dial(t, l))
		<-accepted
	}
	for i, c := range clients[:2] {
		if !closedByServer(t, c) {
			t.Fatalf("connection %d still open", i)
		}
	}
	if st := l.Stats(); st.Unauthenticated != 2 || st.Authenticated != 0 || st.Evicted != 2 {
		t.Fatalf("stats %+v, want 2 unauthenticated, 2 evicted", st)
	}
}

// TestListenerDefaultBudget: the unauthenticated budget defaults to a
// quarter of the cap, at least 1, and never exceeds it.
func TestListenerDefaultBudget(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{Max: 1024}, 256}, {Config{Max: 3}, 1}, {Config{Max: 4, MaxUnauthenticated: 9}, 4},
		{Config{Max: 8, MaxUnauthenticated: 5}, 5},
	} {
		if got := NewListener(nil, c.cfg).maxPre; got != c.want {
			t.Errorf("%+v: budget %d, want %d", c.cfg, got, c.want)
		}
	}
}

// TestListenerKeepsAuthenticatedConnections: a connection on which a
// request authenticated outlives any number of newer unauthenticated ones,
// which close each other instead; closing one frees its place.
func TestListenerKeepsAuthenticatedConnections(t *testing.T) {
	l := listen(t, Config{Max: 4, MaxUnauthenticated: 2, Grace: -1})
	srv := &http.Server{ConnContext: ConnContext, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "yes" {
				Authenticated(r.Context())
			}
		})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-served
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+l.Addr().String()+"/", nil)
		req.Header.Set("Authorization", "yes")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get()
	var idle []net.Conn
	for range 6 {
		idle = append(idle, dial(t, l))
	}
	for _, c := range idle[:4] {
		if !closedByServer(t, c) {
			t.Fatal("an older unauthenticated connection is still open")
		}
	}
	if st := l.Stats(); st.Authenticated != 1 || st.Unauthenticated != 2 || st.Evicted != 4 {
		t.Fatalf("stats %+v, want 1 authenticated, 2 unauthenticated, 4 evicted", st)
	}
	var reused bool
	req, _ := http.NewRequest(http.MethodGet, "http://"+l.Addr().String()+"/", nil)
	req = req.WithContext(httptraceReused(req.Context(), &reused))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !reused {
		t.Fatal("the authenticated connection was closed")
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Authenticated != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection is still counted: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenerWaitsWhenAllAuthenticated: when every connection counts as
// authenticated (loopback, trusted) and the cap is reached, Accept waits
// for one to close instead of closing any; Close ends the wait.
func TestListenerWaitsWhenAllAuthenticated(t *testing.T) {
	l := listen(t, Config{Max: 2, TrustLoopback: true})
	accepted := acceptAll(t, l)
	first := []net.Conn{}
	for range 2 {
		dial(t, l)
		first = append(first, <-accepted)
	}
	dial(t, l)
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted past the cap")
	case <-time.After(300 * time.Millisecond):
	}
	if st := l.Stats(); st.Authenticated != 2 || st.Evicted != 0 {
		t.Fatalf("stats %+v, want 2 authenticated, none evicted", st)
	}
	first[0].Close()
	select {
	case c := <-accepted:
		t.Cleanup(func() { c.Close() })
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted after one closed")
	}
	dial(t, l) // waits again, and the cleanup's Close ends the wait
	t.Cleanup(func() { first[1].Close() })
}

// httptraceReused returns ctx with a trace that sets *reused to whether
// the request's connection was reused.
func httptraceReused(ctx context.Context, reused *bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { *reused = info.Reused },
	})
}

// TestListenerAnswersABurst: a burst of clients that each connect and
// send a request with a valid credential at once, many more than the
// unauthenticated budget, is answered whole: each gets its answer, or a
// 503 with Retry-After; no connection is closed under a request that is
// being served, nor dropped unanswered.
func TestListenerAnswersABurst(t *testing.T) {
	l := listen(t, Config{Max: 64, MaxUnauthenticated: 4})
	srv := &http.Server{ConnContext: ConnContext, ReadHeaderTimeout: 10 * time.Second,
		Handler: Serving(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond) // the credential is checked
			Authenticated(r.Context())
			w.Write([]byte("ok"))
		}))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	const clients = 120
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			resp, err := client.Get("http://" + l.Addr().String() + "/")
			outcome := ""
			switch {
			case err != nil:
				outcome = "error: " + err.Error()
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "1":
				outcome = "503"
			default:
				outcome = resp.Status
			}
			if resp != nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			got[outcome]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got["200 OK"]+got["503"] != clients || got["200 OK"] < 4 {
		t.Fatalf("outcomes of %d clients: %v", clients, got)
	}
	t.Logf("outcomes: %v, stats %+v", got, l.Stats())
}
