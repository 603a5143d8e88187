package conns

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// BodyDeadline returns next behind a read deadline for request bodies: a
// request that has one must send it within timeout of the moment next is
// entered, or the reads of its body fail (and net/http closes its
// connection after the answer). Requests without a body are not touched.
// It must wrap the server's handler directly, so that it sees the
// connection's own ResponseWriter.
func BodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// An error means the writer cannot set deadlines (a test's
			// recorder): there is no connection to hold.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		next.ServeHTTP(w, r)
	})
}

// Config configures a Listener.
type Config struct {
	// Max is the most connections held open at once, authenticated or not
	// (at least 1). When every one of them has authenticated, Accept waits
	// for one to close, and new connections wait in the listen backlog.
	Max int
	// MaxUnauthenticated is the most connections held open at once on
	// which no request has authenticated yet; 0 means a quarter of Max, at
	// least 1, and a value over Max means Max.
	MaxUnauthenticated int
	// Grace is how long a new connection may take to send its first
	// request before it may be closed to make room (0: DefaultGrace;
	// negative: none); a connection whose request is being served is never
	// closed to make room. When no unauthenticated connection may be
	// closed, a new connection past the budget is answered 503 with
	// Retry-After and closed, rather than held or dropped unanswered.
	Grace time.Duration
	// TrustLoopback counts a connection from a loopback address as
	// authenticated from the start: for a server that authenticates nobody
	// and serves a loopback address only.
	TrustLoopback bool
}

// DefaultGrace is Config.Grace's default: a client that connects and
// sends its request at once is never closed to make room for a newer one.
const DefaultGrace = time.Second

// Stats says how a Listener's connections stand.
type Stats struct {
	Authenticated   int    // open connections on which a request authenticated
	Unauthenticated int    // open connections on which none did yet
	Evicted         uint64 // unauthenticated connections closed to make room, ever
	Refused         uint64 // new connections answered 503 for want of room, ever
}

// Listener is a net.Listener whose connections are capped, with a budget
// of their own for those that have not authenticated (see the package
// documentation). Its connections must be served by an http.Server whose
// ConnContext is ConnContext, so that Authenticated finds them.
type Listener struct {
	net.Listener
	max, maxPre   int
	grace         time.Duration
	trustLoopback bool
	refusing      sync.WaitGroup // the answers of refused connections

	mu      sync.Mutex
	room    *sync.Cond // signalled when a connection goes, and at Close
	open    int        // connections counted, authenticated or not
	pre     list.List  // the unauthenticated connections, *conn, oldest first
	evicted uint64
	refused uint64
	closed  bool
}

// NewListener returns ln under cfg's budgets.
func NewListener(ln net.Listener, cfg Config) *Listener {
	l := &Listener{Listener: ln, max: max(1, cfg.Max), maxPre: cfg.MaxUnauthenticated, trustLoopback: cfg.TrustLoopback,
		grace: cfg.Grace}
	switch {
	case l.grace == 0:
		l.grace = DefaultGrace
	case l.grace < 0:
		l.grace = 0
	}
	if l.maxPre <= 0 {
		l.maxPre = max(1, l.max/4)
	}
	l.maxPre = min(l.maxPre, l.max)
	l.room = sync.NewCond(&l.mu)
	return l
}

// Accept waits for a connection and for room for it: when the budgets are
// full, the oldest unauthenticated connection that may go (idle past the
// grace, no request being served) is closed; when none may, the new one is
// answered 503 with Retry-After and closed; when every connection has
// authenticated, Accept waits (holding the new connection) until one
// closes or the Listener does.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, ok := l.admit(nc); ok {
			return c, nil
		}
		if l.isClosed() {
			return nil, net.ErrClosed
		}
	}
}

// admit counts nc in, making room for it, or refuses it (false).
func (l *Listener) admit(nc net.Conn) (net.Conn, bool) {
	c := &conn{Conn: nc, l: l, since: time.Now()}
	trusted := l.trustLoopback && isLoopback(nc.RemoteAddr())
	l.mu.Lock()
	for !l.closed && l.open >= l.max && l.pre.Len() == 0 {
		l.room.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		nc.Close()
		return nil, false
	}
	var victim *conn
	if l.open >= l.max || (!trusted && l.pre.Len() >= l.maxPre) {
		if victim = l.victimLocked(c.since); victim == nil {
			l.refused++
			l.refusing.Add(1)
			l.mu.Unlock()
			go l.refuse(nc)
			return nil, false
		}
		l.forgetLocked(victim)
		l.evicted++
	}
	l.open++
	if !trusted {
		c.elem = l.pre.PushBack(c)
	}
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close() // its server goroutine sees the error and ends
	}
	return c, true
}

// victimLocked is the oldest unauthenticated connection that may be closed
// to make room at now: none of its requests is being served, and it is
// older than the grace; nil: none. l.mu is held.
func (l *Listener) victimLocked(now time.Time) *conn {
	for e := l.pre.Front(); e != nil; e = e.Next() {
		c := e.Value.(*conn)
		if c.serving == 0 && now.Sub(c.since) >= l.grace {
			return c
		}
	}
	return nil
}

// refusal is the answer of a connection refused for want of room.
var refusal = func() string {
	const body = "the server is full: retry in a second\n"
	return "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
}()

// refuse answers nc 503 and closes it, within a second: it reads the
// client's request head first (a client that reads an answer before it
// has sent its request takes it for a broken connection), then writes
// the answer, and reads what else the client sends until it closes, so
// that the close does not reset the connection before the answer is read.
func (l *Listener) refuse(nc net.Conn) {
	defer l.refusing.Done()
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReaderSize(io.LimitReader(nc, 64<<10), 4096)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return // no request came within the second: nobody to answer
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 && err == nil {
			break // the end of the head
		}
	}
	if _, err := io.WriteString(nc, refusal); err != nil {
		return
	}
	if tc, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, 64<<10))
}

func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close closes the listener and wakes an Accept that waits for room.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	err := l.Listener.Close()
	l.refusing.Wait() // each within a second
	return err
}

// Stats says how the connections stand now.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Authenticated: l.open - l.pre.Len(), Unauthenticated: l.pre.Len(), Evicted: l.evicted, Refused: l.refused}
}

// Budgets returns the cap of connections and the budget of
// unauthenticated ones, as NewListener settled them.
func (l *Listener) Budgets() (max, unauthenticated int) { return l.max, l.maxPre }

// forgetLocked stops counting c, which is closing or closed. l.mu is held.
func (l *Listener) forgetLocked(c *conn) {
	if c.gone {
		return
	}
	c.gone = true
	l.open--
	if c.elem != nil {
		l.pre.Remove(c.elem)
		c.elem = nil
	}
	l.room.Broadcast()
}

// authenticate moves c out of the unauthenticated budget.
func (l *Listener) authenticate(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.elem != nil {
		l.pre.Remove(c.elem)
		c.elem = nil
	}
}

// conn is a connection of a Listener.
type conn struct {
	net.Conn
	l *Listener
	// Guarded by l.mu:
	elem    *list.Element // in l.pre while unauthenticated
	gone    bool          // no longer counted
	since   time.Time     // accepted at
	serving int           // its requests being served (Serving)
}

// Close closes the connection and frees its place.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forgetLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// connKey is the context key of a request's connection.
type connKey struct{}

// ConnContext is an http.Server's ConnContext for a Listener's
// connections: it keeps the connection in the context of its requests.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// Authenticated records that the request of ctx authenticated: its
// connection leaves the unauthenticated budget and is never closed to make
// room. A context without a Listener's connection is ignored.
func Authenticated(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*conn); ok {
		c.l.authenticate(c)
	}
}

// Serving returns next marking each request's connection as served while
// next runs: a connection whose request is being served (its credential
// being checked, say) is never closed to make room. It must wrap the
// handler of a server whose ConnContext is ConnContext.
func Serving(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*conn)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		c.l.mu.Lock()
		c.serving++
		c.l.mu.Unlock()
		defer func() {
			c.l.mu.Lock()
			c.serving--
			c.l.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether addr is a loopback TCP address.
func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
