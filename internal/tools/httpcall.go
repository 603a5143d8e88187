package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// idleConnsPerHost is how many idle connections to one host the tools'
// default transport keeps for reuse. net/http's default, 2, is below the
// calls that concurrent runs make to one webhook: each call beyond two
// opened a connection (a TLS handshake) and closed it after.
const idleConnsPerHost = 64

// pooledTransport is the transport of tools given no client: net/http's
// default, keeping more idle connections per host.
var pooledTransport = sync.OnceValue(func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 4 * idleConnsPerHost
	tr.MaxIdleConnsPerHost = idleConnsPerHost
	return tr
})

// noRedirects returns a copy of client (or of a client over
// pooledTransport) that hands redirects back instead of following them: a
// redirect of a call with effects must not be replayed to another place.
func noRedirects(client *http.Client) *http.Client {
	c := http.Client{Transport: pooledTransport()}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// newRequest builds a request that net/http will not replay by itself.
// (http.Transport re-sends a request on a broken reused connection when the
// request is "replayable", which includes any request carrying an
// Idempotency-Key header; retries are the engine's decision, counted as
// attempts.) A request is not replayable when it has a body and no GetBody.
func newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	// A non-nil Body without GetBody; a zero-length one is sent as no body.
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = nil
	return req, nil
}

// do sends req and classifies a failure to get a response: the attempt's
// deadline or a network timeout is KindTimeout, anything else (refused,
// reset, closed, cancelled) is KindConnection. what names the call in
// messages ("webhook", "request").
func do(ctx context.Context, client *http.Client, req *http.Request, what string) (*http.Response, error) {
	resp, err := client.Do(req)
	if err == nil {
		return resp, nil
	}
	return nil, transportError(ctx, err, what)
}

func transportError(ctx context.Context, err error, what string) error {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindTimeout, Message: what + " timed out; it may or may not have taken effect", Err: err}
	case errors.As(err, &ne) && ne.Timeout():
		return &Error{Kind: KindTimeout, Message: what + " timed out; it may or may not have taken effect", Err: err}
	case ctx.Err() != nil:
		return &Error{Kind: KindConnection, Message: what + " was cancelled; it may or may not have taken effect", Err: err}
	}
	return &Error{Kind: KindConnection, Message: what + " failed: connection error; it may or may not have taken effect", Err: err}
}

// statusError classifies a response that is not a success: 5xx is
// KindTransient, anything else (4xx, an unfollowed 3xx) KindFinal. The
// Message holds the status and a short excerpt of the body.
func statusError(resp *http.Response, body []byte, what string) error {
	kind := KindFinal
	if resp.StatusCode >= 500 {
		kind = KindTransient
	}
	msg := fmt.Sprintf("%s answered %s", what, resp.Status)
	if ex := excerpt(body, 300); ex != "" {
		msg += ": " + ex
	}
	return &Error{Kind: kind, Message: msg, Status: resp.StatusCode}
}

// excerpt returns at most n bytes of the start of b as one line of text.
func excerpt(b []byte, n int) string {
	cut := len(b) > n
	if cut {
		b = b[:n]
	}
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
	if cut {
		s += "…"
	}
	return s
}

// readBody reads at most limit bytes of body, and reports whether there was
// more. A read error after the response started is a lost connection.
func readBody(ctx context.Context, body io.Reader, limit int, what string) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return nil, false, transportError(ctx, err, what)
	}
	if len(b) > limit {
		return b[:limit], true, nil
	}
	return b, false, nil
}
