package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/agentd/agentd"
)

// CodeRequestInProgress: a request with this Idempotency-Key is still being
// answered; retry shortly.
const CodeRequestInProgress = "request_in_progress"

// idempotent makes a POST that changes a run (cancel, resume, actions)
// honour an Idempotency-Key: the first request's response is stored, and a
// repeat with the same key and the same request (method, path and body) gets
// it back with Idempotent-Replayed: true, whatever happened since; the same
// key with another request is 422 idempotency_key_reused. A request that
// failed with a server error frees its key, so that a retry runs it again.
func (s *server) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(HeaderIdempotencyKey)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !validKey(key) {
			s.fail(w, r, fieldError(HeaderIdempotencyKey, "must be 1 to %d printable ASCII characters", maxKeyLen))
			return
		}
		body, err := s.readBody(w, r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		tenant := TenantFromContext(r.Context())
		hash, err := fingerprint(tenant, r.Method+" "+r.URL.Path, body)
		if err != nil {
			s.fail(w, r, newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON", "the request body is not valid JSON"))
			return
		}

		var rec agentd.IdempotencyRecord
		var fresh bool
		for wait := 10 * time.Millisecond; ; wait *= 2 {
			rec, fresh, err = s.store.IdempotencyBegin(r.Context(), tenant, key, hash)
			if err != nil && !errors.Is(err, agentd.ErrConflict) {
				s.fail(w, r, err)
				return
			}
			if err == nil && (fresh || rec.Done || rec.RequestHash != hash) {
				break
			}
			if wait > 2*time.Second { // the first request is still being answered
				s.fail(w, r, newError(http.StatusConflict, CodeRequestInProgress, "Request in progress",
					"a request with this Idempotency-Key is still being answered; retry shortly"))
				return
			}
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
		}
		if rec.RequestHash != hash {
			s.fail(w, r, errKeyReused)
			return
		}
		if !fresh {
			w.Header().Set("Content-Type", rec.ContentType)
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set(HeaderIdempotentReplayed, "true")
			w.WriteHeader(rec.Status)
			w.Write(rec.Response)
			return
		}
		rw := &recorder{header: http.Header{}, status: http.StatusOK}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(rw, r)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if rw.status >= 500 {
			if err := s.store.IdempotencyAbandon(ctx, tenant, key); err != nil {
				s.log.ErrorContext(ctx, "free idempotency key", "error", err.Error())
			}
		} else if err := s.store.IdempotencyFinish(ctx, agentd.IdempotencyResponse{TenantID: tenant, Key: key,
			Status: rw.status, ContentType: rw.header.Get("Content-Type"), Body: rw.body.Bytes()}); err != nil {
			s.fail(w, r, err)
			return
		}
		for k, v := range rw.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rw.status)
		w.Write(rw.body.Bytes())
	})
}

// recorder holds a response until it is stored.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
