package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// seenRequest is one request a client sent agentd through a
// recordingProxy, with agentd's answer.
type seenRequest struct {
	Method string
	Path   string
	Body   json.RawMessage
	Status int
	// Error is agentd's body for a status of 400 or more.
	Error json.RawMessage
}

// requestLog is what a recordingProxy saw, in the order the requests
// came.
type requestLog struct {
	mu   sync.Mutex
	reqs []seenRequest
}

// all is a copy of what was seen so far.
func (l *requestLog) all() []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenRequest(nil), l.reqs...)
}

// refusals lists the requests agentd answered with an error, one a line,
// for a test's failure message: a client that cannot be changed shows
// what it sent that agentd did not take.
func refusals(reqs []seenRequest) string {
	var b strings.Builder
	for _, r := range reqs {
		if r.Status >= 400 {
			fmt.Fprintf(&b, "\n  %s %s -> %d %s", r.Method, r.Path, r.Status, r.Error)
		}
	}
	return b.String()
}

// seenKey carries a request's index in its requestLog through the proxy.
type seenKey struct{}

// recordingProxy serves a reverse proxy to base on a loopback port, for a
// client that cannot be made to record its own requests (a compiled
// binary such as Codex), and returns its URL and what it sees. A request
// is logged with agentd's status (and error body) before the client gets
// any of the answer, so the log is whole once the client is done.
func recordingProxy(t *testing.T, base string) (string, *requestLog) {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	log := &requestLog{}
	transport := &http.Transport{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1
	rp.ModifyResponse = func(res *http.Response) error {
		i, _ := res.Request.Context().Value(seenKey{}).(int)
		var errBody []byte
		if res.StatusCode >= 400 {
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				return err
			}
			res.Body = io.NopCloser(bytes.NewReader(b))
			errBody = bytes.TrimSpace(b)
			if !json.Valid(errBody) {
				errBody, _ = json.Marshal(string(b))
			}
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		log.reqs[i].Status, log.reqs[i].Error = res.StatusCode, errBody
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		seen := seenRequest{Method: r.Method, Path: r.URL.Path}
		if json.Valid(body) {
			seen.Body = body
		}
		log.mu.Lock()
		i := len(log.reqs)
		log.reqs = append(log.reqs, seen)
		log.mu.Unlock()
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), seenKey{}, i)))
	}))
	t.Cleanup(func() {
		srv.Close()
		transport.CloseIdleConnections()
	})
	return srv.URL, log
}
