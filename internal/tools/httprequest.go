package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/agentd/agentd"
)

// HTTPRequest returns the side_effect tool "http_request", which sends one
// HTTP request to a host in allowHosts and returns {"status", "headers" (a
// few useful ones), "body" (its first MiB), "body_truncated"?}.
//
// An allowHosts entry is a host name or IP ("api.example.com": ports 80 and
// 443 only) or a host and port ("api.example.com:8443", "127.0.0.1:8080",
// "[::1]:8080": that port only; a URL without a port has its scheme's
// default port). Any other destination is refused with a KindFinal error.
// After the name is resolved, an address that is loopback, link-local
// (169.254.169.254 included), private, shared (CGNAT), multicast or
// unspecified is refused too, unless the entry names that address and port
// itself ("127.0.0.1:8080"): the check is made in the dialer, for every
// address a name resolves to. The model may not set the headers that carry
// credentials or identity (Authorization, Cookie, Host, X-Tenant-ID,
// Forwarded, X-Forwarded-*, X-Real-IP) nor agentd's own (Idempotency-Key,
// X-Request-ID). The call's idempotency key is sent as the Idempotency-Key
// header. Redirects are not followed: a 3xx is a result. A 4xx is a
// KindFinal error, a 5xx KindTransient, a timeout KindTimeout, a lost
// connection KindConnection. A request that failed before it had a
// connection to be written on (a header with a control character, a name
// that does not resolve, a refused connection, a failed TLS handshake, the
// attempt's time out while connecting) sent nothing: it is KindFinal (the
// model's arguments) or KindTransient, an error the model sees, never an
// unknown outcome.
//
// A nil client means a client over a copy of the tools' pooled transport;
// the tool uses a copy of client (over a copy of its transport, when it is
// an *http.Transport) with the destination check in its dialer, that does
// not follow redirects. The server registers this tool only when allowHosts
// is not empty.
func HTTPRequest(allowHosts []string, client *http.Client) Tool {
	return newHTTPRequest(allowHosts, client)
}

func newHTTPRequest(allowHosts []string, client *http.Client) *httpRequest {
	t := &httpRequest{}
	t.hosts, t.hostPorts = parseAllowHosts(allowHosts)
	t.client = noRedirects(t.guarded(client))
	return t
}

// parseAllowHosts reads an allow-list: names and IPs allowed on ports 80
// and 443, and "host:port" entries allowed on that port.
func parseAllowHosts(allowHosts []string) (hosts, hostPorts map[string]bool) {
	hosts, hostPorts = map[string]bool{}, map[string]bool{}
	for _, h := range allowHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(h); err == nil {
			hostPorts[net.JoinHostPort(host, port)] = true
		} else {
			hosts[strings.Trim(h, "[]")] = true // bare IPv6 "[::1]" as "::1"
		}
	}
	return hosts, hostPorts
}

type httpRequest struct {
	hosts     map[string]bool // names and IPs allowed on ports 80 and 443
	hostPorts map[string]bool // "host:port" allowed on that port
	client    *http.Client
}

// GuardedClient returns a copy of client (nil: over the tools' pooled
// transport) that dials only public addresses, and the loopback or private
// ones that allowHosts names with their port ("127.0.0.1:8080"), as
// http_request's dialer does, and does not follow redirects: the egress
// rule of the URLs that a tenant, not the operator, gives (its webhook
// tools).
func GuardedClient(allowHosts []string, client *http.Client) *http.Client {
	return newHTTPRequest(allowHosts, client).client
}

// CheckEgress refuses, before any call, a URL whose host GuardedClient will
// never reach: a literal loopback, private, link-local (169.254.169.254),
// shared, multicast or unspecified address, or localhost, unless allowHosts
// names that host and port. A name that resolves to such an address is
// refused by the dialer, at each call.
func CheckEgress(rawURL string, allowHosts []string) error {
	return CheckEgressOf(rawURL, allowHosts, "AGENTD_HTTP_ALLOW_HOSTS")
}

// CheckEgressOf is CheckEgress for URLs whose allow-list is setting's
// (its refusal names it).
func CheckEgressOf(rawURL string, allowHosts []string, setting string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return errors.New("not an absolute URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := strings.ToLower(u.Hostname())
	_, hostPorts := parseAllowHosts(allowHosts)
	listed := func(h string) bool { return hostPorts[net.JoinHostPort(h, port)] }
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		if listed("127.0.0.1") || listed("::1") || listed(host) {
			return nil
		}
		return fmt.Errorf("%s is a loopback host, which only the operator may allow (%s)", host, setting)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		loose, ok := looseIPv4(host)
		if !ok {
			return nil // a name: its addresses are checked as it is dialled
		}
		if restricted(loose) && !listed(loose.String()) {
			return fmt.Errorf("%s is %s, not a public address, and the operator does not allow %s (%s)", host, loose,
				net.JoinHostPort(loose.String(), port), setting)
		}
		// A resolver may take it for the address or look it up as a
		// name: only the address's own spelling means one thing.
		return fmt.Errorf("%s spells the address %s, which the URL must give as it is", host, loose)
	}
	if ip = ip.Unmap(); restricted(ip) && !listed(ip.String()) {
		return fmt.Errorf("%s is not a public address, and the operator does not allow %s (%s)", ip,
			net.JoinHostPort(ip.String(), port), setting)
	}
	return nil
}

// errDestination is the cause of a refused dial: the destination address is
// one the tool may not reach.
var errDestination = errors.New("destination address not allowed")

// guarded returns a copy of client whose transport dials only addresses the
// allow-list permits (see HTTPRequest).
func (t *httpRequest) guarded(client *http.Client) *http.Client {
	c := http.Client{}
	if client != nil {
		c = *client
	}
	base, ok := c.Transport.(*http.Transport)
	if !ok || base == nil {
		base = pooledTransport()
	}
	tr := base.Clone()
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: t.control}
	tr.DialContext = dialer.DialContext
	tr.Proxy = nil // a proxy would dial for us, past the check
	c.Transport = tr
	return &c
}

// control refuses, at dial time, an address that is not public unless the
// allow-list names that address and port itself.
func (t *httpRequest) control(_, address string, _ syscall.RawConn) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errDestination, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %s", errDestination, address)
	}
	ip = ip.Unmap()
	if !restricted(ip) || t.hostPorts[net.JoinHostPort(ip.String(), port)] {
		return nil
	}
	return fmt.Errorf("%w: %s is not a public address", errDestination, address)
}

// cgnat is the shared address space of carrier-grade NAT (RFC 6598).
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// restricted reports whether ip is not a public unicast address.
func restricted(ip netip.Addr) bool {
	return ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsPrivate() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip)
}

// forbiddenHeaders are the request headers the model may not set.
var forbiddenHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Host", "X-Tenant-Id", "Forwarded",
	"X-Real-Ip", "Idempotency-Key", "X-Request-Id"}

// headerForbidden reports whether the model may not set header k.
func headerForbidden(k string) bool {
	k = http.CanonicalHeaderKey(k)
	return slices.Contains(forbiddenHeaders, k) || strings.HasPrefix(k, "X-Forwarded-")
}

var httpRequestSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
    "url": {"type": "string", "minLength": 1, "description": "Absolute http or https URL; its host must be allowed by the server."},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "body": {"type": "string"}
  },
  "required": ["method", "url"],
  "additionalProperties": false
}`)

func (t *httpRequest) Spec() Spec {
	return Spec{
		Name:        "http_request",
		Description: "Send an HTTP request to an allowed host and return the status, some headers and the body.",
		Parameters:  httpRequestSchema,
		Effect:      agentd.EffectSideEffect,
	}
}

// allowed reports whether u's host and port are in the allow-list.
func (t *httpRequest) allowed(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return t.hostPorts[net.JoinHostPort(host, port)] || (t.hosts[host] && (port == "80" || port == "443"))
}

// resultHeaders are the response headers passed back to the model.
var resultHeaders = []string{"Content-Type", "Content-Length", "Location", "ETag", "Last-Modified", "Retry-After", "Date"}

// maxRequestBody is how much of a response http_request reads.
const maxRequestBody = 1 << 20

func (t *httpRequest) Invoke(ctx context.Context, call Call) (json.RawMessage, error) {
	var args struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, &Error{Kind: KindFinal, Message: "arguments must be an object with method, url, headers and body", Err: err}
	}
	switch args.Method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("method %q not allowed: use GET, POST, PUT, PATCH or DELETE", args.Method)}
	}
	u, err := url.Parse(args.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("url %q is not an absolute http or https URL", args.URL)}
	}
	if u.User != nil {
		return nil, &Error{Kind: KindFinal, Message: "url must not contain credentials"}
	}
	if !t.allowed(u) {
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("host %q is not allowed for http_request", u.Host)}
	}
	req, err := newRequest(ctx, args.Method, u.String(), []byte(args.Body))
	if err != nil {
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("cannot build request: %v", err), Err: err}
	}
	for k, v := range args.Headers {
		if headerForbidden(k) {
			return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("header %q may not be set by the model", k)}
		}
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("header %q is not a valid HTTP header: "+
				"its name must be a token and its value must hold no control characters (CR, LF, NUL)", k)}
		}
		req.Header.Set(k, v)
	}
	if call.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", call.IdempotencyKey)
	}
	resp, err := t.send(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, more, err := readBody(ctx, resp.Body, maxRequestBody, "request")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, statusError(resp, body, "server")
	}
	headers := map[string]string{}
	for _, h := range resultHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			headers[h] = strings.Join(v, ", ")
		}
	}
	return json.Marshal(struct {
		Status    int               `json:"status"`
		Headers   map[string]string `json:"headers"`
		Body      string            `json:"body"`
		Truncated bool              `json:"body_truncated,omitempty"`
	}{resp.StatusCode, headers, strings.ToValidUTF8(string(body), "\uFFFD"), more})
}

// send sends req. A failure before the transport had a connection to write
// the request on (the name did not resolve, the connection was refused or
// its TLS handshake failed, the attempt ran out of time while connecting,
// the destination check refused the address) sent nothing, and is a tool
// error the model sees: KindFinal for a refused destination, else
// KindTransient. Any later failure may have reached the destination, and is
// classified as do does (KindTimeout or KindConnection: the outcome is
// unknown).
func (t *httpRequest) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	var connected atomic.Bool // from here on, request bytes may have been written
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}
	resp, err := t.client.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err == nil {
		return resp, nil
	}
	if connected.Load() {
		return nil, transportError(ctx, err, "request")
	}
	return nil, notSent(ctx, req.URL.Host, err)
}

// notSent classifies a request that failed before it had a connection: it
// never reached host.
func notSent(ctx context.Context, host string, err error) error {
	var dns *net.DNSError
	switch {
	case errors.Is(err, errDestination):
		return &Error{Kind: KindFinal, Message: fmt.Sprintf("host %q resolves to an address that is not allowed for http_request", host), Err: err}
	case errors.As(err, &dns):
		return &Error{Kind: KindTransient, Message: Describe(err) + "; nothing was sent", Err: err}
	case ctx.Err() != nil:
		return &Error{Kind: KindTransient, Message: fmt.Sprintf("the request ended before it connected to %q (%v); nothing was sent", host, context.Cause(ctx)), Err: err}
	}
	return &Error{Kind: KindTransient, Message: fmt.Sprintf("cannot connect to %q: %v; nothing was sent", host, unwrapURL(err)), Err: err}
}

// unwrapURL returns the cause of a *url.Error, which repeats the method and
// the URL the model already knows.
func unwrapURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
