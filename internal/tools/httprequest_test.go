package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/tools/webhooktest"
)

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/missing": webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no such thing", http.StatusNotFound)
		}),
		"/broken": webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "oops", http.StatusBadGateway)
		}),
		"/ok": webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Set-Cookie", "secret=1")
			io.WriteString(w, r.Method+" "+r.Header.Get("X-Test"))
		}),
	})
	u, _ := url.Parse(s.URL)
	tool := HTTPRequest([]string{u.Host}, s.Client())
	call := func(args string) (json.RawMessage, error) {
		c := testCall
		c.Arguments = json.RawMessage(args)
		return tool.Invoke(context.Background(), c)
	}

	raw, err := call(`{"method":"POST","url":"` + s.URL + `/ok","headers":{"X-Test":"yes"},"body":"hello"}`)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.Body != "POST yes" || res.Headers["Content-Type"] != "text/plain" || res.Headers["Set-Cookie"] != "" {
		t.Errorf("result = %s", raw)
	}
	reqs := s.Requests()
	if string(reqs[0].Body) != "hello" || reqs[0].Header.Get("Idempotency-Key") != testCall.IdempotencyKey {
		t.Errorf("server got body %q headers %v", reqs[0].Body, reqs[0].Header)
	}

	// A GET without body carries no body and no chunked encoding.
	if _, err := call(`{"method":"GET","url":"` + s.URL + `/ok"}`); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[1]; len(r.Body) != 0 || r.Header.Get("Transfer-Encoding") != "" || r.Header.Get("Content-Length") != "" {
		t.Errorf("GET sent a body: %q %v", r.Body, r.Header)
	}

	tests := []struct {
		args string
		kind ErrorKind
		want string
	}{
		{`{"method":"GET","url":"` + s.URL + `/missing"}`, KindFinal, "404 Not Found: no such thing"},
		{`{"method":"GET","url":"` + s.URL + `/broken"}`, KindTransient, "502"},
		{`{"method":"GET","url":"http://example.com/"}`, KindFinal, `host "example.com" is not allowed`},
		{`{"method":"GET","url":"http://127.0.0.1:1/"}`, KindFinal, "is not allowed"},
		{`{"method":"GET","url":"http://localhost:` + u.Port() + `/"}`, KindFinal, "is not allowed"},
		{`{"method":"GET","url":"file:///etc/passwd"}`, KindFinal, "not an absolute http or https URL"},
		{`{"method":"TRACE","url":"` + s.URL + `"}`, KindFinal, "not allowed"},
	}
	for _, tt := range tests {
		_, err := call(tt.args)
		te, ok := err.(*Error)
		if !ok || te.Kind != tt.kind || !strings.Contains(te.Message, tt.want) {
			t.Errorf("%s: err = %v, want %s containing %q", tt.args, err, tt.kind, tt.want)
		}
	}
	if n := len(s.Requests()); n != 4 {
		t.Errorf("server saw %d requests, want 4 (refused ones never sent)", n)
	}
}

func TestHTTPRequestAllowList(t *testing.T) {
	t.Parallel()
	tool := HTTPRequest([]string{"API.example.com", "10.0.0.1:8080", "[::1]:9000", "secure.example.com:443"}, nil).(*httpRequest)
	tests := []struct {
		url  string
		want bool
	}{
		{"https://api.example.com/x", true},
		{"http://api.example.com:1234/x", false}, // a name without a port: 80 and 443 only
		{"http://api.example.com/x", true},
		{"https://API.EXAMPLE.COM/x", true},
		{"https://evil.com/api.example.com", false},
		{"https://api.example.com.evil.com/", false},
		{"http://10.0.0.1:8080/", true},
		{"http://10.0.0.1/", false},
		{"http://10.0.0.1:8081/", false},
		{"http://[::1]:9000/", true},
		{"http://[::1]:9001/", false},
		{"https://secure.example.com/", true},
		{"http://secure.example.com/", false},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := tool.allowed(u); got != tt.want {
			t.Errorf("allowed(%s) = %v, want %v", tt.url, got, tt.want)
		}
	}
}

// TestHTTPRequestEgress: a name allowed with its port that resolves to a
// loopback address is refused at dial time (nothing is sent), unless the
// address and port themselves are allowed; the dialer refuses every address
// that is not public; the model may not set headers that carry credentials
// or identity.
func TestHTTPRequestEgress(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{"/secret": webhooktest.OK()})
	u, _ := url.Parse(s.URL)
	call := func(tool Tool, args string) error {
		c := testCall
		c.Arguments = json.RawMessage(args)
		_, err := tool.Invoke(context.Background(), c)
		return err
	}
	byName := HTTPRequest([]string{"localhost:" + u.Port()}, nil)
	err := call(byName, `{"method":"GET","url":"http://localhost:`+u.Port()+`/secret"}`)
	if te, ok := err.(*Error); !ok || te.Kind != KindFinal || !strings.Contains(te.Message, "not allowed") {
		t.Fatalf("a name resolving to loopback: %v", err)
	}
	if n := s.Count("/secret"); n != 0 {
		t.Fatalf("the refused request reached the server %d times", n)
	}
	byAddress := HTTPRequest([]string{u.Host}, nil) // 127.0.0.1:port, named itself
	if err := call(byAddress, `{"method":"GET","url":"`+s.URL+`/secret"}`); err != nil {
		t.Fatalf("an allowed address and port: %v", err)
	}
	for _, h := range []string{"Authorization", "cookie", "Host", "X-Tenant-ID", "Forwarded", "X-Forwarded-For", "Idempotency-Key"} {
		err := call(byAddress, `{"method":"GET","url":"`+s.URL+`/secret","headers":{"`+h+`":"x"}}`)
		if te, ok := err.(*Error); !ok || te.Kind != KindFinal || !strings.Contains(te.Message, "may not be set") {
			t.Errorf("header %s: %v", h, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1": true, "10.1.2.3": true, "192.168.0.1": true, "172.16.5.4": true,
		"169.254.169.254": true, "100.64.0.1": true, "0.0.0.0": true, "224.0.0.1": true, "::1": true, "fe80::1": true,
		"fc00::1": true, "::ffff:127.0.0.1": true, "8.8.8.8": false, "2001:4860:4860::8888": false} {
		if got := restricted(netip.MustParseAddr(addr).Unmap()); got != want {
			t.Errorf("restricted(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestHTTPRequestNotSent: a request that provably never reached its
// destination (a header the model set with CR or LF in it, a name that
// does not resolve, a refused connection, https to a plain-HTTP port whose
// TLS handshake fails, an attempt out of time before it connected) is a tool error the model sees (KindFinal or
// KindTransient, which a side_effect call fails with), never KindTimeout or
// KindConnection, which make its outcome unknown; a request that reached
// the server and lost its connection before the answer stays
// KindConnection.
func TestHTTPRequestNotSent(t *testing.T) {
	t.Parallel()
	s := webhooktest.New(t, map[string]webhooktest.Behaviour{
		"/ok": webhooktest.OK(),
		"/drop": webhooktest.Raw(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}),
	})
	su, _ := url.Parse(s.URL)
	refused := closedPort(t)
	plain := newPlainListener(t)
	tool := HTTPRequest([]string{su.Host, refused, plain.addr, "no-such-host.invalid"}, nil)
	spec := tool.Spec()
	tests := []struct {
		name string
		args string
		kind ErrorKind
		want string
	}{
		{"CRLF in a header value", `{"method":"GET","url":"` + s.URL + `/ok","headers":{"X-A":"a\r\nX-Injected: 1"}}`, KindFinal, "not a valid HTTP header"},
		{"LF in a header name", `{"method":"GET","url":"` + s.URL + `/ok","headers":{"X-A\nX-B":"b"}}`, KindFinal, "not a valid HTTP header"},
		{"NUL in a header value", `{"method":"GET","url":"` + s.URL + `/ok","headers":{"X-A":"a\u0000"}}`, KindFinal, "not a valid HTTP header"},
		{"a name that does not resolve", `{"method":"POST","url":"http://no-such-host.invalid/x","body":"b"}`, KindTransient, "nothing was sent"},
		{"a refused connection", `{"method":"POST","url":"http://` + refused + `/x","body":"b"}`, KindTransient, "nothing was sent"},
		{"https to a plain-HTTP port", `{"method":"POST","url":"https://` + plain.addr + `/x","body":"b"}`, KindTransient, "nothing was sent"},
	}
	for _, tt := range tests {
		c := testCall
		c.Arguments = json.RawMessage(tt.args)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := tool.Invoke(ctx, c)
		cancel()
		te, ok := err.(*Error)
		if !ok || te.Kind != tt.kind || !strings.Contains(te.Message, tt.want) {
			t.Errorf("%s: err = %v, want %s containing %q", tt.name, err, tt.kind, tt.want)
		}
		if d := Decide(spec, err, 1); d != Fail {
			t.Errorf("%s: decision %s, want %s (the model sees the error)", tt.name, d, Fail)
		}
	}
	if n := s.Count("/ok"); n != 0 {
		t.Errorf("requests with invalid headers reached the server %d times", n)
	}
	if got := plain.received(); len(got) == 0 || got[0] != 0x16 || bytes.Contains(got, []byte("POST")) {
		t.Errorf("the plain-HTTP port got %q, want a TLS handshake and no request", got)
	}

	c := testCall
	c.Arguments = json.RawMessage(`{"method":"POST","url":"` + s.URL + `/ok","body":"b"}`)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := tool.Invoke(expired, c)
	if te, ok := err.(*Error); !ok || te.Kind != KindTransient || !strings.Contains(te.Message, "nothing was sent") {
		t.Errorf("an attempt out of time before it connected: err = %v, want %s", err, KindTransient)
	}
	if n := s.Count("/ok"); n != 0 {
		t.Errorf("the request out of time reached the server %d times", n)
	}

	c.Arguments = json.RawMessage(`{"method":"POST","url":"` + s.URL + `/drop","body":"b"}`)
	_, err = tool.Invoke(context.Background(), c)
	if te, ok := err.(*Error); !ok || te.Kind != KindConnection || Decide(spec, err, 1) != Unknown {
		t.Errorf("a connection lost after the request was sent: err = %v, want %s (unknown)", err, KindConnection)
	}
}

// closedPort returns a loopback "host:port" where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// plainListener is a TCP server that keeps what its first connection sent
// and answers it as a plain HTTP server answers a TLS handshake.
type plainListener struct {
	addr string
	mu   sync.Mutex
	got  []byte
}

func newPlainListener(t *testing.T) *plainListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &plainListener{addr: l.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			n, _ := conn.Read(buf)
			p.mu.Lock()
			p.got = append(p.got, buf[:n]...)
			p.mu.Unlock()
			io.WriteString(conn, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			conn.Close()
		}
	}()
	return p
}

// received returns the bytes the listener's connections sent.
func (p *plainListener) received() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}
