package tools

import (
	"agentd/internal/vocab"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// HTTPRequest returns the side_effect tool "http_request", which sends one
// HTTP request to a host in allowHosts and returns {"status", "headers" (a
// few useful ones), "body" (cut to the result limit), "body_truncated"?}.
//
// An allowHosts entry is a host name or IP ("api.example.com", matching any
// port) or a host and port ("127.0.0.1:8080", "[::1]:8080", matching that
// port only; a URL without a port has its scheme's default port). Any other
// host is refused with a KindFinal error. The call's idempotency key is sent
// as the Idempotency-Key header. Redirects are not followed: a 3xx is a
// result. A 4xx is a KindFinal error, a 5xx KindTransient, a timeout
// KindTimeout, a lost connection KindConnection.
//
// A nil client means a client over the tools' pooled transport; the tool
// uses a copy of client that does not follow redirects. The server registers
// this tool only when allowHosts is not empty.
func HTTPRequest(allowHosts []string, client *http.Client) Tool {
	t := &httpRequest{allow: make(map[string]bool, len(allowHosts)), client: noRedirects(client)}
	for _, h := range allowHosts {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			t.allow[strings.Trim(h, "[]")] = true // bare IPv6 "[::1]" as "::1"
			t.allow[h] = true
		}
	}
	return t
}

type httpRequest struct {
	allow  map[string]bool
	client *http.Client
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
		Effect:      vocab.EffectSideEffect,
	}
}

// allowed reports whether u's host is in the allow-list.
func (t *httpRequest) allowed(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return t.allow[host] || t.allow[net.JoinHostPort(host, port)]
}

// resultHeaders are the response headers passed back to the model.
var resultHeaders = []string{"Content-Type", "Content-Length", "Location", "ETag", "Last-Modified", "Retry-After", "Date"}

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
		req.Header.Set(k, v)
	}
	if call.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", call.IdempotencyKey)
	}
	resp, err := do(ctx, t.client, req, "request")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, more, err := readBody(ctx, resp.Body, DefaultMaxResultBytes, "request")
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
