package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// bodyCost is how many bytes of memory handling a request body holds per
// byte of it at the most: the body, what is decoded from it (a run's
// input, its images' and files' bytes), the copies made on the way and
// the garbage collector's slack. TestBodyMemory (cmd/server) measures it:
// a POST /runs with a 28 MB image raised agentd's peak RSS by 179 MB.
const bodyCost = 6

// DefaultBodyMemoryBodies is how many of the largest bodies an instance
// handles at once when Config.MaxBodyMemory is not set.
const DefaultBodyMemoryBodies = 2

// serverBusyRetryAfter is the Retry-After of server_busy: a body is read
// and decoded within a second or two.
const serverBusyRetryAfter = 2 * time.Second

// errServerBusy answers a request whose body would take the bodies in
// flight past the instance's budget (Config.MaxBodyMemory). Nothing of it
// was read, so the same request may be sent again.
var errServerBusy = &apiError{status: http.StatusServiceUnavailable, code: CodeServerBusy,
	title: "Server busy", retryAfter: serverBusyRetryAfter,
	detail: "this instance is handling as many request bodies as its memory allows; retry after Retry-After seconds"}

// bodyBudget bounds the memory that the bodies of the requests in flight,
// and what is decoded from them, hold together: each request reserves
// bodyCost times its size before its body is read (as it is read, for a
// body of unknown length), and gives it back when its handler returns
// (or, for a request that goes on streaming, once what it asked for is
// stored: releaseBody).
type bodyBudget struct {
	sem  *semaphore.Weighted
	size int64
}

func newBodyBudget(size int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(size), size: size}
}

// bodyHold is what one request holds of the budget.
type bodyHold struct {
	budget *bodyBudget
	mu     sync.Mutex
	n      int64
}

type bodyHoldKey struct{}

// reserve takes n more bytes of the budget for the request, or reports
// that the budget is spent. A request alone may take all of it, whatever
// it asks: the budget bounds requests together, the body limits bound
// each one.
func (h *bodyHold) reserve(n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, h.budget.size-h.n)
	if n <= 0 {
		return true
	}
	if !h.budget.sem.TryAcquire(n) {
		return false
	}
	h.n += n
	return true
}

// release gives back all that the request holds.
func (h *bodyHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 {
		h.budget.sem.Release(h.n)
		h.n = 0
	}
}

// holdBodies gives each request its share of the body budget, released
// when the handler returns.
func (s *server) holdBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &bodyHold{budget: s.bodies}
		defer h.release()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyHoldKey{}, h)))
	})
}

// releaseBody gives back the request's share of the body budget before
// its handler returns: once the body and what was decoded from it are no
// longer held (a stream, or a wait, may last minutes).
func releaseBody(ctx context.Context) {
	if h, ok := ctx.Value(bodyHoldKey{}).(*bodyHold); ok {
		h.release()
	}
}

// reserveBody reserves the memory that reading and handling r's body
// costs: from its Content-Length now, or, when it has none, as body is
// read (the reader returned). Without holdBodies around the handler it
// reserves nothing.
func reserveBody(r *http.Request, body io.Reader) (io.Reader, error) {
	h, ok := r.Context().Value(bodyHoldKey{}).(*bodyHold)
	if !ok {
		return body, nil
	}
	if r.ContentLength >= 0 {
		if !h.reserve(bodyCost * r.ContentLength) {
			return nil, errServerBusy
		}
		return body, nil
	}
	return &reservingReader{r: body, hold: h}, nil
}

// reservingReader reserves the cost of a body of unknown length as it is
// read, a chunk ahead.
type reservingReader struct {
	r        io.Reader
	hold     *bodyHold
	read     int64 // bytes read
	reserved int64 // bytes of body reserved for
}

// reserveChunk is how much more of a body of unknown length is reserved
// for at once.
const reserveChunk = 256 << 10

// errBodyBusy is the error of a reservingReader past the budget.
var errBodyBusy = errors.New("body memory budget spent")

func (rr *reservingReader) Read(p []byte) (int, error) {
	if rr.read+int64(len(p)) > rr.reserved {
		more := max(reserveChunk, rr.read+int64(len(p))-rr.reserved)
		if !rr.hold.reserve(bodyCost * more) {
			return 0, errBodyBusy
		}
		rr.reserved += more
	}
	n, err := rr.r.Read(p)
	rr.read += int64(n)
	return n, err
}
