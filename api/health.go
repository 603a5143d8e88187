package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/agentd/agentd"
)

// readyTimeout caps the readiness check so that a hung database answers 503
// rather than hanging the probe.
const readyTimeout = 2 * time.Second

type statusJSON struct {
	Status     string `json:"status"`
	MCPServers any    `json:"mcp_servers,omitempty"`
}

// livez answers 200 while the process serves HTTP at all.
func (s *server) livez(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, statusJSON{Status: "ok"})
}

// ErrDraining is what a Config.ReadyFunc returns once the instance has
// begun shutting down: GET /readyz answers 503 shutting_down at once, so
// that load balancers stop sending it requests while its runs drain.
var ErrDraining = errors.New("instance is shutting down")

// readyz answers 200 when the server's dependencies answer, else 503:
// shutting_down while the instance drains, not_ready when a dependency
// fails (the cause is logged, not shown). The database is ready only when
// it takes writes: a standby or a read-only server is not_ready, so that
// a load balancer sends requests elsewhere while no writable primary is
// reachable, and back within a probe of a promotion.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	err := s.ready(ctx)
	if errors.Is(err, ErrDraining) {
		s.writeProblem(w, r, newProblem(errShuttingDown))
		return
	}
	if err != nil {
		if !errors.Is(err, agentd.ErrUnavailable) {
			// The store logs the database's outages once each; probes
			// come every few seconds.
			s.log.WarnContext(r.Context(), "not ready", slog.String("error", err.Error()))
		}
		e := newError(http.StatusServiceUnavailable, CodeNotReady, "Not ready", "a dependency of the server does not answer")
		e.retryAfter = unavailableRetryAfter
		s.writeProblem(w, r, newProblem(e))
		return
	}
	out := statusJSON{Status: "ready"}
	if s.toolSources != nil {
		out.MCPServers = s.toolSources()
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// toolsList answers GET /tools: the registered tools, sorted by name.
func (s *server) toolsList(w http.ResponseWriter, r *http.Request) error {
	out := listJSON[toolJSON]{Data: []toolJSON{}}
	reg, err := s.registry(r.Context())
	if err != nil {
		return err
	}
	if reg != nil {
		own, _ := reg.Labelled("tenant")
		for _, sp := range reg.List() {
			v := toolView(sp)
			v.Tenant = slices.Contains(own, sp.Name)
			out.Data = append(out.Data, v)
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
