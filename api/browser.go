package api

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-chi/cors"
)

// CodeOriginNotAllowed: a request that changes state came from a web page
// of an origin the server does not allow (403).
const CodeOriginNotAllowed = "origin_not_allowed"

// checkOrigin refuses a request that changes state when it carries an
// Origin (browsers send one with every such request a page makes) that is
// neither this server's own nor one of Config.CORSOrigins: a page on
// another site cannot start runs or approve calls on a server its visitor
// can reach (a developer's local agentd, say). Requests without an Origin,
// from curl or programs, pass.
func (s *server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || s.originAllowed(r, origin) {
			next.ServeHTTP(w, r)
			return
		}
		s.fail(w, r, newError(http.StatusForbidden, CodeOriginNotAllowed, "Origin not allowed",
			"requests from this origin may not change state here; the server's operator may allow it (AGENTD_CORS_ORIGINS)"))
	})
}

// originAllowed reports whether origin is the server's own (the same host
// the request was sent to) or one the operator allowed.
func (s *server) originAllowed(r *http.Request, origin string) bool {
	if slices.Contains(s.corsOrigins, origin) || slices.Contains(s.corsOrigins, "*") {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// corsHandler answers the browsers of the allowed origins, preflights
// included; nil when no origin is allowed (CORS off).
func corsHandler(origins []string) func(http.Handler) http.Handler {
	if len(origins) == 0 {
		return nil
	}
	return cors.Handler(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodPost},
		AllowedHeaders: []string{"Content-Type", "Authorization", HeaderIdempotencyKey, HeaderRequestID, HeaderTenant,
			"Last-Event-ID"},
		ExposedHeaders: []string{"Location", HeaderRequestID, HeaderIdempotentReplayed},
		MaxAge:         300,
	})
}
