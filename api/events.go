package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/stream"
)

// errStreamingUnavailable answers a request for an event stream on a server
// built without one.
var errStreamingUnavailable = newError(http.StatusNotImplemented, CodeStreamingUnavailable, "Streaming unavailable",
	`this server cannot stream run events; send "stream": false and poll GET /runs/{id}`)

// runEvents answers GET /runs/{id}/events: the run's events after
// Last-Event-ID (or ?after=), replayed then tailed live. A run this
// instance already found for the tenant is not read again.
func (s *server) runEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	after, err := parseAfter(r)
	if err != nil {
		return err
	}
	if s.events == nil {
		return errStreamingUnavailable
	}
	tenant := TenantFromContext(r.Context())
	if !s.known.has(tenant, id) {
		if _, err := s.store.RunGet(r.Context(), tenant, id); err != nil {
			return err
		}
		s.known.add(tenant, id)
	}
	done, ok := s.limits.openStream(tenant)
	if !ok {
		return errTooManyStreams(w)
	}
	defer done()
	r, stop := s.whileAuthorized(r)
	defer stop()
	_, err = s.events.StreamRun(w, r, id, after)
	return streamErr(w, err)
}

// streamRun answers a POST /runs with "stream": true: the new run's events
// from the first, then its on_disconnect policy when the client left first
// (a stream that the end of its credential closed was not left: the run
// goes on).
func (s *server) streamRun(w http.ResponseWriter, r *http.Request, run agentd.Run) error {
	r, stop := s.whileAuthorized(r)
	defer stop()
	clientLeft, err := s.events.StreamRun(w, r, run.ID, 0)
	if err != nil {
		return streamErr(w, err)
	}
	if clientLeft && !errors.Is(context.Cause(r.Context()), auth.ErrCredentialEnded) {
		if err := s.runs.ClientLeft(r.Context(), run); err != nil {
			s.log.ErrorContext(r.Context(), "apply on_disconnect", "run_id", run.ID, "error", err.Error())
		}
	}
	return nil
}

// whileAuthorized returns r with a context that also ends when the
// credential the request came with stops holding (its key revoked or
// deleted, its token expired: auth.Watch), so that an event stream, which
// may last for hours, ends then too; the client's next request is refused
// (401). stop releases the watch.
func (s *server) whileAuthorized(r *http.Request) (_ *http.Request, stop context.CancelFunc) {
	c, _ := r.Context().Value(keyCaller).(*caller)
	if c == nil || c.Local {
		return r, func() {}
	}
	ctx, stop := auth.Watch(r.Context(), s.auth, c.Principal)
	return r.WithContext(ctx), stop
}

func errTooManyStreams(w http.ResponseWriter) error {
	return rateLimited(w, time.Second, "this tenant has as many event streams open as its quota allows; close one, or retry")
}

// streamErr turns what a stream returned before it started into the answer:
// 204 for a run with nothing more to send (EventSource stops reconnecting
// on it), else the error, for problemFor.
func streamErr(w http.ResponseWriter, err error) error {
	if errors.Is(err, stream.ErrEnded) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return err
}

// parseAfter reads the stream's position: the Last-Event-ID header, or else
// the "after" query parameter; absent or empty means from the first event.
func parseAfter(r *http.Request) (int64, error) {
	field, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		field, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fieldError(field, "must be a non-negative event id")
	}
	return n, nil
}
