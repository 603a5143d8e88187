package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/internal/metrics"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyCaller
	keyCallerSlot
)

// callerSlot is where the guard leaves who a request came from, for the
// access log, which wraps it.
type callerSlot struct{ tenant, actor string }

// HeaderRequestID carries a request's id, taken from the client when it
// sends a sane one, else made up; it is echoed on every response.
const HeaderRequestID = "X-Request-ID"

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:/+=-]{1,128}$`)

// requestID gives each request an id, in its context and in the response.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !requestIDPattern.MatchString(id) {
			id = uuid.NewString()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyRequestID, id)))
	})
}

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

// statusWriter remembers the status and size of a response. It unwraps, so
// http.ResponseController reaches the real writer (for SSE flushes and
// deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush lets handlers that assert http.Flusher flush through the wrapper.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverer turns a panic into a 500 internal problem, logged with its
// stack. When the handler had already started its answer, the connection is
// aborted instead.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw, ok := w.(*statusWriter)
		if !ok {
			sw = &statusWriter{ResponseWriter: w}
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.metrics.internalErrors.Inc()
			s.log.ErrorContext(r.Context(), "panic in handler", slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())), slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.String("request_id", requestIDFrom(r.Context())))
			if sw.status != 0 {
				// Part of an answer (a stream, say) is out: break the
				// connection so that the client sees it fail rather than end.
				panic(http.ErrAbortHandler)
			}
			p, _ := problemFor(errors.New("panic"))
			s.writeProblem(sw, r, p)
		}()
		next.ServeHTTP(sw, r)
	})
}

// accessLog logs each request at debug level and counts it.
func (s *server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		who := &callerSlot{} // the guard fills it in
		r = r.WithContext(context.WithValue(r.Context(), keyCallerSlot, who))
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		elapsed := time.Since(start)
		method := methodLabel(r.Method)
		s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(sw.status)).Inc()
		s.metrics.duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
		s.log.DebugContext(r.Context(), "http request", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.String("route", route), slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes), slog.Duration("duration", elapsed),
			slog.String("request_id", requestIDFrom(r.Context())), slog.String("tenant_id", who.tenant), slog.String("actor", who.actor))
	})
}

// methodLabel is a request method as a metric label: one of the standard
// methods, or "other", so that clients cannot create series at will.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// requireJSON refuses a request body that is not declared JSON: a body
// without a Content-Type too, since that is what a web page of another
// origin can send without asking the browser first. A request without a
// body passes.
func (s *server) requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength != 0 {
			s.fail(w, r, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Unsupported media type",
				"the request body must be application/json: send Content-Type: application/json"))
			return
		}
		if ct != "" && r.ContentLength != 0 {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
				s.fail(w, r, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "Unsupported media type",
					fmt.Sprintf("the request body must be application/json, not %q", ct)))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, newError(http.StatusNotFound, CodeNotFound, "Not found", "no route for "+r.URL.Path))
}

// routeMethods are the methods that 405 answers list in Allow.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

func (s *server) methodNotAllowed(mux *chi.Mux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range routeMethods {
			if mux.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		s.fail(w, r, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "Method not allowed",
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))))
	}
}

// httpMetrics are the API's request metrics.
type httpMetrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	internalErrors prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	return &httpMetrics{
		requests: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_http_requests_total",
			Help: "HTTP requests answered, by method, route pattern and status.",
		}, []string{"method", "route", "status"})),
		duration: metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentd_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests (for streams: until the stream ends), by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"})),
		internalErrors: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_http_internal_errors_total",
			Help: "Requests answered 500 internal (errors and panics), each logged with its request id.",
		})),
	}
}
