package webhooktest

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Sink is a webhook server for one test. Each path answers as the Behaviour
// the test gave it; every request is recorded and counted by path and
// Idempotency-Key before it is answered. A Sink is safe for concurrent use.
type Sink struct {
	// URL is the server's base URL, without a trailing slash.
	URL string

	t       testing.TB
	srv     *httptest.Server
	paths   map[string]Behaviour // not written after New
	entered chan string
	release chan struct{}
	once    sync.Once
	closing chan struct{} // closed when the test ends: no request waits past it
	conns   atomic.Int64

	mu       sync.Mutex
	counts   map[string]map[string]int // path -> idempotency key -> requests
	cancels  map[string]int            // path -> requests whose context ended while they waited
	received []Received
}

// Behaviour is how a Sink answers a request to one path.
type Behaviour func(w http.ResponseWriter, r *Request)

// Request is a request as a Behaviour sees it. Its body has been read in
// full (r.Body reads it again) and counted.
type Request struct {
	*http.Request
	// Key is the request's Idempotency-Key header.
	Key string
	// N counts the requests to this path with this key, this one included.
	N int

	sink *Sink
}

// Received is one request as the Sink recorded it.
type Received struct {
	Method string
	Path   string
	Key    string
	// Header is the request's header, with Transfer-Encoding and
	// Content-Length put back as the client sent them (net/http moves them
	// out of the header).
	Header http.Header
	Body   []byte
}

// entryBuffer is how many paths Entered holds before it drops new ones.
const entryBuffer = 100

// New starts a Sink whose paths answer as paths says; a request to any
// other path fails the test and gets 404. The server closes when t ends,
// after releasing every request still waiting.
func New(t testing.TB, paths map[string]Behaviour) *Sink {
	t.Helper()
	s := &Sink{
		t:       t,
		paths:   make(map[string]Behaviour, len(paths)),
		entered: make(chan string, entryBuffer),
		release: make(chan struct{}),
		closing: make(chan struct{}),
		counts:  map[string]map[string]int{},
		cancels: map[string]int{},
	}
	for p, b := range paths {
		s.paths[p] = b
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(func() {
		close(s.closing)
		s.srv.Close()
	})
	return s
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	// Reading the body to its end lets the server notice a client that
	// goes away: it then watches the connection and ends the request's
	// context.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	key := r.Header.Get("Idempotency-Key")
	header := r.Header.Clone()
	if len(r.TransferEncoding) > 0 {
		header.Set("Transfer-Encoding", strings.Join(r.TransferEncoding, ","))
	}
	if r.ContentLength > 0 {
		header.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}
	path := r.URL.Path
	s.mu.Lock()
	byKey := s.counts[path]
	if byKey == nil {
		byKey = map[string]int{}
		s.counts[path] = byKey
	}
	byKey[key]++
	n := byKey[key]
	s.received = append(s.received, Received{Method: r.Method, Path: path, Key: key, Header: header, Body: body})
	s.mu.Unlock()
	select {
	case s.entered <- path:
	default:
	}
	b, ok := s.paths[path]
	if !ok {
		s.t.Errorf("webhooktest: request to %s, for which the test declared no behaviour", path)
		http.NotFound(w, r)
		return
	}
	b(w, &Request{Request: r, Key: key, N: n, sink: s})
}

// wait blocks until done is closed and reports true, or reports false when
// the request's context ends first (counted in Cancels) or the sink closes.
// A nil done waits for one of the other two.
func (r *Request) wait(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-r.Context().Done():
		r.sink.mu.Lock()
		r.sink.cancels[r.URL.Path]++
		r.sink.mu.Unlock()
		return false
	case <-r.sink.closing:
		return false
	}
}

// OK answers 200 with {"ok":true,"path":...,"n":...}: the path and how many
// requests it has had with this key.
func OK() Behaviour {
	return func(w http.ResponseWriter, r *Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			OK   bool   `json:"ok"`
			Path string `json:"path"`
			N    int    `json:"n"`
		}{true, r.URL.Path, r.N})
	}
}

// Respond answers status with body as JSON.
func Respond(status int, body string) Behaviour {
	return func(w http.ResponseWriter, r *Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// First answers the first n requests per key as b, and later ones as then.
// First(1, Hang(), OK()) is an effect that happens and is never
// acknowledged, until the same key comes again.
func First(n int, b, then Behaviour) Behaviour {
	return func(w http.ResponseWriter, r *Request) {
		if r.N <= n {
			b(w, r)
			return
		}
		then(w, r)
	}
}

// FailFirst answers 500 to the first n requests per key, then as OK.
func FailFirst(n int) Behaviour {
	return First(n, Respond(http.StatusInternalServerError, `{"error":"try again"}`), OK())
}

// Hang never answers: it waits until the request's context ends, which is
// counted in Cancels.
func Hang() Behaviour {
	return func(w http.ResponseWriter, r *Request) { r.wait(nil) }
}

// Block waits for Release and then answers as OK; a request whose context
// ends first is counted in Cancels and gets no answer.
func Block() Behaviour {
	return func(w http.ResponseWriter, r *Request) {
		if r.wait(r.sink.release) {
			OK()(w, r)
		}
	}
}

// Delay waits a random time in [lo, hi) and then answers as OK; a request
// whose context ends first is counted in Cancels and gets no answer.
func Delay(lo, hi time.Duration) Behaviour {
	return func(w http.ResponseWriter, r *Request) {
		d := lo
		if hi > lo {
			d += rand.N(hi - lo)
		}
		done := make(chan struct{})
		timer := time.AfterFunc(d, func() { close(done) })
		defer timer.Stop()
		if r.wait(done) {
			OK()(w, r)
		}
	}
}

// Reconcile is a reconcile endpoint for the webhook at effectPath: it
// answers {"status":"succeeded","result":{"reconciled":true}} when that
// path has had a request with this key, else {"status":"not_applied"}.
func Reconcile(effectPath string) Behaviour {
	succeeded := Respond(http.StatusOK, `{"status":"succeeded","result":{"reconciled":true}}`)
	notApplied := Respond(http.StatusOK, `{"status":"not_applied"}`)
	return func(w http.ResponseWriter, r *Request) {
		if r.sink.Keys(effectPath)[r.Key] > 0 {
			succeeded(w, r)
			return
		}
		notApplied(w, r)
	}
}

// Raw answers with h, for tests of how a client takes answers of every
// kind (redirects, bodies that are not JSON, a connection closed mid-way).
func Raw(h http.HandlerFunc) Behaviour {
	return func(w http.ResponseWriter, r *Request) { h(w, r.Request) }
}

// Count returns how many requests path has had, all keys together.
func (s *Sink) Count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.counts[path] {
		n += c
	}
	return n
}

// Keys returns how many requests path has had per idempotency key.
func (s *Sink) Keys(path string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts[path]))
	for k, n := range s.counts[path] {
		out[k] = n
	}
	return out
}

// Cancels returns how many requests to path had their context end while
// they waited (Hang, Block, Delay). The server notices a client that went
// away a moment after it went.
func (s *Sink) Cancels(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels[path]
}

// Requests returns every request the sink has had, in the order they came.
func (s *Sink) Requests() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// Release lets every Block request answer, those waiting and those to
// come. Calling it again does nothing.
func (s *Sink) Release() { s.once.Do(func() { close(s.release) }) }

// Entered receives the path of each request as it arrives, after it is
// counted. It buffers 100 unread paths; while it is full, new ones are
// dropped.
func (s *Sink) Entered() <-chan string { return s.entered }

// WaitEntered reads Entered until a request to path arrives, and fails the
// test if none does within timeout.
func (s *Sink) WaitEntered(t testing.TB, path string, timeout time.Duration) {
	t.Helper()
	expired := time.After(timeout)
	for {
		select {
		case p := <-s.entered:
			if p == path {
				return
			}
		case <-expired:
			t.Fatalf("webhooktest: no request to %s within %v", path, timeout)
		}
	}
}

// Conns returns how many connections clients have opened to the sink.
func (s *Sink) Conns() int { return int(s.conns.Load()) }

// Client returns a client set up to reach the sink.
func (s *Sink) Client() *http.Client { return s.srv.Client() }
